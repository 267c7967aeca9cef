"""A virtual clock for code that takes a `clock` and a `sleep` (Delivery, Pacer): sleeping moves
the clock forward at once, so a test of a 60-second exchange runs in milliseconds."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta


class VirtualClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += max(0.0, seconds)
        await asyncio.sleep(0)  # still a suspension point, as a real sleep is

    def advance(self, seconds: float) -> None:
        self.now += seconds


class WallClock:
    """A virtual UTC wall clock for the gateway's `clock` (the job queue, reminders, schedules): it
    moves only when a test moves it, so a reminder an hour away fires without an hour of waiting."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 12, 2, 7, 40, tzinfo=UTC)  # a Wednesday, 08:40 in Berlin

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now
