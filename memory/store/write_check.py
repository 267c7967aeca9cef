"""Whether the storage takes writes now: the database and the data directory (memory files).

A full disk or a file system remounted read-only shows first in a person's turn, as a failed
write. Readiness asks this instead, so that a load balancer stops sending people to an instance
that cannot keep what they say, and learns when it can again: the database gets a real write (a
row per instance in `write_checks`), the data directory a small file that is synced and removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
from pathlib import Path

from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

from gateway.core.events import utcnow
from memory.store.db import Database, StorageUnwritable, unwritable_reason
from memory.store.schema import write_checks

# Enough to need a fresh block on a full file system, small enough to cost nothing.
_PROBE_BYTES = 4096


def _record(conn: Connection, instance: str) -> None:
    insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    now = utcnow()
    statement = insert(write_checks).values(instance=instance, checked_at=now)
    conn.execute(statement.on_conflict_do_update(index_elements=[write_checks.c.instance], set_={"checked_at": now}))


def write_probe(directory: Path) -> None:
    """Write a small file in `directory`, sync it and remove it; OSError when that cannot be done
    (no permission, a read-only file system, no space left)."""
    fd, name = tempfile.mkstemp(dir=directory, prefix=".clawgate-write-check-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(b"\0" * _PROBE_BYTES)
            handle.flush()
            os.fsync(handle.fileno())
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


def probe_directory(directory: Path) -> str | None:
    """None when `directory` takes a write now (see `write_probe`); else why not."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        write_probe(directory)
    except OSError as err:
        return f"{directory} cannot be written: {unwritable_reason(err) or err.strerror or type(err).__name__}"
    return None


class WriteCheck:
    """`problem()`: None while the database and `directory` take writes, else why not, in plain
    words. Asked again at most every `every` seconds (readiness may be polled often)."""

    def __init__(self, db: Database, directory: Path, instance: str, every: float = 2.0) -> None:
        self.db = db
        self.directory = directory
        self.instance = instance[:128]
        self.every = every
        self._at = -float("inf")
        self._last: str | None = None
        self._lock = asyncio.Lock()

    @property
    def last(self) -> str | None:
        """What the latest check found (None: writable), without checking again."""
        return self._last if self._last is not None else self.db.unwritable

    async def problem(self) -> str | None:
        async with self._lock:
            if time.monotonic() - self._at < self.every and self.db.unwritable is None:
                return self._last
            self._last = await self._check()
            self._at = time.monotonic()
            return self._last

    async def _check(self) -> str | None:
        try:
            await self.db.write(_record, self.instance)
        except StorageUnwritable as err:
            return f"the database cannot be written: {err.reason}"
        except Exception as err:  # unreachable database: readiness reports it as storage down
            return f"the database cannot be written: {type(err).__name__}"
        return await asyncio.to_thread(probe_directory, self.directory)
