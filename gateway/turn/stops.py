"""Stopping a reply while it streams: a person presses Stop on the chat page (docs/chat.md).

The turn is not cancelled (its bookkeeping, the session and the journal, must still happen): the
model's stream is cut instead, and the turn goes on with what was said so far as its reply, marked
stopped. A request names the inbound event whose turn should stop; one made before that turn reaches
the model is kept (a few hundred at most) and applies when it does."""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator

from gateway.llm.client import Restart, TextDelta
from gateway.turn.engine import TurnResult
from memory.store.sessions import Message

# Appended to a stopped reply: the page shows it, the session keeps it, and the model reads next
# turn that its answer was cut short.
STOPPED_MARK = "\n\n*(stopped)*"
_KEPT = 256

Item = TextDelta | Restart | TurnResult
_ENDED = TurnResult("")  # a marker: the stream ran out


class Stops:
    def __init__(self) -> None:
        self._events: OrderedDict[str, asyncio.Event] = OrderedDict()

    def request(self, event_id: str) -> None:
        """Ask the turn answering `event_id` to stop (now, or when it starts streaming)."""
        self._event(event_id).set()

    def _event(self, event_id: str) -> asyncio.Event:
        found = self._events.get(event_id)
        if found is None:
            found = self._events[event_id] = asyncio.Event()
            while len(self._events) > _KEPT:
                self._events.popitem(last=False)
        return found

    async def watch(self, event_id: str, stream: AsyncIterator[Item]) -> AsyncIterator[Item]:
        """`stream` as it comes, until a stop is requested for `event_id`: then the model's stream
        is closed and a TurnResult with the text so far (marked stopped) ends it."""
        stop = self._event(event_id)
        said: list[str] = []
        try:
            while True:
                item = await _next_or_stop(stream, stop)
                if item is _ENDED:
                    return  # the stream ended by itself (it always ends with its TurnResult)
                if item is None:
                    break
                if isinstance(item, Restart):
                    said.clear()
                elif isinstance(item, TextDelta):
                    said.append(item.text)
                yield item
                if isinstance(item, TurnResult):
                    return
            text = ("".join(said).rstrip() + STOPPED_MARK).strip()
            yield TurnResult(text, [Message(role="assistant", content=text)])
        finally:
            self._events.pop(event_id, None)
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]


async def _next_or_stop(stream: AsyncIterator[Item], stop: asyncio.Event) -> Item | None:
    """The stream's next item (_ENDED past its end), or None once `stop` is set (the pending read
    is cancelled)."""
    if stop.is_set():
        return None
    nxt = asyncio.ensure_future(anext(stream))
    stopped = asyncio.ensure_future(stop.wait())
    try:
        done, _ = await asyncio.wait({nxt, stopped}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        nxt.cancel()
        raise
    finally:
        stopped.cancel()
    if nxt in done:
        try:
            return nxt.result()
        except StopAsyncIteration:
            return _ENDED
    nxt.cancel()
    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
        await nxt
    return None
