"""Web console sign-ins (docs/console.md): a browser that signed in with a user's token holds a random
session id in an HttpOnly cookie. Only the id's digest is stored, so a copy of the database signs
nobody in; each session has its own CSRF token for the forms it posts."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, insert, select
from sqlalchemy.engine import Connection

from gateway.core.events import utcnow
from memory.store.db import Database
from memory.store.schema import console_sessions

SESSION_TTL = timedelta(hours=12)


def digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class ConsoleSession:
    user_id: str
    token_digest: str  # of the token the person signed in with: the session ends when it leaves config
    csrf: str
    expires_at: datetime


def _create(conn: Connection, id_digest: str, session: ConsoleSession, now: datetime) -> None:
    conn.execute(delete(console_sessions).where(console_sessions.c.expires_at <= now))
    conn.execute(
        insert(console_sessions).values(
            id_digest=id_digest,
            user_id=session.user_id,
            token_digest=session.token_digest,
            csrf=session.csrf,
            created_at=now,
            expires_at=session.expires_at,
        )
    )


def _get(conn: Connection, id_digest: str, now: datetime) -> ConsoleSession | None:
    row = conn.execute(
        select(console_sessions).where(console_sessions.c.id_digest == id_digest, console_sessions.c.expires_at > now)
    ).first()
    return None if row is None else ConsoleSession(row.user_id, row.token_digest, row.csrf, row.expires_at)


def _delete(conn: Connection, id_digest: str) -> bool:
    return bool(conn.execute(delete(console_sessions).where(console_sessions.c.id_digest == id_digest)).rowcount)


class ConsoleSessionStore:
    def __init__(self, db: Database, ttl: timedelta = SESSION_TTL) -> None:
        self._db = db
        self.ttl = ttl

    async def create(
        self, user_id: str, token_digest: str, *, now: datetime | None = None
    ) -> tuple[str, ConsoleSession]:
        """A new session: (the cookie value, the session). Expired sessions are swept meanwhile."""
        now = now or utcnow()
        session_id = secrets.token_urlsafe(32)
        session = ConsoleSession(user_id, token_digest, secrets.token_urlsafe(32), now + self.ttl)
        await self._db.write(_create, digest(session_id), session, now)
        return session_id, session

    async def get(self, session_id: str, *, now: datetime | None = None) -> ConsoleSession | None:
        if not session_id or len(session_id) > 128:
            return None
        return await self._db.read(_get, digest(session_id), now or utcnow())

    async def delete(self, session_id: str) -> bool:
        return await self._db.write(_delete, digest(session_id))
