"""Database engine and migrations. SQLite (WAL) by default; any SQLAlchemy async URL works."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

MIGRATIONS = Path(__file__).with_name("migrations")


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.close()


def create_engine(url: str) -> AsyncEngine:
    if url.startswith("sqlite"):
        path = url.split(":///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        # One connection: SQLite has one writer at a time anyway, and queueing in the pool is cheaper
        # and safer than several connections fighting over the lock ("database is locked" under load).
        engine = create_async_engine(
            url, connect_args={"check_same_thread": False}, pool_size=1, max_overflow=0, pool_timeout=60
        )
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    return create_async_engine(url, pool_pre_ping=True)


def _alembic_config(connection: Connection | None = None) -> Any:
    from alembic.config import Config as AlembicConfig

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def _upgrade(connection: Connection) -> None:
    from alembic import command

    command.upgrade(_alembic_config(connection), "head")


def _current(connection: Connection) -> tuple[str | None, str | None]:
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    current = MigrationContext.configure(connection).get_current_revision()
    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    return current, head


async def migrate(engine: AsyncEngine) -> None:
    """Bring the schema to the newest revision (idempotent)."""
    async with engine.begin() as conn:
        current, head = await conn.run_sync(_current)
        if current != head:
            await conn.run_sync(_upgrade)


async def schema_revision(engine: AsyncEngine) -> tuple[str | None, str | None]:
    async with engine.connect() as conn:
        return await conn.run_sync(_current)
