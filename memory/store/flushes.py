"""Flush jobs: archived messages waiting to be distilled into a daily Markdown file (DESIGN §4-5).

A job is written in the same transaction that archives its messages, so a crash between the two
cannot lose it; the gateway works through pending jobs in the background and again after a restart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.engine import Connection

from gateway.core.events import utcnow
from memory.store.db import Database
from memory.store.schema import archived_messages, session_flushes, sessions


@dataclass(frozen=True, slots=True)
class FlushJob:
    id: int
    session_id: int
    session_key: str
    first_id: int
    last_id: int
    scope: str  # user | channel
    owner: str
    day: str
    attempts: int


@dataclass(frozen=True, slots=True)
class FlushLine:
    role: str
    author: str | None
    content: str


def _job(r: Any) -> FlushJob:
    return FlushJob(r.id, r.session_id, r.key, r.first_id, r.last_id, r.scope, r.owner, r.day, r.attempts)


def _pending(conn: Connection, limit: int) -> list[FlushJob]:
    rows = conn.execute(
        select(session_flushes, sessions.c.key)
        .join(sessions, sessions.c.id == session_flushes.c.session_id)
        .where(session_flushes.c.status == "pending")
        .order_by(session_flushes.c.id)
        .limit(limit)
    ).all()
    return [_job(r) for r in rows]


def _lines(conn: Connection, job_id: int) -> list[FlushLine]:
    job = conn.execute(select(session_flushes).where(session_flushes.c.id == job_id)).one()
    rows = conn.execute(
        select(archived_messages.c.role, archived_messages.c.author, archived_messages.c.content)
        .where(
            archived_messages.c.session_id == job.session_id,
            archived_messages.c.id >= job.first_id,
            archived_messages.c.id <= job.last_id,
        )
        .order_by(archived_messages.c.id)
    ).all()
    return [FlushLine(r.role, r.author, r.content) for r in rows]


def _finish(conn: Connection, job_id: int, status: str, error: str | None) -> None:
    conn.execute(
        update(session_flushes)
        .where(session_flushes.c.id == job_id)
        .values(status=status, error=error, finished_at=utcnow(), attempts=session_flushes.c.attempts + 1)
    )


def _attempted(conn: Connection, job_id: int, error: str) -> None:
    conn.execute(
        update(session_flushes)
        .where(session_flushes.c.id == job_id)
        .values(error=error, attempts=session_flushes.c.attempts + 1)
    )


def _counts(conn: Connection) -> dict[str, int]:
    from sqlalchemy import func

    rows = conn.execute(select(session_flushes.c.status, func.count()).group_by(session_flushes.c.status)).all()
    return {str(s): int(n) for s, n in rows}


class FlushStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def pending(self, limit: int = 100) -> list[FlushJob]:
        return await self._db.read(_pending, limit)

    async def lines(self, job: FlushJob) -> list[FlushLine]:
        """The archived messages of a job, oldest first."""
        return await self._db.read(_lines, job.id)

    async def done(self, job: FlushJob, note: str | None = None) -> None:
        await self._db.write(_finish, job.id, "done", note)

    async def failed(self, job: FlushJob, error: str) -> None:
        """Given up: the messages stay in the archive, the daily file does not get them."""
        await self._db.write(_finish, job.id, "failed", error[:255])

    async def attempted(self, job: FlushJob, error: str) -> None:
        """One more failed attempt; the job stays pending."""
        await self._db.write(_attempted, job.id, error[:255])

    async def counts(self) -> dict[str, int]:
        return await self._db.read(_counts)
