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

Search. On SQLite the FTS5 index `memory_records_fts` (porter stemming, bm25), keyed by the
records' integer `seq` (see memory/store/schema.py), and for CJK text, which has no spaces between words,
`memory_records_cjk` (trigrams, records with CJK only); free text is cut into quoted terms joined
with OR by memory.archive.store's helpers, so it never reaches FTS5 as syntax. Other databases use a
LIKE scan.
"""

from __future__ import annotations

import base64
import builtins
import functools
import operator
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any, TypeVar

from sqlalchemy import (
    ColumnElement,
    Integer,
    and_,
    bindparam,
    case,
    column,
    delete,
    func,
    insert,
    literal_column,
    or_,
    select,
)
from sqlalchemy import table as sql_table
from sqlalchemy import update as sql_update
from sqlalchemy.engine import Connection, Row

from memory.archive.store import (
    PG_LANGUAGE,
    CjkQuery,
    fts_expression,
    indexed_count,
    informative_terms,
    merge_hits,
    pg_cjk_text,
    pg_like_score,
    pg_needles,
    pg_words_for,
    porter_and_trigram,
    query_terms,
    split_cjk,
)
from memory.records.model import (
    EXPIRY,
    MemoryClass,
    MemoryRecord,
    Provenance,
    RecordStatus,
    ReviewStatus,
    Scope,
    ScopeKind,
    UsePolicy,
)
from memory.store.db import Database
from memory.store.schema import memory_records, memory_revisions

ID_PREFIX = "mem-"
MAX_SEARCH = 50
MAX_LIST = 500
# How long a forgotten record can be brought back by undo before expire() purges it.
UNDO_WINDOW = timedelta(days=30)
SENSITIVITIES = frozenset({"normal", "sensitive"})
AUDIENCES = frozenset({"personal", "team", "public"})
# What update() may be asked to do; "create", "import" and "undo" are the store's own.
ACTIONS = frozenset(
    {"edit", "confirm", "evidence", "scope", "stale", "merge", "reject", "dispute", "supersede", "forget"}
)
EDITABLE = frozenset(
    {
        "content",
        "memory_class",
        "provenance",
        "use_policy",
        "scope",
        "review_status",
        "status",
        "sensitivity",
        "superseded_by",
        "tags",
    }
)
_RESTORED = (*sorted(EDITABLE), "expires_at")  # what undo puts back
_NOTE_CHARS = 255
_CHUNK = 500  # ids per IN (...) in get_many

# The hot statements, built once so that a call only binds parameters (building a select costs more
# than running it); bindparam names must differ from column names.
_GET = select(memory_records).where(memory_records.c.id == bindparam("b_id"))
_GET_LIVE = _GET.where(memory_records.c.status != RecordStatus.DELETED.value)
_GET_FOR_UPDATE = _GET.with_for_update()  # PostgreSQL; SQLite has one writer anyway
_INSERT_RECORDS = insert(memory_records)
_INSERT_REVISIONS = insert(memory_revisions)

# The porter index and the CJK trigram one (migration 0006), each as a table and as the name MATCH takes.
_FTS_TABLES: dict[str, tuple[Any, ColumnElement[Any]]] = {
    name: (sql_table(name, column("rowid", Integer)), literal_column(name))
    for name in ("memory_records_fts", "memory_records_cjk")
}


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


@dataclass(frozen=True, slots=True)
class NewRecord:
    """What create() takes, for import_batch; `created_at` (default: now) dates imported memories."""

    content: str
    memory_class: MemoryClass
    provenance: Provenance
    use_policy: UsePolicy
    scope: Scope | str
    author: str
    review_status: ReviewStatus
    sensitivity: str = "normal"
    source: str | None = None
    attribution: str | None = None
    origin_audience: str = "personal"
    tags: tuple[str, ...] = ()
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Revision:
    revision: int
    action: str
    actor: str
    at: datetime
    before: dict[str, Any] | None  # the whole record (see snapshot()); None for create and import
    after: dict[str, Any]
    note: str | None
    record_id: str = ""
    id: int = 0  # the row's own id: how `clawgate memory revisions show|undo ID` names it
    batch: str | None = None  # shared by the revisions of one change of several records (a merge)

    def to_json(self) -> dict[str, Any]:
        """The revision without its snapshots, as `clawgate memory revisions` and the console show it."""
        return {
            "id": self.id,
            "record": self.record_id,
            "revision": self.revision,
            "action": self.action,
            "actor": self.actor,
            "at": self.at.isoformat(),
            "batch": self.batch,
            "note": self.note,
        }


# --- pure helpers -------------------------------------------------------------------------------


def new_id() -> str:
    """`mem-` and 16 base32 characters: 80 random bits, nothing guessable or meaningful."""
    return ID_PREFIX + base64.b32encode(secrets.token_bytes(10)).decode("ascii").lower()


def expiry(memory_class: MemoryClass, start: datetime) -> datetime | None:
    lifetime = EXPIRY[memory_class]
    return None if lifetime is None else start + lifetime


def snapshot(record: MemoryRecord) -> dict[str, Any]:
    """The whole record as JSON values, for revision rows."""
    policy = record.use_policy
    return {
        "id": record.id,
        "content": record.content,
        "memory_class": record.memory_class.value,
        "provenance": record.provenance.value,
        "use_policy": {
            "can_use_as_instruction": policy.can_use_as_instruction,
            "can_use_as_evidence": policy.can_use_as_evidence,
            "requires_user_confirmation": policy.requires_user_confirmation,
            "do_not_inject_automatically": policy.do_not_inject_automatically,
        },
        "scope": str(record.scope),
        "author": record.author,
        "created_at": record.created_at.isoformat(),
        "updated_at": record.updated_at.isoformat(),
        "review_status": record.review_status.value,
        "status": record.status.value,
        "sensitivity": record.sensitivity,
        "source": record.source,
        "attribution": record.attribution,
        "origin_audience": record.origin_audience,
        "expires_at": None if record.expires_at is None else record.expires_at.isoformat(),
        "superseded_by": record.superseded_by,
        "revision": record.revision,
        "tags": list(record.tags),
    }


def from_snapshot(data: Mapping[str, Any]) -> MemoryRecord:
    expires_at = data["expires_at"]
    return MemoryRecord(
        id=data["id"],
        content=data["content"],
        memory_class=MemoryClass(data["memory_class"]),
        provenance=Provenance(data["provenance"]),
        use_policy=UsePolicy(**data["use_policy"]),
        scope=Scope.parse(data["scope"]),
        author=data["author"],
        created_at=datetime.fromisoformat(data["created_at"]),
        updated_at=datetime.fromisoformat(data["updated_at"]),
        review_status=ReviewStatus(data["review_status"]),
        status=RecordStatus(data["status"]),
        sensitivity=data["sensitivity"],
        source=data["source"],
        attribution=data["attribution"],
        origin_audience=data["origin_audience"],
        expires_at=None if expires_at is None else datetime.fromisoformat(expires_at),
        superseded_by=data["superseded_by"],
        revision=data["revision"],
        tags=tuple(data["tags"]),
    )


def _text(name: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{name} must be non-empty text")
        return value

    return check


def _one_of(name: str, allowed: frozenset[str]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in allowed:
            raise ValueError(f"{name} must be one of {sorted(allowed)}, not {value!r}")
        return str(value)

    return check


def _optional_text(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"expected text or None, not {value!r}")
    return value


def _use_policy(value: Any) -> UsePolicy:
    if not isinstance(value, UsePolicy):
        raise ValueError(f"use_policy must be a UsePolicy, not {value!r}")
    return value


def _scope(value: Any) -> Scope:
    return value if isinstance(value, Scope) else Scope.parse(value)


def _tags(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not all(isinstance(t, str) for t in value):
        raise ValueError(f"tags must be a sequence of text, not {value!r}")
    return tuple(value)


_COERCE: dict[str, Callable[[Any], Any]] = {
    "content": _text("content"),
    "memory_class": MemoryClass,
    "provenance": Provenance,
    "use_policy": _use_policy,
    "scope": _scope,
    "review_status": ReviewStatus,
    "status": RecordStatus,
    "sensitivity": _one_of("sensitivity", SENSITIVITIES),
    "superseded_by": _optional_text,
    "tags": _tags,
}


def build(item: NewRecord, now: datetime, record_id: str | None = None) -> MemoryRecord:
    """A new record from `item`, checked; ValueError naming what is wrong."""
    created_at = item.created_at or now
    if created_at.tzinfo is None or now.tzinfo is None:
        raise ValueError("naive datetime given for a memory record")
    memory_class = MemoryClass(item.memory_class)
    return MemoryRecord(
        id=record_id or new_id(),
        content=_text("content")(item.content),
        memory_class=memory_class,
        provenance=Provenance(item.provenance),
        use_policy=_use_policy(item.use_policy),
        scope=_scope(item.scope),
        author=_text("author")(item.author),
        created_at=created_at,
        updated_at=now,
        review_status=ReviewStatus(item.review_status),
        status=RecordStatus.ACTIVE,
        sensitivity=_one_of("sensitivity", SENSITIVITIES)(item.sensitivity),
        source=_optional_text(item.source),
        attribution=_optional_text(item.attribution),
        origin_audience=_one_of("origin_audience", AUDIENCES)(item.origin_audience),
        expires_at=expiry(memory_class, created_at),
        revision=1,
        tags=_tags(item.tags),
    )


def coerce_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    """`changes` checked and in their proper types; TypeError for a field that is not EDITABLE,
    ValueError for a bad value."""
    unknown = set(changes) - EDITABLE
    if unknown:
        raise TypeError(f"not editable: {', '.join(sorted(unknown))}")
    return {name: _COERCE[name](value) for name, value in changes.items()}


def apply_changes(current: MemoryRecord, fields: Mapping[str, Any], now: datetime) -> MemoryRecord:
    """`current` with coerced `fields`; a change of class restarts the expiry clock from `now`."""
    changed = replace(current, **fields)
    if changed.memory_class != current.memory_class:
        changed = replace(changed, expires_at=expiry(changed.memory_class, now))
    return changed


def _row_values(record: MemoryRecord) -> dict[str, Any]:
    policy = record.use_policy
    return {
        "id": record.id,
        "content": record.content,
        "memory_class": record.memory_class.value,
        "provenance": record.provenance.value,
        "use_instruction": policy.can_use_as_instruction,
        "use_evidence": policy.can_use_as_evidence,
        "needs_confirmation": policy.requires_user_confirmation,
        "no_auto_inject": policy.do_not_inject_automatically,
        "scope": str(record.scope),
        "scope_kind": record.scope.kind.value,
        "sensitivity": record.sensitivity,
        "review_status": record.review_status.value,
        "status": record.status.value,
        "author": record.author,
        "source": record.source,
        "attribution": record.attribution,
        "origin_audience": record.origin_audience,
        "tags": list(record.tags),
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "expires_at": record.expires_at,
        "superseded_by": record.superseded_by,
        "revision": record.revision,
    }


E = TypeVar("E", bound=Enum)
_RECORD_FIELDS = (
    "id",
    "content",
    "memory_class",
    "provenance",
    "use_instruction",
    "use_evidence",
    "needs_confirmation",
    "no_auto_inject",
    "scope",
    "author",
    "created_at",
    "updated_at",
    "review_status",
    "status",
    "sensitivity",
    "source",
    "attribution",
    "origin_audience",
    "expires_at",
    "superseded_by",
    "revision",
    "tags",
)


@functools.cache
def _fields_of(keys: tuple[str, ...]) -> Callable[[Row[Any]], tuple[Any, ...]]:
    """What _record reads of a row with these columns, by position: a row's attributes by name cost
    half a microsecond each (recall reads some forty records a turn)."""
    return operator.itemgetter(*(keys.index(name) for name in _RECORD_FIELDS))


def _enum(kind: type[E], value: str) -> E:
    member = kind._value2member_map_.get(value)  # a dict lookup: kind(value) costs ten times as much
    return member if member is not None else kind(value)  # type: ignore[return-value]


def _record(row: Row[Any]) -> MemoryRecord:
    (
        record_id,
        content,
        memory_class,
        provenance,
        use_instruction,
        use_evidence,
        needs_confirmation,
        no_auto_inject,
        scope,
        author,
        created_at,
        updated_at,
        review_status,
        status,
        sensitivity,
        source,
        attribution,
        origin_audience,
        expires_at,
        superseded_by,
        revision,
        tags,
    ) = _fields_of(row._fields)(row)
    return MemoryRecord(
        id=record_id,
        content=content,
        memory_class=_enum(MemoryClass, memory_class),
        provenance=_enum(Provenance, provenance),
        use_policy=UsePolicy(use_instruction, use_evidence, needs_confirmation, no_auto_inject),
        scope=Scope.parse(scope),
        author=author,
        created_at=created_at,
        updated_at=updated_at,
        review_status=_enum(ReviewStatus, review_status),
        status=_enum(RecordStatus, status),
        sensitivity=sensitivity,
        source=source,
        attribution=attribution,
        origin_audience=origin_audience,
        expires_at=expires_at,
        superseded_by=superseded_by,
        revision=revision,
        tags=tuple(tags),
    )


def _revision_row(
    record: MemoryRecord,
    action: str,
    actor: str,
    at: datetime,
    before: MemoryRecord | None,
    note: str | None,
    batch: str | None = None,
) -> dict[str, Any]:
    row = {
        "record_id": record.id,
        "revision": record.revision,
        "action": action,
        "actor": actor[:_NOTE_CHARS],
        "at": at,
        "before": None if before is None else snapshot(before),
        "after": snapshot(record),
        "note": None if note is None else note[:_NOTE_CHARS],
    }
    if batch is not None:  # only then: a change outside any batch also works on a schema before 0007
        row["batch"] = batch
    return row


# --- transactions -------------------------------------------------------------------------------


def _insert_new(conn: Connection, records: Sequence[MemoryRecord], action: str, now: datetime) -> None:
    conn.execute(_INSERT_RECORDS, [_row_values(r) for r in records])
    conn.execute(_INSERT_REVISIONS, [_revision_row(r, action, r.author, now, None, None) for r in records])


def _load(conn: Connection, record_id: str, include_deleted: bool, for_update: bool = False) -> MemoryRecord | None:
    stmt = _GET_FOR_UPDATE if for_update else _GET if include_deleted else _GET_LIVE
    row = conn.execute(stmt, {"b_id": record_id}).first()
    return None if row is None else _record(row)


def get_many_in(conn: Connection, ids: Sequence[str], include_deleted: bool) -> builtins.list[MemoryRecord]:
    """The records of `ids` that exist, in the order asked (RecordStore.get_many, in a caller's transaction)."""
    found: dict[str, MemoryRecord] = {}
    for start in range(0, len(ids), _CHUNK):
        stmt = select(memory_records).where(memory_records.c.id.in_(ids[start : start + _CHUNK]))
        if not include_deleted:
            stmt = stmt.where(memory_records.c.status != RecordStatus.DELETED.value)
        for row in conn.execute(stmt):
            found[row.id] = _record(row)
    return [found[i] for i in ids if i in found]


def current_for_change(conn: Connection, record_id: str, expected: int | None) -> MemoryRecord:
    """The record as it is now, locked for a change in this transaction (deleted ones too);
    RecordNotFound, or StaleRevision when `expected` is given and the record moved on."""
    current = _load(conn, record_id, include_deleted=True, for_update=True)
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
    values = _row_values(new)
    for fixed in ("id", "author", "created_at", "source", "attribution", "origin_audience"):
        del values[fixed]
    done = conn.execute(
        sql_update(memory_records)
        .where(memory_records.c.id == current.id, memory_records.c.revision == current.revision)
        .values(values)
    )
    if done.rowcount != 1:  # another writer got there first (possible on PostgreSQL only)
        raise StaleRevision(current.id, current.revision, current.revision + 1)
    conn.execute(_INSERT_REVISIONS, _revision_row(new, action, actor, now, current, note, batch))
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


def revision_of(row: Row[Any]) -> Revision:
    """A `memory_revisions` row as a Revision."""
    return Revision(
        row.revision, row.action, row.actor, row.at, row.before, row.after, row.note, row.record_id, row.id, row.batch
    )


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


def _unexpired(now: datetime) -> ColumnElement[bool]:
    return or_(memory_records.c.expires_at.is_(None), memory_records.c.expires_at > now)


def _searchable(scopes: Sequence[str], include_projects: bool, now: datetime) -> builtins.list[ColumnElement[bool]]:
    """What search may return (see the module docstring), and only in the given scopes."""
    where_scope: builtins.list[ColumnElement[bool]] = []
    if scopes:
        where_scope.append(memory_records.c.scope.in_(builtins.list(scopes)))
    if include_projects:
        where_scope.append(memory_records.c.scope_kind == ScopeKind.PROJECT.value)
    return [
        or_(*where_scope),
        memory_records.c.status == RecordStatus.ACTIVE.value,
        memory_records.c.memory_class != MemoryClass.TRACE.value,
        _unexpired(now),
        memory_records.c.origin_audience != "public",
    ]


def search_fts(
    conn: Connection, terms: Sequence[str], scopes: Sequence[str], include_projects: bool, limit: int, now: datetime
) -> builtins.list[tuple[MemoryRecord, float]]:
    """SQLite: FTS5 ranked by bm25 (negative, lower is better: flipped here), newest first on ties;
    the CJK trigram index too when the query holds CJK (memory.archive.store.split_cjk)."""
    where = _searchable(scopes, include_projects, now)

    def porter(words: Sequence[str]) -> builtins.list[tuple[MemoryRecord, float]]:
        q = fts_expression(informative_terms(conn, "memory_records_fts", words))
        return _matching(conn, "memory_records_fts", q, where, limit)

    def trigram(cjk: CjkQuery) -> builtins.list[tuple[MemoryRecord, float]]:
        assert cjk.match is not None
        return _matching(conn, "memory_records_cjk", cjk.match, where, limit)

    def short(cjk: CjkQuery) -> builtins.list[tuple[MemoryRecord, float]]:
        # Too short for a trigram: a scan of the records the trigram index holds (those with CJK
        # in them). A run is CJK letters only, so it needs no LIKE escaping.
        docs = sql_table("memory_records_cjk_docsize", column("id", Integer))
        matched = [memory_records.c.content.like(f"%{run}%") for run in cjk.short]
        score = sum((case((m, 1), else_=0) for m in matched), start=literal_column("0")).label("score")
        rows = conn.execute(
            select(memory_records, score)
            # IN, not a join: SQLite then walks the index's ids instead of scanning every record.
            .where(memory_records.c.seq.in_(select(docs.c.id)), or_(*matched), *where)
            .order_by(score.desc(), memory_records.c.seq.desc())
            .limit(limit)
        ).all()
        return [(_record(r), float(r.score)) for r in rows]

    found = porter_and_trigram(conn, terms, "memory_records_cjk", porter, trigram, short, lambda r: r.id, limit)
    return builtins.list(found)


# On a large store the full-text leg ranks this many of FTS5's best matches before joining the
# records and their filters: at 100k records a question matches ~15k of them, and joining every
# match cost more than ranking them (30 ms against 17). A person who owns few of the matches may
# find fewer than asked among them: then every match is joined, as on a small store.
RANKED_FIRST = 200
RANK_FIRST_FROM = 5_000  # indexed texts


def _matching(
    conn: Connection, fts_table: str, expression: str, where: Sequence[ColumnElement[bool]], limit: int
) -> builtins.list[tuple[MemoryRecord, float]]:
    fts, fts_ref = _FTS_TABLES[fts_table]
    rank = func.bm25(fts_ref)
    pool = max(RANKED_FIRST, 10 * limit)
    if indexed_count(conn, fts_table) < RANK_FIRST_FROM:
        return _all_matching(conn, fts_table, expression, where, limit)
    best = (
        select(fts.c.rowid.label("seq"), rank.label("rank"))
        .where(fts_ref.op("MATCH")(expression))
        .order_by(rank)
        .limit(pool)
        .subquery()
    )
    rows = conn.execute(
        select(memory_records, best.c.rank)
        .select_from(best.join(memory_records, memory_records.c.seq == best.c.seq))
        .where(*where)
        .order_by(best.c.rank, memory_records.c.seq.desc())
        .limit(limit)
    ).all()
    if len(rows) < limit and _matches_at_least(conn, fts_table, expression, pool):
        return _all_matching(conn, fts_table, expression, where, limit)
    return [(_record(r), -float(r.rank)) for r in rows]


def _all_matching(
    conn: Connection, fts_table: str, expression: str, where: Sequence[ColumnElement[bool]], limit: int
) -> builtins.list[tuple[MemoryRecord, float]]:
    fts, fts_ref = _FTS_TABLES[fts_table]
    rank = func.bm25(fts_ref)
    rows = conn.execute(
        select(memory_records, rank.label("rank"))
        .select_from(fts.join(memory_records, memory_records.c.seq == fts.c.rowid))
        .where(fts_ref.op("MATCH")(expression), *where)
        .order_by(rank, memory_records.c.seq.desc())
        .limit(limit)
    ).all()
    return [(_record(r), -float(r.rank)) for r in rows]


def _matches_at_least(conn: Connection, fts_table: str, expression: str, n: int) -> bool:
    """Whether `expression` matches `n` texts or more (the first pass saw only the best `n`)."""
    fts, fts_ref = _FTS_TABLES[fts_table]
    inner = select(fts.c.rowid).where(fts_ref.op("MATCH")(expression)).limit(n).subquery()
    return int(conn.execute(select(func.count()).select_from(inner)).scalar_one()) >= n


def search_like(
    conn: Connection,
    terms: Sequence[str],
    scopes: Sequence[str],
    include_projects: bool,
    limit: int,
    now: datetime,
    *also: ColumnElement[bool],
) -> builtins.list[tuple[MemoryRecord, float]]:
    """Any database: `lower(content) LIKE %term%`, scored by how many terms match; no stemming.
    `also`: more conditions (PostgreSQL's CJK leg narrows to the records with CJK text)."""
    content = func.lower(memory_records.c.content)
    matched = [content.contains(t, autoescape=True) for t in terms]
    score = sum((case((m, 1), else_=0) for m in matched), start=literal_column("0")).label("score")
    rows = conn.execute(
        select(memory_records, score)
        .where(or_(*matched), *_searchable(scopes, include_projects, now), *also)
        .order_by(score.desc(), memory_records.c.seq.desc())
        .limit(limit)
    ).all()
    return [(_record(r), float(r.score)) for r in rows]


def search_pg(
    conn: Connection, terms: Sequence[str], scopes: Sequence[str], include_projects: bool, limit: int, now: datetime
) -> builtins.list[tuple[MemoryRecord, float]]:
    """PostgreSQL: its full-text search (English stemming and stop words), any term matching, ranked
    by ts_rank, newest first on ties; CJK runs, which it does not split into words, by LIKE."""
    words, runs = split_cjk(terms)
    found: builtins.list[builtins.list[tuple[MemoryRecord, float]]] = []
    if words:
        # Terms are letters and digits only (archive.query_terms): nothing in them is tsquery syntax.
        # Rows holding one of the rarest words, ranked by every informative one (archive.pg_words_for).
        asked = pg_words_for(conn, "memory_records", words)
        query = func.to_tsquery(PG_LANGUAGE, asked.match)
        vector: ColumnElement[Any] = literal_column("memory_records.words")  # PostgreSQL only: migration 0010
        rank = func.ts_rank(vector, func.to_tsquery(PG_LANGUAGE, asked.rank)).label("rank")
        rows = conn.execute(
            select(memory_records, rank)
            .where(vector.op("@@")(query), *_searchable(scopes, include_projects, now))
            .order_by(rank.desc(), memory_records.c.seq.desc())
            .limit(limit)
        ).all()
        found.append([(_record(r), float(r.rank)) for r in rows])
    # CJK runs, and words inside CJK text ("Tokyo" in "我在Tokyo工作"), by LIKE over the records that
    # hold CJK letters only: the predicate is the one migration 0010's partial index is built on.
    needles = pg_needles(conn, "memory_records", words, runs)  # words only where CJK text exists
    if needles:
        hits = search_like(conn, needles, scopes, include_projects, limit, now, pg_cjk_text("memory_records"))
        found.append([(r, pg_like_score(n, len(needles))) for r, n in hits])
    return merge_hits(found, lambda r: r.id, limit)


def search_in(
    conn: Connection, terms: Sequence[str], scopes: Sequence[str], include_projects: bool, limit: int, now: datetime
) -> builtins.list[tuple[MemoryRecord, float]]:
    dialect = conn.dialect.name
    run = search_fts if dialect == "sqlite" else search_pg if dialect == "postgresql" else search_like
    return run(conn, terms, scopes, include_projects, limit, now)


def _listing(
    scopes: Sequence[str] | None, review_status: ReviewStatus | None, status: RecordStatus | None
) -> builtins.list[ColumnElement[bool]]:
    where: builtins.list[ColumnElement[bool]] = []
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

    def where(self) -> builtins.list[ColumnElement[bool]]:
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


def _list(
    conn: Connection, where: Sequence[ColumnElement[bool]], limit: int, offset: int
) -> builtins.list[MemoryRecord]:
    rows = conn.execute(
        select(memory_records)
        .where(*where)
        .order_by(memory_records.c.created_at.desc(), memory_records.c.seq.desc())
        .limit(limit)
        .offset(offset)
    ).all()
    return [_record(r) for r in rows]


def _texts(conn: Connection, scope: str, limit: int, now: datetime) -> builtins.list[tuple[str, str | None]]:
    rows = conn.execute(
        select(memory_records.c.content, memory_records.c.attribution)
        .where(
            memory_records.c.scope == scope,
            memory_records.c.status == RecordStatus.ACTIVE.value,
            _unexpired(now),
        )
        .order_by(memory_records.c.created_at.desc(), memory_records.c.seq.desc())
        .limit(limit)
    ).all()
    return [(r.content, r.attribution) for r in rows]


def _count(conn: Connection, where: Sequence[ColumnElement[bool]]) -> int:
    return int(conn.execute(select(func.count()).select_from(memory_records).where(*where)).scalar_one())


def _active(
    conn: Connection,
    scope_kinds: Sequence[str] | None,
    provenances: Sequence[str] | None,
    updated_before: datetime | None,
    limit: int,
) -> builtins.list[MemoryRecord]:
    where = [memory_records.c.status == RecordStatus.ACTIVE.value]
    if scope_kinds is not None:
        where.append(memory_records.c.scope_kind.in_(builtins.list(scope_kinds)))
    if provenances is not None:
        where.append(memory_records.c.provenance.in_(builtins.list(provenances)))
    if updated_before is not None:
        where.append(memory_records.c.updated_at < updated_before)
    rows = conn.execute(select(memory_records).where(*where).order_by(memory_records.c.seq).limit(limit)).all()
    return [_record(r) for r in rows]


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
        return await self._db.read(_load, record_id, include_deleted)

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
        where = _listing(None if scopes is None else [str(s) for s in scopes], review_status, status)
        return await self._db.read(_list, where, max(1, min(MAX_LIST, limit)), max(0, offset))

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
        where = _listing(None if scopes is None else [str(s) for s in scopes], review_status, status) + browse.where()

        def run(conn: Connection) -> tuple[builtins.list[MemoryRecord], int]:
            return _list(conn, where, max(1, min(MAX_LIST, limit)), max(0, offset)), _count(conn, where)

        return await self._db.read(run)

    async def texts(
        self, scope: str | Scope, *, limit: int = 500, now: datetime | None = None
    ) -> builtins.list[tuple[str, str | None]]:
        """(content, attribution) of the active, unexpired records of one scope, newest first: what
        background work compares a new statement with, without building whole records."""
        return await self._db.read(_texts, str(scope), max(1, limit), _now(now))

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
        return await self._db.read(_active, kinds, origins, updated_before, max(1, limit))

    async def count(
        self,
        *,
        scopes: Sequence[str | Scope] | None = None,
        review_status: ReviewStatus | None = None,
        status: RecordStatus | None = RecordStatus.ACTIVE,
    ) -> int:
        where = _listing(None if scopes is None else [str(s) for s in scopes], review_status, status)
        return await self._db.read(_count, where)

    async def expire(self, now: datetime | None = None) -> int:
        """Delete expired evidence and traces, and records forgotten more than UNDO_WINDOW ago, with
        their revisions. How many records went."""
        return await self._db.write(_expire, _now(now))
