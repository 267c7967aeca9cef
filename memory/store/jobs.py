"""The job queue (DESIGN §8): background work that survives restarts, in the database.

A job has a `kind` (what runs it), a `key` and a JSON payload. Jobs of one key run one at a time,
in the order they were queued: a job is claimable only when no earlier job of its key is still
pending or running. That is how "sequentially per session" holds with several workers, and later
with several processes on PostgreSQL, where the claim takes the row with `FOR UPDATE SKIP LOCKED`.

A claim is a lease. A worker that dies mid-job (a crash, a kill) leaves the job `running` with a
lease that runs out; the job is then claimable again, so a handler must be idempotent (write what
it writes under keys that make a second run a no-op). A failure is retried with exponential backoff
until `max_attempts`, then the job is `dead`: kept, with its last error, for `clawgate status` and
`clawgate jobs retry`. A lease that ran out counts as an attempt, so a job that kills its process
every time ends up dead too instead of crashing the gateway forever.

`dedupe` names work that must be queued once (e.g. "formation:<session>:<last message id>"):
queuing it again while it exists returns None.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, exists, func, insert, or_, select, update
from sqlalchemy.engine import Connection, Row
from sqlalchemy.exc import IntegrityError

from gateway.core.events import utcnow
from memory.store.db import Database
from memory.store.schema import jobs

PENDING, RUNNING, DONE, DEAD = "pending", "running", "done", "dead"
STATUSES = (PENDING, RUNNING, DONE, DEAD)
DEFAULT_MAX_ATTEMPTS = 5
RETRY_BASE = timedelta(seconds=30)
RETRY_CAP = timedelta(hours=1)
KEEP_DONE = timedelta(days=7)  # finished jobs stay listed this long (clawgate jobs list), then go
KEEP_DEAD = timedelta(days=30)  # dead letters wait this long for someone to look (clawgate status)
_ERROR_CHARS = 512


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    kind: str
    key: str
    payload: Mapping[str, Any]
    status: str
    attempts: int  # claims so far, this one included while it runs
    max_attempts: int
    run_after: datetime
    lease_until: datetime | None
    last_error: str | None
    result: Mapping[str, Any] | None
    created_at: datetime
    finished_at: datetime | None

    def to_json(self) -> dict[str, Any]:
        """What `clawgate jobs list --json` and the console show of a job (not its payload)."""
        return {
            "id": self.id,
            "kind": self.kind,
            "key": self.key,
            "status": self.status,
            "attempts": self.attempts,
            "max_attempts": self.max_attempts,
            "last_error": self.last_error,
            "created_at": self.created_at.isoformat(),
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
        }


def _job(row: Row[Any]) -> Job:
    return Job(
        row.id,
        row.kind,
        row.key,
        row.payload,
        row.status,
        row.attempts,
        row.max_attempts,
        row.run_after,
        row.lease_until,
        row.last_error,
        row.result,
        row.created_at,
        row.finished_at,
    )


def retry_delay(attempts: int) -> timedelta:
    """30 s after the first failure, doubling, at most an hour."""
    return min(RETRY_CAP, RETRY_BASE * 2 ** max(0, attempts - 1))


def _enqueue(
    conn: Connection,
    kind: str,
    key: str,
    payload: Mapping[str, Any],
    dedupe: str | None,
    run_after: datetime,
    max_attempts: int,
    now: datetime,
) -> int | None:
    if dedupe is not None and conn.execute(select(jobs.c.id).where(jobs.c.dedupe == dedupe)).first() is not None:
        return None
    values = {
        "kind": kind,
        "key": key,
        "payload": dict(payload),
        "status": PENDING,
        "attempts": 0,
        "max_attempts": max_attempts,
        "run_after": run_after,
        "dedupe": dedupe,
        "created_at": now,
        "updated_at": now,
    }
    key_of_row = conn.execute(insert(jobs).values(**values)).inserted_primary_key
    assert key_of_row is not None
    return int(key_of_row[0])


def _blocked() -> Any:
    """An earlier job of the same key is still to run or running."""
    earlier = jobs.alias("earlier")
    return exists().where(
        earlier.c.key == jobs.c.key, earlier.c.id < jobs.c.id, earlier.c.status.in_((PENDING, RUNNING))
    )


def _claimable(now: datetime, kinds: Collection[str] | None) -> Any:
    blocked = _blocked()
    ready = or_(
        and_(jobs.c.status == PENDING, jobs.c.run_after <= now),
        and_(jobs.c.status == RUNNING, jobs.c.lease_until < now),  # its worker died
    )
    query = select(jobs).where(ready, ~blocked).order_by(jobs.c.run_after, jobs.c.id).limit(1)
    if kinds is not None:
        query = query.where(jobs.c.kind.in_(list(kinds)))
    return query


def _claim(conn: Connection, worker: str, lease: timedelta, kinds: Collection[str] | None, now: datetime) -> Job | None:
    query = _claimable(now, kinds)
    if conn.dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True, of=jobs)
    while True:
        row = conn.execute(query).first()
        if row is None:
            return None
        if row.status == RUNNING and row.attempts >= row.max_attempts:  # died mid-job every time
            error = f"the worker stopped during the job {row.attempts} times (lease ran out)"
            conn.execute(
                update(jobs)
                .where(jobs.c.id == row.id)
                .values(status=DEAD, last_error=error, lease_until=None, updated_at=now, finished_at=now)
            )
            continue
        claimed = conn.execute(
            update(jobs)
            .where(jobs.c.id == row.id, jobs.c.status == row.status, jobs.c.attempts == row.attempts)
            .values(
                status=RUNNING,
                attempts=row.attempts + 1,
                lease_until=now + lease,
                claimed_by=worker,
                updated_at=now,
            )
        )
        if claimed.rowcount == 1:
            return _job(conn.execute(select(jobs).where(jobs.c.id == row.id)).one())


def _finish(conn: Connection, job_id: int, attempts: int, values: Mapping[str, Any]) -> bool:
    """Change a job this worker holds (same claim: status running, same attempt); False if the
    lease ran out and someone else claimed it meanwhile."""
    done = conn.execute(
        update(jobs).where(jobs.c.id == job_id, jobs.c.status == RUNNING, jobs.c.attempts == attempts).values(**values)
    )
    return done.rowcount == 1


def _counts(conn: Connection) -> dict[str, int]:
    rows = conn.execute(select(jobs.c.status, func.count()).group_by(jobs.c.status)).all()
    return {status: 0 for status in STATUSES} | {str(s): int(n) for s, n in rows}


def _list(conn: Connection, status: str | None, kind: str | None, limit: int) -> builtins.list[Job]:
    query = select(jobs).order_by(jobs.c.id.desc()).limit(limit)
    if status is not None:
        query = query.where(jobs.c.status == status)
    if kind is not None:
        query = query.where(jobs.c.kind == kind)
    return [_job(r) for r in conn.execute(query)]


def _retry(conn: Connection, job_id: int, now: datetime) -> bool:
    again = conn.execute(
        update(jobs)
        .where(jobs.c.id == job_id, jobs.c.status == DEAD)
        .values(status=PENDING, attempts=0, run_after=now, lease_until=None, finished_at=None, updated_at=now)
    )
    return again.rowcount == 1


def _next_due(conn: Connection) -> datetime | None:
    first = select(func.min(jobs.c.run_after)).where(jobs.c.status == PENDING, ~_blocked())
    pending = conn.execute(first).scalar()
    leased = conn.execute(select(func.min(jobs.c.lease_until)).where(jobs.c.status == RUNNING)).scalar()
    times = [t for t in (pending, leased) if t is not None]
    return min(times) if times else None


def _prune(conn: Connection, done_before: datetime, dead_before: datetime) -> int:
    gone = conn.execute(
        delete(jobs).where(
            or_(
                and_(jobs.c.status == DONE, jobs.c.finished_at < done_before),
                and_(jobs.c.status == DEAD, jobs.c.finished_at < dead_before),
            )
        )
    )
    return gone.rowcount


def _get(conn: Connection, job_id: int) -> Job | None:
    row = conn.execute(select(jobs).where(jobs.c.id == job_id)).first()
    return None if row is None else _job(row)


class JobStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def enqueue(
        self,
        kind: str,
        key: str,
        payload: Mapping[str, Any] | None = None,
        *,
        dedupe: str | None = None,
        run_after: datetime | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        now: datetime | None = None,
    ) -> int | None:
        """Queue a job; its id, or None when a job with the same `dedupe` already exists."""
        now = now or utcnow()
        try:
            return await self._db.write(_enqueue, kind, key, payload or {}, dedupe, run_after or now, max_attempts, now)
        except IntegrityError:  # the same dedupe queued concurrently (another process)
            if dedupe is None:
                raise
            return None

    async def claim(
        self,
        worker: str,
        lease: timedelta,
        kinds: Collection[str] | None = None,
        *,
        now: datetime | None = None,
    ) -> Job | None:
        """The next job to run (of `kinds`), leased to `worker`; None when nothing is due."""
        return await self._db.write(_claim, worker, lease, kinds, now or utcnow())

    async def done(self, job: Job, result: Mapping[str, Any] | None = None, *, now: datetime | None = None) -> bool:
        now = now or utcnow()
        values = {"status": DONE, "result": dict(result) if result else None, "lease_until": None}
        return await self._db.write(_finish, job.id, job.attempts, values | {"updated_at": now, "finished_at": now})

    async def failed(self, job: Job, error: str, *, permanent: bool = False, now: datetime | None = None) -> str:
        """Record a failed attempt: retried later (`pending`), or `dead` after the last attempt or
        when `permanent`. Returns the new status."""
        now = now or utcnow()
        dead = permanent or job.attempts >= job.max_attempts
        values: dict[str, Any] = {"last_error": error[:_ERROR_CHARS], "lease_until": None, "updated_at": now}
        if dead:
            values |= {"status": DEAD, "finished_at": now}
        else:
            values |= {"status": PENDING, "run_after": now + retry_delay(job.attempts)}
        await self._db.write(_finish, job.id, job.attempts, values)
        return DEAD if dead else PENDING

    async def extend(self, job: Job, lease: timedelta, *, now: datetime | None = None) -> bool:
        """Keep the lease of a long job; False if it was lost (another worker holds the job now)."""
        now = now or utcnow()
        return await self._db.write(_finish, job.id, job.attempts, {"lease_until": now + lease, "updated_at": now})

    async def get(self, job_id: int) -> Job | None:
        return await self._db.read(_get, job_id)

    async def counts(self) -> dict[str, int]:
        return await self._db.read(_counts)

    async def list(self, status: str | None = None, kind: str | None = None, limit: int = 50) -> builtins.list[Job]:
        """Newest first."""
        return await self._db.read(_list, status, kind, limit)

    async def retry(self, job_id: int, *, now: datetime | None = None) -> bool:
        """A dead job queued again with fresh attempts; False if it is not dead (or not there)."""
        return await self._db.write(_retry, job_id, now or utcnow())

    async def prune(self, *, now: datetime | None = None) -> int:
        """Delete jobs done more than KEEP_DONE ago and dead letters older than KEEP_DEAD; how many."""
        now = now or utcnow()
        return await self._db.write(_prune, now - KEEP_DONE, now - KEEP_DEAD)

    async def next_due(self) -> datetime | None:
        """When the next job may become claimable: the time of the first pending job that waits for
        no earlier one of its key, or a lease running out. Finishing a job can free the next of its
        key sooner; the runner wakes itself then."""
        return await self._db.read(_next_due)
