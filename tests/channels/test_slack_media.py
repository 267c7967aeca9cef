"""Files on Slack (docs/media.md), through slack-bolt and slack_sdk against the local Slack fake:
files.info names the private download URL, fetched with the bot token as a bearer, and only from
Slack's file host or the configured API base's origin."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gateway.app import Gateway
from gateway.config.load import parse_config
from tests.fakes import media
from tests.fakes.llm import TRANSCRIPTION_MODEL, VISION_MODEL, FakeLLM, image_parts, user_text
from tests.fakes.serve import serve_loopback
from tests.fakes.slack import FakeSlack

PERSON = "U1001"
DM = "D0DM1001"
SESSION = f"slack:dm:{DM}"


@asynccontextmanager
async def world(
    tmp_path: Path, *, model: str = "openai/fake-model", bot_token: str | None = None
) -> AsyncIterator[tuple[Gateway, FakeSlack, FakeLLM, aiohttp.ClientSession]]:
    llm = await FakeLLM().start()
    slack = await FakeSlack().start()
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
                "slack": {
                    "mode": "http",
                    "bot_token": bot_token or slack.bot_token,
                    "signing_secret": slack.signing_secret,
                    "api_base_url": slack.api_base,
                    "request_timeout": 2,
                    "dm_policy": "open",
                },
            },
        },
        "t",
        env={},
    )
    gw = Gateway(config)
    async with aiohttp.ClientSession() as http:
        try:
            await gw.start()
            await gw.llm.ready()
            yield gw, slack, llm, http
        finally:
            await gw.stop(deadline=1)
            await slack.stop()
            await llm.stop()


async def share(gw: Gateway, slack: FakeSlack, http: aiohttp.ClientSession, text: str, *files: dict[str, Any]) -> None:
    """A DM with files, delivered to the Events API endpoint as Slack signs it."""
    event = slack.message(DM, text, user=PERSON, files=list(files))
    raw, headers = slack.signed_request(slack.event_body(event))
    response = await http.post(gw.url + "/slack/events", data=raw, headers=headers)
    assert response.status == 200, await response.text()


async def shown(gw: Gateway, slack: FakeSlack, n: int = 1, turns: int = 0) -> str:
    """The n-th message the bot posted, as last updated, once `turns` turns are recorded."""
    assert gw.storage is not None
    async with asyncio.timeout(10):
        while turns:  # the record is written after the reply: a bounded poll (tests/waits.py)
            msgs = await gw.storage.sessions.history(SESSION)
            if len([m for m in msgs if m.role == "assistant"]) >= turns:
                break
            await asyncio.sleep(0.02)
    await slack.wait_for(lambda f: len([p for p in f.posted if not p.edit]) >= n)
    ts = [p for p in slack.posted if not p.edit][n - 1].ts
    return [p for p in slack.posted if p.ts == ts][-1].text


async def test_a_picture_reaches_a_vision_model_with_the_bot_token_as_bearer(tmp_path: Path) -> None:
    picture = media.jpeg(500, 400)
    async with world(tmp_path, model=VISION_MODEL) as (gw, slack, llm, http):
        await share(gw, slack, http, "", slack.file(picture, "photo.jpg", "image/jpeg"))
        await shown(gw, slack, turns=1)
        assert len(image_parts(llm.requests[-1])) == 1
        [(path, token)] = slack.file_fetches
        assert token == slack.bot_token and path.endswith("/photo.jpg")
        assert [c.args["file"] for c in slack.calls_to("files.info")] == ["F000000001"]
        assert media.database_holds(gw.config.storage.data_dir / "clawgate.db", picture) == []


async def test_an_audio_clip_is_transcribed(tmp_path: Path) -> None:
    async with world(tmp_path) as (gw, slack, llm, http):
        llm.transcripts.append("ship it on friday")
        clip = slack.file(media.ogg_voice(20), "audio_message.ogg", "audio/ogg", duration_ms=20_000)
        await share(gw, slack, http, "", clip)
        await shown(gw, slack, turns=1)
        assert "ship it on friday" in user_text(llm.requests[-1])
        assert llm.transcriptions[0]["model"] == "whisper-1"


async def test_a_pdf_and_a_python_file_are_read(tmp_path: Path) -> None:
    async with world(tmp_path) as (gw, slack, llm, http):
        files = (
            slack.file(media.pdf(["Slack report body"]), "report.pdf", "application/pdf"),
            slack.file(media.PY_SOURCE, "greet.py", "text/plain", filetype="python"),
        )
        await share(gw, slack, http, "what do these say?", *files)
        await shown(gw, slack, turns=1)
        text = user_text(llm.requests[-1])
        assert "Slack report body" in text and "def greet" in text


async def test_a_download_url_off_slacks_hosts_is_refused(tmp_path: Path) -> None:
    hits: list[str] = []

    async def elsewhere(request: web.Request) -> web.Response:
        hits.append(request.headers.get("Authorization", ""))
        return web.Response(body=b"notes", content_type="text/plain")

    app = web.Application()
    app.router.add_get("/{tail:.*}", elsewhere)
    runner, other = await serve_loopback(app)
    try:
        async with world(tmp_path) as (gw, slack, llm, http):
            bad = slack.file(b"notes", "notes.txt", "text/plain", download_url=f"{other}/files-pri/T/notes.txt")
            await share(gw, slack, http, "", bad)
            assert "notes.txt: its address is not one of the platform's own" in await shown(gw, slack)
            assert llm.requests == []
        assert hits == []  # the bot token went nowhere
    finally:
        await runner.cleanup()


async def test_a_sign_in_page_instead_of_the_file_is_refused(tmp_path: Path) -> None:
    async with world(tmp_path) as (gw, slack, llm, http):
        slack.files_read = False  # the app was installed without files:read
        await share(gw, slack, http, "", slack.file(b"a,b\n1,2\n", "data.csv", "text/csv"))
        assert "data.csv: the platform sent a web page instead of the file" in await shown(gw, slack)
        assert llm.requests == []


async def test_a_picture_for_a_model_that_cannot_see_becomes_a_note(tmp_path: Path) -> None:
    async with world(tmp_path) as (gw, slack, llm, http):
        await share(gw, slack, http, "", slack.file(media.png(), "screenshot.png", "image/png"))
        await shown(gw, slack, turns=1)
        assert image_parts(llm.requests[-1]) == []
        assert "screenshot.png" in user_text(llm.requests[-1]) and "not shown to you" in user_text(llm.requests[-1])


BAD = [
    ("empty.txt", b"", "text/plain", {}, "it is empty"),
    ("archive.zip", media.zip_file(), "application/zip", {}, "I can read pictures"),
    ("clip.ogg", media.ogg_voice(3 * 3600), "audio/ogg", {"duration_ms": 10_800_000}, "3:00:00 long"),
    ("bomb.pdf", media.pdf_inflating(), "application/pdf", {}, "unpacks to far more"),
    ("cat.jpg", media.corrupt_jpeg(), "image/jpeg", {}, "the picture is damaged"),
]


@pytest.mark.parametrize(("name", "content", "kind", "extra", "says"), BAD, ids=[b[0] for b in BAD])
async def test_bad_input_gets_a_clear_reply(
    tmp_path: Path, name: str, content: bytes, kind: str, extra: dict[str, Any], says: str
) -> None:
    async with world(tmp_path) as (gw, slack, llm, http):
        await share(gw, slack, http, "", slack.file(content, name, kind, **extra))
        assert says in await shown(gw, slack)
        assert llm.requests == [] and llm.transcriptions == []
        assert gw.storage is not None and await gw.storage.sessions.history(SESSION) == []
