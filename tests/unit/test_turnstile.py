"""A key's places are served in the order they were taken, one at a time."""

from __future__ import annotations

import asyncio

from gateway.turn.turnstile import Turnstile


async def test_places_are_served_in_the_order_taken_whatever_they_await_first() -> None:
    line = Turnstile()
    served: list[int] = []

    async def visitor(n: int, yields: int) -> None:
        place = line.join("k")  # taken at arrival
        try:
            for _ in range(yields):  # held up on the way (a database call, say)
                await asyncio.sleep(0)
            await place.wait()
            served.append(n)
            await asyncio.sleep(0)
        finally:
            place.leave()

    tasks = [asyncio.create_task(visitor(n, yields)) for n, yields in enumerate([5, 0, 9, 2, 1])]
    await asyncio.gather(*tasks)
    assert served == [0, 1, 2, 3, 4]
    assert len(line) == 0


async def test_a_place_given_up_while_waiting_does_not_block_the_line() -> None:
    line = Turnstile()
    first = line.join("k")
    second = line.join("k")
    third = line.join("k")
    assert (first.ahead, second.ahead, third.ahead) == (0, 1, 2)
    waiter = asyncio.create_task(second.wait())
    await asyncio.sleep(0)
    waiter.cancel()
    second.leave()
    second.leave()  # idempotent
    first.leave()
    await asyncio.wait_for(third.wait(), 1)
    assert third.ahead == 0 and line.waiting("k") == 1
    third.leave()
    assert line.waiting("k") == 0 and len(line) == 0


async def test_keys_do_not_wait_for_each_other() -> None:
    line = Turnstile()
    a = line.join("a")
    b = line.join("b")
    await asyncio.wait_for(b.wait(), 1)
    assert a.ahead == 0 and b.ahead == 0
    a.leave()
    b.leave()
