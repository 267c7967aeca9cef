"""Deliver a streamed reply through an adapter: placeholder + throttled edits where editing
exists, one message otherwise. On platforms with durable sends the outbound idempotency key is
claimed before the first send, so a restarted turn never posts the same reply twice."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from gateway.core.events import ConversationRef, MessageRef, OutboundMessage
from gateway.core.logs import event
from gateway.core.ports import Adapter, DeliveryError
from gateway.core.splitting import split_message
from gateway.llm.client import Restart, TextDelta
from gateway.turn.engine import TurnResult
from memory.store.journal import Journal

log = logging.getLogger("clawgate.delivery")


def reply_key(event_id: str) -> str:
    return f"{event_id}:reply"


Sent = tuple[str, str | None]  # an outbound record to mark sent: (idempotency key, platform message id)


@dataclass(slots=True)
class Delivered:
    result: TurnResult
    sent: Sent | None  # None when nothing was sent (a duplicate), or nothing was claimed


class Delivery:
    def __init__(self, journal: Journal, send_retries: int = 3) -> None:
        self._journal = journal
        self._send_retries = send_retries

    async def stream(
        self,
        adapter: Adapter,
        conv: ConversationRef,
        event_id: str,
        stream: AsyncIterator[TextDelta | Restart | TurnResult],
    ) -> Delivered:
        key = reply_key(event_id)
        caps = adapter.capabilities
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
        can_stream = caps.can_edit and earlier is None
        shown = ""
        buf: list[str] = []
        next_edit = 0.0
        result: TurnResult | None = None
        async for item in stream:
            if isinstance(item, TurnResult):
                result = item
                break
            if isinstance(item, Restart):
                buf.clear()
                continue
            buf.append(item.text)
            now = time.monotonic()
            if not can_stream or now < next_edit:
                continue
            text = "".join(buf)
            if text == shown or caps.length(text) > caps.max_length:
                continue  # past one message: the final delivery splits it
            if not claimed:
                claimed = True
                earlier = await self._claim(adapter, key)
                if earlier is not None:
                    can_stream = False
                    continue
            try:
                if ref is None:
                    ref = await adapter.send(OutboundMessage(conv, text, key, event_id, final=False))
                    if caps.durable_sends:
                        await self._journal.streaming(key, ref.message_id)
                else:
                    await adapter.edit(ref, text, final=False)
                shown, next_edit = text, now + caps.min_edit_interval
            except DeliveryError as exc:
                # Streaming is best effort: back off, or give up streaming if the first send failed.
                event(log, "delivery_stream_update_failed", logging.WARNING, channel=adapter.name, error=str(exc))
                if ref is None and (exc.maybe_delivered or not exc.retryable):
                    can_stream = False
                next_edit = now + (exc.retry_after or caps.min_edit_interval)
        assert result is not None, "a turn stream always ends with a TurnResult"
        if not claimed:
            earlier = await self._claim(adapter, key)
        if earlier is not None:
            event(log, "delivery_skipped_duplicate", channel=adapter.name, event_id=event_id, status=earlier[0])
            return Delivered(result, None)
        ref = await self._complete(adapter, conv, key, event_id, result.text, ref)
        return Delivered(result, self._sent(adapter, key, ref))

    async def notice(
        self, adapter: Adapter, conv: ConversationRef, event_id: str, text: str, key: str | None = None
    ) -> Sent | None:
        """A one-shot reply (command output, refusals), under the same idempotency rule."""
        key = key or reply_key(event_id)
        earlier = await self._claim(adapter, key)
        if earlier is not None:
            event(log, "delivery_skipped_duplicate", channel=adapter.name, event_id=event_id, status=earlier[0])
            return None
        ref = await self._complete(adapter, conv, key, event_id, text, None)
        return self._sent(adapter, key, ref)

    async def _claim(self, adapter: Adapter, key: str) -> Sent | None:
        """None to go ahead; else (status, message id) of an earlier attempt (Journal.claim_send)."""
        if not adapter.capabilities.durable_sends:
            return None
        return await self._journal.claim_send(key, adapter.name)

    @staticmethod
    def _sent(adapter: Adapter, key: str, ref: MessageRef) -> Sent | None:
        return (key, ref.message_id) if adapter.capabilities.durable_sends else None

    async def _complete(
        self, adapter: Adapter, conv: ConversationRef, key: str, event_id: str, text: str, ref: MessageRef | None
    ) -> MessageRef:
        """Final text: the first part replaces the streamed message (or is sent), the rest follow in order."""
        caps = adapter.capabilities
        chunks = split_message(text, caps.max_length, caps.length) or [text or "…"]
        last = len(chunks) - 1
        if ref is None:
            ref = await self._send(adapter, OutboundMessage(conv, chunks[0], key, event_id, final=last == 0))
        else:
            await self._edit(adapter, ref, chunks[0], final=last == 0)
        for i, chunk in enumerate(chunks[1:], start=1):
            await self._send(adapter, OutboundMessage(conv, chunk, f"{key}:{i}", event_id, final=i == last))
        return ref

    async def _edit(self, adapter: Adapter, ref: MessageRef, text: str, final: bool) -> None:
        # Edits are idempotent, so unlike sends they may be retried even when one may have landed.
        for attempt in range(self._send_retries + 1):
            try:
                await adapter.edit(ref, text, final)
                return
            except DeliveryError as exc:
                if not exc.retryable or attempt == self._send_retries:
                    event(log, "delivery_failed", logging.ERROR, channel=adapter.name, op="edit", error=str(exc))
                    raise
                await asyncio.sleep(exc.retry_after if exc.retry_after is not None else 0.5 * 2**attempt)

    async def _send(self, adapter: Adapter, msg: OutboundMessage) -> MessageRef:
        for attempt in range(self._send_retries + 1):
            try:
                return await adapter.send(msg)
            except DeliveryError as exc:
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
                await asyncio.sleep(exc.retry_after if exc.retry_after is not None else 0.5 * 2**attempt)
        raise AssertionError("unreachable")
