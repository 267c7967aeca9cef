"""Database runners and the stores on them, over real SQLite files (the thread runner: pysqlite on one
dedicated thread; the async runner: SQLAlchemy async over aiosqlite) and over a real PostgreSQL with
pgvector that the tests start themselves (tests/postgres.py)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from gateway.core.events import utcnow
from memory.store.db import Database, DatabaseClosed, Runner
from memory.store.schema import users
from memory.store.sessions import Message
from memory.store.storage import Storage
from tests.postgres import fresh_database_url

URLS: dict[Runner, str] = {"thread": "sqlite:///{}", "async": "sqlite+aiosqlite:///{}"}


@pytest.fixture(params=["thread", "async", "postgres"])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    if request.param == "postgres":
        database = Database(fresh_database_url())
    else:
        runner: Runner = request.param
        database = Database(URLS[runner].format(tmp_path / "data" / "t.db"), runner=runner)
    await database.migrate()
    yield database
    await database.close()


@pytest.fixture
async def storage(db: Database) -> Storage:
    return Storage(db)


def _add_user(conn: Connection, uid: str) -> str:
    conn.execute(insert(users).values(id=uid, roles=["user"], created_at=utcnow()))
    return uid


def _user_ids(conn: Connection) -> list[str]:
    return list(conn.execute(select(users.c.id).order_by(users.c.id)).scalars())


def _count_users(conn: Connection) -> int:
    return int(conn.execute(select(func.count()).select_from(users)).scalar_one())


async def test_runner_follows_the_url(tmp_path: Path) -> None:
    for url, runner in [
        (f"sqlite:///{tmp_path}/a.db", "thread"),
        (f"sqlite+aiosqlite:///{tmp_path}/b.db", "thread"),  # configs written for the old default
    ]:
        database = Database(url)
        assert database.runner == runner, url
        await database.close()
    forced = Database(f"sqlite:///{tmp_path}/c.db", runner="async")
    assert forced.runner == "async"
    await forced.close()
    with pytest.raises(ValueError):
        Database("postgresql+asyncpg://u@localhost/db", runner="thread")


async def test_write_and_read_return_values(db: Database) -> None:
    assert await db.write(_add_user, "ann") == "ann"
    assert await db.read(_user_ids) == ["ann"]
    assert await db.ping()
    current, head = await db.revision()
    assert current == head is not None


async def test_migrate_is_idempotent(db: Database) -> None:
    await db.write(_add_user, "ann")
    await db.migrate()
    assert await db.read(_user_ids) == ["ann"]


async def test_integrity_error_propagates_and_rolls_back(db: Database) -> None:
    await db.write(_add_user, "ann")

    def two_users(conn: Connection) -> None:
        _add_user(conn, "bob")
        _add_user(conn, "ann")  # duplicate key: the whole transaction goes, bob included

    with pytest.raises(IntegrityError):
        await db.write(two_users)
    assert await db.read(_user_ids) == ["ann"]
    # The connection is usable after the failure.
    await db.write(_add_user, "cid")
    assert await db.read(_user_ids) == ["ann", "cid"]


async def test_concurrent_writes_all_land(db: Database) -> None:
    await asyncio.gather(*(db.write(_add_user, f"u{i:02d}") for i in range(50)))
    assert await db.read(_count_users) == 50


async def test_write_after_close_raises(tmp_path: Path) -> None:
    for runner, url in URLS.items():
        database = Database(url.format(tmp_path / f"{runner}.db"), runner=runner)
        await database.migrate()
        await database.close()
        await database.close()  # idempotent
        with pytest.raises(DatabaseClosed):
            await database.write(_add_user, "ann")
        with pytest.raises(DatabaseClosed):
            await database.read(_user_ids)
        assert not await database.ping()


async def test_record_dedupes(storage: Storage) -> None:
    assert await storage.journal.record("e1", "web", "k", {"text": "hi"})
    assert not await storage.journal.record("e1", "web", "k", {"text": "hi again"})
    assert [(p.event_id, p.payload) for p in await storage.journal.unfinished()] == [("e1", {"text": "hi"})]


async def test_claim_send_reports_the_earlier_attempt(storage: Storage) -> None:
    j = storage.journal
    assert await j.record("e1", "web", "k", {})
    assert await j.claim_send("e1:reply", "web") is None
    assert await j.claim_send("e1:reply", "web") == ("sending", None)
    await j.streaming("e1:reply", "m7")
    assert await j.claim_send("e1:reply", "web") == ("streaming", "m7")
    state = await storage.sessions.active("k", "default", None)
    await storage.sessions.append(state, [Message("assistant", "hello")], finish_event="e1", sent=("e1:reply", "m8"))
    assert await j.claim_send("e1:reply", "web") == ("sent", "m8")
    assert await j.outbound_status("e1:reply") == "sent"


async def test_append_is_one_transaction_and_survives_reopen(db: Database, tmp_path: Path) -> None:
    storage = Storage(db)
    assert await storage.journal.record("e1", "web", "k", {"text": "hi"})
    state = await storage.sessions.active("k", "default", "ann")
    msgs = [Message("user", "hi", author="web:ann", event_id="e1"), Message("assistant", "hello there", event_id="e1")]
    await storage.sessions.append(state, msgs, finish_event="e1")
    tokens = sum(m.tokens for m in msgs)
    assert (state.message_count, state.token_count) == (2, tokens)
    assert await storage.journal.unfinished() == []
    assert await storage.journal.counts() == {"done": 1}
    await db.close()

    reopened = await Storage.open(str(db.url))
    try:
        again = await reopened.sessions.active("k", "default", "ann")
        assert again.id == state.id
        assert (again.message_count, again.token_count) == (2, tokens)
        assert [(m.role, m.content, m.event_id) for m in again.recent] == [
            ("user", "hi", "e1"),
            ("assistant", "hello there", "e1"),
        ]
        assert await reopened.sessions.has_user_message(again, "e1")
        reply = await reopened.sessions.reply_for_event("e1")
        assert reply is not None and reply.content == "hello there"
        assert [m.content for m in await reopened.sessions.history("k")] == ["hi", "hello there"]
    finally:
        await reopened.close()


async def test_failed_append_leaves_nothing_behind(storage: Storage) -> None:
    state = await storage.sessions.active("k", "default", None)
    await storage.sessions.append(state, [Message("user", "one")])
    # A session that does not exist breaks the messages' foreign key: nothing of the turn is kept,
    # neither in the database nor in the in-memory state.
    ghost = replace(state, id=999_999, recent=deque(state.recent))
    with pytest.raises(IntegrityError):
        await storage.sessions.append(ghost, [Message("user", "two")], finish_event=None)
    assert (ghost.message_count, [m.content for m in ghost.recent]) == (1, ["one"])
    assert [m.content for m in await storage.sessions.history("k")] == ["one"]


async def test_reset_starts_a_new_session(storage: Storage) -> None:
    first = await storage.sessions.active("k", "default", None)
    await storage.sessions.append(first, [Message("user", "old")])
    fresh, archived = await storage.sessions.reset("k", "default", None)
    assert archived is not None and archived.count == 1  # the cleared transcript went to the archive
    assert fresh.id != first.id
    assert (fresh.message_count, list(fresh.recent)) == (0, [])
    assert await storage.sessions.active("k", "default", None) is fresh
    assert await storage.sessions.history("k") == []


async def test_identities_resolve_and_link(storage: Storage) -> None:
    await storage.identities.sync_declared([("ann", ["admin"], ["telegram:1"])])
    ann = await storage.identities.resolve("telegram:1")
    assert (ann.id, ann.roles, ann.identities) == ("ann", ("admin",), ("telegram:1",))
    stranger = await storage.identities.resolve("discord:9", "Nine")
    assert stranger.id == "discord-9" and stranger.roles == ("user",)
    dm = await storage.sessions.active("discord:dm:9", "main", stranger.id)
    code = await storage.links.create("ann", "telegram:1")
    assert await storage.links.redeem(code, "discord:9") == "ann"
    storage.identities.forget("discord:9", ("ann",))
    assert (await storage.identities.resolve("discord:9")).id == "ann"
    # The account's conversations came along: ann goes on where "discord-9" left off.
    fresh = Storage(storage.db)  # nothing cached
    assert (await fresh.sessions.active("discord:dm:9", "main", "ann")).id == dm.id
    assert (await fresh.sessions.active("discord:dm:9", "main", "ann")).user_id == "ann"


async def test_what_the_config_stops_declaring_is_taken_back(
    storage: Storage, caplog: pytest.LogCaptureFixture
) -> None:
    ids = storage.identities
    await ids.sync_declared(
        [("ann", ["admin"], ["telegram:1", "discord:1"]), ("bob", ["admin", "user"], ["slack:T/U2"])]
    )
    stranger = await ids.resolve("discord:9")  # first contact: not the config's
    code = await storage.links.create("ann", "telegram:1")
    assert await storage.links.redeem(code, "discord:9") == "ann"  # linked by ann herself
    # ann loses discord:1 from her list; bob is taken out of the config altogether.
    caplog.set_level("WARNING", logger="clawgate.identities")
    done = await ids.sync_declared([("ann", ["admin"], ["telegram:1"])])
    assert sorted(done.released) == [("discord:1", "ann"), ("slack:T/U2", "bob")]
    assert done.roles_reset == (("bob", ("admin", "user")),)
    ann = await ids.get_user("ann")
    assert ann is not None and ann.roles == ("admin",) and set(ann.identities) == {"telegram:1", "discord:9"}
    # The released accounts start over as new people, with no role and none of ann's memory.
    newcomer = await ids.resolve("discord:1")
    assert (newcomer.id, newcomer.roles) == ("discord-1", ("user",))
    bob = await ids.get_user("bob")
    assert bob is not None and bob.roles == ("user",) and bob.identities == ()  # his data stays, unreachable
    assert (await ids.resolve("slack:T/U2")).id != "bob"
    assert stranger.id == "discord-9"
    logged = [r.getMessage() for r in caplog.records]
    assert any("config_identity_released" in m and "identity=slack:T/U2" in m and "user=bob" in m for m in logged)
    assert any("config_user_roles_reset" in m and "user=bob" in m for m in logged)
    # Applying the same config again changes nothing more.
    assert await ids.sync_declared([("ann", ["admin"], ["telegram:1"])]) == type(done)()
    # Declared again, an identity moves back to its user, whoever holds it now.
    await ids.sync_declared([("ann", ["admin"], ["telegram:1", "discord:1"])])
    assert (await ids.resolve("discord:1")).id == "ann"


async def test_concurrent_first_contacts_share_one_user(storage: Storage) -> None:
    found = await asyncio.gather(*(storage.identities.resolve("slack:T1/U1") for _ in range(20)))
    assert {u.id for u in found} == {"slack-T1-U1"}
