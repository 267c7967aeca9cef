"""The Teams adapter end to end against the fake Bot Connector: the SDK's Activity model and
connector client on real HTTP, the endpoint served on loopback (tests/contract/harness_teams.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from channels.teams.adapter import TeamsAdapter, masked, pacing
from channels.teams.errors import TeamsStartError, retry_after_seconds
from gateway.core.events import ConversationKind, ConversationRef, MessageReceived, MessageRef, OutboundMessage
from gateway.core.ports import DeliveryError
from tests.contract.harness_teams import TeamsHarness
from tests.fakes.conversations import MemoryConversations
from tests.fakes.teams import CHANNEL, GROUP_CHAT, TENANT_ID, FakeTeams, Hang, RateLimited, Status


class Journal:
    """What the gateway's `accept` does: keeps each event once, and says whether it was new."""

    def __init__(self) -> None:
        self.events: dict[str, MessageReceived] = {}
        self.calls = 0

    async def accept(self, ev: MessageReceived) -> bool:
        self.calls += 1
        if ev.event_id in self.events:
            return False
        self.events[ev.event_id] = ev
        return True


class CountingConversations(MemoryConversations):
    def __init__(self) -> None:
        super().__init__()
        self.saves = 0

    async def save(self, channel: str, conversation: str, data: dict[str, Any]) -> None:
        self.saves += 1
        await super().save(channel, conversation, data)


@pytest.fixture
def journal() -> Journal:
    return Journal()


@pytest.fixture
async def teams(journal: Journal) -> AsyncIterator[TeamsHarness]:
    h = TeamsHarness(accept=journal.accept)
    await h.start()
    try:
        yield h
    finally:
        async with asyncio.timeout(5):  # stop() is prompt
            await h.stop()


async def received(h: TeamsHarness) -> MessageReceived:
    return await asyncio.wait_for(h.inbound.get(), timeout=5)


async def post(h: TeamsHarness, activity: dict[str, Any]) -> None:
    status, body = await h.fake.post(h.endpoint, activity)
    assert status == 200, body


def adapter(h: TeamsHarness) -> TeamsAdapter:
    assert isinstance(h.adapter, TeamsAdapter)
    return h.adapter


async def test_a_dm_comes_in_and_its_answer_goes_back(teams: TeamsHarness) -> None:
    await post(teams, teams.fake.personal("hello there", user="42"))
    ev = await received(teams)
    assert (ev.ref.kind, ev.ref.chat_id, ev.text) == (ConversationKind.DM, "a:1personal-chat-42", "hello there")
    assert ev.sender.identity == f"teams:{TENANT_ID}/aad-42"

    ref = await teams.adapter.send(OutboundMessage(ev.ref, "Hi **Ann**, 1 < 2", "k1"))
    [sent] = await teams.fake.wait_sent(1)
    assert (sent.op, sent.conversation_id, sent.activity_id) == ("send", "a:1personal-chat-42", ref.message_id)
    assert (sent.text, sent.text_format) == ("Hi **Ann**, 1 &lt; 2", "markdown")
    assert sent.body["from"]["id"] == teams.fake.bot_id
    assert teams.adapter.health().ok and "0b07…c1a0" in teams.adapter.health().detail


async def test_group_messages_say_whether_the_bot_was_mentioned(teams: TeamsHarness) -> None:
    await post(teams, teams.fake.group_chat("lunch anyone?"))
    await post(teams, teams.fake.group_chat("what do you think?", mention=True, mentions=(("29:bob", "Bob"),)))
    first, second = await received(teams), await received(teams)
    assert (first.ref.kind, first.ref.chat_id, first.mentions_bot) == (ConversationKind.GROUP, GROUP_CHAT, False)
    assert (second.text, second.mentions_bot) == ("what do you think? @Bob", True)


