"""Messenger's 24-hour window (docs/messenger.md): a Page may answer a person freely for 24 hours after
they last wrote; past that only a message with a tag Meta allows goes out (HUMAN_AGENT: for 7 days).

When each person last wrote is kept in the gateway's conversation store (ConversationState), so a
restart or another instance knows it, and cached here. `decide` is pure."""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from gateway.core.logs import event
from gateway.core.ports import ConversationState, DeliveryError

log = logging.getLogger("clawgate.channels.messenger")

WINDOW = 24 * 3600.0
HUMAN_AGENT_WINDOW = 7 * 24 * 3600.0
# A send this close to the end of a window is treated as outside it: clocks differ, and a send takes time.
MARGIN = 60.0
# The store is written at most this often per person: a chatty conversation costs no write per message.
SAVE_EVERY = 600.0
_CACHED = 10_000  # people whose last message is remembered in memory (the store has them all)


@dataclass(frozen=True, slots=True)
class Decision:
    messaging_type: str  # RESPONSE, or MESSAGE_TAG with `tag`
    tag: str | None = None


def decide(last: float | None, now: float, tag: str | None) -> Decision | None:
    """How a message to someone who last wrote at `last` may go out at `now`; None: it may not."""
    age = None if last is None else now - last
    if age is not None and age < WINDOW - MARGIN:
        return Decision("RESPONSE")
    if tag == "HUMAN_AGENT":
        return Decision("MESSAGE_TAG", tag) if age is not None and age < HUMAN_AGENT_WINDOW - MARGIN else None
    if tag is not None:
        return Decision("MESSAGE_TAG", tag)
    return None


def masked(psid: str) -> str:
    """A person's id as logs show it: a short hash, enough to tell people apart."""
    return "psid#" + hashlib.sha256(psid.encode()).hexdigest()[:12]


class Window:
    def __init__(
        self,
        channel: str,
        store: ConversationState | None,
        tag: str | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.channel = channel
        self.store = store
        self.tag = tag
        self.clock = clock
        self._last: OrderedDict[str, float] = OrderedDict()

    def _remember(self, psid: str, at: float) -> None:
        self._last[psid] = at
        self._last.move_to_end(psid)
        while len(self._last) > _CACHED:
            self._last.popitem(last=False)

    async def seen(self, psid: str, at: float) -> None:
        """`psid` wrote at `at` (Meta's timestamp, never later than now): their window opens again."""
        at = min(at, self.clock())
        known = self._last.get(psid)
        if known is not None and known >= at:
            return  # a redelivery, or an older event: nothing moves
        self._remember(psid, at)
        if self.store is None or (known is not None and at - known < SAVE_EVERY):
            return  # a window a few minutes older in the store only closes it a little early elsewhere
        try:
            await self.store.save(self.channel, psid, {"last_inbound": at})
        except Exception as exc:  # the window still works from memory on this instance
            event(log, "messenger_window_not_saved", logging.WARNING, channel=self.channel, error=type(exc).__name__)

    async def _stored(self, psid: str) -> float | None:
        if self.store is None:
            return None
        try:
            data = await self.store.load(self.channel, psid)
        except Exception as exc:
            event(log, "messenger_window_not_read", logging.WARNING, channel=self.channel, error=type(exc).__name__)
            return None
        value = data.get("last_inbound") if data else None
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    async def last(self, psid: str, *, fresh: bool = False) -> float | None:
        """When `psid` last wrote, from memory, else (or with `fresh`) from the store."""
        known = self._last.get(psid)
        if known is None or fresh:
            stored = await self._stored(psid)
            if stored is not None and (known is None or stored > known):
                self._remember(psid, stored)
                known = stored
        return known

    async def allows(self, psid: str) -> bool:
        """Whether a message to `psid` may go out now (as decision() decides, without a log line)."""
        return decide(await self.last(psid), self.clock(), self.tag) is not None

    async def decision(self, psid: str) -> Decision:
        """How the next message to `psid` goes out, or DeliveryError (logged) when it may not."""
        now = self.clock()
        last = await self.last(psid)
        found = decide(last, now, self.tag)
        if found is None or found.messaging_type != "RESPONSE":
            # Another instance may have received a newer message: ask the store before refusing or tagging.
            last = await self.last(psid, fresh=True)
            found = decide(last, now, self.tag)
        if found is not None:
            return found
        hours = "never" if last is None else f"{(now - last) / 3600:.1f}"
        event(
            log,
            "messenger_window_closed",
            logging.WARNING,
            channel=self.channel,
            recipient=masked(psid),
            hours_since_last_message=hours,
            tag=self.tag,
        )
        when = "has not written to the Page" if last is None else f"last wrote {hours} hours ago"
        if self.tag == "HUMAN_AGENT":
            fix = "HUMAN_AGENT reaches people for 7 days after they last wrote"
        else:
            fix = f"set channels.{self.channel}.message_tag to send updates Meta allows"
        raise DeliveryError(
            f"outside Messenger's 24-hour window: this person {when}; nothing was sent ({fix})", retryable=False
        )
