"""Telling a person approved through pairing (docs/onboarding.md, "Pairing notice"), on the platform
they wrote from, exactly once.

An approval may happen in this process (a chat command, the console) or in another one (`clawgate
pairing approve`, another instance sharing the database). So the notice is driven by the database:
an approved request whose `notified_at` is empty is announced by whoever claims it first (an
UPDATE that only one caller wins), right after an approval here and on a sweep every half minute
that catches the others. The send carries an idempotency key of its own as well, so even a retry
after a crash never posts it twice."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping

from gateway.core.events import ConversationKind, ConversationRef
from gateway.core.logs import event
from gateway.core.ports import Adapter, DeliveryError
from gateway.turn.delivery import Delivery
from memory.store.links import PairingRequest, PairingStore

log = logging.getLogger("clawgate.pairing")

APPROVED_TEXT = "You're approved: you can talk to me now."
SWEEP_SECONDS = 30.0


class PairingNotices:
    def __init__(
        self,
        pairing: PairingStore,
        adapters: Mapping[str, Adapter],
        delivery: Delivery,
        every: float = SWEEP_SECONDS,
    ) -> None:
        self.pairing = pairing
        self.adapters = adapters
        self.delivery = delivery
        self.every = every
        self._wake = asyncio.Event()
        pairing.on_approve = self.wake  # an approval made here is announced at once

    def wake(self) -> None:
        """Sweep now (an approval was just made in this process)."""
        self._wake.set()

    async def run(self) -> None:
        """Sweep at start, after each approval here, and every `every` seconds; a failing sweep
        (a busy database) is logged and tried again at the next one."""
        while True:
            self._wake.clear()
            try:
                await self.sweep()
            except Exception as exc:
                event(log, "pairing_notice_sweep_failed", logging.WARNING, error=type(exc).__name__)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.every)

    async def sweep(self) -> int:
        """Announce every approval not announced yet on this instance's channels: how many were sent."""
        sent = 0
        for request in await self.pairing.unnotified(list(self.adapters)):
            if await self.pairing.claim_notice(request.identity):
                sent += await self._send(request)
        return sent

    async def _send(self, request: PairingRequest) -> int:
        adapter = self.adapters[request.channel]
        if not request.chat_id:  # asked before the DM was kept: there is no address to write to
            event(log, "pairing_notice_skipped", channel=request.channel, identity=request.identity, reason="no_dm")
            return 0
        ref = ConversationRef(request.channel, request.chat_id, None, ConversationKind.DM)
        try:
            done = await self.delivery.notice(adapter, ref, f"pairing-approved:{request.identity}", APPROVED_TEXT)
        except DeliveryError as exc:
            if exc.retryable and not exc.maybe_delivered:  # certainly not sent: the next sweep tries again
                await self.pairing.release_notice(request.identity)
            event(
                log,
                "pairing_notice_failed",
                logging.WARNING,
                channel=request.channel,
                identity=request.identity,
                retry=exc.retryable and not exc.maybe_delivered,
                error=str(exc),
            )
            return 0
        event(log, "pairing_notice_sent", channel=request.channel, identity=request.identity, sent=done is not None)
        return 1 if done is not None else 0