async def test_a_channel_answer_goes_into_the_thread_it_was_asked_in(teams: TeamsHarness) -> None:
    root = teams.fake.channel("deploy is red", mention=True)
    await post(teams, root)
    asked = await received(teams)
    assert (asked.ref.chat_id, asked.ref.thread_id) == (CHANNEL, root["id"])
    await post(teams, teams.fake.channel("any news?", thread=root["id"], mention=True))
    follow_up = await received(teams)
    assert follow_up.ref == asked.ref  # the thread is one conversation

    quote = MessageRef(follow_up.ref, follow_up.message_id or "")
    await teams.adapter.send(OutboundMessage(follow_up.ref, "looking", "k1", reply_to=quote))
    [sent] = await teams.fake.wait_sent(1)
    assert sent.op == "reply" and sent.conversation_id == f"{CHANNEL};messageid={root['id']}"
    assert sent.reply_to_id == follow_up.message_id


async def test_a_streamed_reply_is_one_message_updated_in_place(teams: TeamsHarness) -> None:
    conv = teams.conversation("thread")
    ref = await teams.adapter.send(OutboundMessage(conv, "The answer is", "k1", final=False))
    await teams.adapter.edit(ref, "The answer is **42**", final=True)
    first, update = await teams.fake.wait_sent(2)
    assert update.op == "update" and update.activity_id == first.activity_id == ref.message_id
    assert update.conversation_id == first.conversation_id == f"{CHANNEL};messageid={conv.thread_id}"
    assert teams.fake.shown()[ref.message_id] == "The answer is **42**"


async def test_typing_shows_until_the_first_message_of_the_reply(teams: TeamsHarness) -> None:
    conv = teams.conversation("thread")
    async with teams.adapter.typing(conv):
        await teams.fake.wait_for(lambda f: len(f.typing) >= 1)
        await teams.adapter.send(OutboundMessage(conv, "done", "k1"))
    [typing] = teams.fake.typing
    assert typing.conversation_id == f"{CHANNEL};messageid={conv.thread_id}"
    assert typing.body["type"] == "typing" and "text" not in typing.body


async def test_typing_that_fails_never_fails_the_turn(teams: TeamsHarness) -> None:
    teams.fake.fail_next("typing", Status(403))
    async with teams.adapter.typing(teams.conversation("dm")):
        await teams.fake.wait_for(lambda f: any(c[0] == "POST" for c in f.calls))
    assert teams.fake.typing == []


@pytest.mark.parametrize(
    ("behavior", "retryable", "maybe_delivered", "retry_after"),
    [
        (RateLimited(7), True, False, 7.0),
        (Status(412), True, False, None),
        (Status(500), True, False, None),
        (Status(502), True, False, None),
        (Status(400), False, False, None),
        (Status(403), False, False, None),
        (Status(404), False, False, None),
        (Status(413), False, False, None),
        (Hang(), False, True, None),
    ],
)
async def test_failed_sends_say_whether_to_try_again(
    teams: TeamsHarness, behavior: Any, retryable: bool, maybe_delivered: bool, retry_after: float | None
) -> None:
    teams.fake.fail_next("send", behavior)
    with pytest.raises(DeliveryError) as info:
        await teams.adapter.send(OutboundMessage(teams.conversation("dm"), "hello", "k1"))
    err = info.value
    assert (err.retryable, err.maybe_delivered, err.retry_after) == (retryable, maybe_delivered, retry_after)


async def test_a_refused_bot_token_is_renewed_once(teams: TeamsHarness) -> None:
    await teams.adapter.send(OutboundMessage(teams.conversation("dm"), "one", "k1"))
    teams.fake.revoke_tokens()  # the Bot Connector no longer takes the cached token
    await teams.adapter.send(OutboundMessage(teams.conversation("dm"), "two", "k2"))
    assert [s.text for s in teams.fake.messages] == ["one", "two"]
    assert len(teams.fake.token_requests) == 2
    teams.fake.fail_next("send", Status(401), Status(401))
    with pytest.raises(DeliveryError) as info:
        await teams.adapter.send(OutboundMessage(teams.conversation("dm"), "three", "k3"))
    assert not info.value.retryable and "401" in str(info.value)


