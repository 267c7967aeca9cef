"""The Slack contract harness keeps its promises (the shared contract suite relies on them)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway.core.events import OutboundMessage
from gateway.core.ports import DeliveryError
from tests.contract.harness import Harness
from tests.contract.harness_slack import SlackHarness


@pytest.fixture
async def harness() -> AsyncIterator[SlackHarness]:
    h = SlackHarness()
    await h.start()
    yield h
    await h.stop()


async def test_satisfies_the_protocol(harness: SlackHarness) -> None:
    h: Harness = harness  # type-checked against the Protocol
    assert h.platform == "slack" and h.supports_groups and h.adapter.name == "slack"
    assert h.adapter.health().ok


@pytest.mark.parametrize("where", ["dm", "group", "thread"])
async def test_inject_normalizes_to_the_declared_conversation(harness: SlackHarness, where: str) -> None:
    await harness.inject(where, "hi", mention=True)  # type: ignore[arg-type]
    ev = await asyncio.wait_for(harness.inbound.get(), 5)
    assert ev.ref == harness.conversation(where)  # type: ignore[arg-type]
    assert ev.text == "hi" and ev.mentions_bot and ev.sender.identity.endswith("/1001")


async def test_own_messages_are_not_delivered(harness: SlackHarness) -> None:
    await harness.inject("group", "echo of my reply", from_self=True)
    await harness.inject("group", "sentinel", sender="1002")
    assert (await asyncio.wait_for(harness.inbound.get(), 5)).text == "sentinel"


async def test_sends_edits_and_failures(harness: SlackHarness) -> None:
    conv = harness.conversation("thread")
    ref = await harness.adapter.send(OutboundMessage(conv, "**one**", "k1"))
    await harness.adapter.edit(ref, "**two**", final=True)
    sent = await harness.wait_sent(2)
    assert [(s.text, s.edit, s.thread_id) for s in sent] == [
        ("*one*", False, conv.thread_id),
        ("*two*", True, conv.thread_id),
    ]
    assert sent[0].message_id == sent[1].message_id == ref.message_id

    harness.fail_next_send("rate_limit", retry_after=2)
    with pytest.raises(DeliveryError) as info:
        await harness.adapter.send(OutboundMessage(conv, "x", "k2"))
    assert info.value.retryable and info.value.retry_after == 2
    harness.fail_next_send("server")
    with pytest.raises(DeliveryError) as info:
        await harness.adapter.send(OutboundMessage(conv, "x", "k3"))
    assert info.value.retryable
    harness.fail_next_send("timeout")
    with pytest.raises(DeliveryError) as info:
        await harness.adapter.send(OutboundMessage(conv, "x", "k4"))
    assert info.value.maybe_delivered
    assert len(await harness.sent()) == 2


async def test_reconnects_after_drop(harness: SlackHarness) -> None:
    await harness.drop_connection()
    await harness.inject("dm", "after drop")
    assert (await asyncio.wait_for(harness.inbound.get(), 5)).text == "after drop"
