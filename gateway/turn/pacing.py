"""Rate budgets and rate-limit holds for outbound platform calls (docs/channels.md, "Delivery").

One Pacer serves every adapter of the process. Each adapter names its budgets per conversation
(`Capabilities.rates`: a chat, a channel, a whole workspace); a budget is a token bucket that refills
at `per_second` up to `burst`. A refusal with retry_after (a 429) puts a hold on the budgets it
concerns: no call that spends them goes out before the hold is over, whichever part of a reply
(streamed message, edit, final edit, later chunk) makes it. Time comes from an injected clock and
sleep, so tests run on a virtual clock without waiting.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from gateway.core.ports import Rate

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]

# Past this many remembered budgets, idle ones (full again, no hold) are forgotten.
MAX_KEYS = 10_000
# A wait shorter than this is none: rounding leaves such crumbs, and a clock may not even move by them.
EPSILON = 1e-6


@dataclass(frozen=True, slots=True)
class Bucket:
    tokens: float  # may be below zero: sends spend without waiting and leave a debt
    at: float  # when `tokens` was counted


def tokens_at(bucket: Bucket | None, rate: Rate, now: float) -> float:
    """The tokens a budget holds at `now`; one never used is full."""
    if bucket is None or math.isinf(rate.per_second):
        return rate.burst
    return min(rate.burst, bucket.tokens + max(0.0, now - bucket.at) * rate.per_second)


def wait_for_token(tokens: float, rate: Rate) -> float:
    """Seconds until a budget holding `tokens` has a whole token to spend."""
    if tokens >= 1 or math.isinf(rate.per_second):
        return 0.0
    return (1 - tokens) / rate.per_second


def full_at(bucket: Bucket, rate: Rate) -> float:
    """When a budget is full again, after which forgetting it changes nothing."""
    if math.isinf(rate.per_second):
        return bucket.at
    return bucket.at + max(0.0, rate.burst - bucket.tokens) / rate.per_second


class Pacer:
    def __init__(self, clock: Clock = time.monotonic, sleep: Sleep = asyncio.sleep) -> None:
        self.clock = clock
        self.sleep = sleep
        self._buckets: dict[tuple[str, str], tuple[Bucket, float]] = {}  # (bucket, when it is full)
        self._holds: dict[tuple[str, str], float] = {}  # not before this time

    def delay(self, scope: str, rates: Iterable[Rate], *, budget: bool = True) -> float:
        """Seconds until a call spending `rates` may go out: a hold, or (with `budget`) an empty bucket."""
        now = self.clock()
        wait = 0.0
        for rate in rates:
            key = (scope, rate.key)
            wait = max(wait, self._holds.get(key, now) - now)
            if budget:
                found = self._buckets.get(key)
                wait = max(wait, wait_for_token(tokens_at(found[0] if found else None, rate, now), rate))
        return wait if wait > EPSILON else 0.0

    async def wait(self, scope: str, rates: tuple[Rate, ...]) -> float:
        """Wait until no hold is on these budgets (a send: it does not wait for a token)."""
        waited = 0.0
        while (wait := self.delay(scope, rates, budget=False)) > 0:
            await self.sleep(wait)
            waited += wait
        return waited

    async def take(self, scope: str, rates: tuple[Rate, ...]) -> float:
        """Wait for a call that must keep to the budgets (a final edit), and spend its token. The
        token is taken when the wait begins, leaving a debt that the wait pays off, so callers go in
        the order they came: sends, which spend without waiting, push later callers back but never
        one already waiting. (Waiting for a whole token first starved such an edit for as long as
        other conversations sharing the budget kept sending.)"""
        waited = await self.wait(scope, rates)
        wait = self.delay(scope, rates)  # for a token: the holds are over
        self.spend(scope, rates, send=False)
        if wait:
            await self.sleep(wait)
            waited += wait
        return waited + await self.wait(scope, rates)  # a hold that came meanwhile

    def spend(self, scope: str, rates: Iterable[Rate], *, send: bool) -> None:
        now = self.clock()
        for rate in rates:
            if send and not rate.sends:
                continue
            key = (scope, rate.key)
            found = self._buckets.get(key)
            bucket = Bucket(tokens_at(found[0] if found else None, rate, now) - 1, now)
            self._buckets[key] = (bucket, full_at(bucket, rate))
        if len(self._buckets) > MAX_KEYS:
            self._forget_idle(now)

    def hold(self, scope: str, rates: Iterable[Rate], seconds: float) -> None:
        """No call spending these budgets before `seconds` from now (rates with hold=False excepted)."""
        until = self.clock() + max(0.0, seconds)
        for rate in rates:
            if rate.hold:
                key = (scope, rate.key)
                self._holds[key] = max(self._holds.get(key, until), until)
        if len(self._holds) > MAX_KEYS:
            self._forget_idle(self.clock())

    def _forget_idle(self, now: float) -> None:
        self._buckets = {k: v for k, v in self._buckets.items() if v[1] > now}
        self._holds = {k: until for k, until in self._holds.items() if until > now}
