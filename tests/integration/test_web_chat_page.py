"""The chat page's WebSocket (docs/chat.md): replies and history with sanitised HTML, the Stop button,
the list of a person's conversations, and commands kept in the history the page shows after a reload."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from gateway.app import Gateway
from gateway.turn.stops import STOPPED_MARK
from tests.conftest import ALICE_TOKEN
from tests.fakes.llm import FakeLLM, Gate, Reply
from tests.integration.test_ws_and_ops import frames_until


async def _committed(gateway: Gateway) -> None:
    """The reply reaches the page just before its turn is committed: wait for the commit."""
    assert gateway.storage is not None
    async with asyncio.timeout(10):
        while await gateway.storage.journal.unfinished():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def _hello(ws: aiohttp.ClientWebSocketResponse, **extra: Any) -> dict[str, Any]:
    await ws.send_json({"type": "hello", **extra})
    return (await frames_until(ws, lambda f: f["type"] == "ready"))[-1]


async def test_replies_and_history_carry_sanitised_html(
    gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    fake_llm.script(Reply("**bold** and <script>alert(1)</script> [x](javascript:alert(1))", chunks=3))
    async with http.ws_connect(gateway.url + "/ws") as ws:
        await _hello(ws)
        await ws.send_json({"type": "message", "text": "<b>mine</b>", "id": "h1"})
        frames = await frames_until(ws, lambda f: f["type"] == "reply" and f["final"])
    final = frames[-1]
    assert "<strong>bold</strong>" in final["html"]
    assert "<script" not in final["html"] and "&lt;script&gt;" in final["html"]
    assert "javascript:" not in final["html"].replace("[x](javascript:alert(1))", "")
    assert all("html" in f for f in frames if f["type"] == "reply")  # short replies: every update too
    await _committed(gateway)
    async with http.ws_connect(gateway.url + "/ws") as ws:
        history = (await _hello(ws))["history"]
    assert [h["role"] for h in history] == ["user", "assistant"]
    assert "html" not in history[0]  # a person's words stay text
    assert history[1]["html"] == final["html"]


async def test_stop_keeps_the_partial_reply_marked_stopped(
    gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    fake_llm.script(Gate(then=Reply("never shown"), before="The first half"), Reply("next answer"))
    async with http.ws_connect(gateway.url + "/ws") as ws:
        await _hello(ws)
        await ws.send_json({"type": "message", "text": "tell me a long story", "id": "s1"})
        await frames_until(ws, lambda f: f["type"] == "reply" and f["text"] == "The first half")
        await ws.send_json({"type": "stop"})
        frames = await frames_until(ws, lambda f: f["type"] == "reply" and f["final"])
    assert {"type": "stopping", "running": True} in frames
    stopped = "The first half" + STOPPED_MARK
    assert frames[-1]["text"] == stopped
    await _committed(gateway)
    async with http.ws_connect(gateway.url + "/ws") as ws:
        ready = await _hello(ws)
        assert [h["text"] for h in ready["history"]] == ["tell me a long story", stopped]
        assert ready["running"] is False
        await ws.send_json({"type": "stop"})  # nothing runs: said so, nothing breaks
        assert (await frames_until(ws, lambda f: f["type"] == "stopping"))[-1]["running"] is False
        await ws.send_json({"type": "message", "text": "go on", "id": "s2"})
        await frames_until(ws, lambda f: f["type"] == "reply" and f["final"])
    # The next turn's prompt holds the stopped reply as it was said.
    said = [m["content"] for m in fake_llm.requests[-1]["messages"] if m["role"] == "assistant"]
    assert said == [stopped]


async def test_commands_are_kept_for_the_page_but_never_reach_the_model(
    gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    fake_llm.script(Reply("an answer"))
    async with http.ws_connect(gateway.url + "/ws") as ws:
        await _hello(ws, conversation="cmd")
        await ws.send_json({"type": "message", "text": "/help", "id": "c1"})
        help_reply = (await frames_until(ws, lambda f: f["type"] == "reply" and f["final"]))[-1]
        await _committed(gateway)
        await ws.send_json({"type": "message", "text": "a question", "id": "c2"})
        await frames_until(ws, lambda f: f["type"] == "reply" and f["final"])
    await _committed(gateway)
    async with http.ws_connect(gateway.url + "/ws") as ws:
        history = (await _hello(ws, conversation="cmd"))["history"]
    assert [(h["role"], h["text"]) for h in history] == [
        ("user", "/help"),
        ("notice", help_reply["text"]),
        ("user", "a question"),
        ("assistant", "an answer"),
    ]
    assert history[1]["html"] == help_reply["html"]
    prompt = fake_llm.requests[-1]["messages"]
    assert not any("/help" in str(m["content"]) or help_reply["text"] in str(m["content"]) for m in prompt)
    async with http.ws_connect(gateway.url + "/ws") as ws:  # nor do they count in the session's context
        await _hello(ws, conversation="cmd")
        await ws.send_json({"type": "message", "text": "/status", "id": "c3"})
        status = (await frames_until(ws, lambda f: f["type"] == "reply" and f["final"]))[-1]["text"]
    assert "Messages in context: 2\n" in status, status


async def test_the_conversation_list_is_the_persons_own_most_recent_first(
    gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    fake_llm.script(Reply("one"), Reply("two"), Reply("three"))
    long_title = "A first message that is rather long, " * 4
    for conv, text in (("older", long_title), ("newer", "Second topic")):
        async with http.ws_connect(gateway.url + "/ws") as ws:
            await _hello(ws, token=ALICE_TOKEN, conversation=conv)
            await ws.send_json({"type": "message", "text": text, "id": conv})
            await frames_until(ws, lambda f: f["type"] == "reply" and f["final"])
        await _committed(gateway)
    async with http.ws_connect(gateway.url + "/ws") as ws:
        await ws.send_json({"type": "hello", "token": ALICE_TOKEN})
        listed = (await frames_until(ws, lambda f: f["type"] == "ready"))[-1]["conversations"]
        assert [c["id"] for c in listed] == ["newer", "older"]
        assert listed[0]["title"] == "Second topic"
        assert listed[1]["title"].endswith("…") and len(listed[1]["title"]) <= 61
        await ws.send_json({"type": "conversations"})
        again = (await frames_until(ws, lambda f: f["type"] == "conversations"))[-1]["conversations"]
        assert again == listed
    async with http.ws_connect(gateway.url + "/ws") as ws:  # the local visitor's list is their own
        await ws.send_json({"type": "hello"})
        assert (await frames_until(ws, lambda f: f["type"] == "ready"))[-1]["conversations"] == []
