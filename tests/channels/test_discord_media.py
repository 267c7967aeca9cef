"""Pictures, files and voice on Discord (docs/media.md), through discord.py against the local
Discord fake: attachments carry CDN-style URLs the fake serves, and the gateway downloads only from
Discord's file hosts or the configured API base's origin."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gateway.app import Gateway
from gateway.config.load import parse_config
from tests.fakes import media
from tests.fakes.discord import TOKEN, FakeDiscord, user
from tests.fakes.llm import TRANSCRIPTION_MODEL, VISION_MODEL, FakeLLM, image_parts, user_text
from tests.fakes.serve import serve_loopback

PERSON = "1400000000000000001"
SESSION = "discord:dm:1300000000000000001"


@asynccontextmanager
async def world(
    tmp_path: Path, *, model: str = "openai/fake-model"
) -> AsyncIterator[tuple[Gateway, FakeDiscord, FakeLLM]]:
    llm = await FakeLLM().start()
    discord = await FakeDiscord().start()
    config = parse_config(
        {
            "ai": {
                "model": model,
                "api_base": llm.api_base,
                "api_key": "sk-test-0000000000000",
                "retries": 0,
                "transcription": {"model": TRANSCRIPTION_MODEL},
            },
            "storage": {"data_dir": str(tmp_path / "data")},
            "channels": {
                "web": {"port": 0},
                "discord": {
                    "token": TOKEN,
                    "api_base_url": discord.api_base,
                    "gateway_url": discord.gateway_url,
                    "request_timeout": 2,
                    "dm_policy": "open",
                },
            },
        },
        "t",
        env={},
    )
    gw = Gateway(config)
    await gw.start()
    await gw.llm.ready()
    try:
        yield gw, discord, llm
    finally:
        await gw.stop(deadline=1)
        await discord.stop()
        await llm.stop()


async def send(discord: FakeDiscord, text: str, *attachments: dict[str, Any]) -> None:
    author = user(PERSON, "alex", global_name="Alex")
    await discord.inject(discord.message("dm", text, author=author, attachments=list(attachments)))


async def shown(gw: Gateway, discord: FakeDiscord, n: int = 1, turns: int = 0) -> str:
    """The n-th message the bot posted, as last edited, once `turns` turns are recorded."""
    assert gw.storage is not None
    async with asyncio.timeout(10):
        while turns:  # the record is written after the reply: a bounded poll (tests/waits.py)
            msgs = await gw.storage.sessions.history(SESSION)
            if len([m for m in msgs if m.role == "assistant"]) >= turns:
                break
            await asyncio.sleep(0.02)
    posted = [o for o in await discord.wait_outbox(n) if not o.edit]
    await discord.wait_outbox(n)
    message_id = [o for o in discord.outbox if not o.edit][n - 1].message_id
    return [o for o in discord.outbox if o.message_id == message_id][-1].content if posted else ""


async def test_a_photo_reaches_a_vision_model_as_an_image(tmp_path: Path) -> None:
    picture = media.png(300, 200)
    async with world(tmp_path, model=VISION_MODEL) as (gw, discord, llm):
        await send(discord, "", discord.attachment(picture, "chart.png", "image/png"))
        await shown(gw, discord, turns=1)
        [url] = image_parts(llm.requests[-1])
        assert url.startswith("data:image/jpeg;base64,")
        assert len(discord.cdn_fetches) == 1
        assert media.database_holds(gw.config.storage.data_dir / "clawgate.db", picture) == []


async def test_a_voice_message_is_transcribed(tmp_path: Path) -> None:
    voice = media.ogg_voice(9)
    async with world(tmp_path) as (gw, discord, llm):
        llm.transcripts.append("can you book the room")
        await send(discord, "", discord.attachment(voice, "voice-message.ogg", "audio/ogg", duration_secs=9.2))
        await shown(gw, discord, turns=1)
        assert "transcript\u27eb can you book the room" in user_text(llm.requests[-1])
        assert gw.storage is not None
        [first, _] = await gw.storage.sessions.history(SESSION)
        assert first.content == "[audio voice-message.ogg, 0:09, transcript] can you book the room"


async def test_a_pdf_and_a_python_file_are_read(tmp_path: Path) -> None:
    report = media.pdf(["Discord report body"])
    async with world(tmp_path) as (gw, discord, llm):
        await send(
            discord,
            "summarise both",
            discord.attachment(report, "report.pdf", "application/pdf"),
            discord.attachment(media.PY_SOURCE, "greet.py"),  # no content type: told by its bytes
        )
        await shown(gw, discord, turns=1)
        text = user_text(llm.requests[-1])
        assert "summarise both" in text and "Discord report body" in text and "def greet" in text


async def test_a_corrupt_picture_gets_a_clear_reply(tmp_path: Path) -> None:
    async with world(tmp_path, model=VISION_MODEL) as (gw, discord, llm):
        await send(discord, "", discord.attachment(media.corrupt_jpeg(), "cat.jpg", "image/jpeg"))
        assert "cat.jpg: the picture is damaged or not a picture" in await shown(gw, discord)
        assert llm.requests == []


async def test_an_attachment_url_off_discords_hosts_is_never_fetched(tmp_path: Path) -> None:
    hits: list[str] = []

    async def elsewhere(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(body=media.png(), content_type="image/png")

    app = web.Application()
    app.router.add_get("/{tail:.*}", elsewhere)
    runner, other = await serve_loopback(app)  # loopback too, but another origin than the API base
    try:
        async with world(tmp_path) as (gw, discord, llm):
            bad = discord.attachment(media.png(), "x.png", "image/png", url=f"{other}/attachments/1/2/x.png")
            await send(discord, f"look at {other}/y.png", bad)
            answer = await shown(gw, discord)
            assert "x.png: its address is not one of the platform's own" in answer
            assert llm.requests == []
        assert hits == []
    finally:
        await runner.cleanup()


async def test_a_photo_for_a_model_that_cannot_see_becomes_a_note(tmp_path: Path) -> None:
    async with world(tmp_path) as (gw, discord, llm):
        await send(discord, "", discord.attachment(media.jpeg(), "IMG_2231.jpg", "image/jpeg"))
        await shown(gw, discord, turns=1)
        assert image_parts(llm.requests[-1]) == []
        assert "IMG_2231.jpg" in user_text(llm.requests[-1]) and "not shown to you" in user_text(llm.requests[-1])


BAD = [
    ("empty.txt", b"", "text/plain", {}, "it is empty"),
    ("archive.zip", media.zip_file(), "application/zip", {}, "I can read pictures"),
    ("voice-message.ogg", media.ogg_voice(3 * 3600), "audio/ogg", {"duration_secs": 10_800.0}, "3:00:00 long"),
    ("bomb.pdf", media.pdf_inflating(), "application/pdf", {}, "unpacks to far more"),
    ("huge.pdf", b"%PDF-1.4 small", "application/pdf", {"size": 30_000_000}, "may be at most 20.0 MB"),
]


@pytest.mark.parametrize(("name", "content", "kind", "extra", "says"), BAD, ids=[b[0] for b in BAD])
async def test_bad_input_gets_a_clear_reply(
    tmp_path: Path, name: str, content: bytes, kind: str, extra: dict[str, Any], says: str
) -> None:
    async with world(tmp_path) as (gw, discord, llm):
        await send(discord, "", discord.attachment(content, name, kind, **extra))
        assert says in await shown(gw, discord)
        assert llm.requests == [] and llm.transcriptions == []
        assert gw.storage is not None and await gw.storage.sessions.history(SESSION) == []
