"""What the message path does while the storage cannot be written (a full disk, a read-only file
system): nothing already journaled is lost, HTTP callers get a clear 503 (Unavailable), and a person
on a chat platform is told once, since the platform will not retry for them (docs/operations.md, "A full disk")."""

from __future__ import annotations

import logging
from collections.abc import Callable

from gateway.core.events import MessageReceived, OutboundMessage
from gateway.core.logs import event
from gateway.core.ports import Adapter, Unavailable

log = logging.getLogger("clawgate.router")

NOT_TAKEN = "Sorry, I can't take messages right now: {reason}. Please send yours again in a little while."
DEFERRED = (
    "I can't save anything right now ({reason}), so I can't answer yet. "
    "I've kept your message and will answer it once I can."
)


class StorageOutage:
    def __init__(self, chat: Callable[[str], bool]) -> None:
        self.chat = chat  # whether a channel is a chat platform (else HTTP, whose caller retries)
        self._told: set[str] = set()  # notices sent while the storage could not be written

    async def not_taken(self, adapter: Adapter, ev: MessageReceived, reason: str) -> None:
        """`ev` could not be journaled (the storage cannot be written), so it is not kept: an HTTP
        caller gets Unavailable (a 503, and retries); a person on a chat platform is told to send
        it again, since the platform will not."""
        event(log, "inbound_not_journaled", logging.ERROR, channel=ev.ref.channel, event_id=ev.event_id, reason=reason)
        if not self.chat(ev.ref.channel):
            raise Unavailable(f"the gateway cannot save messages right now: {reason}")
        await self._tell(adapter, ev, NOT_TAKEN.format(reason=reason), "not-taken")

    async def defer(self, adapter: Adapter, ev: MessageReceived, reason: str) -> Unavailable | None:
        """`ev` is journaled but its turn could not be kept (the storage cannot be written): it stays
        unfinished in the journal and is answered once writes work again (Router.resume_unfinished). What
        the HTTP caller is to get, or None once a chat person was told."""
        event(log, "turn_deferred", logging.ERROR, channel=ev.ref.channel, event_id=ev.event_id, reason=reason)
        if not self.chat(ev.ref.channel):
            return Unavailable(f"the gateway cannot save messages right now: {reason}; your message is kept")
        await self._tell(adapter, ev, DEFERRED.format(reason=reason), "deferred")
        return None

    async def _tell(self, adapter: Adapter, ev: MessageReceived, text: str, why: str) -> None:
        """A notice sent once (per event and process) without an outbound record, nothing being
        writable now: a restart could only repeat this notice, never a reply."""
        key = f"{ev.event_id}:{why}"
        if key in self._told:
            return
        if len(self._told) > 10_000:  # a long outage: forget the oldest ones' notices
            self._told.clear()
        self._told.add(key)
        try:
            await adapter.send(OutboundMessage(ev.ref, text, key, ev.event_id))
        except Exception as exc:  # the notice is a courtesy: the event's fate does not depend on it
            event(log, "notice_failed", logging.WARNING, channel=ev.ref.channel, why=why, error=type(exc).__name__)