async def test_one_token_serves_many_calls_and_the_secret_stays_in_the_token_request(teams: TeamsHarness) -> None:
    conv = teams.conversation("group")
    await asyncio.gather(*(teams.adapter.send(OutboundMessage(conv, f"m{i}", f"k{i}")) for i in range(5)))
    assert len(teams.fake.token_requests) == 1
    request = teams.fake.token_requests[0]
    assert request["client_secret"] == teams.fake.app_password
    assert (request["grant_type"], request["scope"]) == ("client_credentials", "https://api.botframework.com/.default")
    assert all(teams.fake.app_password not in f"{path} {token}" for _m, path, token in teams.fake.calls)


async def test_a_wrong_secret_fails_sends_plainly(caplog: pytest.LogCaptureFixture) -> None:
    h = TeamsHarness(app_password="not-the-secret-at-all")
    await h.start()
    try:
        with caplog.at_level(logging.INFO), pytest.raises(DeliveryError) as info:
            await h.adapter.send(OutboundMessage(h.conversation("dm"), "hello", "k1"))
    finally:
        await h.stop()
    assert not info.value.retryable and "invalid_client" in str(info.value)
    assert "not-the-secret-at-all" not in str(info.value) + caplog.text
    assert h.fake.sent == []


async def test_a_redelivered_activity_is_answered_once(teams: TeamsHarness, journal: Journal) -> None:
    activity = teams.fake.personal("only once")
    await post(teams, activity)
    await post(teams, activity)  # Bot Service did not hear our 200 and sends it again
    assert journal.calls == 2 and len(journal.events) == 1
    assert (await received(teams)).text == "only once"
    assert teams.inbound.empty()


async def test_a_journal_that_fails_gets_bot_service_to_retry(teams: TeamsHarness) -> None:
    async def broken(_ev: MessageReceived) -> bool:
        raise OSError("disk full")

    adapter(teams).services = dataclasses.replace(adapter(teams).services, accept=broken)
    status, _ = await teams.fake.post(teams.endpoint, teams.fake.personal("hello"))
    assert status == 503 and teams.inbound.empty()


async def test_a_new_process_answers_a_conversation_it_never_saw() -> None:
    fake = FakeTeams()
    store = CountingConversations()
    first = TeamsHarness(fake=fake, conversations=store, install=False)
    await first.start()
    try:
        for text in ("one", "two", "three"):
            await post(first, fake.personal(text, user="77"))
        ev = await received(first)
        assert store.saves == 1  # written when first seen, not on every message
        moved = fake.personal("four", user="77") | {"serviceUrl": fake.service_url_in("emea")}
        await post(first, moved)
        assert store.saves == 2  # and when Teams moves the conversation

        second = TeamsHarness(fake=fake, conversations=store, install=False)
        await second.start(fake=False)
        try:
            await second.adapter.send(OutboundMessage(ev.ref, "from the other instance", "k1"))
        finally:
            await second.stop(fake=False)
        assert fake.sent[-1].conversation_id == "a:1personal-chat-77"
        assert fake.calls[-1][1].startswith("/smba/emea/v3/")  # the newest reference

        stranger = TeamsHarness(fake=fake, install=False)
        await stranger.start(fake=False)
        try:
            with pytest.raises(DeliveryError, match="no conversation reference") as info:
                await stranger.adapter.send(OutboundMessage(ev.ref, "hello?", "k2"))
            assert not info.value.retryable
        finally:
            await stranger.stop(fake=False)
    finally:
        await first.stop()


