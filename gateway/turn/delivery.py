"""Deliver a streamed reply through an adapter: placeholder + paced edits where editing exists,
one message otherwise. On platforms with durable sends the outbound idempotency key is claimed
before the first send, so a restarted turn never posts the same reply twice.

Every call spends the conversation's rate budgets and waits out a 429's retry_after (pacing.py);
an edit that would leave the message as it is is not sent; an acknowledgement reaction marks the
trigger while the turn runs (docs/channels.md, "Delivery: rate limits, edits and reactions").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from gateway.core.events import ConversationRef, MessageReceived, MessageRef, OutboundMessage
from gateway.core.logs import event
from gateway.core.ports import Adapter, DeliveryError, Rate, Reacting
from gateway.core.splitting import split_message
from gateway.llm.client import Restart, TextDelta
from gateway.turn.engine import TurnResult
from gateway.turn.pacing import Clock, Pacer, Sleep
from memory.store.platforms.journal import Journal

log = logging.getLogger("clawgate.delivery")

# `ack_reaction: true` means this one; every platform with reactions has it.
DEFAULT_ACK_REACTION = "👀"


def reply_key(event_id: str) -> str:
    return f"{event_id}:reply"


def ack_reaction(setting: bool | str | None) -> str | None:
    """The reaction a channel's `ack_reaction` setting asks for: None (off), or the emoji."""
    if setting is True:
        return DEFAULT_ACK_REACTION
    return setting or None


ReactCall = Callable[[MessageRef, str], Awaitable[None]]
Sent = tuple[str, str | None]  # an outbound record to mark sent: (idempotency key, platform message id)


@dataclass(slots=True)
class Delivered:
    result: TurnResult
    sent: Sent | None  # None when nothing was sent (a duplicate), or nothing was claimed


@dataclass(frozen=True, slots=True)
class _Pace:
    """One conversation's budgets in the shared pacer."""

    pacer: Pacer
    scope: str  # the adapter: budget keys are the adapter's own
    rates: tuple[Rate, ...]

    def delay(self) -> float:
        return self.pacer.delay(self.scope, self.rates)

    async def wait(self) -> None:
        """Until no hold is on the budgets (a send: it spends without waiting for a token)."""
        self._paced(await self.pacer.wait(self.scope, self.rates))

    async def take(self) -> None:
        """An edit's turn in the budgets, its token spent (Pacer.take)."""
        self._paced(await self.pacer.take(self.scope, self.rates))

    def _paced(self, waited: float) -> None:
        if waited:
            event(log, "delivery_paced", logging.DEBUG, channel=self.scope, waited_s=round(waited, 3))

    def spend(self, *, send: bool) -> None:
        self.pacer.spend(self.scope, self.rates, send=send)

    def refused(self, exc: DeliveryError, *, send: bool, spent: bool = False) -> None:
        """After a failed call: hold for the platform's retry_after, else count the attempt as spent
        (unless `spent`: taken before the call)."""
        if exc.retry_after is not None:
            self.pacer.hold(self.scope, self.rates, exc.retry_after)
            event(log, "delivery_rate_limited", logging.WARNING, channel=self.scope, retry_after=exc.retry_after)
        elif not spent:
            self.spend(send=send)


