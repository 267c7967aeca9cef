"""What an item is and which items are searchable: the vocabulary shared by the stored vectors
(memory.embed.vectors) and the database search over them (memory.embed.pgvector).

Items are long-term records (`record`: active, unexpired, not trace; id mem-…), archived user and
assistant messages of sessions that may be searched (`archive`: the message id as text) and
daily-file chunks (`daily`: the chunk id as text). `source` says, per kind, which rows those are:
the store keeps vectors of exactly these, and the search in the database filters by the same rule.
Apart from both because each needs it and the store calls the search: kept in either, it would
tie the two into a circle.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, get_args

import numpy as np
import numpy.typing as npt
from sqlalchemy import ColumnElement, String, cast, false, or_

from memory.records.model import MemoryClass, RecordStatus
from memory.store.schema import archived_messages, daily_chunks, memory_records, sessions, unindexed

ItemKind = Literal["record", "archive", "daily"]
KINDS: tuple[ItemKind, ...] = get_args(ItemKind)
ItemKey = tuple[str, str]  # (kind, item id)
Vector = npt.NDArray[np.float32]

CHUNK = 500  # ids per IN (...)
_SEARCHED_ROLES = ("user", "assistant")

_KIND_OF: dict[str, ItemKind] = {k: k for k in KINDS}


def item_kind(kind: str) -> ItemKind:
    try:
        return _KIND_OF[kind]
    except KeyError:
        raise ValueError(f"unknown item kind {kind!r}: one of {', '.join(KINDS)}") from None


def source(
    kind: ItemKind, now: datetime | ColumnElement[datetime]
) -> tuple[ColumnElement[Any], ColumnElement[Any], list[Any], Any]:
    """(item id as text, sort key, where-clauses, from-clause) of the searchable items of `kind`."""
    if kind == "record":
        r = memory_records.c
        # Each kind is read by its key (a page after a cursor, or a batch of ids): no other index.
        expires = unindexed(r.expires_at)
        where = [
            unindexed(r.status) == RecordStatus.ACTIVE.value,
            r.memory_class != MemoryClass.TRACE.value,
            r.content != "",
            or_(expires.is_(None), expires > now),
        ]
        return r.id, r.id, where, memory_records
    if kind == "archive":
        a = archived_messages.c
        where = [
            a.role.in_(_SEARCHED_ROLES),
            sessions.c.memory_excluded.is_(false()),  # never searched: nothing derived from them either
            sessions.c.audience != "public",
        ]
        joined = archived_messages.join(sessions, sessions.c.id == a.session_id)
        return cast(a.id, String), a.id, where, joined
    return cast(daily_chunks.c.id, String), daily_chunks.c.id, [], daily_chunks
