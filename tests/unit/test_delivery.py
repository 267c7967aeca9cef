"""Delivery policy (splitting, streaming edits, retries, idempotency) over a recording adapter."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from gateway.core.events import ConversationRef, MessageRef, OutboundMessage
from gateway.core.ports import Capabilities, DeliveryError, Health
from gateway.llm.client import Restart, TextDelta
from gateway.turn.delivery import Delivery
from gateway.turn.engine import TurnResult
from memory.store.storage import Storage
from tests.fakes.clock import VirtualClock


class RecordingAdapter:
    """A minimal, real implementation of the adapter port that records what it was asked to do."""

    name = "rec"

    def __init__(self, caps: Capabilities) -> None:
        self.capabilities = caps
        self.ops: list[tuple[str, str, str]] = []  # (op, message id, text)
        self.failures: list[DeliveryError] = []
        self._n = 0

    async def start(self, sink: object) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, msg: OutboundMessage) -> MessageRef:
        if self.failures:
            raise self.failures.pop(0)
        self._n += 1
        self.ops.append(("send", str(self._n), msg.text))
        return MessageRef(msg.conversation, str(self._n))

    async def edit(self, ref: MessageRef, text: str, final: bool) -> None:
        if self.failures:
            raise self.failures.pop(0)
        self.ops.append(("edit", ref.message_id, text))

    @asynccontextmanager
    async def typing(self, conv: ConversationRef) -> AsyncIterator[None]:
        yield

    def health(self) -> Health:
        return Health(True)


CONV = ConversationRef("rec", "chat")


@pytest.fixture
async def delivery(tmp_path: Path) -> AsyncIterator[Delivery]:
    storage = await Storage.open(f"sqlite:///{tmp_path}/d.db")
    clock = VirtualClock()  # waits for a budget or a retry_after pass at once
    yield Delivery(storage.journal, send_retries=2, clock=clock, sleep=clock.sleep)
    await storage.close()


async def turn(*pieces: str | Restart, final: str | None = None) -> AsyncIterator[TextDelta | Restart | TurnResult]:
    for p in pieces:
        yield p if isinstance(p, Restart) else TextDelta(p)
    yield TurnResult(final if final is not None else "".join(p for p in pieces if isinstance(p, str)))


async def test_streams_by_editing_one_message(delivery: Delivery) -> None:
    ad = RecordingAdapter(Capabilities(can_edit=True, max_length=1000, min_edit_interval=0))
    out = await delivery.stream(ad, CONV, "e1", turn("Hel", "lo ", "world"))
    assert out.sent == ("e1:reply", "1")
    assert ad.ops[0] == ("send", "1", "Hel")
    assert ad.ops[-1] == ("edit", "1", "Hello world")
    assert {op[1] for op in ad.ops} == {"1"}


async def test_a_caller_that_wants_no_stream_gets_one_final_message(delivery: Delivery) -> None:
    """A REST call waits for the final text: no message sent to be edited later (two calls where one
    does, and an edit that had to wait for the chat's budget)."""
    ad = RecordingAdapter(Capabilities(can_edit=True, max_length=1000, min_edit_interval=0))
    out = await delivery.stream(ad, CONV, "e1", turn("Hel", "lo ", "world"), live=False)
    assert ad.ops == [("send", "1", "Hello world")]
    assert out.sent == ("e1:reply", "1")


async def test_edit_rate_is_throttled(delivery: Delivery) -> None:
    ad = RecordingAdapter(Capabilities(can_edit=True, max_length=1000, min_edit_interval=3600))
    await delivery.stream(ad, CONV, "e1", turn("a", "b", "c", "d"))
    assert ad.ops == [("send", "1", "a"), ("edit", "1", "abcd")]


async def test_long_reply_is_split_without_editing_platforms(delivery: Delivery) -> None:
    ad = RecordingAdapter(Capabilities(can_edit=False, max_length=40))
    text = "\n".join(f"line number {i}" for i in range(10))
    await delivery.stream(ad, CONV, "e1", turn(text))
    assert all(op[0] == "send" for op in ad.ops)
    assert len(ad.ops) > 2 and all(len(op[2]) <= 40 for op in ad.ops)
    assert "\n".join(op[2] for op in ad.ops) == text


async def test_restart_discards_partial_stream(delivery: Delivery) -> None:
    ad = RecordingAdapter(Capabilities(can_edit=True, max_length=1000, min_edit_interval=0))
    await delivery.stream(ad, CONV, "e1", turn("wrong ", Restart("m"), "right", final="right"))
    assert ad.ops[-1] == ("edit", "1", "right")


async def test_rate_limited_send_waits_and_retries(delivery: Delivery) -> None:
    ad = RecordingAdapter(Capabilities(can_edit=False, max_length=1000))
    ad.failures.append(DeliveryError("429", retryable=True, retry_after=0.01))
    ref = await delivery.notice(ad, CONV, "e1", "hello")
    assert ref is not None and ad.ops == [("send", "1", "hello")]


async def test_a_send_that_may_have_landed_is_never_retried(delivery: Delivery) -> None:
    ad = RecordingAdapter(Capabilities(can_edit=False, max_length=1000))
    ad.failures.append(DeliveryError("read timeout", retryable=True, maybe_delivered=True))
    with pytest.raises(DeliveryError):
        await delivery.notice(ad, CONV, "e1", "hello")
    assert ad.ops == []


async def test_same_event_is_never_delivered_twice(delivery: Delivery) -> None:
    ad = RecordingAdapter(Capabilities(can_edit=False, max_length=1000))
    assert await delivery.notice(ad, CONV, "e1", "once") is not None
    assert await delivery.notice(ad, CONV, "e1", "once") is None
    out = await delivery.stream(ad, CONV, "e1", turn("again"))
    assert out.sent is None
    assert ad.ops == [("send", "1", "once")]


async def test_sends_that_leave_nothing_behind_are_not_claimed(delivery: Delivery) -> None:
    # The web channel: the history is the record, and a repeated push harms nobody.
    ad = RecordingAdapter(Capabilities(can_edit=True, max_length=1000, min_edit_interval=0, durable_sends=False))
    out = await delivery.stream(ad, CONV, "e1", turn("Hel", "lo"))
    assert out.sent is None
    assert await delivery._journal.outbound_status("e1:reply") is None
    await delivery.stream(ad, CONV, "e1", turn("again"))
    assert ad.ops[-1] == ("edit", "2", "again")


async def test_final_edit_is_retried_after_rate_limit(delivery: Delivery) -> None:
    ad = RecordingAdapter(Capabilities(can_edit=True, max_length=1000, min_edit_interval=3600))

    async def stream() -> AsyncIterator[TextDelta | Restart | TurnResult]:
        yield TextDelta("first")
        ad.failures.append(DeliveryError("429", retryable=True, retry_after=0.01))
        yield TurnResult("first and final")

    await delivery.stream(ad, CONV, "e1", stream())
    assert ad.ops == [("send", "1", "first"), ("edit", "1", "first and final")]


async def test_a_reply_cut_mid_stream_is_finished_in_place(delivery: Delivery) -> None:
    ad = RecordingAdapter(Capabilities(can_edit=True, max_length=1000, min_edit_interval=0))

    async def cut() -> AsyncIterator[TextDelta | Restart | TurnResult]:
        yield TextDelta("partial")
        raise asyncio.CancelledError  # the process died here

    with pytest.raises(asyncio.CancelledError):
        await delivery.stream(ad, CONV, "e1", cut())
    assert ad.ops == [("send", "1", "partial")]
    await delivery.stream(ad, CONV, "e1", turn("partial and complete"))  # the resumed turn
    assert ad.ops[-1] == ("edit", "1", "partial and complete")
    assert [op for op in ad.ops if op[0] == "send"] == [("send", "1", "partial")]


async def test_a_turn_cut_before_anything_was_sent_leaves_no_claim(delivery: Delivery) -> None:
    # The process dies while the model is still answering: the resumed turn must still deliver.
    ad = RecordingAdapter(Capabilities(can_edit=False, max_length=1000))

    async def thinking() -> AsyncIterator[TextDelta | Restart | TurnResult]:
        yield TextDelta("half an ans")
        raise asyncio.CancelledError  # the process died here

    with pytest.raises(asyncio.CancelledError):
        await delivery.stream(ad, CONV, "e1", thinking())
    assert await delivery._journal.outbound_status("e1:reply") is None
    out = await delivery.stream(ad, CONV, "e1", turn("the whole answer"))
    assert out.sent == ("e1:reply", "1")
    assert ad.ops == [("send", "1", "the whole answer")]
    assert await delivery._journal.outbound_status("e1:reply") == "sending"  # marked sent with the turn
