"""Two `Storage` objects on one PostgreSQL database stand for two gateway instances: what one
process caches must not hide what the other wrote."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text, update
from sqlalchemy.engine import Connection

from memory.store import db as db_module
from memory.store.db import Database
from memory.store.schema import users
from memory.store.sessions import Message
from memory.store.storage import Storage
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


async def test_two_instances_summarizing_one_session_at_once_archive_it_once(pair: tuple[Storage, Storage]) -> None:
    a, b = pair
    on_a = await a.sessions.active("tg:2", "main", "alice")
    await a.sessions.append(on_a, [Message("user" if i % 2 == 0 else "assistant", f"m{i}") for i in range(40)])
    on_b = await b.sessions.active("tg:2", "main", "alice")
    through = on_a.recent[29].id or 0
    # Both instances' background summaries of the same 30 messages finish together.
    done = await asyncio.gather(
        a.sessions.archive(on_a, through, "budget", summary="from a", summary_tokens=2),
        b.sessions.archive(on_b, through, "budget", summary="from b", summary_tokens=2),
    )
    assert sorted(d is None for d in done) == [False, True]  # one archived; the other found it done
    winner = next(d for d in done if d is not None)
    assert winner.count == 30
    archived = await a.db.read(lambda c: c.execute(text("SELECT count(*) FROM archived_messages")).scalar_one())
    assert archived == 30
    third = Storage(Database(a.db.url))  # nothing cached
    try:
        state = await third.sessions.active("tg:2", "main", "alice")
    finally:
        await third.close()
    assert state.message_count == 10 and state.summaries == 1 and state.summary in ("from a", "from b")


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
    code = "import asyncio, sys; from memory.store.db import Database; asyncio.run(Database(sys.argv[1]).migrate())"
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


# --- The connection pool on PostgreSQL -------------------------------------------------------------


def _in_transaction(conn: Connection) -> bool:
    # One transaction id for both statements when they share a transaction, two in autocommit.
    ids = [conn.execute(text("SELECT pg_current_xact_id()::text")).scalar() for _ in range(2)]
    return ids[0] == ids[1]


def _ef_search_after_setting(conn: Connection) -> str:
    conn.execute(text("SELECT set_config('hnsw.ef_search', '123', true)"))
    return str(conn.execute(text("SELECT current_setting('hnsw.ef_search')")).scalar())


def _backend_pid(conn: Connection) -> int:
    return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


async def _terminate_all(url: str) -> None:
    db = Database(url)
    try:
        await db.write(
            lambda conn: conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
        )
    finally:
        await db.close()


async def test_reads_run_without_a_transaction_unless_they_ask_for_one() -> None:
    db = Database(fresh_database_url())
    try:
        assert not await db.read(_in_transaction)  # no BEGIN / ROLLBACK round trips
        assert await db.write(_in_transaction)
        # (write_statement's work is one statement; two here show it is not wrapped in a transaction)
        assert not await db.write_statement(_in_transaction)
        assert await db.read_in_transaction(_in_transaction)
        # Transaction-local settings (the HNSW search's) hold for the rest of a read that asks.
        await db.read(lambda conn: conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector")))
        assert await db.read_in_transaction(_ef_search_after_setting) == "123"
        assert await db.read(_ef_search_after_setting) != "123"
    finally:
        await db.close()


async def test_a_connection_the_server_dropped_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    url = fresh_database_url()
    db = Database(url)
    try:
        first = await db.read(_backend_pid)
        await _terminate_all(url)
        # A read whose connection is gone is run again on a new one.
        second = await db.read(_backend_pid)
        assert second != first
        # A write gets a connection checked before it is handed out when it sat idle (here: at all).
        monkeypatch.setattr(db_module, "IDLE_PING_SECONDS", 0.0)
        await _terminate_all(url)
        assert await db.write(_backend_pid) != second
    finally:
        await db.close()
