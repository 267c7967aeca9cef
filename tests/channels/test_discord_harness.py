"""The contract harness for Discord does what the Harness protocol promises."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway.core.events import OutboundMessage
from gateway.core.ports import DeliveryError
from tests.contract.harness import Harness, Sent, Where
from tests.contract.harness_discord import DiscordHarness


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    h: Harness = DiscordHarness()
    await h.start()
    yield h
    await h.stop()


async def test_inject_and_conversation_agree(harness: Harness) -> None:
    wheres: tuple[Where, ...] = ("dm", "group", "thread")
    for where in wheres:
        await harness.inject(where, f"hi {where}", sender="4242", mention=where != "dm")
        ev = await asyncio.wait_for(harness.inbound.get(), 5)
        assert ev.ref == harness.conversation(where)
        assert ev.text == f"hi {where}"
        assert ev.sender.identity == "discord:4242"
        assert ev.mentions_bot is (where != "dm")
    await harness.inject("group", "mine", from_self=True)
    await harness.inject("group", "theirs")
    assert (await asyncio.wait_for(harness.inbound.get(), 5)).text == "theirs"


async def test_sent_reports_sends_and_edits_per_conversation(harness: Harness) -> None:
    conv = harness.conversation("thread")
    ref = await harness.adapter.send(OutboundMessage(conv, "one", "k1"))
    await harness.adapter.edit(ref, "one, edited", final=True)
    sent = await harness.wait_sent(2)
    assert sent == [
        Sent(conv.chat_id, conv.thread_id, ref.message_id, "one"),
        Sent(conv.chat_id, conv.thread_id, ref.message_id, "one, edited", edit=True),
    ]
    assert await harness.sent() == sent


async def test_injected_failures(harness: Harness) -> None:
    conv = harness.conversation("group")
    harness.fail_next_send("rate_limit", retry_after=3)
    with pytest.raises(DeliveryError) as info:
        await harness.adapter.send(OutboundMessage(conv, "a", "k"))
    assert (info.value.retryable, info.value.retry_after) == (True, 3)
    harness.fail_next_send("server")
    with pytest.raises(DeliveryError) as info:
        await harness.adapter.send(OutboundMessage(conv, "b", "k"))
    assert info.value.retryable and not info.value.maybe_delivered
    harness.fail_next_send("timeout")
    with pytest.raises(DeliveryError) as info:
        await harness.adapter.send(OutboundMessage(conv, "c", "k"))
    assert info.value.maybe_delivered
    assert [s.text for s in await harness.sent()] == ["c"]


async def test_reconnects_after_drop(harness: Harness) -> None:
    await harness.drop_connection()
    await harness.inject("dm", "after the drop")
    assert (await asyncio.wait_for(harness.inbound.get(), 10)).text == "after the drop"
