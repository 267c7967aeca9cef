"""The two ends of `clawgate migrate-storage` (gateway/cli/migrate_storage.py does the copy): the
URLs and what their errors mean in plain words, the SQLite source as one locked snapshot brought to
the newest schema, and the PostgreSQL target's state (empty, or refused)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Engine,
    create_engine,
    event,
    exc,
    func,
    inspect,
    make_url,
    select,
    text,
)
from sqlalchemy.engine import URL, Connection
from sqlalchemy.pool import NullPool

from gateway.doctor.checks import mask_url
from memory.store import schema
from memory.store.db import Database, StorageUnwritable, known_revisions

CONNECT_TIMEOUT_S = 15.0
LOCK_TIMEOUT_S = 5.0  # how long to wait for SQLite's write lock before calling the source locked
USAGE = 2  # exit codes: a bad URL or config
FAILED = 1  # the migration was tried and did not happen
UNCHANGED = "nothing was committed: the target is as it was"
_SQLITE_BUSY = {"SQLITE_BUSY", "SQLITE_LOCKED"}
_TABLES_SQL = "SELECT name, sql FROM sqlite_master WHERE type = 'table'"


class MigrateError(Exception):
    """The migration did not happen (or was refused); the message says why and what to do."""

    def __init__(self, message: str, exit_code: int = FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Refused(MigrateError):
    """The target holds data or a schema of its own: nothing was tried."""


# --- URLs and errors ---------------------------------------------------------------------------------


def parse(url: str, what: str) -> URL:
    try:
        return make_url(url)
    except (exc.ArgumentError, ValueError):
        raise MigrateError(f"{what} is not a database URL: {mask_url(url)}", USAGE) from None


def source_file(url: str) -> Path:
    """The SQLite file of the configured database; MigrateError (usage) for anything else."""
    parsed = parse(url, "storage.database_url")
    backend = parsed.get_backend_name()
    if backend != "sqlite":
        raise MigrateError(
            f"storage.database_url is already a {backend} database; migrate-storage moves a SQLite database "
            "(between PostgreSQL servers use pg_dump and pg_restore)",
            USAGE,
        )
    if not parsed.database or parsed.database == ":memory:" or parsed.database.startswith("file:"):
        raise MigrateError("storage.database_url names no SQLite file: there is nothing on disk to migrate", USAGE)
    path = Path(parsed.database)
    if not path.is_file():
        raise MigrateError(f"there is no database at {path}: check storage.data_dir and storage.database_url", USAGE)
    return path


def target_url(url: str) -> URL:
    parsed = parse(url, "--to")
    shown = mask_url(url)
    if parsed.get_backend_name() != "postgresql":
        raise MigrateError(
            f"--to must be a PostgreSQL URL such as postgresql+asyncpg://user@host/db, not {shown}", USAGE
        )
    if parsed.drivername == "postgresql":
        raise MigrateError(f"--to names no driver: write postgresql+asyncpg://… ({shown})", USAGE)
    if not parsed.database:
        raise MigrateError(f"--to names no database: postgresql+asyncpg://user@host/DBNAME ({shown})", USAGE)
    return parsed


def root_cause(error: BaseException) -> BaseException:
    """The driver's own exception under SQLAlchemy's wrapper: its message holds no SQL and no values."""
    if isinstance(error, exc.DBAPIError) and error.orig is not None:
        orig: BaseException = error.orig
        return orig.__cause__ or orig
    return error


def detail(error: BaseException, url: URL) -> str:
    """The cause in one line, without the URL's password (drivers sometimes echo the DSN)."""
    cause = root_cause(error)
    line = " ".join(f"{type(cause).__name__}: {cause}".split())
    return line.replace(url.password, "***") if url.password else line


def target_error(error: BaseException, url: URL, doing: str) -> MigrateError:
    """A driver or network error of the target as one clear line, classified by type and SQLSTATE."""
    where = f"{url.host or 'localhost'}{f':{url.port}' if url.port else ''}/{url.database}"
    cause = root_cause(error)
    state = str(getattr(cause, "sqlstate", None) or getattr(getattr(error, "orig", None), "sqlstate", None) or "")
    if state.startswith("28"):
        return MigrateError(f"the target database {where} refused the user name or password: {detail(error, url)}")
    if state == "3D000":
        return MigrateError(f"the target database {url.database} does not exist: create it (createdb {url.database})")
    if doing == "connect":
        if isinstance(cause, OSError):
            return MigrateError(f"cannot reach the target database {where}: {detail(error, url)}")
        return MigrateError(f"cannot connect to the target database {where}: {detail(error, url)}")
    lost = isinstance(cause, OSError) or state[:2] in ("08", "57")
    lost = lost or (isinstance(error, exc.DBAPIError) and error.connection_invalidated)
    what = "the connection to the target was lost" if lost else "the target refused it"
    return MigrateError(f"{what} while {doing}: {detail(error, url)}; {UNCHANGED}")


