"""The Discord adapter with the real discord.py against tests/fakes/discord.py (loopback only)."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp.web
import discord
import pytest

import channels
from channels.discord import endpoints
from channels.discord.adapter import DiscordAdapter
from channels.discord.config import DiscordChannelConfig
from channels.discord.errors import DiscordStartError
from gateway.core.events import ConversationKind, ConversationRef, MessageReceived, MessageRef, OutboundMessage
from gateway.core.ports import ChannelServices, DeliveryError, SessionBusy
from tests.fakes.discord import (
    APP_ID,
    BOT_ID,
    BOT_ROLE_ID,
    BOT_USER,
    DM_CHANNEL_ID,
    TEXT_CHANNEL_ID,
    THREAD_ID,
    TOKEN,
    FakeDiscord,
    user,
)

# GUILDS | GUILD_MESSAGES | DIRECT_MESSAGES | MESSAGE_CONTENT
INTENTS = (1 << 0) | (1 << 9) | (1 << 12) | (1 << 15)
DM = ConversationRef("discord", DM_CHANNEL_ID, None, ConversationKind.DM)
GROUP = ConversationRef("discord", TEXT_CHANNEL_ID, None, ConversationKind.GROUP)
THREAD = ConversationRef("discord", TEXT_CHANNEL_ID, THREAD_ID, ConversationKind.GROUP)


async def no_history(*_args: Any) -> list[Any]:
    return []


async def ignore(_ev: MessageReceived) -> None:
    return None


def services() -> ChannelServices:
    return ChannelServices(http=aiohttp.web.Application(), authenticate=lambda _t: None, history=no_history)


def make(fake: FakeDiscord, name: str = "discord", **overrides: Any) -> DiscordAdapter:
    cfg: dict[str, Any] = {"token": TOKEN, "api_base_url": fake.api_base, "request_timeout": 1.0, **overrides}
    adapter = channels.create(name, DiscordChannelConfig(**cfg), services())
    assert isinstance(adapter, DiscordAdapter)
    return adapter


@dataclass
class Live:
    fake: FakeDiscord
    adapter: DiscordAdapter
    inbound: asyncio.Queue[MessageReceived]

    async def next(self, timeout: float = 5) -> MessageReceived:
        return await asyncio.wait_for(self.inbound.get(), timeout)


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    f = await FakeDiscord().start()
    yield f
    await f.stop()


@pytest.fixture
async def live(fake: FakeDiscord) -> AsyncIterator[Live]:
    adapter = make(fake)
    inbound: asyncio.Queue[MessageReceived] = asyncio.Queue()
    await adapter.start(inbound.put)
    yield Live(fake, adapter, inbound)
    await adapter.stop()


def outbound(conv: ConversationRef, text: str, **kw: Any) -> OutboundMessage:
    return OutboundMessage(conv, text, idempotency_key="k", **kw)


# -- connecting ---------------------------------------------------------------------------------


async def test_start_logs_in_discovers_gateway_and_identifies(live: Live) -> None:
    fake = live.fake
    rest = [c.path for c in fake.journal if c.kind == "rest"]
    assert rest[:3] == ["/users/@me", "/oauth2/applications/@me", "/gateway/bot"]
    connect = next(c for c in fake.journal if c.kind == "connect")
    assert connect.path.startswith("/gateway?v=10&encoding=json")
    (identify,) = fake.ops(2)
    assert identify.body["token"] == TOKEN
    assert identify.body["intents"] == INTENTS
    assert "shard" not in identify.body
    assert live.adapter.health().ok
    caps = live.adapter.capabilities
    assert caps.max_length == 2000 and caps.min_edit_interval == 1.0
    assert caps.can_edit and caps.typing and caps.threads
    assert caps.length("@everyone") == 10  # measured as rendered (escape included)


async def test_configured_gateway_url_skips_discovery(fake: FakeDiscord) -> None:
    adapter = make(fake, gateway_url=fake.gateway_url)
    await adapter.start(ignore)
    try:
        assert fake.rest("GET", "/gateway") == []
        assert len(fake.ops(2)) == 1
    finally:
        await adapter.stop()


async def test_bad_token_fails_start_with_login_failure(fake: FakeDiscord) -> None:
    adapter = make(fake, token="wrong-token")
    started = time.monotonic()
    with pytest.raises(DiscordStartError, match="token was rejected") as info:
        await adapter.start(ignore)
    assert isinstance(info.value.__cause__, discord.LoginFailure)
    assert time.monotonic() - started < 5
    assert adapter.health().ok is False
    assert fake.ops(2) == []


async def test_disallowed_intents_fail_start_clearly(fake: FakeDiscord) -> None:
    fake.close_on_identify = 4014
    adapter = make(fake)
    with pytest.raises(DiscordStartError, match="Message Content intent") as info:
        await adapter.start(ignore)
    assert isinstance(info.value.__cause__, discord.PrivilegedIntentsRequired)


async def test_single_shard_of_many_identifies_with_its_shard(fake: FakeDiscord) -> None:
    adapter = make(fake, shard_ids=[1], shard_count=2)
    await adapter.start(ignore)
    try:
        assert fake.ops(2)[0].body["shard"] == [1, 2]
        assert type(adapter._client) is discord.Client
    finally:
        await adapter.stop()


async def test_shard_count_uses_the_auto_sharded_client(fake: FakeDiscord) -> None:
    adapter = make(fake, shard_count=1)
    inbound: asyncio.Queue[MessageReceived] = asyncio.Queue()
    await adapter.start(inbound.put)
    try:
        assert isinstance(adapter._client, discord.AutoShardedClient)
        assert fake.ops(2)[0].body["shard"] == [0, 1]
        await fake.inject(fake.message("group", "sharded hello"))
        assert (await asyncio.wait_for(inbound.get(), 5)).text == "sharded hello"
    finally:
        await adapter.stop()


def test_shard_ids_need_a_shard_count(fake: FakeDiscord) -> None:
    with pytest.raises(ValueError, match="shard_count"):
        make(fake, shard_ids=[0])
    with pytest.raises(ValueError, match="within"):
        make(fake, shard_ids=[2], shard_count=2)


async def test_channels_in_one_process_must_share_endpoints(fake: FakeDiscord) -> None:
    first = make(fake, name="dc-a")
    try:
        same = make(fake, name="dc-b")
        await same.stop()
        with pytest.raises(ValueError, match="same ones"):
            make(fake, name="dc-c", api_base_url="http://127.0.0.1:9/api/v10")
        with pytest.raises(ValueError, match="ws"):
            make(fake, name="dc-a", gateway_url="http://not-a-websocket")
    finally:
        await first.stop()
    other = make(fake, name="dc-c", api_base_url="http://127.0.0.1:9/api/v10")  # free again after stop
    await other.stop()
    assert endpoints._claims == {}


# -- inbound ------------------------------------------------------------------------------------


async def test_dm_group_and_thread_messages_are_normalized(live: Live) -> None:
    fake = live.fake
    for where, conv in (("dm", DM), ("group", GROUP), ("thread", THREAD)):
        payload = fake.message(where, f"hello from {where}")  # type: ignore[arg-type]
        await fake.inject(payload)
        ev = await live.next()
        assert ev.ref == conv
        assert ev.event_id == f"discord:{payload['id']}"
        assert ev.sender.identity == "discord:1001"
        assert ev.sender.display_name == "Alice"
        assert ev.text == f"hello from {where}"
        assert ev.mentions_bot is False and ev.edited is False


async def test_mentions_replies_and_attachments(live: Live) -> None:
    fake, adapter = live.fake, live.adapter
    bob = user("1002", "bob", global_name="Bob")
    await fake.inject(fake.message("group", f"<@{BOT_ID}> ask <@1002>", mentions=[BOT_USER, bob]))
    ev = await live.next()
    assert (ev.text, ev.mentions_bot) == ("ask @Bob", True)

    await fake.inject(fake.message("group", f"<@&{BOT_ROLE_ID}> via the role", mention_roles=[BOT_ROLE_ID]))
    ev = await live.next()
    assert (ev.text, ev.mentions_bot) == ("via the role", True)

    ref = await adapter.send(outbound(THREAD, "bot says hi"))
    await fake.inject(fake.message("thread", "answering the bot", reply_to=ref.message_id))
    ev = await live.next()
    assert ev.mentions_bot is True
    assert ev.reply_to == MessageRef(THREAD, ref.message_id)

    pdf = {
        "id": fake.snowflake(),
        "filename": "a.pdf",
        "size": 1234,
        "url": "https://cdn.discordapp.com/x/a.pdf",
        "proxy_url": "https://media.discordapp.net/x/a.pdf",
        "content_type": "application/pdf",
    }
    await fake.inject(fake.message("dm", "", attachments=[pdf]))
    ev = await live.next()
    assert [(a.kind, a.name, a.size) for a in ev.attachments] == [("application/pdf", "a.pdf", 1234)]


async def test_edits_arrive_flagged_with_their_own_event_id(live: Live) -> None:
    fake = live.fake
    payload = fake.message("group", "first version")
    await fake.inject(payload)
    original = await live.next()
    updated = await fake.inject_edit(payload["id"], "second version")
    edit = await live.next()
    assert edit.edited is True and edit.text == "second version"
    assert edit.event_id == f"discord:{payload['id']}:edit:{updated['edited_timestamp']}"
    assert edit.event_id != original.event_id
    assert edit.ref == original.ref


async def test_own_and_other_bots_messages_are_ignored(live: Live) -> None:
    fake = live.fake
    await fake.inject(fake.message("group", "from myself", author=BOT_USER))
    await fake.inject(fake.message("group", "from another bot", author=user("1999", "otherbot", bot=True)))
    await fake.inject(fake.message("group", "from a person"))
    assert (await live.next()).text == "from a person"
    assert live.inbound.empty()


async def test_a_slow_sink_does_not_block_receiving(fake: FakeDiscord) -> None:
    gate = asyncio.Event()
    seen: list[str] = []
    second = asyncio.Event()

    async def sink(ev: MessageReceived) -> None:
        seen.append(ev.text)
        if ev.text == "slow":
            await gate.wait()
        elif ev.text == "busy":
            raise SessionBusy(ev.ref.session_key)
        else:
            second.set()

    adapter = make(fake)
    await adapter.start(sink)
    try:
        await fake.inject(fake.message("dm", "slow"))
        await fake.inject(fake.message("dm", "busy"))
        await fake.inject(fake.message("dm", "fast"))
        await asyncio.wait_for(second.wait(), 5)
        assert seen == ["slow", "busy", "fast"]
    finally:
        await adapter.stop()  # cancels the turn still waiting on the gate
    assert adapter._tasks == set()


# -- outbound -----------------------------------------------------------------------------------


async def test_send_to_dm_group_and_thread(live: Live) -> None:
    fake, adapter = live.fake, live.adapter
    refs = [await adapter.send(outbound(conv, f"to {conv.kind}")) for conv in (DM, GROUP, THREAD)]
    sent = await fake.wait_outbox(3)
    assert [(s.channel_id, s.content) for s in sent] == [
        (DM_CHANNEL_ID, "to dm"),
        (TEXT_CHANNEL_ID, "to group"),
        (THREAD_ID, "to group"),
    ]
    assert [r.message_id for r in refs] == [s.message_id for s in sent]
    assert refs[2].conversation == THREAD
    body = fake.rest("POST", f"/channels/{DM_CHANNEL_ID}/messages")[0].body
    assert body["allowed_mentions"]["parse"] == []  # the bot never pings, whatever the text says


async def test_send_renders_and_replies(live: Live) -> None:
    fake, adapter = live.fake, live.adapter
    question = fake.message("group", "what now?")
    await fake.inject(question)
    await live.next()
    await adapter.send(outbound(GROUP, "hey @everyone\n```\n@here\n```", reply_to=MessageRef(GROUP, question["id"])))
    (post,) = fake.rest("POST", f"/channels/{TEXT_CHANNEL_ID}/messages")
    assert post.body["content"] == "hey @\u200beveryone\n```\n@here\n```"
    assert str(post.body["message_reference"]["message_id"]) == question["id"]
    assert post.body["message_reference"]["fail_if_not_exists"] is False


async def test_edit_patches_the_message(live: Live) -> None:
    fake, adapter = live.fake, live.adapter
    ref = await adapter.send(outbound(THREAD, "draft"))
    await adapter.edit(ref, "final @here", final=True)
    sent = await fake.wait_outbox(2)
    assert sent[1].edit and sent[1].message_id == ref.message_id and sent[1].channel_id == THREAD_ID
    assert sent[1].content == "final @\u200bhere"
    assert fake.rest("PATCH", f"/channels/{THREAD_ID}/messages/{ref.message_id}")


async def test_too_long_text_is_passed_through_not_truncated(live: Live) -> None:
    with pytest.raises(DeliveryError) as info:
        await live.adapter.send(outbound(GROUP, "x" * 2001))
    assert info.value.retryable is False and info.value.maybe_delivered is False
    (post,) = live.fake.rest("POST", f"/channels/{TEXT_CHANNEL_ID}/messages")
    assert len(post.body["content"]) == 2001 and post.status == 400


async def test_typing_refreshes_and_stops(live: Live) -> None:
    fake, adapter = live.fake, live.adapter
    adapter.typing_interval = 0.01
    path = f"/channels/{THREAD_ID}/typing"
    async with adapter.typing(THREAD):
        await fake.wait_for(lambda _j: len(fake.rest("POST", path)) >= 3)
    assert not [t for t in adapter._tasks if t.get_name().startswith("discord-typing")]
    count = len(fake.rest("POST", path))
    await adapter.send(outbound(THREAD, "done"))
    await fake.wait_outbox(1)
    assert len(fake.rest("POST", path)) == count


async def test_typing_failure_never_breaks_the_turn(live: Live) -> None:
    fake, adapter = live.fake, live.adapter
    fake.fail_next("forbidden", route="typing")
    async with adapter.typing(GROUP):
        await fake.wait_for(lambda _j: any(c.status == 403 for c in fake.rest("POST", "/channels/")))
    assert await adapter.send(outbound(GROUP, "still fine"))


# -- delivery errors ----------------------------------------------------------------------------


async def test_rate_limit_surfaces_at_once_with_retry_after(live: Live) -> None:
    fake, adapter = live.fake, live.adapter
    fake.fail_next("rate_limit", retry_after=2.5)
    started = time.monotonic()
    with pytest.raises(DeliveryError) as info:
        await adapter.send(outbound(GROUP, "hi"))
    assert time.monotonic() - started < 2.0  # discord.py did not sleep 2.5 s and retry
    assert (info.value.retryable, info.value.retry_after, info.value.maybe_delivered) == (True, 2.5, False)
    assert len(fake.rest("POST", f"/channels/{TEXT_CHANNEL_ID}/messages")) == 1
    # The channel keeps working: the next send goes through.
    await adapter.send(outbound(GROUP, "again"))
    assert (await fake.wait_outbox(1))[0].content == "again"


async def test_global_rate_limit_on_edit(live: Live) -> None:
    fake, adapter = live.fake, live.adapter
    ref = await adapter.send(outbound(GROUP, "draft"))
    fake.fail_next("global_rate_limit", route="edit", retry_after=0.75)
    with pytest.raises(DeliveryError) as info:
        await adapter.edit(ref, "more", final=False)
    assert (info.value.retryable, info.value.retry_after) == (True, 0.75)
    await adapter.edit(ref, "more", final=True)  # no global lock left behind
    assert (await fake.wait_outbox(2))[1].content == "more"


async def test_server_error_is_retryable_and_not_retried_by_the_sdk(live: Live) -> None:
    fake = live.fake
    fake.fail_next("server")
    with pytest.raises(DeliveryError) as info:
        await live.adapter.send(outbound(DM, "hi"))
    assert (info.value.retryable, info.value.maybe_delivered) == (True, False)
    assert len(fake.rest("POST", f"/channels/{DM_CHANNEL_ID}/messages")) == 1


@pytest.mark.parametrize("kind", ["forbidden", "not_found", "bad_request"])
async def test_client_errors_are_final(live: Live, kind: Any) -> None:
    live.fake.fail_next(kind)
    with pytest.raises(DeliveryError) as info:
        await live.adapter.send(outbound(GROUP, "hi"))
    assert (info.value.retryable, info.value.maybe_delivered) == (False, False)


async def test_timeout_may_have_delivered_and_is_sent_once(fake: FakeDiscord) -> None:
    adapter = make(fake, request_timeout=0.3)
    await adapter.start(ignore)
    try:
        fake.fail_next("timeout")
        with pytest.raises(DeliveryError) as info:
            await adapter.send(outbound(GROUP, "slow"))
        assert (info.value.maybe_delivered, info.value.retryable) == (True, False)
        assert len(fake.rest("POST", f"/channels/{TEXT_CHANNEL_ID}/messages")) == 1
        assert [s.content for s in fake.outbox] == ["slow"]  # it did arrive
    finally:
        await adapter.stop()


async def test_connection_refused_is_retryable_and_not_delivered(live: Live) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    endpoints.use_api(endpoints.endpoints_for(f"http://127.0.0.1:{dead}/api/v10", None))
    try:
        with pytest.raises(DeliveryError) as info:
            await live.adapter.send(outbound(GROUP, "hi"))
        assert (info.value.retryable, info.value.maybe_delivered) == (True, False)
    finally:
        endpoints.use_api(endpoints.endpoints_for(live.fake.api_base, None))


async def test_bad_ids_and_stopped_channel(live: Live) -> None:
    with pytest.raises(DeliveryError) as info:
        await live.adapter.send(outbound(ConversationRef("discord", "general"), "hi"))
    assert info.value.retryable is False
    await live.adapter.stop()
    with pytest.raises(DeliveryError) as info:
        await live.adapter.send(outbound(GROUP, "hi"))
    assert info.value.retryable is True
    assert live.adapter.health().ok is False


# -- reconnecting and stopping ------------------------------------------------------------------


async def test_dropped_socket_resumes_and_replays_missed_events(live: Live) -> None:
    fake = live.fake
    fake.hold_connections()
    await fake.drop_connection()
    missed = fake.message("group", "sent while you were away")
    await fake.inject(missed)  # kept by the fake for the RESUME
    fake.release_connections()
    await fake.wait_for(lambda _j: len(fake.ops(6)) == 1)
    ev = await live.next()
    assert ev.event_id == f"discord:{missed['id']}"
    (resume,) = fake.ops(6)
    assert resume.body["token"] == TOKEN and resume.body["seq"] >= 2
    assert len(fake.ops(2)) == 1  # resumed, not re-identified
    await fake.inject(fake.message("dm", "after the resume"))
    assert (await live.next()).text == "after the resume"
    assert live.adapter.health().ok


async def test_gateway_close_code_also_resumes(live: Live) -> None:
    fake = live.fake
    await fake.drop_connection(code=4000)
    await fake.wait_for(lambda _j: len(fake.ops(6)) == 1)
    await fake.inject(fake.message("thread", "still here"))
    ev = await live.next()
    assert (ev.text, ev.ref) == ("still here", THREAD)


async def test_stop_is_prompt_and_closes_the_gateway(live: Live) -> None:
    started = time.monotonic()
    await live.adapter.stop()
    assert time.monotonic() - started < 2.0
    assert live.adapter.health().ok is False
    await live.fake.wait_for(lambda _j: not live.fake.connected)
    await live.adapter.stop()  # idempotent


async def test_fatal_gateway_close_shows_in_health(live: Live) -> None:
    runner = live.adapter._runner
    assert runner is not None
    await live.fake.drop_connection(code=4004)  # "authentication failed": discord.py gives up
    await asyncio.wait([runner], timeout=5)
    health = live.adapter.health()
    assert (health.ok, health.detail) == (False, "gateway closed: ConnectionClosed")
    with pytest.raises(DeliveryError):
        await live.adapter.send(outbound(DM, "nobody listens"))


async def test_restart_after_stop(fake: FakeDiscord) -> None:
    adapter = make(fake)
    inbound: asyncio.Queue[MessageReceived] = asyncio.Queue()
    for _ in range(2):
        await adapter.start(inbound.put)
        await fake.inject(fake.message("dm", "are you there?"))
        assert (await asyncio.wait_for(inbound.get(), 5)).text == "are you there?"
        await adapter.stop()
    assert len(fake.ops(2)) == 2


async def test_typing_on_a_stopped_or_bad_conversation_is_harmless(live: Live) -> None:
    async with live.adapter.typing(ConversationRef("discord", "not-an-id")):
        pass
    await live.adapter.stop()
    live.adapter.typing_interval = 0.01
    async with live.adapter.typing(GROUP):
        pass
    assert live.adapter._tasks == set()


# -- slash commands -----------------------------------------------------------------------------

COMMANDS = (("help", "list commands"), ("new", "start a new conversation"), ("link", "link this chat to your account"))
CONV_OF = {"dm": DM, "group": GROUP, "thread": THREAD}


def make_with_commands(fake: FakeDiscord, commands: tuple[tuple[str, str], ...] = COMMANDS) -> DiscordAdapter:
    config = DiscordChannelConfig(token=TOKEN, api_base_url=fake.api_base, request_timeout=1.0)
    svc = ChannelServices(
        http=aiohttp.web.Application(), authenticate=lambda _t: None, history=no_history, commands=commands
    )
    adapter = channels.create("discord", config, svc)
    assert isinstance(adapter, DiscordAdapter)
    return adapter


@pytest.fixture
async def cmd(fake: FakeDiscord) -> AsyncIterator[Live]:
    adapter = make_with_commands(fake)
    inbound: asyncio.Queue[MessageReceived] = asyncio.Queue()
    await adapter.start(inbound.put)
    yield Live(fake, adapter, inbound)
    await adapter.stop()


def callbacks(fake: FakeDiscord, interaction: dict[str, Any]) -> list[Any]:
    return fake.rest("POST", f"/interactions/{interaction['id']}/{interaction['token']}/callback")


async def assert_nothing_more(live: Live) -> None:
    """Nothing else was delivered: a later message is the next thing the sink sees."""
    await live.fake.inject(live.fake.message("dm", "sentinel"))
    assert (await live.next()).text == "sentinel"


async def test_commands_are_registered_once_after_ready(cmd: Live) -> None:
    fake = cmd.fake
    (put,) = fake.rest("PUT", f"/applications/{APP_ID}/commands")
    assert put.status == 200
    text_option = {"type": 3, "name": "text", "description": "arguments", "required": False}
    assert [(c["name"], c["type"], c["description"], c["options"]) for c in put.body] == [
        (name, 1, summary, [text_option]) for name, summary in COMMANDS
    ]
    assert [c["name"] for c in fake.commands] == ["help", "new", "link"]
    identify = next(i for i, c in enumerate(fake.journal) if c.kind == "gateway" and c.op == 2)
    assert fake.journal.index(put) > identify  # after the gateway session began, before start returned


async def test_no_commands_leaves_the_application_alone(live: Live) -> None:
    assert live.fake.rest("PUT") == []


@pytest.mark.parametrize(("kind", "status"), [("server", 500), ("forbidden", 403), ("rate_limit", 429)])
async def test_registration_failure_is_logged_not_fatal(
    fake: FakeDiscord, caplog: pytest.LogCaptureFixture, kind: Any, status: int
) -> None:
    fake.fail_next(kind, route="commands", retry_after=5.0)
    adapter = make_with_commands(fake)
    inbound: asyncio.Queue[MessageReceived] = asyncio.Queue()
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="clawgate.channels.discord"):
        await adapter.start(inbound.put)
    try:
        assert time.monotonic() - started < 3  # no sleeping out the 429 or retrying the 500
        assert adapter.health().ok
        assert [c.status for c in fake.rest("PUT", "/applications/")] == [status]
        assert "discord_commands_register_failed" in caplog.text
        # Commands registered earlier still reach the bot.
        interaction = fake.interaction("dm", "new")
        await fake.inject_interaction(interaction)
        assert (await asyncio.wait_for(inbound.get(), 5)).text == "/new"
    finally:
        await adapter.stop()


async def test_command_is_acked_ephemerally_then_delivered_once(cmd: Live) -> None:
    fake = cmd.fake
    interaction = fake.interaction("group", "link", "ABCD-1234", nick="Ally")
    await fake.inject_interaction(interaction)
    ev = await cmd.next()
    (ack,) = callbacks(fake, interaction)  # answered before the turn began
    assert ack.status == 200
    assert ack.body["type"] == 4
    assert ack.body["data"]["flags"] == 64
    assert ack.body["data"]["content"] == "/link received."
    assert ev.text == "/link ABCD-1234"
    assert ev.event_id == f"discord:{interaction['id']}"
    assert ev.ref == GROUP
    assert (ev.sender.identity, ev.sender.display_name) == ("discord:1001", "Ally")
    assert ev.mentions_bot is True
    assert fake.acks[interaction["id"]]["data"]["content"] == "/link received."
    await assert_nothing_more(cmd)


@pytest.mark.parametrize("where", ["dm", "group", "thread"])
async def test_command_conversation_and_reply(cmd: Live, where: Any) -> None:
    fake, adapter = cmd.fake, cmd.adapter
    await fake.inject_interaction(fake.interaction(where, "new"))
    ev = await cmd.next()
    assert (ev.text, ev.ref, ev.sender.identity) == ("/new", CONV_OF[where], "discord:1001")
    # The gateway's answer is an ordinary message in the place the command was used.
    await adapter.send(outbound(ev.ref, "fresh start"))
    (sent,) = await fake.wait_outbox(1)
    assert sent.channel_id == {"dm": DM_CHANNEL_ID, "group": TEXT_CHANNEL_ID, "thread": THREAD_ID}[where]


async def test_unknown_command_is_answered_and_not_delivered(cmd: Live) -> None:
    fake = cmd.fake
    for interaction in (
        fake.interaction("group", "weather", "Paris"),  # left over from an older registration
        fake.interaction("dm", "link", command_type=2),  # a user context-menu command
    ):
        await fake.inject_interaction(interaction)
        await fake.wait_for(lambda _j, i=interaction: bool(callbacks(fake, i)))
        ack = fake.acks[interaction["id"]]
        assert (ack["type"], ack["data"]["flags"], ack["data"]["content"]) == (4, 64, "Unknown command")
    await assert_nothing_more(cmd)


@pytest.mark.parametrize("kind", ["server", "rate_limit", "not_found", "timeout"])
async def test_failed_ack_is_logged_and_the_command_still_delivered(
    cmd: Live, caplog: pytest.LogCaptureFixture, kind: Any
) -> None:
    fake = cmd.fake
    fake.fail_next(kind, route="callback", retry_after=5.0)
    interaction = fake.interaction("thread", "link", "ABCD-1234")
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="clawgate.channels.discord"):
        await fake.inject_interaction(interaction)
        ev = await cmd.next()
    assert time.monotonic() - started < 3  # discord.py's webhook retries did not run
    assert (ev.text, ev.ref) == ("/link ABCD-1234", THREAD)
    assert len(callbacks(fake, interaction)) == 1
    assert "discord_interaction_ack_failed" in caplog.text
    await assert_nothing_more(cmd)