async def test_installing_the_bot_keeps_the_reference_for_proactive_messages() -> None:
    h = TeamsHarness(install=False)
    await h.start()
    try:
        conversation = {"isGroup": True, "conversationType": "channel", "id": CHANNEL}
        await post(h, h.fake.installed(conversation))
        assert h.inbound.empty()
        assert h.conversations.rows[("teams", CHANNEL)]["service_url"] == h.fake.service_url
        # A scheduled run posts to the channel itself: a new thread.
        await h.adapter.send(
            OutboundMessage(ConversationRef("teams", CHANNEL, None, ConversationKind.GROUP), "hi", "k1")
        )
        assert h.fake.messages[-1].conversation_id == CHANNEL
    finally:
        await h.stop()


async def test_non_messages_and_own_messages_are_answered_and_dropped(teams: TeamsHarness, journal: Journal) -> None:
    conversation = {"conversationType": "personal", "id": "a:1personal-chat-1001"}
    for kind in ("typing", "messageReaction", "invoke", "conversationUpdate", "messageUpdate"):
        await post(teams, teams.fake.activity(conversation, None, kind=kind))
    await post(teams, teams.fake.personal("echo of myself", from_self=True))
    await post(teams, teams.fake.personal("a real one"))
    assert (await received(teams)).text == "a real one"
    assert len(journal.events) == 1


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[1, 2]", b"{}", json.dumps({"type": "message"}).encode(), b'{"type": 5, "conversation": {}}'],
)
async def test_malformed_activities_are_refused_and_nothing_is_kept(
    teams: TeamsHarness, journal: Journal, body: bytes
) -> None:
    status, text = await teams.fake.post(teams.endpoint, body)
    assert status == 400 and "malformed activity" in text
    assert journal.calls == 0 and teams.inbound.empty()


async def test_a_huge_request_is_refused_before_it_is_read(teams: TeamsHarness, journal: Journal) -> None:
    status, _ = await teams.fake.post(teams.endpoint, teams.fake.personal("x" * 2_000_000))
    assert status == 413 and journal.calls == 0


async def test_a_single_tenant_bot_refuses_another_tenants_activity(teams: TeamsHarness, journal: Journal) -> None:
    activity = teams.fake.personal("hi")
    activity["conversation"]["tenantId"] = "another-tenant"
    status, _ = await teams.fake.post(teams.endpoint, activity)
    assert status == 403 and journal.calls == 0


async def test_private_answers_are_refused_not_posted_for_all(teams: TeamsHarness) -> None:
    with pytest.raises(DeliveryError, match="private"):
        await teams.adapter.send(OutboundMessage(teams.conversation("group"), "x", "k", private_to="teams:t/u"))
    assert teams.fake.sent == []


def test_pacing_follows_teams_limits_per_conversation() -> None:
    dm = ConversationRef("teams", "a:1", None, ConversationKind.DM)
    thread = ConversationRef("teams", CHANNEL, "17", ConversationKind.GROUP)
    other = ConversationRef("teams", CHANNEL, "18", ConversationKind.GROUP)
    conv, app = pacing(thread)
    assert conv == pacing(other)[0]  # a channel's threads share its budget
    assert pacing(dm)[0].key != conv.key and app.key == "app" and not app.hold
    for seconds, allowed in ((1, 7), (2, 8), (30, 60), (3600, 1800)):
        assert conv.burst + conv.per_second * seconds <= allowed
    assert app.burst + app.per_second * 1 <= 30


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("5", 5.0), ("0.5", 0.5), ("-3", 0.0), ("Wed, 21 Oct 2015 07:28:10 GMT", 10.0), ("soon", None), (None, None)],
)
def test_retry_after_headers(header: str | None, seconds: float | None) -> None:
    now = 1445412480.0  # 07:28:00 that day
    assert retry_after_seconds(header, now=now) == seconds


def test_app_ids_are_masked() -> None:
    assert masked("0b07a11e-0000-4000-8000-00000000c1a0") == "0b07…c1a0"
    assert masked("short") == "…"


async def test_a_second_channel_on_the_same_path_is_refused() -> None:
    h = TeamsHarness()
    with pytest.raises(TeamsStartError, match="already served"):
        TeamsAdapter("teams2", h.config, adapter(h).services)
