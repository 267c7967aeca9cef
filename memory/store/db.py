"""The database: engine, migrations, and running units of work.

A store hands `Database.write`/`Database.read` one sync function that does a whole transaction on
a sync `Connection`. For SQLite that function runs on a sync engine in one dedicated thread: one
thread hop per transaction. SQLAlchemy async over aiosqlite paid a greenlet bridge and an aiosqlite
thread hop per *statement*; a REST turn's storage work (journal.record, journal.claim_send,
sessions.append with finish) cost about 5.6 ms CPU that way and about 1.2 ms this way. One thread
also means one writer, which SQLite has anyway, so transactions queue in order instead of
fighting over the file lock ("database is locked" under load).

Any other URL (PostgreSQL, e.g. `postgresql+asyncpg://`) runs the same functions through
SQLAlchemy async (`AsyncConnection.run_sync`), where a pool of connections does pay off.
"""

from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, TypeVar, TypeVarTuple

from sqlalchemy import Engine, create_engine, event, exc, make_url, text
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

MIGRATIONS = Path(__file__).with_name("migrations")
# Operating-system errors of the same kind, in the same words (gateway/preflight.py says them too).
OS_UNWRITABLE = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EROFS: "the file system is read-only",
}

Runner = Literal["auto", "thread", "async"]
MIGRATION_LOCK = 0x636C6177  # "claw": the advisory lock key schema migrations take on PostgreSQL
T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class DatabaseClosed(RuntimeError):
    """Work was handed to a Database after close()."""


class StorageUnwritable(RuntimeError):
    """A write the storage refused because it cannot be written at all (a full disk, a read-only
    file or file system, a server out of space), as opposed to a conflict or a bug: the same write
    can succeed once the operator frees space. `reason` says which, in plain words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# SQLite's primary result codes (the low byte of an extended code) that mean the file cannot be
# written, and what to call them.
_SQLITE_UNWRITABLE = {
    13: "the disk is full",
    8: "the database is read-only",
    10: "a disk I/O error",
    14: "the database file cannot be opened",
}
# PostgreSQL SQLSTATEs of the same kind.
_PG_UNWRITABLE = {
    "53100": "the database server's disk is full",
    "53200": "the database server is out of memory",
    "25006": "the database is read-only",
}


def unwritable_reason(err: BaseException) -> str | None:
    """Why `err` (from a write) means the storage cannot be written now; None for any other error.
    Decided by the driver's error code, never by the message."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        code = getattr(current, "sqlite_errorcode", None)
        if isinstance(code, int) and code & 0xFF in _SQLITE_UNWRITABLE:
            return _SQLITE_UNWRITABLE[code & 0xFF]
        state = getattr(current, "sqlstate", None) or getattr(current, "pgcode", None)
        if isinstance(state, str) and state in _PG_UNWRITABLE:
            return _PG_UNWRITABLE[state]
        if isinstance(current, OSError) and current.errno in OS_UNWRITABLE:
            return OS_UNWRITABLE[current.errno]
        current = getattr(current, "orig", None) or current.__cause__ or current.__context__
    return None


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.close()


def _sqlite_url(url: URL, driver: str) -> URL:
    """`url` on the given SQLite driver, with the directory of its file created."""
    if url.database and url.database != ":memory:" and not url.database.startswith("file:"):
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    return url.set(drivername=driver)


def _alembic_config(connection: Connection | None = None) -> Any:
    from alembic.config import Config as AlembicConfig

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def known_revisions() -> set[str]:
    """Every schema revision this version of clawgate knows."""
    from alembic.script import ScriptDirectory

    return {rev.revision for rev in ScriptDirectory.from_config(_alembic_config()).walk_revisions()}


def _upgrade(connection: Connection) -> None:
    from alembic import command

    command.upgrade(_alembic_config(connection), "head")


def _current(connection: Connection) -> tuple[str | None, str | None]:
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    current = MigrationContext.configure(connection).get_current_revision()
    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    return current, head


