"""Bursts (docs/channels.md, "Bursts"): messages one person sends in one conversation less than
`debounce_ms` apart are answered as one turn.

The first message of a burst leads it: its handler waits until the person has been quiet for the
window, then answers the burst's texts joined with newlines (attachments kept, in order) as that
one event. Later messages join while it waits; their handlers wait for the leader to be done, so a
start-up resume or another instance never answers them apart.

Nothing is lost in a crash: every message is journaled when it arrives (Router.accept). Until the
leader's journal entry is rewritten with the whole burst and the others are marked merged, in one
transaction (Journal.merge), each is an unfinished event of its own and is answered on its own
after a restart; from then on the leader carries them all.

A command never joins or opens a burst, and ends the one open for its sender there: it is answered
after the messages before it and before those after it, in the order they came.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace

from gateway.core.channel_config import ChatChannelConfig
from gateway.core.events import MessageReceived

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]

MAX_MESSAGES = 20  # a burst this long takes no more: the next message starts another
MAX_HOLD = 5.0  # windows: however chatty, a burst is answered this many windows after it began


@dataclass(eq=False, slots=True)
class Burst:
    key: str
    window: float
    began: float
    last: float
    events: list[MessageReceived]
    closed: bool = False
    # Set once the leader has answered (or given up): the other handlers return then.
    settled: asyncio.Event = field(default_factory=asyncio.Event)


def window(cfg: object, ev: MessageReceived, *, command: bool) -> float | None:
    """Seconds `ev` waits for more from its sender: 0.0 when it may not be part of a burst (a
    command, an edit), None when its channel makes no bursts (no `debounce_ms`)."""
    if not isinstance(cfg, ChatChannelConfig) or not cfg.debounce_ms:
        return None
    return 0.0 if command or ev.edited else cfg.debounce_ms / 1000


def burst_key(ev: MessageReceived) -> str:
    """One person in one conversation (a thread or topic is a conversation of its own)."""
    return f"{ev.ref.session_key}|{ev.sender.identity}"


def merge(events: Sequence[MessageReceived]) -> MessageReceived:
    """One event for a burst: the first one's identity (event id, arrival time), every text in order
    on its own line, every attachment, addressed to the assistant if any part was. The answer points
    at the last message, where the person stopped."""
    first, last = events[0], events[-1]
    if len(events) == 1:
        return first
    return replace(
        first,
        text="\n".join(e.text for e in events if e.text),
        attachments=tuple(a for e in events for a in e.attachments),
        mentions_bot=any(e.mentions_bot for e in events),
        reply_to=next((e.reply_to for e in events if e.reply_to is not None), None),
        message_id=last.message_id or first.message_id,
        private_reply=last.private_reply,
    )


class Bursts:
    """The open bursts of this process. `clock` and `sleep` are injectable, for tests."""

    def __init__(self, clock: Clock = time.monotonic, sleep: Sleep = asyncio.sleep) -> None:
        self._clock = clock
        self._sleep = sleep
        self._open: dict[str, Burst] = {}

    def join(self, ev: MessageReceived) -> Burst | None:
        """Add `ev` to its sender's open burst there; None when none is open (it leads one then)."""
        burst = self._open.get(burst_key(ev))
        if burst is None or burst.closed or len(burst.events) >= MAX_MESSAGES:
            return None
        burst.events.append(ev)
        burst.last = self._clock()
        return burst

    def open(self, ev: MessageReceived, window: float) -> Burst:
        now = self._clock()
        burst = Burst(burst_key(ev), window, now, now, [ev])
        self._open[burst.key] = burst
        return burst

    def close(self, ev: MessageReceived) -> None:
        """No more messages join the burst `ev`'s sender has open there (a command came)."""
        burst = self._open.pop(burst_key(ev), None)
        if burst is not None:
            burst.closed = True

    async def gather(self, burst: Burst) -> list[MessageReceived]:
        """Wait until the burst's sender has been quiet for its window (or it is full, or has been
        held long enough); then it is closed and its events are returned, in the order they came."""
        try:
            while not burst.closed and len(burst.events) < MAX_MESSAGES:
                now = self._clock()
                quiet_at = min(burst.last, burst.began + burst.window * (MAX_HOLD - 1)) + burst.window
                if now >= quiet_at:
                    break
                await self._sleep(quiet_at - now)
        finally:
            burst.closed = True
            if self._open.get(burst.key) is burst:
                del self._open[burst.key]
        return list(burst.events)

    def __len__(self) -> int:
        return len(self._open)
