"""The session archive: the messages pruned from a session's context (DESIGN §4), and its reads.

ArchiveStore is what the rest of the gateway holds: search (search.py, over the terms of
fulltext.query_terms), the messages of vector hits by id, the thread around a hit, a session's
archive and counts. Every read on behalf of an asker goes through visibility.py's rules (DESIGN
§5); for_session and count take no asker. Recall calls search.search_in, visible_in and threads_in
in its own transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Integer, Select, bindparam, func, select, union_all
from sqlalchemy.engine import Connection
from sqlalchemy.sql.selectable import CompoundSelect

from memory.archive.fulltext import make_snippet, query_terms
from memory.archive.search import search_in
from memory.archive.visibility import (
    HIT_COLUMNS,
    SEARCHED_ROLES,
    ArchiveHit,
    to_hit,
    visible,
    visible_params,
    visible_sessions,
)
from memory.store.db import Database
from memory.store.schema import archived_messages, sessions

MAX_LIMIT = 50


def _for_session(conn: Connection, session_id: int, limit: int) -> list[ArchiveHit]:
    rows = conn.execute(
        select(*HIT_COLUMNS)
        .select_from(archived_messages.join(sessions, sessions.c.id == archived_messages.c.session_id))
        .where(archived_messages.c.session_id == session_id)
        .order_by(archived_messages.c.id)
        .limit(limit)
    ).all()
    return [to_hit(r, make_snippet(r.content), 0.0) for r in rows]


def _by_ids_statement(by_user: bool, by_keys: bool) -> Select[Any]:
    """Messages by id behind the visibility rules, built once per shape of asker (recall loads its
    vector hits and neighbours with it every turn; building it cost ten times running it)."""
    cached = _BY_IDS.get((by_user, by_keys))
    if cached is not None:
        return cached
    stmt: Select[Any] = (
        select(*HIT_COLUMNS)
        .select_from(archived_messages.join(sessions, sessions.c.id == archived_messages.c.session_id))
        .where(archived_messages.c.id.in_(bindparam("ids", expanding=True)), *visible(by_user, by_keys))
    )
    _BY_IDS[(by_user, by_keys)] = stmt
    return stmt


_BY_IDS: dict[tuple[bool, bool], Select[Any]] = {}


def visible_in(
    conn: Connection, ids: Sequence[int], user_id: str | None, session_keys: Sequence[str], *, snippets: bool = True
) -> list[ArchiveHit]:
    """The messages of `ids` the asker may see (ArchiveStore.visible, in a caller's transaction).
    Without `snippets` (recall reads the whole text) each hit's snippet is empty."""
    by_user, by_keys, params = visible_params(user_id, session_keys)
    rows = conn.execute(_by_ids_statement(by_user, by_keys), {**params, "ids": list(ids)}).all()
    return [to_hit(r, make_snippet(r.content) if snippets else "", 0.0) for r in rows]


class Neighbour(NamedTuple):
    """A message found next to a hit (threads_in), with what recall shows of it."""

    hit: int  # the message it was found around
    id: int
    session_key: str
    author: str | None
    content: str
    created_at: datetime


def _thread_statement(by_user: bool, by_keys: bool) -> CompoundSelect:
    # For each id, its `reach` nearest searched messages on either side, in its own session: two
    # correlated LIMIT subqueries walk ix_archived_messages_session_id_id from the id outwards, so
    # the cost does not grow with the session's length. The rows come with them (recall reads a
    # hundred a turn: one statement, not one for the ids and one for their rows), behind the same
    # rules as every other read of the archive.
    hit, near, step = archived_messages.alias("h"), archived_messages.alias("c"), archived_messages.alias("s")
    sides = []
    for before in (True, False):
        window = (
            select(step.c.id)
            .where(
                step.c.session_id == hit.c.session_id,
                step.c.role.in_(SEARCHED_ROLES),
                step.c.id < hit.c.id if before else step.c.id > hit.c.id,
            )
            .order_by(step.c.id.desc() if before else step.c.id)
            .limit(bindparam("reach", type_=Integer))
            .correlate(hit)
        )
        sides.append(
            select(
                hit.c.id.label("hit"),
                near.c.id,
                sessions.c.key.label("session_key"),
                near.c.author,
                near.c.content,
                near.c.created_at,
            )
            .select_from(hit.join(near, near.c.id.in_(window)).join(sessions, sessions.c.id == near.c.session_id))
            .where(hit.c.id.in_(bindparam("ids", expanding=True)), *visible_sessions(by_user, by_keys))
        )
    return union_all(*sides)


_THREADS = {(u, k): _thread_statement(u, k) for u in (False, True) for k in (False, True)}


def threads_in(
    conn: Connection, ids: Sequence[int], reach: int, user_id: str | None, session_keys: Sequence[str]
) -> list[Neighbour]:
    """The searched messages around each of `ids` in its session, up to `reach` on either side,
    that the asker may see (the thread a reply like "yes, last Sunday" belongs to). One statement,
    whatever `reach` is."""
    if not ids or reach < 1:
        return []
    by_user, by_keys, params = visible_params(user_id, session_keys)
    rows = conn.execute(_THREADS[(by_user, by_keys)], {**params, "ids": list(ids), "reach": reach})
    return [Neighbour._make(row) for row in rows]


def _count(conn: Connection, session_id: int | None) -> int:
    stmt = select(func.count()).select_from(archived_messages)
    if session_id is not None:
        stmt = stmt.where(archived_messages.c.session_id == session_id)
    return int(conn.execute(stmt).scalar_one())


class ArchiveStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def search(
        self, query: str, *, user_id: str | None = None, session_keys: Sequence[str] = (), limit: int = 10
    ) -> list[ArchiveHit]:
        """Archived user and assistant messages matching any word of `query`, best first.

        With `user_id` and/or `session_keys`, only the sessions that person owns or the given
        conversations; with neither, every session (the operator's view). A query with no words
        finds nothing."""
        terms = query_terms(query)
        if not terms:
            return []
        return await self._db.read(search_in, terms, user_id, tuple(session_keys), max(1, min(MAX_LIMIT, limit)))

    async def visible(
        self, ids: Sequence[int], *, user_id: str | None = None, session_keys: Sequence[str] = ()
    ) -> list[ArchiveHit]:
        """The messages of `ids` the asker may see, by the same rules as search (for vector hits).
        With neither `user_id` nor `session_keys` nothing is returned: no operator view here."""
        if not ids or (user_id is None and not session_keys):
            return []
        return await self._db.read(visible_in, tuple(ids), user_id, tuple(session_keys))

    async def for_session(self, session_id: int, limit: int = 200) -> list[ArchiveHit]:
        """The archived messages of one session, every role, oldest first (score 0)."""
        return await self._db.read(_for_session, session_id, limit)

    async def count(self, session_id: int | None = None) -> int:
        return await self._db.read(_count, session_id)
