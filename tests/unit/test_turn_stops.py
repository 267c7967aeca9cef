"""gateway/turn/stops.py: a stop request cuts the model's stream, and the turn goes on with what was
said so far as its reply, marked stopped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from gateway.llm.client import Restart, TextDelta
from gateway.turn.engine import TurnResult
from gateway.turn.stops import _KEPT, STOPPED_MARK, Stops

Item = TextDelta | Restart | TurnResult


async def _model(started: asyncio.Event, closed: list[bool]) -> AsyncIterator[Item]:
    """A model that says two things, then thinks for ever (until it is closed)."""
    try:
        yield TextDelta("Hello")
        yield TextDelta(", world")
        started.set()
        await asyncio.Event().wait()
        yield TurnResult("never")
    finally:
        closed.append(True)


async def _all(stream: AsyncIterator[Item]) -> list[Item]:
    return [item async for item in stream]


async def test_a_stop_cuts_the_stream_and_keeps_what_was_said() -> None:
    stops, started, closed = Stops(), asyncio.Event(), []
    run = asyncio.create_task(_all(stops.watch("ev1", _model(started, closed))))
    await started.wait()
    stops.request("ev1")
    items = await asyncio.wait_for(run, 5)
    result = items[-1]
    assert isinstance(result, TurnResult)
    assert result.text == "Hello, world" + STOPPED_MARK
    assert [m.content for m in result.produced] == [result.text]
    assert closed == [True]  # the model's stream was closed: its HTTP response goes with it
    assert stops._events == {}


async def test_a_stop_asked_before_the_model_answers_applies_when_it_does() -> None:
    stops, closed = Stops(), []
    stops.request("early")
    items = await _all(stops.watch("early", _model(asyncio.Event(), closed)))
    assert len(items) == 1 and isinstance(items[0], TurnResult)
    assert items[0].text == STOPPED_MARK.strip()


async def test_a_stream_nobody_stops_passes_unchanged() -> None:
    async def model() -> AsyncIterator[Item]:
        yield TextDelta("draft")
        yield Restart("fallback-model")
        yield TextDelta("final")
        yield TurnResult("final")

    stops = Stops()
    items = await _all(stops.watch("ev", model()))
    assert [type(i).__name__ for i in items] == ["TextDelta", "Restart", "TextDelta", "TurnResult"]
    assert items[-1] == TurnResult("final")
    stops.request("other")  # a stop for another turn changes nothing here


def test_requests_for_turns_that_never_ran_are_bounded() -> None:
    stops = Stops()
    for i in range(_KEPT + 50):
        stops.request(f"ev{i}")
    assert len(stops._events) == _KEPT and "ev0" not in stops._events
