"""Persistent chat sessions: ordered messages per session, running token totals, /new and /reset.

Active sessions are cached in memory with their recent messages, so a turn reads nothing from
the database; every change is written through before the turn goes on.

Secrets at rest (DESIGN §11): a message is redacted as it is stored (every role, tool-call
arguments included), and the session's cached context holds the stored copy, so later turns, the
summary and the archive (filled from these rows only) never see the original. The live turn's own
request was built before, from what the person typed: the model may answer about the key just
pasted. The turn's journaled event is finished in the same transaction, its text redacted too.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, case, delete, func, insert, literal, or_, select, union_all, update
from sqlalchemy.engine import Connection

from gateway.core.events import GATEWAY_AUTHOR, utcnow
from memory.store.db import Database
from memory.store.platforms.journal import finish_in
from memory.store.schema import UTCDateTime, archived_messages, messages, session_flushes, sessions
from memory.tokens import estimate_tokens
from memory.trust.redact import redact
from memory.trust.redact.tool_calls import redact_tool_calls

# The statements of every turn's append, built once (bindparam names must differ from column names).
_ADD_MESSAGES = insert(messages).returning(messages.c.id, sort_by_parameter_order=True)
_COUNT = (
    update(sessions)
    .where(sessions.c.id == bindparam("b_session_id"))
    .values(
        message_count=sessions.c.message_count + bindparam("b_messages"),
        token_count=sessions.c.token_count + bindparam("b_tokens"),
    )
)
_MESSAGE_COLUMNS = ("id", "session_id", "role", "content", "tool_calls", "tool_call_id", "author", "event_id")
# Messages kept aside in a session: stored with it and shown in its history (a chat command and its
# answer on the chat page), but outside its context: not in `SessionState.recent` (so never in a
# prompt or a summary), not counted in its messages or tokens.
ASIDE_AUTHOR = f"{GATEWAY_AUTHOR}aside:"


def kept_aside(author: str | None) -> bool:
    return author is not None and author.startswith(ASIDE_AUTHOR)


@dataclass(slots=True)
class Message:
    role: str  # system | user | assistant | tool
    content: str
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    author: str | None = None
    event_id: str | None = None
    id: int | None = None  # set once stored
    tokens: int = -1  # estimated once, at creation (DESIGN §4)

    def __post_init__(self) -> None:
        if self.tokens < 0:
            extra = sum(len(str(c.get("function", {}))) for c in self.tool_calls or ()) // 4
            self.tokens = estimate_tokens(self.content) + extra

    def to_llm(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = self.tool_calls
        if self.tool_call_id:
            out["tool_call_id"] = self.tool_call_id
        return out


def stored_copy(message: Message, secrets: Sequence[str]) -> Message:
    """`message` as it may be stored: itself when nothing in it is secret-like, else a redacted copy
    whose token estimate is that of the stored text (the session's totals add up the rows)."""
    content = redact(message.content, secrets) if message.content else message.content
    calls = redact_tool_calls(message.tool_calls, secrets)
    if content == message.content and calls is message.tool_calls:
        return message
    return Message(
        role=message.role,
        content=content,
        tool_calls=calls,
        tool_call_id=message.tool_call_id,
        author=message.author,
        event_id=message.event_id,
    )


@dataclass(slots=True)
class SessionState:
    """An open session as the gateway holds it: its active context (every message not archived,
    oldest first) with running totals, and the rolling summary of what was archived."""

    id: int
    key: str
    agent: str
    user_id: str | None
    created_at: datetime
    message_count: int = 0
    token_count: int = 0
    recent: deque[Message] = field(default_factory=deque)
    summary: str | None = None
    summary_tokens: int = 0
    summaries: int = 0
    last_flush_at: datetime | None = None
    audience: str = "personal"


@dataclass(frozen=True, slots=True)
class FlushRequest:
    """Distil what is archived into a daily file: the user's (scope "user") or the conversation's."""

    scope: str  # user | channel
    owner: str
    day: str  # YYYY-MM-DD in the configured time zone


@dataclass(frozen=True, slots=True)
class Archived:
    count: int
    tokens: int
    first_id: int | None
    last_id: int | None
    flush_id: int | None = None


def _message(r: Any) -> Message:
    return Message(
        role=r.role,
        content=r.content,
        tool_calls=r.tool_calls,
        tool_call_id=r.tool_call_id,
        author=r.author,
        event_id=r.event_id,
        id=r.id,
        tokens=r.tokens,
    )


def _append(
    conn: Connection,
    session_id: int,
    rows: list[dict[str, Any]],
    tokens: int,
    finish_event: str | None,
    sent: tuple[str, str | None] | None,
    scrub: Callable[[str], str] | None,
    counted: int,
) -> list[int]:
    ids: list[int] = []
    if rows:
        ids = list(conn.execute(_ADD_MESSAGES, rows).scalars())
        conn.execute(_COUNT, {"b_session_id": session_id, "b_messages": counted, "b_tokens": tokens})
    if finish_event is not None:
        finish_in(conn, finish_event, "done", sent, scrub=scrub)
    return ids


def _archive(
    conn: Connection,
    session_id: int,
    through_id: int | None,
    reason: str,
    summary: tuple[str, int] | None,
    flush: FlushRequest | None,
    only_if_open: bool,
) -> Archived | None:
    """Move the session's active messages with id <= through_id (all when None) to the archive, in
    one transaction with the new summary and the flush job, if any. None when the session has ended
    meanwhile (a /new raced a background summary) and `only_if_open`, or when a summary's messages
    were archived meanwhile by another instance (its summary, of the same messages, stands)."""
    # The session's row is locked first (PostgreSQL; SQLite has one writer anyway): two instances
    # compacting one session take turns, and the second finds the messages already moved instead
    # of failing on their ids in the archive.
    ended = conn.execute(select(sessions.c.ended_at).where(sessions.c.id == session_id).with_for_update()).first()
    if only_if_open and (ended is None or ended.ended_at is not None):
        return None
    where = [messages.c.session_id == session_id]
    if through_id is not None:
        where.append(messages.c.id <= through_id)
    aside = messages.c.author.startswith(ASIDE_AUTHOR, autoescape=True)
    stats = conn.execute(
        select(
            func.count(case((aside, None), else_=literal(1))),  # kept-aside messages were never counted
            func.coalesce(func.sum(case((aside, 0), else_=messages.c.tokens)), 0),
            func.min(messages.c.id),
            func.max(messages.c.id),
        ).where(*where)
    ).one()
    count, tokens, first_id, last_id = int(stats[0]), int(stats[1]), stats[2], stats[3]
    if summary is not None and not count:
        return None
    now = utcnow()
    if count:
        columns = [*_MESSAGE_COLUMNS, "tokens", "created_at"]
        conn.execute(
            insert(archived_messages).from_select(
                [*columns, "archived_at", "reason"],
                select(
                    *(messages.c[c] for c in columns),
                    literal(now, UTCDateTime),
                    literal(reason),
                ).where(*where),
            )
        )
        conn.execute(delete(messages).where(*where))
    values: dict[str, Any] = {
        "message_count": sessions.c.message_count - count,
        "token_count": sessions.c.token_count - tokens,
    }
    if summary is not None:
        values.update(summary=summary[0], summary_tokens=summary[1], summaries=sessions.c.summaries + 1)
    flush_id = None
    if flush is not None and count:
        values["last_flush_at"] = now
        inserted = conn.execute(
            insert(session_flushes).values(
                session_id=session_id,
                first_id=first_id,
                last_id=last_id,
                scope=flush.scope,
                owner=flush.owner,
                day=flush.day,
                status="pending",
                attempts=0,
                created_at=now,
            )
        ).inserted_primary_key
        flush_id = int(inserted[0]) if inserted else None
    conn.execute(update(sessions).where(sessions.c.id == session_id).values(**values))
    return Archived(count, tokens, first_id, last_id, flush_id)


def _both(*columns: str) -> Any:
    """Active and archived messages as one selectable (a turn's rows may have been archived since)."""
    return union_all(
        select(*(messages.c[c] for c in columns)), select(*(archived_messages.c[c] for c in columns))
    ).subquery()


def _reply_for_event(conn: Connection, event_id: str) -> Message | None:
    both = _both("id", "role", "content", "event_id")
    row = conn.execute(
        select(both).where(both.c.event_id == event_id, both.c.role == "assistant").order_by(both.c.id.desc()).limit(1)
    ).first()
    return None if row is None else Message(role=row.role, content=row.content, event_id=row.event_id)


def _has_user_message(conn: Connection, event_id: str) -> bool:
    both = _both("role", "event_id")
    n = conn.execute(
        select(func.count()).select_from(both).where(both.c.event_id == event_id, both.c.role == "user")
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
    # What the person saw, archived or not: summaries shorten the model's context, not the page.
    both = _both("id", "session_id", "role", "content", "author", "event_id")
    rows = conn.execute(
        select(both)
        .where(both.c.session_id == sid, both.c.role.in_(("user", "assistant")))
        .order_by(both.c.id.desc())
        .limit(limit)
    ).all()
    return [
        Message(role=r.role, content=r.content, author=r.author, event_id=r.event_id, id=r.id)
        for r in reversed(rows)
        if r.content
    ]


@dataclass(frozen=True, slots=True)
class Thread:
    """An open session under a chat's key (`<chat key>` or `<chat key>:<thread>`), for a list to pick from."""

    key: str
    title: str  # the first thing a person said in it (a command when that is all), "" when nothing yet
    updated_at: datetime


def _threads(conn: Connection, base: str, limit: int) -> list[Thread]:
    latest = select(func.max(messages.c.created_at)).where(messages.c.session_id == sessions.c.id).scalar_subquery()
    found = list(
        conn.execute(
            select(sessions.c.id, sessions.c.key, sessions.c.created_at, latest.label("latest")).where(
                sessions.c.ended_at.is_(None),
                or_(sessions.c.key == base, sessions.c.key.startswith(base + ":", autoescape=True)),
            )
        ).all()
    )
    found.sort(key=lambda r: (r.latest or r.created_at, r.id), reverse=True)
    both = _both("id", "session_id", "role", "content", "author")
    gateway_said = case((both.c.author.startswith(GATEWAY_AUTHOR, autoescape=True), 1), else_=0)
    out = []
    for r in found[:limit]:
        title = conn.execute(
            select(both.c.content)
            .where(both.c.session_id == r.id, both.c.role == "user")
            .order_by(gateway_said, both.c.id)
            .limit(1)
        ).scalar()
        out.append(Thread(r.key, title or "", r.latest or r.created_at))
    return out


def _newer(conn: Connection, state: SessionState) -> tuple[list[Message], int] | None:
    """What another instance appended to a cached session since: its new messages, oldest first
    ([] when nothing changed), with the session's token count; or None when the session changed
    otherwise (ended, pruned, summarized, another audience) and must be read again whole."""
    row = conn.execute(
        select(sessions.c.ended_at, sessions.c.message_count, sessions.c.token_count, sessions.c.summaries)
        .add_columns(sessions.c.audience)
        .where(sessions.c.id == state.id)
    ).first()
    if row is None or row.ended_at is not None or int(row.summaries or 0) != state.summaries:
        return None
    if row.audience != state.audience:
        return None
    last = state.recent[-1].id if state.recent else 0
    rows = conn.execute(
        select(messages).where(messages.c.session_id == state.id, messages.c.id > (last or 0)).order_by(messages.c.id)
    ).all()
    fresh = [_message(r) for r in rows if not kept_aside(r.author)]
    if int(row.message_count) != state.message_count + len(fresh):
        return None  # some went too (pruned without a summary): read it again whole
    return fresh, int(row.token_count)


class SessionStore:
    def __init__(self, db: Database, secrets: Sequence[str] = ()) -> None:
        self._db = db
        self._secrets = secrets  # the gateway's configured secrets: a reload extends the list in place
        self._active: dict[str, SessionState] = {}

    async def caught_up(self, state: SessionState) -> bool:
        """Bring a cached session up to what the database holds, when other instances share it: the
        messages they appended are added (the usual case: they answered the last turn); False when
        it changed otherwise and must be read again whole."""
        found = await self._db.read(_newer, state)
        if found is None:
            return False
        newer, state.token_count = found
        state.recent.extend(newer)
        state.message_count += len(newer)
        return True

    async def active(self, key: str, agent: str, user_id: str | None, audience: str | None = None) -> SessionState:
        """The open session of `key` (created when there is none). `audience`, when given, is
        recorded on the session (it decides what may be flushed and found later)."""
        state = self._active.get(key)
        if state is not None and self._db.shared and not await self.caught_up(state):
            state = None
        if state is None:
            state = await self._db.write(self._open, key, agent, user_id, audience or "personal")
            self._active[key] = state
        if audience is not None and audience != state.audience:
            await self._db.write(_set_audience, state.id, audience)
            state.audience = audience
        return state

    def _open(self, conn: Connection, key: str, agent: str, user_id: str | None, audience: str) -> SessionState:
        """The open session of `key` with its whole active context, or a new one."""
        row = conn.execute(
            select(sessions)
            .where(sessions.c.key == key, sessions.c.ended_at.is_(None))
            .order_by(sessions.c.id.desc())
            .limit(1)
        ).first()
        if row is None:
            return self._create(conn, key, agent, user_id, audience)
        rows = conn.execute(select(messages).where(messages.c.session_id == row.id).order_by(messages.c.id)).all()
        return SessionState(
            id=row.id,
            key=key,
            agent=row.agent,
            user_id=row.user_id,
            created_at=row.created_at,
            message_count=row.message_count,
            token_count=row.token_count,
            recent=deque(_message(r) for r in rows if not kept_aside(r.author)),
            summary=row.summary,
            summary_tokens=row.summary_tokens,
            summaries=row.summaries,
            last_flush_at=row.last_flush_at,
            audience=row.audience,
        )

    @staticmethod
    def _create(conn: Connection, key: str, agent: str, user_id: str | None, audience: str) -> SessionState:
        now = utcnow()
        res = conn.execute(
            insert(sessions).values(
                key=key,
                agent=agent,
                user_id=user_id,
                created_at=now,
                message_count=0,
                token_count=0,
                audience=audience,
            )
        )
        sid = res.inserted_primary_key[0] if res.inserted_primary_key else None
        assert sid is not None
        return SessionState(id=int(sid), key=key, agent=agent, user_id=user_id, created_at=now, audience=audience)

    async def append(
        self,
        state: SessionState,
        new: list[Message],
        *,
        finish_event: str | None = None,
        sent: tuple[str, str | None] | None = None,
    ) -> None:
        """Write messages, and optionally mark their inbound event done (and, with it, the reply
        sent), in one transaction: after a crash either all of the turn is recorded or none of it.

        What is stored, and what `state.recent` keeps, are redacted copies (`stored_copy`); the
        messages given keep their text and get their ids."""
        now = utcnow()
        kept = [stored_copy(m, self._secrets) for m in new]
        rows = [
            {
                "session_id": state.id,
                "role": m.role,
                "content": m.content,
                "tool_calls": m.tool_calls,
                "tool_call_id": m.tool_call_id,
                "author": m.author,
                "event_id": m.event_id,
                "tokens": m.tokens,
                "created_at": now,
            }
            for m in kept
        ]
        context = [m for m in kept if not kept_aside(m.author)]
        tokens = sum(m.tokens for m in context)
        scrub = self._journal_scrub(new, kept, finish_event) if finish_event is not None else None
        ids = await self._db.write(_append, state.id, rows, tokens, finish_event, sent, scrub, len(context))
        for m, k, mid in zip(new, kept, ids, strict=True):
            m.id = k.id = mid
        state.recent.extend(context)
        state.message_count += len(context)
        state.token_count += tokens

    def _journal_scrub(self, new: list[Message], kept: list[Message], event_id: str) -> Callable[[str], str] | None:
        """How the finished event's journaled text is redacted. A turn's user message is its event's
        text (gateway/turn/router.py), just redacted above: unchanged, the journal needs no rewrite; changed,
        it gets that result. Without the event's user message here the journal redacts on its own."""
        for m, k in zip(new, kept, strict=True):
            if m.role == "user" and m.event_id == event_id:
                if k is m:
                    return None
                original, hidden = m.content, k.content
                secrets = self._secrets
                return lambda text: hidden if text == original else redact(text, secrets)
        secrets = self._secrets
        return lambda text: redact(text, secrets)

    async def archive(
        self,
        state: SessionState,
        through_id: int,
        reason: str,
        *,
        summary: str | None = None,
        summary_tokens: int = 0,
        flush: FlushRequest | None = None,
    ) -> Archived | None:
        """Prune the active messages up to `through_id` into the archive (with the new rolling
        summary, and a flush job, when given). Safe next to a turn appending to the same session:
        only the oldest messages move. None when the session ended meanwhile."""
        if summary is not None:
            # Made from redacted messages, but stored and shown to every later request: checked too.
            hidden = redact(summary, self._secrets)
            if hidden != summary:
                summary, summary_tokens = hidden, estimate_tokens(hidden)
        done = await self._db.write(
            _archive,
            state.id,
            through_id,
            reason,
            (summary, summary_tokens) if summary is not None else None,
            flush,
            True,
        )
        if done is None:
            return None
        while state.recent and state.recent[0].id is not None and state.recent[0].id <= through_id:
            state.recent.popleft()
        state.message_count -= done.count
        state.token_count -= done.tokens
        if summary is not None:
            state.summary, state.summary_tokens = summary, summary_tokens
            state.summaries += 1
        if done.flush_id is not None:
            state.last_flush_at = utcnow()
        return done

    async def reset(
        self,
        key: str,
        agent: str,
        user_id: str | None,
        *,
        keep: bool = True,
        flush: FlushRequest | None = None,
    ) -> tuple[SessionState, Archived | None]:
        """End the active session of `key` and start a fresh one (/new, /reset).

        keep: the cleared transcript is archived (and flushed, when `flush` is given); otherwise it is
        marked to stay out of memory for good (memory.session_memory.enabled false).
        """
        old = self._active.get(key)
        audience = old.audience if old is not None else "personal"
        state, archived = await self._db.write(self._restart, key, agent, user_id, audience, keep, flush)
        self._active[key] = state
        return state, archived

    def _restart(
        self,
        conn: Connection,
        key: str,
        agent: str,
        user_id: str | None,
        audience: str,
        keep: bool,
        flush: FlushRequest | None,
    ) -> tuple[SessionState, Archived | None]:
        archived = None
        open_ids = conn.execute(
            select(sessions.c.id).where(sessions.c.key == key, sessions.c.ended_at.is_(None))
        ).scalars()
        for sid in list(open_ids):
            if keep:
                archived = _archive(conn, sid, None, "reset", None, flush, False)
            else:
                conn.execute(update(sessions).where(sessions.c.id == sid).values(memory_excluded=True))
            conn.execute(update(sessions).where(sessions.c.id == sid).values(ended_at=utcnow()))
        return self._create(conn, key, agent, user_id, audience), archived

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

    async def threads(self, base: str, limit: int = 50) -> list[Thread]:
        """The open sessions of the chat whose session key is `base` (its threads too), most
        recently written first: the chat page's list of a person's conversations."""
        return await self._db.read(_threads, base, limit)


def _set_audience(conn: Connection, session_id: int, audience: str) -> None:
    conn.execute(update(sessions).where(sessions.c.id == session_id).values(audience=audience))
