"""Deliver a streamed reply through an adapter: placeholder + throttled edits where editing
exists, one message otherwise. The outbound idempotency key is claimed before the first send,
so a restarted turn never posts the same reply twice."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from gateway.events import ConversationRef, MessageRef, OutboundMessage
from gateway.llm import Restart, TextDelta
from gateway.logs import event
from gateway.ports import Adapter, DeliveryError
from gateway.turn import TurnResult
from memory.journal import Journal

log = logging.getLogger("clawgate.delivery")


def reply_key(event_id: str) -> str:
    return f"{event_id}:reply"


@dataclass(slots=True)
class Delivered:
    result: TurnResult
    ref: MessageRef | None  # None when nothing was sent (a duplicate, or a failed send)


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
        earlier = await self._journal.claim_send(key, adapter.name)
        caps = adapter.capabilities
        can_stream = caps.can_edit and earlier is None
        ref: MessageRef | None = None
        shown = ""
        buf: list[str] = []
        last_edit = 0.0
        result: TurnResult | None = None
        async for item in stream:
            if isinstance(item, TurnResult):
                result = item
                break
            if isinstance(item, Restart):
                buf.clear()
                continue
            buf.append(item.text)
            if not can_stream:
                continue
            text = "".join(buf)
            now = time.monotonic()
            if caps.length(text) > caps.max_length:
                continue  # too long for one message: the final delivery sends it whole
            if ref is None:
                ref = await self._send(adapter, OutboundMessage(conv, text, key, event_id, final=False))
                shown, last_edit = text, now
            elif now - last_edit >= caps.min_edit_interval and text != shown:
                try:
                    await adapter.edit(ref, text, final=False)
                    shown, last_edit = text, now
                except DeliveryError as exc:
                    event(log, "delivery_edit_failed", logging.WARNING, channel=adapter.name, error=str(exc))
        assert result is not None, "a turn stream always ends with a TurnResult"
        if earlier is not None:
            event(log, "delivery_skipped_duplicate", channel=adapter.name, event_id=event_id, status=earlier)
            return Delivered(result, None)
        if ref is None:
            ref = await self._send(adapter, OutboundMessage(conv, result.text, key, event_id, final=True))
        else:
            await adapter.edit(ref, result.text, final=True)
        return Delivered(result, ref)

    async def notice(
        self, adapter: Adapter, conv: ConversationRef, event_id: str, text: str, key: str | None = None
    ) -> MessageRef | None:
        """A one-shot reply (command output, refusals), under the same idempotency rule."""
        key = key or reply_key(event_id)
        earlier = await self._journal.claim_send(key, adapter.name)
        if earlier is not None:
            event(log, "delivery_skipped_duplicate", channel=adapter.name, event_id=event_id, status=earlier)
            return None
        ref = await self._send(adapter, OutboundMessage(conv, text, key, event_id, final=True))
        return ref

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