def migrate_in(connection: Connection) -> None:
    """Bring the schema of the database behind `connection` to the newest revision, inside the
    caller's transaction (Database.migrate, and migrate-storage's all-or-nothing copy).

    On PostgreSQL, instances starting together take turns (a transaction-scoped advisory lock):
    the first migrates, the others then find the schema current. Without it two would create the
    same tables at once and one would fail its start."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
    current, head = _current(connection)
    if current != head:
        _upgrade(connection)


def _ping(connection: Connection) -> None:
    connection.execute(text("SELECT 1"))


# A pooled PostgreSQL connection idle longer than this is pinged before it is handed out (the server
# may have restarted or dropped it meanwhile). SQLAlchemy's pool_pre_ping pings on *every* checkout:
# a round trip in each of a turn's ~7 transactions, about a fifth of the database's work per turn.
IDLE_PING_SECONDS = 5.0
POOL_SIZE = 20  # connections a process keeps to PostgreSQL (and as many more for a burst)


def _stamp_checkin(_dbapi_conn: Any, record: Any) -> None:
    record.info["idle_since"] = time.monotonic()


def _ping_if_idle(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
    idle_since = record.info.get("idle_since")
    if idle_since is None or time.monotonic() - idle_since < IDLE_PING_SECONDS:
        return
    try:
        dbapi_conn.ping()
    except Exception as err:  # the pool throws this connection away and hands out a new one
        raise exc.DisconnectionError("the pooled connection was dropped while idle") from err


class Database:
    """Owns the engine and runs units of work, each a sync `fn(conn, *args)`.

    `runner`: "auto" picks the thread runner for SQLite and the async runner for everything else;
    "async" forces SQLAlchemy async for SQLite too (aiosqlite), so tests can exercise that path.
    """

    def __init__(self, url: str, runner: Runner = "auto") -> None:
        self.url = url
        parsed = make_url(url)
        self.backend = parsed.get_backend_name()  # "sqlite", "postgresql"
        sqlite = self.backend == "sqlite"
        if runner == "thread" and not sqlite:
            raise ValueError(f"the thread runner is for SQLite only, not {parsed.get_backend_name()}")
        self.runner: Literal["thread", "async"] = ("thread" if sqlite else "async") if runner == "auto" else runner
        self._closed = False
        # Why the last write failed because the storage could not be written; None once one succeeds.
        self.unwritable: str | None = None
        # How many writes failed so, ever: a transaction that wrote nothing (a job claim finding no
        # job) succeeds on a full disk and clears `unwritable`, so a watcher counts failures instead.
        self.unwritable_failures = 0
        self._engine: Engine | None = None
        self._async_engine: AsyncEngine | None = None
        self._reader: AsyncEngine | None = None
        self._executor: ThreadPoolExecutor | None = None
        if self.runner == "thread":
            # One connection, used only on the executor's thread; check_same_thread is off so that a
            # Database dropped without close() can still be garbage-collected on another thread.
            self._engine = create_engine(
                _sqlite_url(parsed, "sqlite+pysqlite"),
                connect_args={"check_same_thread": False},
                pool_size=1,
                max_overflow=0,
            )
            event.listen(self._engine, "connect", _sqlite_pragmas)
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="clawgate-db")
        elif sqlite:
            # One connection: queueing in the pool is cheaper and safer than several connections
            # fighting over SQLite's lock.
            self._async_engine = create_async_engine(
                _sqlite_url(parsed, "sqlite+aiosqlite"),
                connect_args={"check_same_thread": False},
                pool_size=1,
                max_overflow=0,
                pool_timeout=60,
            )
            event.listen(self._async_engine.sync_engine, "connect", _sqlite_pragmas)
        else:
            # Every session a process is answering may be at the database at once (its turn, its
            # lease renewal, a waiting turn's poll), and the pool must keep what a busy process uses:
            # a connection closed on check-in (over pool_size) is a server process forked again at
            # the next checkout, which cost a third of a core at 120 turns/s with 10 (scale.py).
            self._async_engine = create_async_engine(parsed, pool_size=POOL_SIZE, max_overflow=POOL_SIZE)
            event.listen(self._async_engine.sync_engine, "checkin", _stamp_checkin)
            event.listen(self._async_engine.sync_engine, "checkout", _ping_if_idle)
            # Reads need no transaction (READ COMMITTED gives each statement its own snapshot, in a
            # transaction or not): autocommit saves the BEGIN and ROLLBACK round trips.
            self._reader = self._async_engine.execution_options(isolation_level="AUTOCOMMIT")

    @property
    def shared(self) -> bool:
        """Whether several gateway instances may use this database at once (anything but SQLite):
        then what a process caches about a session must be checked against the database."""
        return self.backend != "sqlite"

    async def write(self, fn: Callable[[Connection, *Ts], T], *args: *Ts) -> T:
        """Run `fn(conn, *args)` in one transaction, committed when it returns, rolled back (and
        the exception re-raised) when it raises. A storage that cannot be written raises
        StorageUnwritable (and `unwritable` says why until a write succeeds again)."""
        return await self._noting_unwritable(self._write(fn, *args))

    async def _write(self, fn: Callable[[Connection, *Ts], T], *args: *Ts) -> T:
        if self._async_engine is not None:
            self._check_open()
            async with self._async_engine.begin() as conn:
                return await conn.run_sync(fn, *args)
        return await self._in_thread(self._write_sync, fn, *args)

    async def write_statement(self, fn: Callable[[Connection, *Ts], T], *args: *Ts) -> T:
        """`write` for a `fn` that runs exactly one statement: a statement is a transaction of its
        own, so on PostgreSQL it runs in autocommit, without the BEGIN and COMMIT round trips (the
        journal's inserts and the session leases, several times a turn)."""
        if self._reader is None:
            return await self.write(fn, *args)
        return await self._noting_unwritable(self._autocommit(self._reader, fn, *args))

    async def _autocommit(self, engine: AsyncEngine, fn: Callable[[Connection, *Ts], T], *args: *Ts) -> T:
        self._check_open()
        async with engine.connect() as conn:
            return await conn.run_sync(fn, *args)

    async def _noting_unwritable(self, work: Awaitable[T]) -> T:
        """`work`, a write: a failure that means the storage cannot be written becomes
        StorageUnwritable and is noted in `unwritable`; a success clears it."""
        try:
            result = await work
        except Exception as err:
            reason = unwritable_reason(err)
            if reason is None:
                raise
            self.unwritable = reason
            self.unwritable_failures += 1
            raise StorageUnwritable(reason) from err
        self.unwritable = None
        return result

    async def read(self, fn: Callable[[Connection, *Ts], T], *args: *Ts) -> T:
        """Run `fn(conn, *args)` on a connection without committing anything."""
        if self._async_engine is not None:
            self._check_open()
            engine = self._reader or self._async_engine
            try:
                async with engine.connect() as conn:
                    return await conn.run_sync(fn, *args)
            except exc.DBAPIError as err:
                if not err.connection_invalidated:
                    raise
            # The connection broke (a server restart, a dropped socket): SQLAlchemy has discarded the
            # pool's older connections too, and a read changes nothing, so it is safe to run again.
            async with engine.connect() as conn:
                return await conn.run_sync(fn, *args)
        return await self._in_thread(self._read_sync, fn, *args)

    async def read_in_transaction(self, fn: Callable[[Connection, *Ts], T], *args: *Ts) -> T:
        """`read` for work that needs a transaction though it changes nothing: settings made with
        `set_config(…, true)` last until the transaction ends, so in autocommit they would end with
        their own statement. Rolled back at the end."""
        if self._async_engine is not None:
            self._check_open()
            async with self._async_engine.connect() as conn:
                return await conn.run_sync(fn, *args)
        return await self._in_thread(self._read_sync, fn, *args)

    async def migrate(self) -> None:
        """Bring the schema to the newest revision (idempotent)."""
        await self.write(migrate_in)

    async def revision(self) -> tuple[str | None, str | None]:
        """(current, head) schema revisions."""
        return await self.read(_current)

    async def ping(self) -> bool:
        try:
            await self.read(_ping)
        except Exception:
            return False
        return True

    async def close(self) -> None:
        """Dispose of the engine; later work raises DatabaseClosed. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._async_engine is not None:
            await self._async_engine.dispose()
            return
        assert self._engine is not None and self._executor is not None
        # Queued behind any work submitted before close(), on the thread that owns the connection.
        await asyncio.get_running_loop().run_in_executor(self._executor, self._engine.dispose)
        self._executor.shutdown(wait=False)

    def _check_open(self) -> None:
        if self._closed:
            raise DatabaseClosed("the database is closed")

    async def _in_thread(self, run: Callable[..., T], *args: Any) -> T:
        self._check_open()
        assert self._executor is not None
        return await asyncio.get_running_loop().run_in_executor(self._executor, run, *args)

    def _write_sync(self, fn: Callable[..., T], *args: Any) -> T:
        assert self._engine is not None
        with self._engine.begin() as conn:
            return fn(conn, *args)

    def _read_sync(self, fn: Callable[..., T], *args: Any) -> T:
        assert self._engine is not None
        with self._engine.connect() as conn:
            return fn(conn, *args)
