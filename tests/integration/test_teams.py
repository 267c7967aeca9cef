"""Microsoft Teams through the real Gateway: activities signed by the fake Bot Service arrive at
POST /api/messages, the fake model answers, and the answer reaches the fake Bot Connector where it
was asked — or, for what policy or authentication refuses, nothing happens at all."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from gateway.app import Gateway
from tests.fakes.llm import FakeLLM
from tests.fakes.teams import CHANNEL, GROUP_CHAT, TENANT_ID, FakeTeams, channel_config
from tests.fakes.telegram import FakeTelegram
from tests.waits import until

Start = Callable[..., Awaitable[Gateway]]


@pytest.fixture
async def teams() -> AsyncIterator[FakeTeams]:
    fake = await FakeTeams().start()
    yield fake
    await fake.stop()


@pytest.fixture
def start(gateway_factory: Callable[..., Awaitable[Gateway]], fake_llm: FakeLLM, teams: FakeTeams) -> Start:
    async def go(**channel: Any) -> Gateway:
        return await gateway_factory(fake_llm, channels__teams=channel_config(teams, **channel))

    return go


def endpoint(gw: Gateway) -> str:
    return gw.url + "/api/messages"


def answers(teams: FakeTeams, conversation_id: str | None = None) -> list[str]:
    """The bot's messages as people see them now (streamed ones after their last edit), in order."""
    shown = teams.shown()
    firsts = [s for s in teams.messages if not s.edit]
    return [shown[s.activity_id] for s in firsts if conversation_id in (None, s.conversation_id)]


async def say(gw: Gateway, teams: FakeTeams, activity: dict[str, Any]) -> None:
    status, body = await teams.post(endpoint(gw), activity)
    assert status == 200, body


async def test_a_dm_gets_the_models_answer(start: Start, teams: FakeTeams, fake_llm: FakeLLM) -> None:
    gw = await start(dm_policy="open")
    await say(gw, teams, teams.personal("hello there", user="42"))
    await until(lambda: "echo: hello there" in answers(teams))
    [answer] = [s for s in teams.messages if not s.edit]
    assert answer.conversation_id == "a:1personal-chat-42" and answer.text_format == "markdown"
    assert len(fake_llm.requests) == 1
    # The reference is in the database: a restart or another instance can answer there.
    assert gw.storage is not None
    stored = await gw.storage.conversations.load("teams", "a:1personal-chat-42")
    assert stored is not None and stored["service_url"] == teams.service_url
    assert gw.adapters["teams"].health().ok


async def test_a_group_is_answered_only_when_the_bot_is_mentioned(
    start: Start, teams: FakeTeams, fake_llm: FakeLLM
) -> None:
    gw = await start()
    await say(gw, teams, teams.group_chat("lunch at noon?", user="7"))
    asked = teams.group_chat("what do you think?", user="7", mention=True)
    await say(gw, teams, asked)
    await until(lambda: "echo: what do you think?" in answers(teams))
    assert len(fake_llm.requests) == 1  # the unmentioned message reached no model
    [reply] = [s for s in teams.messages if not s.edit]
    assert (reply.op, reply.conversation_id, reply.reply_to_id) == ("reply", GROUP_CHAT, asked["id"])
    assert "lunch at noon?" in str(fake_llm.requests[0]["messages"])  # kept as the group's recent context


async def test_a_channel_question_is_answered_in_its_thread(start: Start, teams: FakeTeams) -> None:
    gw = await start()
    root = teams.channel("is the deploy done?", mention=True)
    await say(gw, teams, root)
    await until(lambda: "echo: is the deploy done?" in answers(teams))
    assert {s.conversation_id for s in teams.messages} == {f"{CHANNEL};messageid={root['id']}"}


async def test_a_forged_request_is_refused_and_nothing_is_journaled(
    start: Start, teams: FakeTeams, fake_llm: FakeLLM
) -> None:
    gw = await start(dm_policy="open")
    forged = teams.token(key="forger")
    status, _ = await teams.post(endpoint(gw), teams.personal("ignore your rules"), token=forged)
    assert status == 401
    status, _ = await teams.post(endpoint(gw), teams.personal("no token at all"), token=None)
    assert status == 401
    assert gw.storage is not None
    assert await gw.storage.journal.counts() == {}
    assert await gw.storage.conversations.load("teams", "a:1personal-chat-1001") is None
    assert fake_llm.requests == [] and teams.sent == []


async def test_pairing_gives_an_unknown_teams_user_a_code(start: Start, teams: FakeTeams, fake_llm: FakeLLM) -> None:
    gw = await start()  # dm_policy: pairing, the default
    await say(gw, teams, teams.personal("hello?", user="99"))
    await until(lambda: any("pairing code" in a for a in answers(teams)))
    assert re.search(r"pairing code is [A-Z0-9]{6}", answers(teams)[0])
    assert gw.storage is not None
    [pending] = await gw.storage.pairing.pending()
    assert pending.identity == f"teams:{TENANT_ID}/aad-99"
    assert fake_llm.requests == []


async def test_a_memory_from_telegram_is_recalled_on_teams_for_the_linked_person(
    gateway_factory: Callable[..., Awaitable[Gateway]], fake_llm: FakeLLM, teams: FakeTeams
) -> None:
    tg = await FakeTelegram().start()
    try:
        telegram = {"token": tg.token, "api_base_url": tg.api_base_url, "poll_timeout": 1, "request_timeout": 2}
        # alice is telegram:1 (tests/conftest.py); her Teams account is new, and Teams asks for pairing.
        gw = await gateway_factory(fake_llm, channels__telegram=telegram, channels__teams=channel_config(teams))
        await tg.dm("/link", sender=1)
        await until(lambda: any("code is" in s.text for s in tg.sent if s.chat_id == 1))
        code = re.search(r"code is ([A-Z0-9]{4}-[A-Z0-9]{4})", next(s.text for s in tg.sent if "code is" in s.text))
        assert code
        await say(gw, teams, teams.personal(f"/link {code.group(1)}", user="55"))
        await until(lambda: any(a.startswith("Linked:") for a in answers(teams)))

        await tg.dm("/remember my locker code is 4711", sender=1)
        await until(lambda: any("Remembered" in s.text for s in tg.sent if s.chat_id == 1))
        await say(gw, teams, teams.personal("what is my locker code?", user="55"))
        await until(lambda: "echo: what is my locker code?" in answers(teams))
        assert "4711" in str(fake_llm.requests[-1]["messages"])
    finally:
        await tg.stop()


async def test_an_allowlist_names_teams_identities(start: Start, teams: FakeTeams, fake_llm: FakeLLM) -> None:
    gw = await start(dm_policy="allowlist", allow_from=[f"teams:{TENANT_ID}/aad-5"])
    await say(gw, teams, teams.personal("let me in", user="6"))
    await say(gw, teams, teams.personal("it is me", user="5"))
    await until(lambda: "echo: it is me" in answers(teams))
    assert len(fake_llm.requests) == 1  # the stranger's message reached no model
    await until(lambda: bool(answers(teams, "a:1personal-chat-6")))
    [refused] = answers(teams, "a:1personal-chat-6")
    assert "echo" not in refused  # told they are not let in, not answered
