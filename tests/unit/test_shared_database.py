"""Two `Storage` objects on one PostgreSQL database stand for two gateway instances: what one
process caches must not hide what the other wrote."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import update

from memory.db import Database
from memory.schema import users
from memory.sessions import Message
from memory.storage import Storage
from tests.postgres import fresh_database_url

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
async def pair() -> AsyncIterator[tuple[Storage, Storage]]:
    url = fresh_database_url()
    a = await Storage.open(url)
    b = Storage(Database(url))
    yield a, b
    await b.close()
    await a.close()


def test_only_a_database_other_processes_can_open_is_shared(tmp_path: object) -> None:
    assert Database(fresh_database_url()).shared
    assert not Database(f"sqlite:///{tmp_path}/t.db").shared


async def test_a_cached_session_sees_the_other_instances_turns(pair: tuple[Storage, Storage]) -> None:
    a, b = pair
    on_a = await a.sessions.active("tg:1", "main", "alice")
    await a.sessions.append(on_a, [Message("user", "one"), Message("assistant", "1")])
    on_b = await b.sessions.active("tg:1", "main", "alice")
    assert [m.content for m in on_b.recent] == ["one", "1"]
    await b.sessions.append(on_b, [Message("user", "two"), Message("assistant", "2")])

    again = await a.sessions.active("tg:1", "main", "alice")
    assert again is on_a  # caught up with what B appended, not read again whole
    assert [m.content for m in again.recent] == ["one", "1", "two", "2"]
    assert again.message_count == 4 and again.token_count == on_b.token_count

    await b.sessions.archive(on_b, on_b.recent[1].id or 0, "budget", summary="they counted", summary_tokens=3)
    pruned = await a.sessions.active("tg:1", "main", "alice")  # summarized there: read again whole
    assert pruned is not on_a
    assert [m.content for m in pruned.recent] == ["two", "2"] and pruned.summary == "they counted"
    assert await a.sessions.active("tg:1", "main", "alice") is pruned  # unchanged: the cache is used

    fresh, _ = await b.sessions.reset("tg:1", "main", "alice")  # /new on the other instance
    after = await a.sessions.active("tg:1", "main", "alice")
    assert after.id == fresh.id and not after.recent


async def test_identity_changes_made_elsewhere_show_within_the_cache_time(
    pair: tuple[Storage, Storage], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = pair
    alice = await a.identities.resolve("telegram:1", "Alice")
    assert alice.roles == ("user",)
    await b.db.write(lambda c: c.execute(update(users).where(users.c.id == alice.id).values(roles=["admin"])))
    assert (await a.identities.resolve("telegram:1")).roles == ("user",)  # cached for a moment
    monkeypatch.setattr(type(a.identities), "SHARED_CACHE_SECONDS", 0.0)
    assert (await a.identities.resolve("telegram:1")).roles == ("admin",)


async def test_instances_starting_together_migrate_one_after_another() -> None:
    # Separate processes (Alembic's context is global to one): without the migration lock, two
    # would create the same tables at once and one of them would fail its start.
    url = fresh_database_url()
    code = "import asyncio, sys; from memory.db import Database; asyncio.run(Database(sys.argv[1]).migrate())"
    procs = [
        await asyncio.create_subprocess_exec(sys.executable, "-c", code, url, cwd=REPO, stderr=asyncio.subprocess.PIPE)
        for _ in range(3)
    ]
    results = [await p.communicate() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err.decode()[-2000:] for _, err in results]
    db = Database(url)
    try:
        current, head = await db.revision()
    finally:
        await db.close()
    assert current == head