class Delivery:
    def __init__(
        self,
        journal: Journal,
        send_retries: int = 3,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._journal = journal
        self._send_retries = send_retries
        self._sleep = sleep
        self._pacer = Pacer(clock, sleep)

    def _pace(self, adapter: Adapter, conv: ConversationRef) -> _Pace:
        return _Pace(self._pacer, adapter.name, adapter.capabilities.rates(conv))

    async def stream(
        self,
        adapter: Adapter,
        conv: ConversationRef,
        event_id: str,
        stream: AsyncIterator[TextDelta | Restart | TurnResult],
        *,
        reply_to: MessageRef | None = None,  # what the reply's first message quotes (gateway/turn/replies.py)
        live: bool = True,  # False: the caller wants the final text only (a REST call), no message to edit
    ) -> Delivered:
        key = reply_key(event_id)
        caps = adapter.capabilities
        pace = self._pace(adapter, conv)
        # The key is claimed right before the first send, not now: a crash while the model is still
        # answering (the long part of a turn) then leaves no claim, and the resumed turn delivers.
        earlier = await self._journal.sent_before(key) if caps.durable_sends else None
        claimed = earlier is not None
        ref: MessageRef | None = None
        if earlier is not None and earlier[0] == "streaming" and earlier[1] and caps.can_edit:
            # A restart cut this reply mid-stream: finish the message already on screen.
            ref = MessageRef(conv, earlier[1])
            earlier = None
            event(log, "delivery_resumed_stream", channel=adapter.name, event_id=event_id)
        can_stream = live and caps.can_edit and earlier is None
        shown: str | None = None  # the streamed message as rendered, once we know what it shows
        buf: list[str] = []
        result: TurnResult | None = None
        async for item in stream:
            if isinstance(item, TurnResult):
                result = item
                break
            if isinstance(item, Restart):
                buf.clear()
                continue
            buf.append(item.text)
            if not can_stream or pace.delay() > 0:
                continue  # not yet: a later delta or the final text carries this one
            text = "".join(buf)
            if caps.length(text) > caps.max_length:
                continue  # past one message: the final delivery splits it
            rendered = caps.rendered(text)
            if rendered == shown:
                continue  # nothing new to show
            if not claimed:
                claimed = True
                earlier = await self._claim(adapter, key)
                if earlier is not None:
                    can_stream = False
                    continue
            try:
                if ref is None:
                    ref = await adapter.send(OutboundMessage(conv, text, key, event_id, final=False, reply_to=reply_to))
                    pace.spend(send=True)
                    if caps.durable_sends:
                        await self._journal.streaming(key, ref.message_id)
                else:
                    await adapter.edit(ref, text, final=False)
                    pace.spend(send=False)
                shown = rendered
            except DeliveryError as exc:
                # Streaming is best effort: back off, or give up streaming if the first send failed.
                event(log, "delivery_stream_update_failed", logging.WARNING, channel=adapter.name, error=str(exc))
                if ref is None and (exc.maybe_delivered or not exc.retryable):
                    can_stream = False
                pace.refused(exc, send=ref is None)
        assert result is not None, "a turn stream always ends with a TurnResult"
        if not claimed:
            earlier = await self._claim(adapter, key)
        if earlier is not None:
            event(log, "delivery_skipped_duplicate", channel=adapter.name, event_id=event_id, status=earlier[0])
            return Delivered(result, None)
        ref = await self._complete(adapter, pace, conv, key, event_id, result.text, ref, shown, reply_to=reply_to)
        return Delivered(result, self._sent(adapter, key, ref))

    async def notice(
        self,
        adapter: Adapter,
        conv: ConversationRef,
        event_id: str,
        text: str,
        key: str | None = None,
        *,
        reply_to: MessageRef | None = None,
        private_to: str | None = None,
    ) -> Sent | None:
        """A one-shot reply (command output, refusals), under the same idempotency rule; its first
        message quotes `reply_to`, all of it is seen by `private_to` alone (gateway/turn/replies.py)."""
        key = key or reply_key(event_id)
        earlier = await self._claim(adapter, key)
        if earlier is not None:
            event(log, "delivery_skipped_duplicate", channel=adapter.name, event_id=event_id, status=earlier[0])
            return None
        pace = self._pace(adapter, conv)
        ref = await self._complete(
            adapter, pace, conv, key, event_id, text, None, None, reply_to=reply_to, private_to=private_to
        )
        return self._sent(adapter, key, ref)

    @asynccontextmanager
    async def acknowledged(self, adapter: Adapter, ev: MessageReceived, reaction: str | None) -> AsyncIterator[None]:
        """The message `ev` carries `reaction` while the block runs (a turn), where the platform has
        reactions. A reaction that fails is logged and never fails the turn."""
        if reaction is None or not ev.message_id or not isinstance(adapter, Reacting):
            yield
            return
        trigger = MessageRef(ev.ref, ev.message_id)
        added = await self._react(adapter, "add", adapter.react, trigger, reaction)
        try:
            yield
        finally:
            if added:
                await self._react(adapter, "remove", adapter.unreact, trigger, reaction)

    @staticmethod
    async def _react(adapter: Adapter, op: str, call: ReactCall, trigger: MessageRef, reaction: str) -> bool:
        try:
            await call(trigger, reaction)
        except DeliveryError as exc:
            event(log, "delivery_reaction_failed", logging.WARNING, channel=adapter.name, op=op, error=str(exc))
            return False
        return True

    async def _claim(self, adapter: Adapter, key: str) -> Sent | None:
        """None to go ahead; else (status, message id) of an earlier attempt (Journal.claim_send)."""
        if not adapter.capabilities.durable_sends:
            return None
        return await self._journal.claim_send(key, adapter.name)

    @staticmethod
    def _sent(adapter: Adapter, key: str, ref: MessageRef) -> Sent | None:
        return (key, ref.message_id) if adapter.capabilities.durable_sends else None

    async def _complete(
        self,
        adapter: Adapter,
        pace: _Pace,
        conv: ConversationRef,
        key: str,
        event_id: str,
        text: str,
        ref: MessageRef | None,
        shown: str | None,
        *,
        reply_to: MessageRef | None = None,
        private_to: str | None = None,
    ) -> MessageRef:
        """Final text: the first part replaces the streamed message (or is sent), the rest follow in order."""
        caps = adapter.capabilities
        chunks = split_message(text, caps.max_length, caps.length) or [text or "…"]
        last = len(chunks) - 1
        if ref is None:
            first = OutboundMessage(
                conv, chunks[0], key, event_id, final=last == 0, reply_to=reply_to, private_to=private_to
            )
            try:
                ref = await self._send(adapter, pace, first)
            except DeliveryError as exc:
                # Nothing of the reply is on screen and this send certainly failed: the claim is given
                # back, so that work tried again later (a scheduled run's retry) sends it once, not never.
                if not exc.maybe_delivered and caps.durable_sends:
                    await self._journal.release(key)
                raise
        elif caps.rendered(chunks[0]) == shown and not (last == 0 and caps.final_edit_matters):
            event(log, "delivery_edit_unchanged", logging.DEBUG, channel=adapter.name, event_id=event_id)
        else:
            await self._edit(adapter, pace, ref, chunks[0], final=last == 0)
        for i, chunk in enumerate(chunks[1:], start=1):
            part = OutboundMessage(conv, chunk, f"{key}:{i}", event_id, final=i == last, private_to=private_to)
            await self._send(adapter, pace, part)
        return ref

    async def _edit(self, adapter: Adapter, pace: _Pace, ref: MessageRef, text: str, final: bool) -> None:
        # Edits are idempotent, so unlike sends they may be retried even when one may have landed.
        # A final edit waits for the budget rather than being dropped: it is the reply.
        for attempt in range(self._send_retries + 1):
            await pace.take()
            try:
                await adapter.edit(ref, text, final)
                return
            except DeliveryError as exc:
                pace.refused(exc, send=False, spent=True)
                if not exc.retryable or attempt == self._send_retries:
                    event(log, "delivery_failed", logging.ERROR, channel=adapter.name, op="edit", error=str(exc))
                    raise
                if exc.retry_after is None:
                    await self._sleep(0.5 * 2**attempt)

    async def _send(self, adapter: Adapter, pace: _Pace, msg: OutboundMessage) -> MessageRef:
        for attempt in range(self._send_retries + 1):
            # A send waits out a hold but not the edit budget: chunks of a reply go out together.
            await pace.wait()
            try:
                ref = await adapter.send(msg)
                pace.spend(send=True)
                return ref
            except DeliveryError as exc:
                pace.refused(exc, send=True)
                # A send that may have gone through is never retried: a duplicate is worse than a gap.
                if exc.maybe_delivered or not exc.retryable or attempt == self._send_retries:
                    event(
                        log,
                        "delivery_failed",
                        logging.ERROR,
                        channel=adapter.name,
                        idempotency_key=msg.idempotency_key,
                        error=str(exc),
                    )
                    raise
                if exc.retry_after is None:
                    await self._sleep(0.5 * 2**attempt)
        raise AssertionError("unreachable")
