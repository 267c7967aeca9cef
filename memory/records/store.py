"""The store of long-term memory records (DESIGN §6): create, read, change with revisions, undo,
forget, expire, import, and full-text search.

Raw storage: who may read or write which record is memory/trust/policy.py's decision, applied by the
gateway. The store holds back only what nobody should get: `get` never returns a forgotten record
(unless asked with `include_deleted`), and `search` never finds traces, expired, superseded or
forgotten records, nor records formed in a public conversation.

Revisions. Every change writes a revision row holding the whole record before and after, so any
change can be inspected and undone. `undo` reverts the newest change not already undone and is a
revision itself (action "undo"); undoing again walks further back, as in an editor, and undoing the
creation forgets the record. Which change an undo reverted is not stored: undos pair with the
changes they reverted like brackets, newest first. Revisions written by one change of several records
(a merge) share a `batch` id: memory/records/revisions.py lists revisions across records and undoes a batch
as one.

Forgetting. `forget` marks a record deleted and blanks its content in the table, and so in the
search index: the text lives on only in the record's revisions, so that the forget can be undone.
`expire` purges forgotten records UNDO_WINDOW after they were forgotten; `purge` removes a record
and every revision of it at once (privacy requests).

Expiry. Evidence expires 30 days and traces 72 hours after creation, or after a change of class;
durable facts never. `expire` deletes expired records with their revisions: an expired record is
never read again, and its revisions would keep what it said.

This module holds RecordStore and the units of work that write: inserts, a change as the next
revision (current_for_change and commit_change, which memory/records/revisions.py uses for batches
too), undo, purge and expire. What they build on is apart: checking what callers give
(memory/records/fields.py), a record as a row and as a revision snapshot (rows.py), the reads
(reads.py) and full-text search (search.py).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, insert, or_, select
from sqlalchemy import update as sql_update
from sqlalchemy.engine import Connection

from memory.archive.fulltext import query_terms
from memory.records.fields import EDITABLE, NewRecord, apply_changes, build, coerce_changes
from memory.records.model import (
    MemoryClass,
    MemoryRecord,
    Provenance,
    RecordStatus,
    ReviewStatus,
    Scope,
    ScopeKind,
    UsePolicy,
)
from memory.records.reads import (
    Browse,
    active_records,
    count_where,
    get_many_in,
    list_where,
    listing,
    load,
    scope_texts,
)
from memory.records.rows import Revision, from_snapshot, revision_of, revision_row, row_values
from memory.records.search import search_in
from memory.store.db import Database
from memory.store.schema import memory_records, memory_revisions

MAX_SEARCH = 50
MAX_LIST = 500
# How long a forgotten record can be brought back by undo before expire() purges it.
UNDO_WINDOW = timedelta(days=30)
# What update() may be asked to do; "create", "import" and "undo" are the store's own.
ACTIONS = frozenset(
    {"edit", "confirm", "evidence", "scope", "stale", "merge", "reject", "dispute", "supersede", "forget"}
)
_RESTORED = (*sorted(EDITABLE), "expires_at")  # what undo puts back

# The hot statements, built once so that a call only binds parameters (building a statement costs
# more than running it).
_INSERT_RECORDS = insert(memory_records)
_INSERT_REVISIONS = insert(memory_revisions)


class RecordError(Exception):
    """A memory record operation that cannot be done as asked."""


class RecordNotFound(RecordError):
    def __init__(self, record_id: str) -> None:
        super().__init__(f"no memory record {record_id!r}")
        self.record_id = record_id


class StaleRevision(RecordError):
    """The record changed since the caller read it (optimistic concurrency)."""

    def __init__(self, record_id: str, expected: int, current: int) -> None:
        super().__init__(f"memory record {record_id} is at revision {current}, not {expected}")
        self.record_id = record_id
        self.expected = expected
        self.current = current


class NothingToUndo(RecordError):
    def __init__(self, record_id: str) -> None:
        super().__init__(f"memory record {record_id} has no change left to undo")
        self.record_id = record_id


# --- transactions -------------------------------------------------------------------------------


def _insert_new(conn: Connection, records: Sequence[MemoryRecord], action: str, now: datetime) -> None:
    conn.execute(_INSERT_RECORDS, [row_values(r) for r in records])
    conn.execute(_INSERT_REVISIONS, [revision_row(r, action, r.author, now, None, None) for r in records])


def current_for_change(conn: Connection, record_id: str, expected: int | None) -> MemoryRecord:
    """The record as it is now, locked for a change in this transaction (deleted ones too);
    RecordNotFound, or StaleRevision when `expected` is given and the record moved on."""
    current = load(conn, record_id, include_deleted=True, for_update=True)
    if current is None:
        raise RecordNotFound(record_id)
    if expected is not None and expected != current.revision:
        raise StaleRevision(record_id, expected, current.revision)
    return current


def commit_change(
    conn: Connection,
    current: MemoryRecord,
    changed: MemoryRecord,
    action: str,
    actor: str,
    note: str | None,
    now: datetime,
    batch: str | None = None,
) -> MemoryRecord:
    """Write `changed` as the next revision of `current`, and its revision row (in `batch`)."""
    new = replace(changed, revision=current.revision + 1, updated_at=now)
    if new.status == RecordStatus.DELETED:
        new = replace(new, content="")  # out of the table and the index; kept in this revision's `before`
    values = row_values(new)
    for fixed in ("id", "author", "created_at", "source", "attribution", "origin_audience"):
        del values[fixed]
    done = conn.execute(
        sql_update(memory_records)
        .where(memory_records.c.id == current.id, memory_records.c.revision == current.revision)
        .values(values)
    )
    if done.rowcount != 1:  # another writer got there first (possible on PostgreSQL only)
        raise StaleRevision(current.id, current.revision, current.revision + 1)
    conn.execute(_INSERT_REVISIONS, revision_row(new, action, actor, now, current, note, batch))
    return new


def _update(
    conn: Connection,
    record_id: str,
    actor: str,
    action: str,
    note: str | None,
    expected: int | None,
    changes: dict[str, Any],
    now: datetime,
) -> MemoryRecord:
    current = current_for_change(conn, record_id, expected)
    return commit_change(conn, current, apply_changes(current, changes, now), action, actor, note, now)


def _revisions(conn: Connection, record_id: str) -> builtins.list[Revision]:
    rows = conn.execute(
        select(memory_revisions).where(memory_revisions.c.record_id == record_id).order_by(memory_revisions.c.revision)
    ).all()
    return [revision_of(r) for r in rows]


def undo_target(actions: Iterable[tuple[int, str]]) -> int | None:
    """The revision an undo should revert, given (revision, action) newest first: the newest change
    not already undone. Each undo reverted the nearest earlier change not yet reverted, so undos pair
    with changes like brackets."""
    pending = 0
    for revision, action in actions:
        if action == "undo":
            pending += 1
        elif pending:
            pending -= 1
        else:
            return revision
    return None


def _undo(conn: Connection, record_id: str, actor: str, expected: int | None, now: datetime) -> MemoryRecord:
    current = current_for_change(conn, record_id, expected)
    history = conn.execute(
        select(memory_revisions.c.revision, memory_revisions.c.action)
        .where(memory_revisions.c.record_id == record_id)
        .order_by(memory_revisions.c.revision.desc())
    ).all()
    target = undo_target((r.revision, r.action) for r in history)
    if target is None:
        raise NothingToUndo(record_id)
    return revert(conn, current, target, actor, now)


def revert(
    conn: Connection, current: MemoryRecord, target: int, actor: str, now: datetime, batch: str | None = None
) -> MemoryRecord:
    """Put back what revision `target` of `current` changed, as a new "undo" revision (in `batch`):
    every field a change can touch as it was before `target`. The caller chose `target` so that undos
    keep pairing with changes like brackets (see undo_target)."""
    before = conn.execute(
        select(memory_revisions.c.before).where(
            memory_revisions.c.record_id == current.id, memory_revisions.c.revision == target
        )
    ).scalar_one()
    if before is None:  # the creation (or import): undoing it forgets the record
        restored = replace(current, status=RecordStatus.DELETED)
    else:
        old = from_snapshot(before)
        restored = replace(current, **{name: getattr(old, name) for name in _RESTORED})
    return commit_change(conn, current, restored, "undo", actor, f"undo of revision {target}", now, batch)


def _purge_where(conn: Connection, condition: ColumnElement[bool]) -> int:
    doomed = select(memory_records.c.id).where(condition)
    conn.execute(delete(memory_revisions).where(memory_revisions.c.record_id.in_(doomed)))
    return int(conn.execute(delete(memory_records).where(condition)).rowcount)


def _purge(conn: Connection, record_id: str) -> bool:
    return _purge_where(conn, memory_records.c.id == record_id) > 0


def _expire(conn: Connection, now: datetime) -> int:
    expired = and_(
        memory_records.c.expires_at.is_not(None),
        memory_records.c.expires_at <= now,
        memory_records.c.memory_class.in_([MemoryClass.EVIDENCE.value, MemoryClass.TRACE.value]),
    )
    forgotten = and_(
        memory_records.c.status == RecordStatus.DELETED.value,
        memory_records.c.updated_at <= now - UNDO_WINDOW,
    )
    return _purge_where(conn, or_(expired, forgotten))


def _now(now: datetime | None) -> datetime:
    return datetime.now(UTC) if now is None else now


class RecordStore:
    """Long-term memory records on the database; every method is one transaction."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def create(
        self,
        content: str,
        *,
        memory_class: MemoryClass,
        provenance: Provenance,
        use_policy: UsePolicy,
        scope: Scope | str,
        author: str,
        review_status: ReviewStatus,
        sensitivity: str = "normal",
        source: str | None = None,
        attribution: str | None = None,
        origin_audience: str = "personal",
        tags: Sequence[str] = (),
        now: datetime | None = None,
    ) -> MemoryRecord:
        """A new record at revision 1 (a "create" revision by its author), expiring by its class."""
        item = NewRecord(
            content,
            memory_class,
            provenance,
            use_policy,
            scope,
            author,
            review_status,
            sensitivity,
            source,
            attribution,
            origin_audience,
            tuple(tags),
        )
        at = _now(now)
        record = build(item, at)
        await self._db.write(_insert_new, [record], "create", at)
        return record

    async def import_batch(self, items: Sequence[NewRecord], *, now: datetime | None = None) -> builtins.list[str]:
        """Create every item, each with an "import" revision, in one transaction: all or nothing.
        The ids, in the order of `items`."""
        at = _now(now)
        records = [build(item, at) for item in items]
        if records:
            await self._db.write(_insert_new, records, "import", at)
        return [r.id for r in records]

    async def get(self, record_id: str, *, include_deleted: bool = False) -> MemoryRecord | None:
        return await self._db.read(load, record_id, include_deleted)

    async def get_many(self, ids: Sequence[str], *, include_deleted: bool = False) -> builtins.list[MemoryRecord]:
        """The records of `ids` that exist, in the order asked."""
        if not ids:
            return []
        return await self._db.read(get_many_in, tuple(ids), include_deleted)

    async def update(
        self,
        record_id: str,
        *,
        actor: str,
        action: str,
        note: str | None = None,
        expected_revision: int | None = None,
        now: datetime | None = None,
        **changes: Any,
    ) -> MemoryRecord:
        """Change EDITABLE fields as the next revision. RecordNotFound for an unknown id;
        StaleRevision when `expected_revision` is given and the record has moved on; ValueError or
        TypeError for a bad action, field or value."""
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}: one of {sorted(ACTIONS)}")
        fields = coerce_changes(changes)  # bad fields or values fail before touching the database
        return await self._db.write(_update, record_id, actor, action, note, expected_revision, fields, _now(now))

    async def forget(
        self,
        record_id: str,
        actor: str,
        *,
        note: str | None = None,
        expected_revision: int | None = None,
        now: datetime | None = None,
    ) -> MemoryRecord:
        """Mark deleted: never read or found again, content blanked; undo brings it back until
        expire() purges it UNDO_WINDOW later."""
        return await self.update(
            record_id,
            actor=actor,
            action="forget",
            note=note,
            expected_revision=expected_revision,
            now=now,
            status=RecordStatus.DELETED,
        )

    async def purge(self, record_id: str) -> bool:
        """Delete the record and all its revisions for good. False when there was no such record."""
        return await self._db.write(_purge, record_id)

    async def revisions(self, record_id: str) -> builtins.list[Revision]:
        """The record's history, oldest first; empty for an unknown (or purged) record."""
        return await self._db.read(_revisions, record_id)

    async def undo(
        self, record_id: str, actor: str, *, expected_revision: int | None = None, now: datetime | None = None
    ) -> MemoryRecord:
        """Revert the newest change not already undone, as a new "undo" revision; NothingToUndo when
        every change is undone. `expected_revision` makes a repeated click harmless."""
        return await self._db.write(_undo, record_id, actor, expected_revision, _now(now))

    async def search(
        self,
        query: str,
        *,
        scopes: Sequence[str | Scope],
        include_projects: bool = False,
        limit: int = 10,
        now: datetime | None = None,
    ) -> builtins.list[tuple[MemoryRecord, float]]:
        """Active, unexpired, non-trace records in `scopes` (and every project with
        `include_projects`) matching any word of `query`, best first, with a score (higher is better,
        comparable within one search only). A query without words finds nothing."""
        terms = query_terms(query)
        names = tuple(str(s) for s in scopes)
        if not terms or not (names or include_projects):
            return []
        limit = max(1, min(MAX_SEARCH, limit))
        return await self._db.read(search_in, terms, names, include_projects, limit, _now(now))

    async def list(
        self,
        *,
        scopes: Sequence[str | Scope] | None = None,
        review_status: ReviewStatus | None = None,
        status: RecordStatus | None = RecordStatus.ACTIVE,
        limit: int = 50,
        offset: int = 0,
    ) -> builtins.list[MemoryRecord]:
        """Records newest first. `scopes` None: every scope; `status` None: every status but deleted."""
        where = listing(None if scopes is None else [str(s) for s in scopes], review_status, status)
        return await self._db.read(list_where, where, max(1, min(MAX_LIST, limit)), max(0, offset))

    async def browse(
        self,
        browse: Browse,
        *,
        scopes: Sequence[str | Scope] | None = None,
        review_status: ReviewStatus | None = None,
        status: RecordStatus | None = RecordStatus.ACTIVE,
        limit: int = 50,
        offset: int = 0,
    ) -> tuple[builtins.list[MemoryRecord], int]:
        """list() narrowed by `browse`, and how many records match in all (for paging)."""
        where = listing(None if scopes is None else [str(s) for s in scopes], review_status, status) + browse.where()

        def run(conn: Connection) -> tuple[builtins.list[MemoryRecord], int]:
            return list_where(conn, where, max(1, min(MAX_LIST, limit)), max(0, offset)), count_where(conn, where)

        return await self._db.read(run)

    async def texts(
        self, scope: str | Scope, *, limit: int = 500, now: datetime | None = None
    ) -> builtins.list[tuple[str, str | None]]:
        """(content, attribution) of the active, unexpired records of one scope, newest first: what
        background work compares a new statement with, without building whole records."""
        return await self._db.read(scope_texts, str(scope), max(1, limit), _now(now))

    async def active(
        self,
        *,
        scope_kinds: Sequence[ScopeKind] | None = None,
        provenances: Sequence[Provenance] | None = None,
        updated_before: datetime | None = None,
        limit: int = 1000,
    ) -> builtins.list[MemoryRecord]:
        """Active records of these scope kinds and provenances (None: any), last changed before
        `updated_before`, oldest first: the input of background work (consolidation, merges).
        Expired ones are included until expire() removes them: callers check `expired(now)`."""
        kinds = None if scope_kinds is None else [ScopeKind(k).value for k in scope_kinds]
        origins = None if provenances is None else [Provenance(p).value for p in provenances]
        return await self._db.read(active_records, kinds, origins, updated_before, max(1, limit))

    async def count(
        self,
        *,
        scopes: Sequence[str | Scope] | None = None,
        review_status: ReviewStatus | None = None,
        status: RecordStatus | None = RecordStatus.ACTIVE,
    ) -> int:
        where = listing(None if scopes is None else [str(s) for s in scopes], review_status, status)
        return await self._db.read(count_where, where)

    async def expire(self, now: datetime | None = None) -> int:
        """Delete expired evidence and traces, and records forgotten more than UNDO_WINDOW ago, with
        their revisions. How many records went."""
        return await self._db.write(_expire, _now(now))
