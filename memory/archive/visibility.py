"""What an asker may see of the session archive, and the ArchiveHit every read of it returns.

Privacy (DESIGN §5): a person sees the archive of their own sessions and of the conversation they
are in, never another person's; sessions kept out of memory and public conversations are never
returned, not even to the operator. Only user and assistant messages are searched or shown to
an asker.

Apart from search.py and store.py so that both apply these rules, and build hits, from one place
without importing each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, bindparam, false, or_
from sqlalchemy.engine import Row

from memory.store.schema import archived_messages, sessions

SEARCHED_ROLES = ("user", "assistant")
HIT_COLUMNS = (
    archived_messages.c.id,
    archived_messages.c.session_id,
    sessions.c.key,
    sessions.c.user_id,
    archived_messages.c.role,
    archived_messages.c.author,
    archived_messages.c.content,
    archived_messages.c.created_at,
    archived_messages.c.archived_at,
)


@dataclass(frozen=True, slots=True)
class ArchiveHit:
    id: int
    session_id: int
    session_key: str
    user_id: str | None  # the session's owner
    role: str
    author: str | None
    content: str
    snippet: str  # at most fulltext.SNIPPET_CHARS, around the first match, "…" where cut
    created_at: datetime
    archived_at: datetime
    score: float  # higher is better; only comparable within one search


def visible(by_user: bool, by_keys: bool) -> list[ColumnElement[bool]]:
    """Filters for what the asker may see (see the module docstring), the asker bound as parameters
    (`visible_params`): with neither a user nor keys, every session (the operator's view)."""
    return [archived_messages.c.role.in_(SEARCHED_ROLES), *visible_sessions(by_user, by_keys)]


def visible_sessions(by_user: bool, by_keys: bool) -> list[ColumnElement[bool]]:
    """The sessions part of visible: which sessions' messages the asker may see."""
    rules: list[ColumnElement[bool]] = [sessions.c.memory_excluded.is_(false()), sessions.c.audience != "public"]
    mine: list[ColumnElement[bool]] = []
    if by_user:
        mine.append(sessions.c.user_id == bindparam("v_user"))
    if by_keys:
        mine.append(sessions.c.key.in_(bindparam("v_keys", expanding=True)))
    if mine:
        rules.append(or_(*mine))
    return rules


def visible_params(user_id: str | None, session_keys: Sequence[str]) -> tuple[bool, bool, dict[str, Any]]:
    params: dict[str, Any] = {}
    if user_id is not None:
        params["v_user"] = user_id
    if session_keys:
        params["v_keys"] = list(session_keys)
    return user_id is not None, bool(session_keys), params


def to_hit(row: Row[*tuple[Any, ...]], snippet: str, score: float) -> ArchiveHit:
    return ArchiveHit(
        id=row.id,
        session_id=row.session_id,
        session_key=row.key,
        user_id=row.user_id,
        role=row.role,
        author=row.author,
        content=row.content,
        snippet=snippet,
        created_at=row.created_at,
        archived_at=row.archived_at,
        score=score,
    )
