"""Persistent chat sessions: ordered messages per session, running token totals, /new and /reset.

Active sessions are cached in memory with their recent messages, so a turn reads nothing from
the database; every change is written through before the turn goes on.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.engine import Connection

from gateway.events import utcnow
from memory.db import Database
from memory.journal import finish_in
from memory.schema import messages, sessions
from memory.tokens import estimate_tokens

# The statements of every turn's append, built once (bindparam names must differ from column names).
_ADD_MESSAGES = insert(messages)
_COUNT = (
    update(sessions)
    .where(sessions.c.id == bindparam("b_session_id"))
    .values(
        message_count=sessions.c.message_count + bindparam("b_messages"),
        token_count=sessions.c.token_count + bindparam("b_tokens"),
    )
)


@dataclass(slots=True)
class Message:
    role: str  # system | user | assistant | tool
    content: str
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    author: str | None = None
    event_id: str | None = None

    def to_llm(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = self.tool_calls
        if self.tool_call_id:
            out["tool_call_id"] = self.tool_call_id
        return out

    @property
    def tokens(self) -> int:
        extra = sum(len(str(c.get("function", {}))) for c in self.tool_calls or ()) // 4
        return estimate_tokens(self.content) + extra


@dataclass(slots=True)
class SessionState:
    id: int
    key: str
    agent: str
    user_id: str | None
    created_at: datetime
    message_count: int = 0
    token_count: int = 0
    recent: deque[Message] = field(default_factory=deque)


def _append(
    conn: Connection,
    session_id: int,
    rows: list[dict[str, Any]],
    tokens: int,
    finish_event: str | None,
    sent: tuple[str, str | None] | None,
) -> None:
    if rows:
        conn.execute(_ADD_MESSAGES, rows)
        conn.execute(_COUNT, {"b_session_id": session_id, "b_messages": len(rows), "b_tokens": tokens})
    if finish_event is not None:
        finish_in(conn, finish_event, "done", sent)


def _reply_for_event(conn: Connection, event_id: str) -> Message | None:
    row = conn.execute(
        select(messages)
        .where(messages.c.event_id == event_id, messages.c.role == "assistant")
        .order_by(messages.c.id.desc())
        .limit(1)
    ).first()
    return None if row is None else Message(role=row.role, content=row.content, event_id=row.event_id)


def _has_user_message(conn: Connection, event_id: str) -> bool:
    n = conn.execute(
        select(func.count()).select_from(messages).where(messages.c.event_id == event_id, messages.c.role == "user")
    ).scalar()
    return bool(n)


def _history(conn: Connection, key: str, limit: int) -> list[Message]:
    sid = conn.execute(
        select(sessions.c.id)
        .where(sessions.c.key == key, sessions.c.ended_at.is_(None))
        .order_by(sessions.c.id.desc())
        .limit(1)
    ).scalar()
    if sid is None:
        return []
    rows = conn.execute(
        select(messages)
        .where(messages.c.session_id == sid, messages.c.role.in_(("user", "assistant")))
        .order_by(messages.c.id.desc())
        .limit(limit)
    ).all()
    return [
        Message(role=r.role, content=r.content, author=r.author, event_id=r.event_id)
        for r in reversed(rows)
        if r.content
    ]


class SessionStore:
    def __init__(self, db: Database, history_messages: int = 40) -> None:
        self._db = db
        self._history = history_messages
        self._active: dict[str, SessionState] = {}

    async def active(self, key: str, agent: str, user_id: str | None) -> SessionState:
        state = self._active.get(key)
        if state is not None:
            return state
        state = await self._db.write(self._open, key, agent, user_id)
        self._active[key] = state
        return state

    def _open(self, conn: Connection, key: str, agent: str, user_id: str | None) -> SessionState:
        """The open session of `key` with its recent messages, or a new one."""
        row = conn.execute(
            select(sessions)
            .where(sessions.c.key == key, sessions.c.ended_at.is_(None))
            .order_by(sessions.c.id.desc())
            .limit(1)
        ).first()
        if row is None:
            return self._create(conn, key, agent, user_id)
        return SessionState(
            id=row.id,
            key=key,
            agent=row.agent,
            user_id=row.user_id,
            created_at=row.created_at,
            message_count=row.message_count,
            token_count=row.token_count,
            recent=deque(self._load_recent(conn, row.id), maxlen=self._history),
        )

    def _create(self, conn: Connection, key: str, agent: str, user_id: str | None) -> SessionState:
        now = utcnow()
        res = conn.execute(
            insert(sessions).values(
                key=key, agent=agent, user_id=user_id, created_at=now, message_count=0, token_count=0
            )
        )
        sid = res.inserted_primary_key[0] if res.inserted_primary_key else None
        assert sid is not None
        return SessionState(
            id=int(sid), key=key, agent=agent, user_id=user_id, created_at=now, recent=deque(maxlen=self._history)
        )

    def _load_recent(self, conn: Connection, session_id: int) -> list[Message]:
        rows = conn.execute(
            select(messages)
            .where(messages.c.session_id == session_id)
            .order_by(messages.c.id.desc())
            .limit(self._history)
        ).all()
        return [
            Message(
                role=r.role,
                content=r.content,
                tool_calls=r.tool_calls,
                tool_call_id=r.tool_call_id,
                author=r.author,
                event_id=r.event_id,
            )
            for r in reversed(rows)
        ]

    async def append(
        self,
        state: SessionState,
        new: list[Message],
        *,
        finish_event: str | None = None,
        sent: tuple[str, str | None] | None = None,
    ) -> None:
        """Write messages, and optionally mark their inbound event done (and, with it, the reply
        sent), in one transaction: after a crash either all of the turn is recorded or none of it."""
        now = utcnow()
        tokens = [m.tokens for m in new]
        rows = [
            {
                "session_id": state.id,
                "role": m.role,
                "content": m.content,
                "tool_calls": m.tool_calls,
                "tool_call_id": m.tool_call_id,
                "author": m.author,
                "event_id": m.event_id,
                "tokens": t,
                "created_at": now,
            }
            for m, t in zip(new, tokens, strict=True)
        ]
        await self._db.write(_append, state.id, rows, sum(tokens), finish_event, sent)
        state.recent.extend(new)
        state.message_count += len(new)
        state.token_count += sum(tokens)

    async def reset(self, key: str, agent: str, user_id: str | None) -> SessionState:
        """End the active session of `key` and start a fresh one (/new, /reset)."""
        state = await self._db.write(self._restart, key, agent, user_id)
        self._active[key] = state
        return state

    def _restart(self, conn: Connection, key: str, agent: str, user_id: str | None) -> SessionState:
        conn.execute(
            update(sessions).where(sessions.c.key == key, sessions.c.ended_at.is_(None)).values(ended_at=utcnow())
        )
        return self._create(conn, key, agent, user_id)

    async def reply_for_event(self, event_id: str) -> Message | None:
        """The assistant reply recorded for an inbound event, if the turn got that far."""
        return await self._db.read(_reply_for_event, event_id)

    async def has_user_message(self, state: SessionState, event_id: str) -> bool:
        if any(m.event_id == event_id and m.role == "user" for m in state.recent):
            return True
        return await self._db.read(_has_user_message, event_id)

    async def history(self, key: str, limit: int = 200) -> list[Message]:
        """Messages of the active session for `key`, oldest first (for the chat page and REST)."""
        return await self._db.read(_history, key, limit)
