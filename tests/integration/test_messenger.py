"""Facebook Messenger end to end: a real Gateway (parse_config + Gateway) with the Messenger channel on
the local Graph API fake and the fake model. Meta's calls to the webhook are signed and posted to the
gateway's own web server; replies come back through the Send API."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from gateway.app import Gateway
from gateway.config.load import parse_config
from tests.fakes import media
from tests.fakes.llm import TRANSCRIPTION_MODEL, VISION_MODEL, FakeLLM, Reply, image_parts, user_text
from tests.fakes.messenger import PSID, FakeMessenger
from tests.fakes.telegram import FakeTelegram
from tests.waits import until

ADMIN_PSID = "7000000000000900"
STRANGER = "7000000000000777"


@asynccontextmanager
async def messenger_world(
    tmp_path: Path,
    *,
    users: dict[str, Any] | None = None,
    messenger: dict[str, Any] | None = None,
    model: str = "openai/fake-model",
    telegram: FakeTelegram | None = None,
    transcription: bool = False,
) -> AsyncIterator[tuple[Gateway, FakeMessenger, FakeLLM]]:
    llm = await FakeLLM().start()
    fb = await FakeMessenger().start()
    chans: dict[str, Any] = {"web": {"port": 0}, "messenger": fb.config(**(messenger or {}))}
    if telegram is not None:
        chans["telegram"] = {"token": telegram.token, "api_base_url": telegram.api_base_url, "poll_timeout": 1}
    ai: dict[str, Any] = {"model": model, "api_base": llm.api_base, "api_key": "sk-test-0000000000000", "retries": 0}
    if transcription:
        ai["transcription"] = {"model": TRANSCRIPTION_MODEL}
    config = parse_config(
        {
            "ai": ai,
            "storage": {"data_dir": str(tmp_path / "data")},
            "channels": chans,
            "users": users or {},
            "memory": {"merge": {"enabled": False}},
        },
        "t",
        env={},
    )
    gw = Gateway(config)
    try:
        await gw.start()
        await gw.llm.ready()
        yield gw, fb, llm
    finally:
        await gw.stop(deadline=1)
        await fb.stop()
        await llm.stop()


def hook(gw: Gateway) -> str:
    return gw.url + "/messenger/webhook"


async def said(fb: FakeMessenger, psid: str, n: int = 1) -> list[str]:
    """What the Page sent `psid`, once it sent at least `n` messages."""
    await fb.wait_for(lambda f: len(f.texts_to(psid)) >= n)
    return fb.texts_to(psid)


async def status(gw: Gateway, event_id: str) -> str | None:
    assert gw.storage is not None
    found = await gw.storage.journal.journaled(event_id)
    return None if found is None else found[0]


async def settled(gw: Gateway, event_id: str) -> str | None:
    """The journal status of `event_id` once its turn is over."""
    async with asyncio.timeout(10):
        while (found := await status(gw, event_id)) in (None, "received"):  # noqa: ASYNC110
            await asyncio.sleep(0.02)  # the journal has no event to wait on (tests/waits.py's bounded poll)
    return found


async def test_a_dm_is_answered_through_the_send_api(tmp_path: Path) -> None:
    async with messenger_world(tmp_path, messenger={"dm_policy": "open"}) as (gw, fb, llm):
        assert await fb.deliver(hook(gw), fb.text("hello, **page**", mid="m_first")) == 200
        assert await said(fb, PSID) == ["echo: hello, page"]  # the model's Markdown, as Messenger shows it
        [sent] = fb.sent
        assert sent.messaging_type == "RESPONSE"
        assert fb.tokens_in_url == 0 and all(c.token == fb.token for c in fb.calls)
        assert [a.action for a in fb.actions] == ["typing_on"]  # the reply itself ended the indicator
        assert len(llm.requests) == 1
        assert await settled(gw, "messenger:m_first") == "done"


async def test_a_redelivered_call_is_answered_once(tmp_path: Path) -> None:
    async with messenger_world(tmp_path, messenger={"dm_policy": "open"}) as (gw, fb, llm):
        event = fb.text("are you there?", mid="m_twice")
        first = await asyncio.gather(fb.deliver(hook(gw), event), fb.deliver(hook(gw), event))
        assert first == [200, 200]
        await said(fb, PSID)
        await until(lambda: llm.requests != [])
        assert await fb.deliver(hook(gw), event) == 200  # Meta tries again later
        await fb.deliver(hook(gw), fb.text("and now?"))
        assert await said(fb, PSID, 2) == ["echo: are you there?", "echo: and now?"]
        assert len(llm.requests) == 2
        assert await settled(gw, "messenger:m_twice") == "done"


@pytest.mark.parametrize("forgery", ["unsigned", "wrong secret", "malformed json"])
async def test_forged_and_malformed_calls_store_nothing(tmp_path: Path, forgery: str) -> None:
    async with messenger_world(tmp_path, messenger={"dm_policy": "open"}) as (gw, fb, llm):
        event = fb.text("let me in", mid="m_forged")
        raw = json.dumps(fb.body(event)).encode()
        headers = {
            "unsigned": {"Content-Type": "application/json"},
            "wrong secret": fb.signed(raw, secret="guessed-secret"),
            "malformed json": fb.signed(raw[:-3]),
        }[forgery]
        code, _ = await fb.post(hook(gw), raw[:-3] if forgery == "malformed json" else raw, headers)
        assert code == (400 if forgery == "malformed json" else 403)
        assert await status(gw, "messenger:m_forged") is None
        assert gw.storage is not None and await gw.storage.conversations.load("messenger", PSID) is None
        # The next genuine message is the first thing answered.
        await fb.deliver(hook(gw), fb.text("genuine"))
        assert await said(fb, PSID) == ["echo: genuine"]
        assert len(llm.requests) == 1


async def test_pairing_gives_an_unknown_person_a_code(tmp_path: Path) -> None:
    users = {"root": {"roles": ["admin"], "identities": [f"messenger:{FakeMessenger().page_id}/{ADMIN_PSID}"]}}
    async with messenger_world(tmp_path, users=users) as (gw, fb, llm):
        await fb.deliver(hook(gw), fb.text("hello?", psid=STRANGER))
        [answer] = await said(fb, STRANGER)
        code = re.search(r"pairing code is ([A-Z0-9]{6})", answer)
        assert code, answer
        assert llm.requests == []
        await fb.deliver(hook(gw), fb.text(f"/pair approve {code.group(1)}", psid=ADMIN_PSID))
        assert "Approved messenger:" in (await said(fb, ADMIN_PSID))[0]
        await fb.deliver(hook(gw), fb.text("hello again", psid=STRANGER))
        # Told they were approved (gateway/pairing_notice.py), and answered.
        assert sorted((await said(fb, STRANGER, 3))[1:]) == [
            "You're approved: you can talk to me now.",
            "echo: hello again",
        ]


async def test_a_long_answer_is_split_under_two_thousand_characters(tmp_path: Path) -> None:
    paragraph = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 6
    code = "```python\n" + "\n".join(f"value_{i} = {i} * 2  # **not bold**" for i in range(40)) + "\n```"
    answer = "\n\n".join([paragraph] * 8 + [code] + [paragraph] * 4)
    async with messenger_world(tmp_path, messenger={"dm_policy": "open"}) as (gw, fb, llm):
        llm.script(Reply(answer))
        await fb.deliver(hook(gw), fb.text("tell me a lot", mid="m_long"))
        assert await settled(gw, "messenger:m_long") == "done"
        texts = fb.texts_to(PSID)
        assert len(texts) >= len(answer) // 2000 + 1
        assert all(len(t) <= 2000 for t in texts)
        assert sum(t.count("```") for t in texts) % 2 == 0  # each piece closes the fence it opens
        assert "**not bold**" in "".join(texts)  # code is kept as written
        assert "value_39 = 39 * 2" in "".join(texts)


async def test_a_picture_reaches_a_vision_model(tmp_path: Path) -> None:
    async with messenger_world(tmp_path, messenger={"dm_policy": "open"}, model=VISION_MODEL) as (gw, fb, llm):
        url = fb.attach(media.jpeg(320, 200), "4411_n.jpg", "image/jpeg")
        await fb.deliver(hook(gw), fb.attachments(("image", url), text="what is this?"))
        await said(fb, PSID)
        assert len(image_parts(llm.requests[-1])) == 1
        [(path, auth)] = fb.downloads
        assert path.endswith("/4411_n.jpg") and auth is None  # Meta's signed URL: no token sent with it


async def test_a_picture_for_a_model_that_cannot_see_becomes_a_note(tmp_path: Path) -> None:
    async with messenger_world(tmp_path, messenger={"dm_policy": "open"}) as (gw, fb, llm):
        url = fb.attach(media.png(), "screen.png", "image/png")
        await fb.deliver(hook(gw), fb.attachments(("image", url)))
        await said(fb, PSID)
        assert image_parts(llm.requests[-1]) == []
        assert "screen.png" in user_text(llm.requests[-1]) and "not shown to you" in user_text(llm.requests[-1])


async def test_a_voice_clip_is_transcribed(tmp_path: Path) -> None:
    async with messenger_world(tmp_path, messenger={"dm_policy": "open"}, transcription=True) as (gw, fb, llm):
        llm.transcripts.append("book a table for two")
        url = fb.attach(media.ogg_voice(4), "audioclip-1700000000000-4000.mp4", "audio/mpeg")
        await fb.deliver(hook(gw), fb.attachments(("audio", url)))
        await said(fb, PSID)
        assert "book a table for two" in user_text(llm.requests[-1])


async def test_an_attachment_off_facebooks_hosts_is_not_fetched(tmp_path: Path) -> None:
    async with messenger_world(tmp_path, messenger={"dm_policy": "open"}) as (gw, fb, llm):
        await fb.deliver(hook(gw), fb.attachments(("file", "https://attacker.example/notes.txt")))
        [answer] = await said(fb, PSID)
        assert "notes.txt: its address is not one of the platform's own" in answer
        assert llm.requests == [] and fb.downloads == []


async def test_a_late_redelivery_outside_the_window_gets_no_reply(tmp_path: Path) -> None:
    async with messenger_world(tmp_path, messenger={"dm_policy": "open"}) as (gw, fb, llm):
        old = fb.clock() - 25 * 3600
        await fb.deliver(hook(gw), fb.text("from yesterday", mid="m_old", timestamp=old))
        await settled(gw, "messenger:m_old")
        assert len(llm.requests) == 1  # the model answered; Messenger may not be sent it
        assert fb.sent == [] and fb.actions == []


async def test_a_memory_remembered_on_telegram_is_recalled_on_messenger(tmp_path: Path) -> None:
    tg = await FakeTelegram().start()
    users = {"dana": {"identities": ["telegram:2002"]}}
    try:
        async with messenger_world(tmp_path, users=users, telegram=tg) as (gw, fb, llm):

            def tg_texts() -> list[str]:
                return [s.text for s in tg.sent if s.chat_id == 2002 and not s.edit]

            await tg.dm("/remember I prefer green tea over coffee", sender=2002)
            await until(lambda: any("Remembered as mem-" in t for t in tg_texts()))
            await tg.dm("/link", sender=2002)
            await until(lambda: any("code is" in t for t in tg_texts()))
            code = re.search(r"code is ([A-Z0-9]{4}-[A-Z0-9]{4})", tg_texts()[-1])
            assert code, tg_texts()
            await fb.deliver(hook(gw), fb.text(f"/link {code.group(1)}"))
            assert (await said(fb, PSID))[0].startswith(
                f"Linked: messenger:{fb.page_id}/{PSID} now belongs to user dana"
            )
            await fb.deliver(hook(gw), fb.text("do I prefer green tea or coffee?"))
            await said(fb, PSID, 2)
            assert "I prefer green tea over coffee" in str(llm.requests[-1]["messages"])
    finally:
        await tg.stop()