# --- the source: one SQLite snapshot ----------------------------------------------------------------


def is_locked(error: BaseException) -> bool:
    cause = root_cause(error)
    return isinstance(cause, sqlite3.OperationalError) and getattr(cause, "sqlite_errorname", "") in _SQLITE_BUSY


def locked(path: Path) -> MigrateError:
    return MigrateError(
        f"the database {path} is locked by another process: stop the gateway (and any other clawgate command "
        "using it), then run again"
    )


def source_engine(path: Path, lock_timeout: float) -> Engine:
    """SQLite on one connection whose transactions are BEGIN IMMEDIATE: the write lock is taken as the
    copy starts and held until it ends, so what is copied cannot change under it."""
    engine = create_engine(f"sqlite+pysqlite:///{path.as_posix()}", poolclass=NullPool)

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # the driver's own BEGIN would be DEFERRED
        dbapi_conn.execute(f"PRAGMA busy_timeout={int(lock_timeout * 1000)}")

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


async def bring_up_to_date(source: str, path: Path) -> tuple[str, str | None]:
    """(the source's revision now, the one it had when it was behind)."""
    db = Database(source)
    try:
        current, head = await db.revision()
        if current is None or head is None:
            raise MigrateError(f"{path} holds no clawgate schema: it is not a clawgate database")
        if current not in known_revisions():
            raise MigrateError(
                f"{path} is at schema {current}, which this clawgate does not know: run migrate-storage with "
                "the newer clawgate that wrote it"
            )
        if current == head:
            return current, None
        await db.migrate()
        return head, current
    except StorageUnwritable as error:
        raise MigrateError(f"cannot bring {path} up to date: {error.reason}") from None
    except exc.OperationalError as error:
        if is_locked(error):
            raise locked(path) from None
        raise MigrateError(f"cannot read {path}: {root_cause(error)}") from None
    finally:
        await db.close()


def source_extras(src: Connection) -> tuple[dict[str, int], tuple[str, ...], tuple[str, ...]]:
    """(SQLite's AUTOINCREMENT high-water marks, its full-text indexes, any other table outside the
    schema). The inspector leaves sqlite_* tables out, so sqlite_master is asked instead."""
    tables = {str(name): str(sql or "") for name, sql in src.exec_driver_sql(_TABLES_SQL)}
    marks: dict[str, int] = {}
    if "sqlite_sequence" in tables:
        marks = {str(n): int(s) for n, s in src.exec_driver_sql("SELECT name, seq FROM sqlite_sequence")}
    indexes = sorted(n for n, sql in tables.items() if sql.upper().startswith("CREATE VIRTUAL TABLE"))
    shadows = {n for n in tables for index in indexes if n.startswith(index + "_")}  # FTS5's own tables
    known = set(schema.metadata.tables) | {"alembic_version", "sqlite_sequence"} | set(indexes) | shadows
    return marks, tuple(indexes), tuple(sorted(set(tables) - known))


# --- the target ------------------------------------------------------------------------------------


def target_state(conn: Connection) -> tuple[str | None, dict[str, int]]:
    """(the target's schema revision, the rows of every clawgate table that has any)."""
    names = set(inspect(conn).get_table_names())
    revision = None
    if "alembic_version" in names:
        revision = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    filled = {}
    for table in schema.metadata.sorted_tables:
        if table.name in names:
            rows = int(conn.execute(select(func.count()).select_from(table)).scalar_one())
            if rows:
                filled[table.name] = rows
    return revision, filled


def check_empty(state: tuple[str | None, dict[str, int]], url: URL) -> None:
    revision, filled = state
    if revision is not None and revision not in known_revisions():
        raise Refused(
            f"the target database {url.database} is at schema {revision}, which this clawgate does not know: "
            "use an empty database"
        )
    if filled:
        listed = ", ".join(f"{rows:,} in {name}" for name, rows in list(filled.items())[:4])
        listed += f", and {len(filled) - 4} more tables" if len(filled) > 4 else ""
        raise Refused(
            f"the target database {url.database} already holds clawgate rows ({listed}): migrate-storage "
            f"copies only into an empty database, and nothing was changed. To start over, drop and re-create it "
            f"(dropdb {url.database} && createdb {url.database}), or choose another database"
        )
