"""One contract, every adapter: the same behaviour from web, Telegram, Discord, Slack, Teams and Messenger."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.core.events import ConversationKind, MessageReceived, OutboundMessage
from gateway.core.ports import DeliveryError
from gateway.turn.delivery import Delivery
from gateway.turn.engine import TurnResult
from memory.store.storage import Storage
from tests.contract.harness import Harness

HARNESSES = {
    "web": "tests.contract.harness_web:WebHarness",
    "telegram": "tests.contract.harness_telegram:TelegramHarness",
    "discord": "tests.contract.harness_discord:DiscordHarness",
    "slack": "tests.contract.harness_slack:SlackHarness",
    "teams": "tests.contract.harness_teams:TeamsHarness",
    "messenger": "tests.contract.harness_messenger:MessengerHarness",
}


@pytest.fixture(params=list(HARNESSES))
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    module, _, cls = HARNESSES[request.param].partition(":")
    h: Harness = getattr(importlib.import_module(module), cls)()
    await h.start()
    try:
        yield h
    finally:
        async with asyncio.timeout(10):  # stop() must be prompt
            await h.stop()


async def next_event(h: Harness) -> MessageReceived:
    return await asyncio.wait_for(h.inbound.get(), timeout=10)


async def test_started_adapter_is_healthy(harness: Harness) -> None:
    assert harness.adapter.health().ok
    assert harness.adapter.capabilities.max_length > 0


async def test_dm_is_normalized(harness: Harness) -> None:
    await harness.inject("dm", "hello there")
    ev = await next_event(harness)
    assert ev.text == "hello there"
    assert ev.ref == harness.conversation("dm")
    assert ev.ref.kind == ConversationKind.DM
    assert ev.sender.identity.startswith(f"{harness.platform}:")
    assert ev.event_id.startswith(f"{harness.adapter.name}:")
    assert ev.received_at.tzinfo is not None


async def test_group_mentions_are_normalized(harness: Harness) -> None:
    await harness.inject("group", "are you there?", mention=True)
    ev = await next_event(harness)
    assert ev.ref.kind == ConversationKind.GROUP
    assert ev.ref == harness.conversation("group")
    assert ev.mentions_bot
    assert ev.text.strip() == "are you there?"  # the bot's own mention is removed
    await harness.inject("group", "just chatting")
    ev = await next_event(harness)
    assert not ev.mentions_bot and ev.text == "just chatting"


async def test_thread_is_its_own_conversation(harness: Harness) -> None:
    await harness.inject("thread", "in a thread", mention=True)
    ev = await next_event(harness)
    assert ev.ref == harness.conversation("thread")
    assert ev.ref.thread_id is not None
    assert ev.ref.session_key != harness.conversation("group").session_key


async def test_own_messages_are_ignored(harness: Harness) -> None:
    await harness.inject("dm", "I am the bot", from_self=True)
    await harness.inject("dm", "from a person")
    ev = await next_event(harness)
    assert ev.text == "from a person"


async def test_send_edit_and_typing(harness: Harness) -> None:
    conv = harness.conversation("dm")
    async with harness.adapter.typing(conv):
        ref = await harness.adapter.send(OutboundMessage(conv, "first **draft**", "k1", final=False))
    if not harness.adapter.capabilities.can_edit:  # Messenger: the gateway never asks it to edit
        with pytest.raises(DeliveryError) as refused:
            await harness.adapter.edit(ref, "final text", final=True)
        assert not refused.value.retryable
        sent = await harness.wait_sent(1)
        assert sent[0].chat_id == conv.chat_id and "draft" in sent[0].text
        return
    await harness.adapter.edit(ref, "final text", final=True)
    sent = await harness.wait_sent(2)
    assert sent[0].chat_id == conv.chat_id and not sent[0].edit
    assert "draft" in sent[0].text
    assert sent[-1].edit and sent[-1].message_id == ref.message_id == sent[0].message_id
    assert "final text" in sent[-1].text


async def test_replies_go_to_the_thread(harness: Harness) -> None:
    if not harness.supports_groups:
        pytest.skip("no threads on this channel")
    conv = harness.conversation("thread")
    await harness.adapter.send(OutboundMessage(conv, "threaded reply", "k1"))
    sent = await harness.wait_sent(1)
    assert sent[-1].thread_id == conv.thread_id


async def test_long_replies_are_split_to_the_platform_limit(harness: Harness, tmp_path: Path) -> None:
    caps = harness.adapter.capabilities
    storage = await Storage.open(f"sqlite:///{tmp_path}/c.db")
    try:
        paragraph = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 8
        text = (
            "\n\n".join([paragraph] * (caps.max_length // len(paragraph) + 2))
            if caps.max_length < 10_000
            else paragraph
        )

        async def turn() -> AsyncIterator[TurnResult]:
            yield TurnResult(text)

        await Delivery(storage.journal).stream(harness.adapter, harness.conversation("dm"), "e-long", turn())
    finally:
        await storage.close()
    sent = await harness.sent()
    assert sent
    assert all(caps.length(s.text) <= caps.max_length for s in sent)
    if caps.max_length < 10_000:
        assert len(sent) >= 2


async def test_rate_limit_is_reported_with_retry_after(harness: Harness) -> None:
    harness.fail_next_send("rate_limit", retry_after=2)
    with pytest.raises(DeliveryError) as info:
        await harness.adapter.send(OutboundMessage(harness.conversation("dm"), "hello", "k1"))
    assert info.value.retryable and not info.value.maybe_delivered
    assert info.value.retry_after is not None and 1 <= info.value.retry_after <= 3


async def test_send_timeout_may_have_delivered(harness: Harness) -> None:
    harness.fail_next_send("timeout")
    with pytest.raises(DeliveryError) as info:
        await harness.adapter.send(OutboundMessage(harness.conversation("dm"), "hello", "k1"))
    assert info.value.maybe_delivered


async def test_server_error_is_retryable(harness: Harness) -> None:
    harness.fail_next_send("server")
    with pytest.raises(DeliveryError) as info:
        await harness.adapter.send(OutboundMessage(harness.conversation("dm"), "hello", "k1"))
    assert info.value.retryable


async def test_reconnects_after_a_dropped_connection(harness: Harness) -> None:
    await harness.drop_connection()
    await harness.inject("dm", "after the drop")
    ev = await next_event(harness)
    assert ev.text == "after the drop"
