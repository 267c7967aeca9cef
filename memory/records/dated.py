"""The records recall may find that were created in a window of time (docs/recall.md, "Time in
questions"): "what did I note in May" looks at May's records even when its words are not theirs.

The same rules as the full-text leg (memory.records.search: active, unexpired, not a trace, never
formed in a public conversation, only the scopes asked), on the (status, created_at) index; the
caller's loader then applies the whole read policy, as to any other candidate.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.engine import Connection

from memory.records.search import SEARCHABLE, searchable_params
from memory.store.schema import memory_records


def created_in(
    conn: Connection,
    scopes: Sequence[str],
    include_projects: bool,
    start: datetime | None,
    end: datetime,
    limit: int,
    now: datetime,
) -> list[str]:
    """The ids of at most `limit` searchable records created in [start, end) (start None: any time
    before `end`), newest first."""
    if not scopes and not include_projects:
        return []
    where = [*SEARCHABLE, memory_records.c.created_at < end]
    if start is not None:
        where.append(memory_records.c.created_at >= start)
    stmt = (
        select(memory_records.c.id)
        .where(*where)
        .order_by(memory_records.c.created_at.desc(), memory_records.c.seq.desc())
        .limit(limit)
    )
    return list(conn.execute(stmt, searchable_params(scopes, include_projects, now)).scalars())
