from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from gateway.app import Gateway
from tests.conftest import ALICE_TOKEN
from tests.fakes.llm import FakeLLM, Reply


async def frames_until(ws: aiohttp.ClientWebSocketResponse, pred: Any) -> list[dict[str, Any]]:
    out = []
    while True:
        msg = await ws.receive(timeout=10)
        assert msg.type == aiohttp.WSMsgType.TEXT, msg
        frame = json.loads(msg.data)
        out.append(frame)
        if pred(frame):
            return out


async def test_ws_streams_reply_and_keeps_history(
    gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    fake_llm.script(Reply("streamed in several pieces", chunks=4))
    async with http.ws_connect(gateway.url + "/ws") as ws:
        await ws.send_json({"type": "hello"})
        ready = (await frames_until(ws, lambda f: f["type"] == "ready"))[-1]
        assert ready["user"] == "local" and ready["history"] == []
        await ws.send_json({"type": "message", "text": "hello ws", "id": "c1"})
        frames = await frames_until(ws, lambda f: f["type"] == "reply" and f["final"])
        replies = [f for f in frames if f["type"] == "reply"]
        assert replies[-1]["text"] == "streamed in several pieces"
        assert len({f["id"] for f in replies}) == 1  # one message, edited in place
        assert any(f["type"] == "typing" and f["on"] for f in frames)
    # The reply reaches the page just before the turn is committed: wait for the commit.
    assert gateway.storage is not None
    async with asyncio.timeout(10):
        while await gateway.storage.journal.unfinished():  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    async with http.ws_connect(gateway.url + "/ws") as ws:
        await ws.send_json({"type": "hello"})
        ready = (await frames_until(ws, lambda f: f["type"] == "ready"))[-1]
        assert [h["text"] for h in ready["history"]] == ["hello ws", "streamed in several pieces"]


async def test_ws_token_and_bad_frames(gateway: Gateway, http: aiohttp.ClientSession) -> None:
    async with http.ws_connect(gateway.url + "/ws") as ws:
        await ws.send_str("not json")
        assert "malformed" in (await frames_until(ws, lambda f: True))[-1]["error"]
        await ws.send_json({"type": "message", "text": "too early"})
        assert "hello first" in (await frames_until(ws, lambda f: True))[-1]["error"]
        await ws.send_json({"type": "hello", "token": ALICE_TOKEN, "conversation": "ws-1"})
        ready = (await frames_until(ws, lambda f: f["type"] == "ready"))[-1]
        assert ready["user"] == "alice" and ready["conversation"] == "ws-1"
    async with http.ws_connect(gateway.url + "/ws") as ws:
        await ws.send_json({"type": "hello", "token": "wrong-token-0000000000"})
        frame = (await frames_until(ws, lambda f: True))[-1]
        assert frame["fatal"] and "unauthorized" in frame["error"]


async def test_health_readiness_metrics(gateway: Gateway, http: aiohttp.ClientSession) -> None:
    assert (await http.get(gateway.url + "/healthz")).status == 200
    ready = await http.get(gateway.url + "/readyz")
    assert ready.status == 200
    body = await ready.json()
    assert body["ready"] and body["storage"] and body["channels"] == {"web": True}
    await http.post(
        gateway.url + "/api/v1/messages", json={"text": "count me"}, headers={"Authorization": f"Bearer {ALICE_TOKEN}"}
    )
    metrics = await http.get(gateway.url + "/metrics")
    assert metrics.headers["Content-Type"].startswith("text/plain")
    text = await metrics.text()
    assert 'clawgate_turns_total{channel="web",outcome="ok"} 1.0' in text
    assert "clawgate_turn_seconds_bucket" in text
    assert 'clawgate_llm_calls_total{model="openai/fake-model",outcome="ok"} 1.0' in text


async def test_readyz_fails_when_storage_is_down(
    gateway: Gateway, http: aiohttp.ClientSession, monkeypatch: Any
) -> None:
    assert gateway.storage is not None

    async def down() -> bool:
        return False

    monkeypatch.setattr(gateway.storage, "ping", down)
    r = await http.get(gateway.url + "/readyz")
    assert r.status == 503
    assert (await r.json())["storage"] is False
    assert (await http.get(gateway.url + "/healthz")).status == 200
