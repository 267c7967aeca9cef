"""Pictures and files sent from the web chat and the REST API (docs/media.md): in the message as
base64, capped on the server, judged by the same policy as every channel's, never stored."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from gateway.app import Gateway
from tests.conftest import auth
from tests.fakes import media
from tests.fakes.llm import TRANSCRIPTION_MODEL, VISION_MODEL, FakeLLM, image_parts, user_text


def upload(name: str, data: bytes, kind: str | None = None) -> dict[str, Any]:
    out = {"name": name, "data": media.b64(data)}
    if kind:
        out["type"] = kind
    return out


async def post(http: aiohttp.ClientSession, gw: Gateway, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    r = await http.post(gw.url + "/api/v1/messages", json=body, headers=auth())
    return r.status, await r.json()


def stored(gw: Gateway) -> Any:
    return gw.config.storage.data_dir / "clawgate.db"


async def test_a_picture_and_a_pdf_through_the_rest_api(
    gateway_factory: Callable[..., Any], fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    gw = await gateway_factory(fake_llm, ai__model=VISION_MODEL)
    picture, report = media.png(120, 80), media.pdf(["Minutes: we agreed on Tuesday"])
    files = [upload("board.png", picture, "image/png"), upload("minutes.pdf", report)]
    status, body = await post(http, gw, {"text": "what did we agree?", "files": files})
    assert status == 200, body
    request = fake_llm.requests[-1]
    assert len(image_parts(request)) == 1
    assert "what did we agree?" in user_text(request) and "we agreed on Tuesday" in user_text(request)
    r = await http.get(gw.url + "/api/v1/messages", headers=auth())
    [question, _answer] = (await r.json())["messages"]
    assert question["text"].startswith("what did we agree?\n[attached: board.png, image, 120x80 pixels")
    assert "[attached: minutes.pdf, PDF" in question["text"]
    assert media.database_holds(stored(gw), picture, report) == []


async def test_a_file_alone_is_a_message_and_voice_is_transcribed(
    gateway_factory: Callable[..., Any], fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    gw = await gateway_factory(fake_llm, ai__transcription={"model": TRANSCRIPTION_MODEL})
    fake_llm.transcripts.append("remind me to call mum")
    status, body = await post(http, gw, {"files": [upload("memo.ogg", media.ogg_voice(6), "audio/ogg")]})
    assert status == 200, body
    assert "remind me to call mum" in user_text(fake_llm.requests[-1])
    assert fake_llm.transcriptions[0]["filename"] == "memo.ogg"


@pytest.mark.parametrize(
    ("files", "says"),
    [
        ([upload("cat.jpg", media.corrupt_jpeg(), "image/jpeg")], "cat.jpg: the picture is damaged"),
        ([upload("x.zip", media.zip_file())], "I can read pictures"),
        ([upload("long.ogg", media.ogg_voice(3 * 3600), "audio/ogg")], "3:00:00 long"),
        ([upload("empty.txt", b"")], "empty.txt: it is empty"),
    ],
)
async def test_bad_uploads_get_a_clear_reply_and_no_turn(
    gateway_factory: Callable[..., Any],
    fake_llm: FakeLLM,
    http: aiohttp.ClientSession,
    files: list[dict[str, Any]],
    says: str,
) -> None:
    gw = await gateway_factory(fake_llm, ai__transcription={"model": TRANSCRIPTION_MODEL})
    status, body = await post(http, gw, {"text": "look", "files": files})
    assert status == 200 and says in body["reply"], body
    assert fake_llm.requests == [] and fake_llm.transcriptions == []
    r = await http.get(gw.url + "/api/v1/messages", headers=auth())
    assert (await r.json())["messages"] == []


async def test_uploads_are_capped_and_checked_before_any_turn(
    gateway_factory: Callable[..., Any], fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    gw = await gateway_factory(fake_llm, channels__web__media={"max_mb": 0.05})
    status, body = await post(http, gw, {"text": "x", "files": [upload("big.txt", b"a" * 60_000)]})
    assert status == 413 and "larger than" in body["error"]
    status, body = await post(http, gw, {"text": "x", "files": [{"name": "a.txt", "data": "not base64!"}]})
    assert status == 400 and "base64" in body["error"]
    status, body = await post(http, gw, {"text": "x", "files": [upload(f"{i}.txt", b"hi") for i in range(9)]})
    assert status == 400 and "at most 8 files" in body["error"]
    huge = "A" * (gw.adapters["web"]._body_cap + 10)  # type: ignore[attr-defined]
    r = await http.post(gw.url + "/api/v1/messages", data=json.dumps({"text": huge}), headers=auth())
    assert r.status == 413
    status, body = await post(http, gw, {"text": "x", "files": [upload("ok.txt", b"b" * 40_000)]})
    assert status == 200  # under the image/document/audio caps of 50 KB
    assert fake_llm.requests and "bbbb" in user_text(fake_llm.requests[-1])


async def test_the_chat_page_sends_a_picture_over_the_websocket(
    gateway_factory: Callable[..., Any], fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    gw = await gateway_factory(fake_llm)
    async with http.ws_connect(gw.url + "/ws") as ws:
        await ws.send_json({"type": "hello"})
        ready = await _until(ws, lambda f: f["type"] == "ready")
        assert ready["max_upload_bytes"] == 25_000_000
        await ws.send_json({"type": "message", "id": "m1", "files": [upload("dot.png", media.png(), "image/png")]})
        final = await _until(ws, lambda f: f["type"] == "reply" and f["final"])
        assert "not shown to you" in final["text"]  # the fake model cannot see: a note, echoed back
    assert gw.storage is not None
    history = await gw.storage.sessions.history("web:dm:local")
    assert history[0].content.startswith("[attached: dot.png, image, 64x48 pixels")


async def _until(ws: aiohttp.ClientWebSocketResponse, pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    while True:
        msg = await ws.receive(timeout=10)
        assert msg.type == aiohttp.WSMsgType.TEXT, msg
        frame = json.loads(msg.data)
        if pred(frame):
            return dict(frame)
