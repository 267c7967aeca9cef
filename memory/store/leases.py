"""Session leases: one turn at a time per session across gateway instances sharing a database.

Within one process an asyncio lock per key already orders turns. Several instances on one
PostgreSQL also need a claim everybody can see: a row in `session_leases` naming its holder (a
random token per acquisition) until `expires_at`. Nothing holds a database connection while a turn
runs, so a thousand busy sessions cost a thousand rows, not a thousand connections.

- Acquire: insert the row, or take it over when it is free (holder NULL) or expired: one
  `INSERT … ON CONFLICT DO UPDATE … WHERE` the database applies atomically, so two instances can
  never both succeed.
- While held, the lease is renewed every quarter of its length; an instance that dies stops renewing
  and its sessions are free again one lease length later (default 30 s).
- Waiting for a lease held by another instance polls with backoff (20 ms up to 0.5 s). Local
  waiters queue on the asyncio lock first, so only one task per key and process polls.
- Time is each instance's clock (UTC): instances need synchronised clocks (NTP) to well within a
  lease length.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import or_, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

from gateway.core.events import utcnow
from gateway.core.logs import event
from memory.store.db import Database
from memory.store.schema import session_leases

log = logging.getLogger("clawgate.leases")

FIRST_POLL = 0.02
MAX_POLL = 0.5


def _acquire(conn: Connection, key: str, holder: str, instance: str, now: datetime, until: datetime) -> bool:
    """One statement: insert the lease, or take over a free or expired one; whether it worked."""
    insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    new = insert(session_leases).values(session_key=key, holder=holder, instance=instance, expires_at=until)
    statement = new.on_conflict_do_update(
        index_elements=[session_leases.c.session_key],
        set_={"holder": holder, "instance": instance, "expires_at": until},
        where=or_(session_leases.c.holder.is_(None), session_leases.c.expires_at < now),
    )
    return conn.execute(statement).rowcount == 1


def _renew(conn: Connection, key: str, holder: str, until: datetime) -> bool:
    renewed = conn.execute(
        update(session_leases)
        .where(session_leases.c.session_key == key, session_leases.c.holder == holder)
        .values(expires_at=until)
    )
    return renewed.rowcount == 1


def _release(conn: Connection, key: str, holder: str, now: datetime) -> None:
    conn.execute(
        update(session_leases)
        .where(session_leases.c.session_key == key, session_leases.c.holder == holder)
        .values(holder=None, expires_at=now)
    )


@dataclass(slots=True)
class Lease:
    """A held lease. `lost` turns true when a renewal found another holder (this instance was too
    slow to renew): the holder should finish what it is doing and start nothing more under it."""

    key: str
    holder: str
    lost: bool = False


@dataclass(slots=True)
class _Local:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class SessionLeases:
    """Leases on session keys for this instance (`instance` names it in the table, for people)."""

    def __init__(self, db: Database, instance: str, lease_seconds: float = 30.0) -> None:
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        self._db = db
        self.instance = instance
        self.lease = timedelta(seconds=lease_seconds)
        self._local: dict[str, _Local] = {}

    async def try_acquire(self, key: str) -> str | None:
        """Take the lease on `key` now if nobody holds it; the holder token, or None."""
        holder = secrets.token_hex(16)
        now = utcnow()
        acquired = await self._db.write_statement(_acquire, key, holder, self.instance, now, now + self.lease)
        return holder if acquired else None

    async def renew(self, key: str, holder: str) -> bool:
        """Extend a held lease; False when it was lost (expired and taken by someone else)."""
        return await self._db.write_statement(_renew, key, holder, utcnow() + self.lease)

    async def release(self, key: str, holder: str) -> None:
        await self._db.write_statement(_release, key, holder, utcnow())

    @asynccontextmanager
    async def hold(self, key: str, *, wait: bool = True) -> AsyncIterator[Lease | None]:
        """Hold the lease on `key` for the block. With `wait=False` the block runs at once, given
        None when this process or another instance holds the lease."""
        local = self._local.get(key)
        if local is None:
            local = self._local[key] = _Local()
        if not wait and local.lock.locked():
            yield None
            return
        local.users += 1
        try:
            async with local.lock:
                holder = await self._wait_for(key, wait)
                if holder is None:
                    yield None
                    return
                lease = Lease(key, holder)
                renewing = asyncio.create_task(self._keep(lease), name=f"lease:{key}")
                try:
                    yield lease
                finally:
                    renewing.cancel()
                    await asyncio.gather(renewing, return_exceptions=True)
                    await asyncio.shield(self.release(key, holder))
        finally:
            local.users -= 1
            if local.users == 0 and self._local.get(key) is local:
                del self._local[key]

    def waiting(self, key: str) -> int:
        """How many tasks of this process hold or wait for `key`."""
        local = self._local.get(key)
        return local.users if local is not None else 0

    async def _wait_for(self, key: str, wait: bool) -> str | None:
        delay = FIRST_POLL
        waited = False
        while True:
            holder = await self.try_acquire(key)
            if holder is not None or not wait:
                if waited:
                    event(log, "session_lease_waited", logging.DEBUG, session=key)
                return holder
            waited = True
            await asyncio.sleep(delay)
            delay = min(MAX_POLL, delay * 1.5)

    async def _keep(self, lease: Lease) -> None:
        period = self.lease.total_seconds() / 4
        while True:
            await asyncio.sleep(period)
            try:
                kept = await self.renew(lease.key, lease.holder)
            except Exception as exc:  # the database is away: try again next period
                event(log, "session_lease_renew_failed", logging.WARNING, session=lease.key, error=type(exc).__name__)
                continue
            if not kept:
                # Another instance took it after it expired: say so loudly; the holder stops.
                lease.lost = True
                event(log, "session_lease_lost", logging.ERROR, session=lease.key)
                return
