"""The reads of memory records other than search: one record by id (also locked, for a change), many
by ids (get_many_in: recall loads its candidates in its own transaction), a page of the console's
list or browser and how many match in all (listing, Browse), one scope's texts, and the active records
that background work goes through.

Apart from the store, whose own module is its write path; search builds on the condition here of
what has not expired (unexpired).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, bindparam, func, or_, select
from sqlalchemy.engine import Connection

from memory.records.model import MemoryClass, MemoryRecord, Provenance, RecordStatus, ReviewStatus, Scope, ScopeKind
from memory.records.rows import record_of
from memory.store.schema import memory_records

_CHUNK = 500  # ids per IN (...) in get_many

# The hot statements, built once so that a call only binds parameters (building a select costs more
# than running it); bindparam names must differ from column names.
_GET = select(memory_records).where(memory_records.c.id == bindparam("b_id"))
_GET_LIVE = _GET.where(memory_records.c.status != RecordStatus.DELETED.value)
_GET_FOR_UPDATE = _GET.with_for_update()  # PostgreSQL; SQLite has one writer anyway
_GET_MANY = select(memory_records).where(memory_records.c.id.in_(bindparam("b_ids", expanding=True)))
_GET_MANY_LIVE = _GET_MANY.where(memory_records.c.status != RecordStatus.DELETED.value)


def load(conn: Connection, record_id: str, include_deleted: bool, for_update: bool = False) -> MemoryRecord | None:
    stmt = _GET_FOR_UPDATE if for_update else _GET if include_deleted else _GET_LIVE
    row = conn.execute(stmt, {"b_id": record_id}).first()
    return None if row is None else record_of(row)


def get_many_in(conn: Connection, ids: Sequence[str], include_deleted: bool) -> list[MemoryRecord]:
    """The records of `ids` that exist, in the order asked (RecordStore.get_many, in a caller's transaction)."""
    found: dict[str, MemoryRecord] = {}
    stmt = _GET_MANY if include_deleted else _GET_MANY_LIVE
    for start in range(0, len(ids), _CHUNK):
        for row in conn.execute(stmt, {"b_ids": list(ids[start : start + _CHUNK])}):
            found[row.id] = record_of(row)
    return [found[i] for i in ids if i in found]


def unexpired(now: datetime) -> ColumnElement[bool]:
    return or_(memory_records.c.expires_at.is_(None), memory_records.c.expires_at > now)


def listing(
    scopes: Sequence[str] | None, review_status: ReviewStatus | None, status: RecordStatus | None
) -> list[ColumnElement[bool]]:
    where: list[ColumnElement[bool]] = []
    if scopes is not None:
        where.append(memory_records.c.scope.in_([str(s) for s in scopes]))
    if review_status is not None:
        where.append(memory_records.c.review_status == ReviewStatus(review_status).value)
    if status is None:
        where.append(memory_records.c.status != RecordStatus.DELETED.value)
    else:
        where.append(memory_records.c.status == RecordStatus(status).value)
    return where


@dataclass(frozen=True, slots=True)
class Browse:
    """What the console's memory browser narrows to, beside the scopes and statuses list() takes."""

    personal_of: str | None  # every personal scope but this user's is left out (None: all are)
    channels: bool = True  # conversations' memory too (administrators)
    scope: Scope | None = None  # exactly this one
    scope_kind: ScopeKind | None = None
    memory_class: MemoryClass | None = None
    provenance: Provenance | None = None
    expires_before: datetime | None = None  # "expiring soon"

    def where(self) -> list[ColumnElement[bool]]:
        c = memory_records.c
        own = f"{ScopeKind.PERSONAL.value}:{self.personal_of}" if self.personal_of is not None else None
        where = [or_(c.scope_kind != ScopeKind.PERSONAL.value, c.scope == own)]
        if not self.channels:
            where.append(c.scope_kind != ScopeKind.CHANNEL.value)
        if self.scope is not None:
            where.append(c.scope == str(self.scope))
        if self.scope_kind is not None:
            where.append(c.scope_kind == ScopeKind(self.scope_kind).value)
        if self.memory_class is not None:
            where.append(c.memory_class == MemoryClass(self.memory_class).value)
        if self.provenance is not None:
            where.append(c.provenance == Provenance(self.provenance).value)
        if self.expires_before is not None:
            where.append(c.expires_at.is_not(None))
            where.append(c.expires_at <= self.expires_before)
        return where


def list_where(conn: Connection, where: Sequence[ColumnElement[bool]], limit: int, offset: int) -> list[MemoryRecord]:
    rows = conn.execute(
        select(memory_records)
        .where(*where)
        .order_by(memory_records.c.created_at.desc(), memory_records.c.seq.desc())
        .limit(limit)
        .offset(offset)
    ).all()
    return [record_of(r) for r in rows]


def scope_texts(conn: Connection, scope: str, limit: int, now: datetime) -> list[tuple[str, str | None]]:
    rows = conn.execute(
        select(memory_records.c.content, memory_records.c.attribution)
        .where(
            memory_records.c.scope == scope,
            memory_records.c.status == RecordStatus.ACTIVE.value,
            unexpired(now),
        )
        .order_by(memory_records.c.created_at.desc(), memory_records.c.seq.desc())
        .limit(limit)
    ).all()
    return [(r.content, r.attribution) for r in rows]


def count_where(conn: Connection, where: Sequence[ColumnElement[bool]]) -> int:
    return int(conn.execute(select(func.count()).select_from(memory_records).where(*where)).scalar_one())


def active_records(
    conn: Connection,
    scope_kinds: Sequence[str] | None,
    provenances: Sequence[str] | None,
    updated_before: datetime | None,
    limit: int,
) -> list[MemoryRecord]:
    where = [memory_records.c.status == RecordStatus.ACTIVE.value]
    if scope_kinds is not None:
        where.append(memory_records.c.scope_kind.in_(list(scope_kinds)))
    if provenances is not None:
        where.append(memory_records.c.provenance.in_(list(provenances)))
    if updated_before is not None:
        where.append(memory_records.c.updated_at < updated_before)
    rows = conn.execute(select(memory_records).where(*where).order_by(memory_records.c.seq).limit(limit)).all()
    return [record_of(r) for r in rows]
