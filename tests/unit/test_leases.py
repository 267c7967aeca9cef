"""Session leases (memory/store/leases.py) on SQLite and PostgreSQL: two `SessionLeases` on one database
stand for two gateway instances."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from memory.store.leases import SessionLeases
from memory.store.schema import session_leases
from memory.store.storage import Storage
from tests.postgres import BACKENDS, database_url


@pytest.fixture(params=BACKENDS)
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Storage]:
    s = await Storage.open(database_url(request.param, tmp_path))
    yield s
    await s.close()


async def test_one_holder_at_a_time_and_release_frees_it(storage: Storage) -> None:
    a, b = SessionLeases(storage.db, "a"), SessionLeases(storage.db, "b")
    held = await a.try_acquire("tg:1")
    assert held is not None
    assert await b.try_acquire("tg:1") is None
    assert await a.try_acquire("tg:1") is None  # a second acquisition is refused even to its instance
    assert await b.try_acquire("tg:2") is not None  # other sessions are independent
    await a.release("tg:1", held)
    taken = await b.try_acquire("tg:1")
    assert taken is not None
    listing = select(session_leases).order_by(session_leases.c.session_key)
    rows = await storage.db.read(lambda c: c.execute(listing).all())
    assert [(r.session_key, r.instance) for r in rows] == [("tg:1", "b"), ("tg:2", "b")]


async def test_an_expired_lease_is_taken_over_and_its_old_holder_cannot_renew_it(storage: Storage) -> None:
    a, b = SessionLeases(storage.db, "a", lease_seconds=30), SessionLeases(storage.db, "b", lease_seconds=30)
    old = await a.try_acquire("tg:1")
    assert old is not None
    assert await a.renew("tg:1", old)
    a.lease = timedelta(seconds=-1)  # as if `a` stopped renewing long ago
    assert await a.renew("tg:1", old)
    new = await b.try_acquire("tg:1")
    assert new is not None
    assert not await a.renew("tg:1", old)
    await a.release("tg:1", old)  # releasing a lost lease does not free the new holder's
    assert await a.try_acquire("tg:1") is None
    assert await b.renew("tg:1", new)


async def test_hold_waits_for_another_instance_and_then_runs(storage: Storage) -> None:
    a, b = SessionLeases(storage.db, "a"), SessionLeases(storage.db, "b")
    order: list[str] = []
    inside = asyncio.Event()

    async def first() -> None:
        async with a.hold("tg:1"):
            inside.set()
            order.append("a in")
            await asyncio.sleep(0.3)
            order.append("a out")

    async def second() -> None:
        await inside.wait()
        async with b.hold("tg:1"):
            order.append("b in")

    await asyncio.wait_for(asyncio.gather(first(), second()), 10)
    assert order == ["a in", "a out", "b in"]
    assert a.waiting("tg:1") == b.waiting("tg:1") == 0


async def test_hold_without_waiting_says_whether_it_got_the_lease(storage: Storage) -> None:
    a, b = SessionLeases(storage.db, "a"), SessionLeases(storage.db, "b")
    async with a.hold("tg:1") as got:
        assert got
        assert a.waiting("tg:1") == 1
        async with a.hold("tg:1", wait=False) as again:  # held in this process
            assert not again
        async with b.hold("tg:1", wait=False) as other:  # held by another instance
            assert not other
    async with b.hold("tg:1", wait=False) as free:
        assert free


async def test_local_waiters_queue_in_arrival_order(storage: Storage) -> None:
    leases = SessionLeases(storage.db, "a")
    order: list[int] = []

    async def turn(i: int) -> None:
        async with leases.hold("tg:1"):
            order.append(i)
            await asyncio.sleep(0.01)

    tasks = [asyncio.create_task(turn(i)) for i in range(8)]
    await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert order == list(range(8))


async def test_a_held_lease_is_renewed_past_its_length(storage: Storage) -> None:
    a, b = SessionLeases(storage.db, "a", lease_seconds=0.3), SessionLeases(storage.db, "b", lease_seconds=0.3)
    async with a.hold("tg:1"):
        for _ in range(5):  # 1 s in all: more than three lease lengths
            await asyncio.sleep(0.2)
            assert await b.try_acquire("tg:1") is None
    assert await b.try_acquire("tg:1") is not None


def test_a_lease_must_have_a_length() -> None:
    with pytest.raises(ValueError, match="positive"):
        SessionLeases(None, "a", lease_seconds=0)  # type: ignore[arg-type]
