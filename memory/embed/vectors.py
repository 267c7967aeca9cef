"""Embeddings of searchable items, stored per model (DESIGN §7), and an exact in-memory index.

Items are long-term records (`record`: active, unexpired, not trace; id mem-…), archived user and
assistant messages of sessions that may be searched (`archive`: the message id as text) and
daily-file chunks (`daily`: the chunk id as text). An item's text is its `content`, exactly: the
vector stored for it carries the hash of the text that was embedded, so a changed text shows up as
missing again and is re-embedded.

`VectorStore.upsert` checks each vector against the item's current text in the same transaction and
skips it when the item changed or left the searchable set since it was read (edited, forgotten,
re-chunked): a vector in the table always describes text that was searchable when it was written.
Vectors of items that stopped being searchable are removed by `delete` (the writer knows) or
`prune` (a sweep), so nothing derived from a forgotten text outlives it.

Finding changed texts without hashing every row on every call: archived messages never change (ids
are never reused, archived rows never updated), records change only with a newer `updated_at`, and
daily chunks are few; only those candidates are hashed.

`VectorIndex` keeps one model's vectors in a contiguous float32 matrix and answers exact top-k by
cosine with one matrix-vector product: 100k x 384 floats are ~150 MB and a few milliseconds per search,
without an ANN index to build, tune or keep in sync. That is how SQLite is searched.

On PostgreSQL the database is the index (`DatabaseIndex`): pgvector's HNSW, nothing loaded into the
process. PostgreSQL computes `embedding`, a `vector`, from the stored blob (migration 0012), so the
rows are written exactly as on SQLite. Models differ in dimension, so the column has none, and each
model's vectors of each kind get an HNSW index of their own on `embedding::vector(<dim>)`, partial
on the model and kind (pgvector's way to index one column of several dimensions), made when such
vectors are first stored or when the model's index is opened (`prepare`). A search asks each kind's
index for its nearest items that the asker may see (`Reach`, the lexical legs' rules, checked by a
join in the same statement), with pgvector's iterative scan so that a filter that turns most
neighbours away still fills the top k, and an exact scan of the visible items when it does not.
"""

from __future__ import annotations

import hashlib
import logging
import time
import weakref
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, get_args

import numpy as np
import numpy.typing as npt
from sqlalchemy import (
    ColumnElement,
    Integer,
    String,
    Text,
    and_,
    bindparam,
    case,
    cast,
    delete,
    exists,
    false,
    func,
    insert,
    literal_column,
    null,
    or_,
    select,
    text,
    true,
    union_all,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql import CompoundSelect, Select
from sqlalchemy.types import UserDefinedType

from memory.records.model import MemoryClass, RecordStatus
from memory.store.db import Database
from memory.store.schema import (
    UTCDateTime,
    archived_messages,
    daily_chunks,
    memory_records,
    memory_vectors,
    sessions,
    unindexed,
)

log = logging.getLogger("clawgate.vectors")

ItemKind = Literal["record", "archive", "daily"]
KINDS: tuple[ItemKind, ...] = get_args(ItemKind)
ItemKey = tuple[str, str]  # (kind, item id)
Allow = Callable[[str, str], bool] | Collection[ItemKey] | None
Vector = npt.NDArray[np.float32]

_PAGE = 1000  # rows per read when scanning for missing vectors or loading an index
_CHUNK = 500  # ids per IN (...)
_SEARCHED_ROLES = ("user", "assistant")


def text_hash(text: str) -> str:
    """16 hex characters (64 bits of blake2b): tells whether the embedded text is still current."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()


def to_blob(vector: npt.ArrayLike) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


def from_blob(blob: bytes, dim: int) -> Vector:
    vec = np.frombuffer(blob, dtype="<f4")
    if vec.shape != (dim,):
        raise ValueError(f"a stored vector of {vec.size} floats, expected {dim}")
    return vec.astype(np.float32, copy=False)


_KIND_OF: dict[str, ItemKind] = {k: k for k in KINDS}


def _kind(kind: str) -> ItemKind:
    try:
        return _KIND_OF[kind]
    except KeyError:
        raise ValueError(f"unknown item kind {kind!r}: one of {', '.join(KINDS)}") from None


# --- what each kind's searchable items are -----------------------------------------------------


def _source(
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


def _content(kind: ItemKind) -> ColumnElement[str]:
    return {"record": memory_records.c.content, "archive": archived_messages.c.content}.get(
        kind, daily_chunks.c.content
    )


def _key_value(kind: ItemKind, item_id: str) -> str | int:
    """An item id as its table's key: archive messages and daily chunks have integer ids."""
    return item_id if kind == "record" else int(item_id)


def _after(kind: ItemKind, key: ColumnElement[Any], after: str | None) -> list[ColumnElement[bool]]:
    return [] if after is None else [key > _key_value(kind, after)]


def _vector_of(kind: ItemKind, item_id: ColumnElement[Any], model_id: str) -> ColumnElement[bool]:
    v = memory_vectors.c
    return and_(v.item_kind == kind, v.item_id == item_id, v.model_id == model_id)


def _maybe_changed(kind: ItemKind) -> ColumnElement[bool]:
    """Rows with a vector whose text may have changed since (see the module docstring)."""
    if kind == "record":
        return memory_records.c.updated_at > memory_vectors.c.created_at
    if kind == "daily":
        return true()
    return false()


def _query_vector(query: npt.ArrayLike) -> Vector:
    q = np.asarray(query, dtype=np.float32).reshape(-1)
    if q.size == 0 or not np.isfinite(q).all():
        raise ValueError("a query vector must be non-empty and finite")
    return q


# --- transactions -------------------------------------------------------------------------------


def _missing(
    conn: Connection, kind: ItemKind, model_id: str, limit: int, after: str | None, force: bool, now: datetime
) -> list[tuple[str, str]]:
    item_id, key, where, frm = _source(kind, now)
    content = _content(kind)
    v = memory_vectors.c
    found: list[tuple[str, str]] = []
    cursor = after
    while len(found) < limit:
        stmt: Select[Any] = select(item_id.label("item_id"), key.label("key"), content.label("content"), v.text_hash)
        stmt = stmt.select_from(frm.outerjoin(memory_vectors, _vector_of(kind, item_id, model_id)))
        stmt = stmt.where(*where, *_after(kind, key, cursor))
        if not force:
            stmt = stmt.where(or_(v.item_id.is_(None), _maybe_changed(kind)))
        rows = conn.execute(stmt.order_by(key).limit(_PAGE)).all()
        for row in rows:
            if force or row.text_hash is None or row.text_hash != text_hash(row.content):
                found.append((row.item_id, row.content))
                if len(found) == limit:
                    break
        if len(rows) < _PAGE:
            break
        cursor = str(rows[-1].key)
    return found


def _current_hashes(conn: Connection, kind: ItemKind, ids: Sequence[str], now: datetime) -> dict[str, str]:
    """The text hash of each of `ids` that is still searchable."""
    item_id, key, where, frm = _source(kind, now)
    keys = [_key_value(kind, i) for i in ids if kind == "record" or i.isdigit()]
    hashes: dict[str, str] = {}
    for start in range(0, len(keys), _CHUNK):
        part = keys[start : start + _CHUNK]
        rows = conn.execute(  # by the key column, so the primary key index serves the lookup
            select(item_id.label("item_id"), _content(kind).label("content"))
            .select_from(frm)
            .where(*where, key.in_(part))
        ).all()
        hashes.update((row.item_id, text_hash(row.content)) for row in rows)
    return hashes


def _upsert(
    conn: Connection, kind: ItemKind, rows: list[tuple[str, str, bytes, int]], model_id: str, now: datetime
) -> int:
    current = _current_hashes(conn, kind, [r[0] for r in rows], now)
    fresh = [r for r in rows if current.get(r[0]) == r[1]]
    ids = [r[0] for r in fresh]
    v = memory_vectors.c
    for start in range(0, len(ids), _CHUNK):
        conn.execute(
            delete(memory_vectors).where(
                v.item_kind == kind, v.model_id == model_id, v.item_id.in_(ids[start : start + _CHUNK])
            )
        )
    if fresh:
        conn.execute(
            insert(memory_vectors),
            [
                {
                    "item_kind": kind,
                    "item_id": item_id,
                    "model_id": model_id,
                    "dim": dim,
                    "vector": blob,
                    "text_hash": digest,
                    "created_at": now,
                }
                for item_id, digest, blob, dim in fresh
            ],
        )
        if conn.dialect.name == "postgresql":
            for dim in {r[3] for r in fresh}:
                ensure_hnsw(conn, model_id, kind, dim)
    return len(fresh)


def _delete(conn: Connection, kind: ItemKind, ids: Sequence[str]) -> int:
    gone = 0
    for start in range(0, len(ids), _CHUNK):
        part = list(ids[start : start + _CHUNK])
        where = and_(memory_vectors.c.item_kind == kind, memory_vectors.c.item_id.in_(part))
        gone += int(conn.execute(delete(memory_vectors).where(where)).rowcount)
    return gone


def _prune(conn: Connection, now: datetime) -> int:
    gone = 0
    for kind in KINDS:
        item_id, _key, where, frm = _source(kind, now)
        searchable = select(item_id).select_from(frm).where(*where)
        stmt = delete(memory_vectors).where(
            memory_vectors.c.item_kind == kind, memory_vectors.c.item_id.not_in(searchable)
        )
        gone += int(conn.execute(stmt).rowcount)
    return gone


def _coverage(conn: Connection, model_id: str, now: datetime) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for kind in KINDS:
        item_id, _key, where, frm = _source(kind, now)
        has_vector = exists().where(_vector_of(kind, item_id, model_id))
        total, covered = conn.execute(
            select(func.count(), func.coalesce(func.sum(case((has_vector, 1), else_=0)), 0))
            .select_from(frm)
            .where(*where)
        ).one()
        out[kind] = (int(covered), int(total))
    return out


def _models(conn: Connection) -> dict[str, int]:
    v = memory_vectors.c
    rows = conn.execute(select(v.model_id, func.count()).group_by(v.model_id)).all()
    return {row[0]: int(row[1]) for row in rows}


def _vectors(conn: Connection, model_id: str, after: ItemKey | None, limit: int) -> list[tuple[str, str, bytes, int]]:
    # One kind at a time, so that the primary key (item_kind, item_id, model_id) serves both the
    # range and the order; an OR over kinds made SQLite sort every vector of the model per page.
    v = memory_vectors.c
    out: list[tuple[str, str, bytes, int]] = []
    for kind in sorted(KINDS):
        if after is not None and kind < after[0]:
            continue
        stmt = select(v.item_kind, v.item_id, v.vector, v.dim).where(v.item_kind == kind, v.model_id == model_id)
        if after is not None and kind == after[0]:
            stmt = stmt.where(v.item_id > after[1])
        rows = conn.execute(stmt.order_by(v.item_id).limit(limit - len(out))).all()
        out += [(r.item_kind, r.item_id, r.vector, r.dim) for r in rows]
        if len(out) >= limit:
            break
    return out


def _places(conn: Connection, kind: ItemKind, ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
    if kind == "archive":
        key = archived_messages.c.id
        frm = archived_messages.join(sessions, sessions.c.id == archived_messages.c.session_id)
        stmt = select(key, sessions.c.key, sessions.c.user_id).select_from(frm)
    else:
        table = memory_records if kind == "record" else daily_chunks
        key = table.c.id
        stmt = select(key, table.c.scope, null())
    values = [_key_value(kind, i) for i in ids if kind == "record" or i.isdigit()]
    out: dict[str, tuple[str, str | None]] = {}
    for start in range(0, len(values), _CHUNK):
        rows = conn.execute(stmt.where(key.in_(values[start : start + _CHUNK]))).all()
        out.update((str(r[0]), (r[1], r[2])) for r in rows)
    return out


def _records_changed(conn: Connection, since: datetime) -> list[tuple[str, str]]:
    r = memory_records.c
    return [(row.id, row.scope) for row in conn.execute(select(r.id, r.scope).where(r.updated_at > since))]


class VectorStore:
    """Vectors on the database; every method is one transaction (upsert: one per call)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def upsert(
        self, kind: str, items: Sequence[tuple[str, str, npt.ArrayLike]], model_id: str, *, now: datetime | None = None
    ) -> int:
        """Store (item id, text hash, vector) for `model_id`, replacing older vectors of those items.
        An item whose current text no longer has that hash, or that is no longer searchable, is
        skipped (it will show up in `missing` again). How many were stored."""
        k = _kind(kind)
        rows = []
        for item_id, digest, vector in items:
            vec = np.asarray(vector, dtype=np.float32)
            if vec.ndim != 1:
                raise ValueError(f"{kind} {item_id}: a vector must be 1-D, got shape {vec.shape}")
            rows.append((str(item_id), digest, to_blob(vec), int(vec.shape[0])))
        if not rows:
            return 0
        stored = await self._db.write(_upsert, k, rows, model_id, now or datetime.now(UTC))
        if stored < len(rows):
            log.info("memory_vectors_stale kind=%s model=%s skipped=%d", kind, model_id, len(rows) - stored)
        return stored

    async def delete(self, kind: str, ids: Iterable[str]) -> int:
        """Remove the vectors of these items, for every model. How many rows went."""
        ids = [str(i) for i in ids]
        return await self._db.write(_delete, _kind(kind), ids) if ids else 0

    async def missing(
        self, kind: str, model_id: str, limit: int, *, after: str | None = None, now: datetime | None = None
    ) -> list[tuple[str, str]]:
        """Up to `limit` searchable items of `kind` as (item id, text) without a current vector for
        `model_id` (none yet, or one of an older text), in id order. `after`: continue past this
        item id (a backfill passes the last id it got, so a pass over everything reads each row
        once)."""
        if limit < 1:
            return []
        return await self._db.read(_missing, _kind(kind), model_id, limit, after, False, now or datetime.now(UTC))

    async def items(
        self, kind: str, limit: int, *, after: str | None = None, now: datetime | None = None
    ) -> list[tuple[str, str]]:
        """Every searchable item of `kind` as (item id, text), in id order, a page at a time (for a
        forced re-embedding)."""
        if limit < 1:
            return []
        return await self._db.read(_missing, _kind(kind), "", limit, after, True, now or datetime.now(UTC))

    async def coverage(self, model_id: str, *, now: datetime | None = None) -> dict[str, tuple[int, int]]:
        """Per kind: (searchable items with a vector for `model_id`, searchable items)."""
        return await self._db.read(_coverage, model_id, now or datetime.now(UTC))

    async def models(self) -> dict[str, int]:
        """How many vectors each model id has stored."""
        return await self._db.read(_models)

    async def prune(self, *, now: datetime | None = None) -> int:
        """Delete vectors (of every model) whose item is gone or no longer searchable. How many."""
        return await self._db.write(_prune, now or datetime.now(UTC))

    async def places(self, kind: str, ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        """Where each of these items lives, which decides who may see it: (scope, None) for records
        and daily chunks, (session key, session owner) for archived messages. Gone items are left out."""
        ids = [str(i) for i in ids]
        return await self._db.read(_places, _kind(kind), ids) if ids else {}

    async def records_changed(self, since: datetime) -> list[tuple[str, str]]:
        """(record id, scope) of records updated after `since` (a scope may have been narrowed)."""
        return await self._db.read(_records_changed, since)

    async def prepare(self, model_id: str) -> int:
        """PostgreSQL: make the HNSW indexes `model_id`'s stored vectors lack (a copy from SQLite,
        vectors stored before migration 0012); how many were made. Elsewhere nothing to do."""
        if not searched_in_database(self._db):
            return 0
        return await self._db.write(prepare_indexes, model_id)

    async def nearest(
        self,
        model_id: str,
        query: npt.ArrayLike,
        k: int,
        reach: Reach,
        *,
        now: datetime | None = None,
        exact: bool = False,
    ) -> list[tuple[str, str, float]]:
        """PostgreSQL: the `k` items `reach` covers nearest to `query` by cosine, as (kind, item id,
        cosine), best first (see the module docstring). `exact`: without the HNSW index (what tests
        and benchmarks measure the index against)."""
        q = _query_vector(query)
        if k < 1:
            return []
        return await self._db.read_in_transaction(_nearest_pg, model_id, q, k, reach, now or datetime.now(UTC), exact)

    async def cosines(
        self, model_id: str, query: npt.ArrayLike, keys: Collection[ItemKey]
    ) -> list[tuple[str, str, float]]:
        """PostgreSQL: the cosine to `query` of each of `keys` with a vector of `model_id`, best first."""
        q = _query_vector(query)
        if not keys:
            return []
        return await self._db.read(_cosines_pg, model_id, q, [(str(kind), str(i)) for kind, i in keys])

    async def vectors(
        self, model_id: str, *, after: ItemKey | None = None, limit: int = _PAGE
    ) -> list[tuple[str, str, Vector]]:
        """Stored vectors of `model_id` as (kind, item id, vector), ordered by (kind, id), a page at a time."""
        rows = await self._db.read(_vectors, model_id, after, limit)
        return [(kind, item_id, from_blob(blob, dim)) for kind, item_id, blob, dim in rows]


# --- PostgreSQL: pgvector -----------------------------------------------------------------------

# pgvector indexes a `vector` of up to 2,000 dimensions and a `halfvec` of up to 4,000: a larger
# model's vectors are indexed at half precision (the cosine returned is still the full one), and
# beyond that searched exactly.
VECTOR_INDEX_MAX_DIM = 2_000
HALFVEC_INDEX_MAX_DIM = 4_000
# The HNSW graph and its search. Recall's texts come in near-duplicates (a fact said in several
# wordings) that crowd pgvector's default graph (m 16, ef_construction 64): at 110,000 records its
# search found 83 % of the exact top 20 with the default ef_search of 40, and for some questions
# none of it (stuck among near-duplicates far from the best); 98.5 % with 200, but 65 % at worst.
# This denser graph with 200 finds 99.6 %, at least 85 % of every question's (200 LoCoMo
# questions), in 11.6 ms; with 100, 98.0 % and two questions under half. Building it takes twice
# as long (59 s instead of 32 for 110,000 rows). benchmarks/pg_recall.py measures all of it.
HNSW_M = 24
HNSW_EF_CONSTRUCTION = 128
EF_SEARCH = 200  # at least; at least the k asked for
# Build an index in memory (a graph that outgrows maintenance_work_mem is built far more slowly: at
# 330,000 rows 404 s with 256MB against 132 s with 4GB; benchmarks/pg_recall.py at 1,100,000 built in
# 592 s with 4GB, a 1.9 GB index). At least INDEX_BUILD_MEMORY, more for more rows (about what the
# graph takes: the vector and 2·m neighbours of 16 bytes a row, and a fifth more), at most
# INDEX_BUILD_MEMORY_MAX (enough for ~400,000 rows: a small database server must not run out of
# memory for an index); a server configured with more keeps its own, which a store of millions wants.
INDEX_BUILD_MEMORY = "256MB"
INDEX_BUILD_MEMORY_MAX = 1024**3


class _PgVectorType(UserDefinedType[Any]):
    """`vector(<dim>)` / `halfvec(<dim>)` / `vector` in a CAST (the index expression is such a cast)."""

    cache_ok = True

    def __init__(self, name: str, dim: int | None) -> None:
        self.name = name
        self.dim = dim

    def get_col_spec(self, **kw: Any) -> str:
        return self.name if self.dim is None else f"{self.name}({self.dim})"


def _indexed_as(dim: int) -> str | None:
    """The type a model's `embedding::<type>` index casts to; None: too large to index."""
    if dim <= VECTOR_INDEX_MAX_DIM:
        return "vector"
    if dim <= HALFVEC_INDEX_MAX_DIM:
        return "halfvec"
    return None


def hnsw_index_name(model_id: str, kind: str, dim: int) -> str:
    """A stable name (model ids are free text; PostgreSQL names are short)."""
    digest = hashlib.blake2b(f"{model_id}\0{kind}\0{dim}".encode(), digest_size=6).hexdigest()
    return f"ix_memory_vectors_hnsw_{digest}"


def _sql_string(value: str) -> str:
    """`value` as an SQL string literal (standard_conforming_strings, PostgreSQL's default since 9.1).
    A partial index's predicate must be written out: a bound parameter could not be proven to match it."""
    if "\x00" in value:
        raise ValueError("a model id with a NUL character")
    return "'" + value.replace("'", "''") + "'"


# At least :size for the build, for this transaction only (a server given more keeps it).
_BUILD_MEMORY = text(
    "SELECT set_config('maintenance_work_mem', :size, true) "
    "WHERE pg_size_bytes(current_setting('maintenance_work_mem')) < pg_size_bytes(:size)"
)


def build_memory(rows: int, dim: int) -> str:
    """maintenance_work_mem to ask for an HNSW build over `rows` vectors of `dim` floats."""
    graph = rows * (8 + 4 * dim + 2 * HNSW_M * 16) * 6 // 5
    floor = int(INDEX_BUILD_MEMORY.removesuffix("MB")) * 1024**2
    return f"{min(INDEX_BUILD_MEMORY_MAX, max(floor, graph)) // 1024**2}MB"


# Per database: the indexes known to exist, so that storing vectors asks at most once per process.
_HNSW_KNOWN: weakref.WeakKeyDictionary[Engine, set[str]] = weakref.WeakKeyDictionary()


def ensure_hnsw(conn: Connection, model_id: str, kind: ItemKind, dim: int) -> bool:
    """Make the HNSW index of one model's vectors of one kind unless it exists; whether it was made.
    Building it over many rows takes a while and blocks writes to memory_vectors meanwhile (other
    tables are untouched); that happens once per model and kind, in the background upkeep. Gateways
    sharing the database take turns (an advisory lock until the transaction ends): the second sees
    the first one's index."""
    known = _HNSW_KNOWN.setdefault(conn.engine, set())
    name = hnsw_index_name(model_id, kind, dim)
    as_type = _indexed_as(dim)
    if name in known or as_type is None:
        return False
    conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:name))"), {"name": name})
    if conn.execute(text("SELECT to_regclass(:name) IS NOT NULL"), {"name": name}).scalar():
        known.add(name)  # (only once seen committed: a transaction that made it may still roll back)
        return False
    started = time.perf_counter()
    v = memory_vectors.c
    rows = conn.execute(select(func.count()).where(v.model_id == model_id, v.item_kind == kind)).scalar_one()
    conn.execute(_BUILD_MEMORY, {"size": build_memory(int(rows), dim)})
    conn.execute(
        text(
            f"CREATE INDEX IF NOT EXISTS {name} ON memory_vectors USING hnsw "
            f"((embedding::{as_type}({dim})) {as_type}_cosine_ops) "
            f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION}) "
            f"WHERE model_id = {_sql_string(model_id)} AND item_kind = {_sql_string(kind)}"
        )
    )
    log.info(
        "memory_vectors_index_built model=%s kind=%s dim=%d rows=%d memory=%s ms=%.0f",
        model_id,
        kind,
        dim,
        rows,
        conn.execute(text("SHOW maintenance_work_mem")).scalar(),
        (time.perf_counter() - started) * 1000,
    )
    return True


def prepare_indexes(conn: Connection, model_id: str) -> int:
    """ensure_hnsw for every kind and dimension `model_id` has vectors of; how many were made."""
    v = memory_vectors.c
    found = conn.execute(select(v.item_kind, v.dim).where(v.model_id == model_id).distinct()).all()
    return sum(ensure_hnsw(conn, model_id, _kind(kind), int(dim)) for kind, dim in found)


@dataclass(frozen=True, slots=True)
class Reach:
    """What one asker may see, as the vector search filters it in the database: the same rules as
    the lexical legs (records of these scopes, and of every project when `include_projects`;
    archived messages of the sessions `archive_user` owns or of `archive_keys`; daily chunks of
    `daily_scopes`), on top of what is searchable at all (`_source`)."""

    record_scopes: tuple[str, ...] = ()
    include_projects: bool = False
    archive_user: str | None = None
    archive_keys: tuple[str, ...] = ()
    daily_scopes: tuple[str, ...] = ()


Shape = tuple[tuple[ItemKind, tuple[bool, ...]], ...]  # per kind searched: which of its rules apply


def _shape(reach: Reach) -> Shape:
    """Which of `reach`'s rules apply to each kind it covers (statements are built once per shape)."""
    rules: dict[ItemKind, tuple[bool, ...]] = {
        "record": (bool(reach.record_scopes), reach.include_projects),
        "archive": (reach.archive_user is not None, bool(reach.archive_keys)),
        "daily": (bool(reach.daily_scopes),),
    }
    return tuple((kind, rule) for kind, rule in rules.items() if any(rule))


def _reach_params(reach: Reach) -> dict[str, Any]:
    return {
        "record_scopes": list(reach.record_scopes),
        "archive_user": reach.archive_user,
        "archive_keys": list(reach.archive_keys),
        "daily_scopes": list(reach.daily_scopes),
    }


def _reach(kind: ItemKind, rule: tuple[bool, ...]) -> tuple[ColumnElement[bool], list[Any], Any]:
    """(how memory_vectors joins the items of `kind`, where-clauses, from-clause) for its visible
    items under one shape of Reach, everything bound: `now` and _reach_params."""
    _item_id, _key, where, frm = _source(kind, bindparam("now", type_=UTCDateTime))
    v = memory_vectors.c
    mine: list[ColumnElement[bool]] = []
    if kind == "record":
        r = memory_records.c
        by_scope, projects = rule
        if by_scope:
            mine.append(r.scope.in_(bindparam("record_scopes", expanding=True)))
        if projects:
            mine.append(r.scope_kind == "project")
        return r.id == v.item_id, [*where, or_(*mine), r.origin_audience != "public"], frm
    # Archive and daily ids are integers (upsert stores no other): compared as integers, so that the
    # item's primary key serves the join.
    if kind == "archive":
        by_user, by_keys = rule
        if by_user:
            mine.append(sessions.c.user_id == bindparam("archive_user"))
        if by_keys:
            mine.append(sessions.c.key.in_(bindparam("archive_keys", expanding=True)))
        return archived_messages.c.id == cast(v.item_id, Integer), [*where, or_(*mine)], frm
    scoped = daily_chunks.c.scope.in_(bindparam("daily_scopes", expanding=True))
    return daily_chunks.c.id == cast(v.item_id, Integer), [*where, scoped], frm


def _pg_text(query: Vector) -> str:
    """A vector in pgvector's text form: each float32 written so that it reads back exactly."""
    return "[" + ",".join(repr(float(x)) for x in query) + "]"


def _query_as(name: str, dim: int | None) -> ColumnElement[Any]:
    """The query vector (bound as text, `q`) as a pgvector value, computed once per statement: a
    scalar subquery, because a plan PostgreSQL reuses for a prepared statement (as asyncpg's are)
    would otherwise parse the text again for every row it compares (730 ms instead of 30 at 11,000)."""
    return select(cast(cast(bindparam("q"), Text), _PgVectorType(name, dim))).scalar_subquery()


_EMBEDDING: ColumnElement[Any] = literal_column("memory_vectors.embedding")  # PostgreSQL only: migration 0012
_COSINE = (1 - _EMBEDDING.op("<=>")(_query_as("vector", None))).label("cosine")

_NEAREST: dict[tuple[str, int, Shape, str | None], CompoundSelect[Any]] = {}
NEAREST_KEPT = 256  # statements; a few per model and shape of asker


def _nearest_statement(model_id: str, dim: int, shape: Shape, as_type: str | None) -> CompoundSelect[Any]:
    """For each kind of `shape`, the `limit` (bound) visible items nearest to `q`, in one statement:
    ordered by the model's index expression (`as_type`), or by the column itself, which no index
    serves (None: exact). Built once per model, dimension and shape: recall asks it every turn."""
    key = (model_id, dim, shape, as_type)
    cached = _NEAREST.get(key)
    if cached is not None:
        return cached
    v = memory_vectors.c
    if as_type is None:
        distance = _EMBEDDING.op("<=>")(_query_as("vector", None))
    else:
        distance = cast(_EMBEDDING, _PgVectorType(as_type, dim)).op("<=>")(_query_as(as_type, dim))
    parts = []
    for kind, rule in shape:
        join_on, where, frm = _reach(kind, rule)
        parts.append(
            select(v.item_kind, v.item_id, _COSINE)
            .select_from(memory_vectors.join(frm, join_on))
            # Written out, not bound: the partial index's predicate must be seen to hold.
            .where(v.model_id == literal_column(_sql_string(model_id)), v.item_kind == literal_column(f"'{kind}'"))
            .where(*where)
            .order_by(distance)
            .limit(bindparam("limit"))
        )
    stmt = union_all(*parts)
    if len(_NEAREST) >= NEAREST_KEPT:
        _NEAREST.clear()
    _NEAREST[key] = stmt
    return stmt


# Relaxed order: pgvector keeps walking the graph until enough rows pass the join's filters, handing
# them over nearly in order (the top k is sorted here again). No sort: the planner takes the HNSW
# index, the only other way to the order asked. It underrates a sort of every visible vector by
# distance (at 11,000 records with ef_search 200 it chose one: 50 ms instead of 8), and the exact
# statement, which has no other way, still sorts.
_HNSW_SETTINGS = text(
    "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), set_config('hnsw.ef_search', :ef, true), "
    "set_config('enable_sort', 'off', true)"
)


def _nearest_pg(
    conn: Connection, model_id: str, query: Vector, k: int, reach: Reach, now: datetime, exact: bool
) -> list[tuple[str, str, float]]:
    dim = int(query.shape[0])
    as_type = None if exact else _indexed_as(dim)
    shape = _shape(reach)
    if not shape:
        return []
    params = {"q": _pg_text(query), "now": now, "limit": k, **_reach_params(reach)}
    rows: Sequence[Any] = []
    if as_type is not None:  # the model's HNSW indexes
        # (pgvector takes at most 1,000; the iterative scan goes on past it for a larger k)
        conn.execute(_HNSW_SETTINGS, {"ef": str(min(1_000, max(EF_SEARCH, k)))})
        rows = conn.execute(_nearest_statement(model_id, dim, shape, as_type), params).all()
    per_kind = {kind: 0 for kind, _ in shape}
    for r in rows:
        per_kind[r.item_kind] += 1
    # A kind with fewer than k: so few visible items that the graph walk gave up (hnsw.max_scan_tuples)
    # before finding k, or no more exist. An exact scan of its visible ones says which, at little
    # cost for so few.
    short = tuple((kind, rule) for kind, rule in shape if per_kind[kind] < k)
    if short:
        rows = [r for r in rows if per_kind[r.item_kind] >= k]
        rows += conn.execute(_nearest_statement(model_id, dim, short, None), params).all()
    found = [(str(r.item_kind), str(r.item_id), float(r.cosine)) for r in rows]
    found.sort(key=lambda hit: -hit[2])
    return found[:k]


def _cosines_pg(
    conn: Connection, model_id: str, query: Vector, keys: Sequence[ItemKey]
) -> list[tuple[str, str, float]]:
    """The cosine to `query` of each of `keys` with a vector of `model_id`: one statement on the
    primary key for up to _CHUNK of them (every kind asked with every id: the extra pairs it may
    find are dropped here)."""
    asked = set(keys)
    q = _pg_text(query)
    out: list[tuple[str, str, float]] = []
    for start in range(0, len(keys), _CHUNK):
        part = keys[start : start + _CHUNK]
        params = {"q": q, "model": model_id, "kinds": sorted({k for k, _ in part}), "ids": [i for _, i in part]}
        rows = conn.execute(_COSINES, params)
        out += [(r.item_kind, r.item_id, float(r.cosine)) for r in rows if (r.item_kind, r.item_id) in asked]
    return sorted(out, key=lambda hit: -hit[2])


_COSINES = select(memory_vectors.c.item_kind, memory_vectors.c.item_id, _COSINE).where(
    memory_vectors.c.item_kind.in_(bindparam("kinds", expanding=True)),
    memory_vectors.c.item_id.in_(bindparam("ids", expanding=True)),
    memory_vectors.c.model_id == bindparam("model"),
)


def searched_in_database(db: Database) -> bool:
    """Whether `db`'s vectors are searched where they are stored (PostgreSQL with pgvector) rather
    than loaded into a VectorIndex (SQLite)."""
    return db.backend == "postgresql"


class DatabaseIndex:
    """One model's vectors searched in the database (PostgreSQL: pgvector's HNSW), standing where
    a VectorIndex stands on SQLite. Nothing is held in memory: what the store holds is searched,
    and who may see what is decided by the same statement, from the rows as they are now."""

    def __init__(self, store: VectorStore, model_id: str) -> None:
        self.store = store
        self.model_id = model_id

    async def search(
        self, query: npt.ArrayLike, k: int, reach: Reach, *, now: datetime | None = None
    ) -> list[tuple[str, str, float]]:
        """The `k` items of `reach` nearest to `query` (a unit vector) as (kind, item id, cosine),
        best first: approximate (HNSW) where the model is indexed, exact otherwise."""
        return await self.store.nearest(self.model_id, query, k, reach, now=now)

    async def scores(self, query: npt.ArrayLike, keys: Collection[ItemKey]) -> list[tuple[str, str, float]]:
        """The cosine of each of `keys` that has a vector (items the caller already may see), best first."""
        return await self.store.cosines(self.model_id, query, keys)


# --- the in-memory index ------------------------------------------------------------------------


_NO_GROUP = -1


def _lazy_is_cheaper(allowed: int, n: int, k: int) -> bool:
    """Whether ranking everything and asking candidates for membership beats scoring the allowed
    rows alone. Costs in units of about 0.1 us measured here: a key lookup with its row 6, a row of
    the full product 1.1, a membership question 5, about k·n/allowed of them (the allowed share)."""
    return allowed * 6 > n * 1.1 + 5 * k * n / allowed


class VectorIndex:
    """Exact cosine search over one model's unit vectors, in memory.

    Rows live in one float32 matrix whose capacity doubles when full (adding is amortized O(dim));
    removing moves the last row into the hole, so rows [0, len) are always dense and a search is one
    matrix-vector product over them. Not thread-safe: one event loop owns it.

    Each row may belong to one *group* (a label such as a scope: who may see it), kept as a small
    integer beside the row. A search restricted to some groups masks the scores of every other row
    before the top-k: one vectorized pass, so a person who may see 1 % of the items still gets their
    own top k, and a row without a group is in no group's results."""

    def __init__(self, model_id: str, dim: int | None = None, capacity: int = 1024) -> None:
        self.model_id = model_id
        self.dim = dim
        self._capacity = max(1, capacity)
        self._matrix: Vector | None = None if dim is None else np.empty((self._capacity, dim), dtype=np.float32)
        self._group_of_row = np.full(self._capacity, _NO_GROUP, dtype=np.int32)
        self._keys: list[ItemKey] = []
        self._slots: dict[ItemKey, int] = {}
        self._group_ids: dict[str, int] = {}
        self._group_names: list[str] = []

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._slots

    def keys(self) -> list[ItemKey]:
        """Every (kind, item id) in the index."""
        return list(self._keys)

    @property
    def capacity(self) -> int:
        return 0 if self._matrix is None else self._matrix.shape[0]

    def add(self, kind: str, item_id: str, vector: npt.ArrayLike, group: str | None = None) -> None:
        """Add or replace the vector of (kind, item_id), in `group` if given (else it keeps its group)."""
        vec = np.asarray(vector, dtype=np.float32)
        if vec.ndim != 1:
            raise ValueError(f"a vector must be 1-D, got shape {vec.shape}")
        if self.dim is None:
            self.dim = int(vec.shape[0])
        if vec.shape[0] != self.dim:
            raise ValueError(f"{self.model_id}: a {vec.shape[0]}-dimensional vector in a {self.dim}-dimensional index")
        key = (kind, str(item_id))
        slot = self._slots.get(key)
        if slot is None:
            slot = len(self._keys)
            self._reserve(slot + 1)
            self._keys.append(key)
            self._slots[key] = slot
        assert self._matrix is not None
        self._matrix[slot] = vec
        if group is not None:
            self._group_of_row[slot] = self._group_id(group)

    def add_many(self, items: Sequence[tuple[str, str, npt.ArrayLike]]) -> None:
        """add() for many (kind, item id, vector) at once: one copy into the matrix."""
        if not items:
            return
        block = np.asarray(np.stack([np.asarray(vec, dtype=np.float32) for _, _, vec in items]), dtype=np.float32)
        if block.ndim != 2:
            raise ValueError(f"vectors must be 1-D, got a block of shape {block.shape}")
        if self.dim is None:
            self.dim = int(block.shape[1])
        if block.shape[1] != self.dim:
            raise ValueError(f"{self.model_id}: {block.shape[1]}-dimensional vectors in a {self.dim}-dimensional index")
        self._reserve(len(self._keys) + len(items))
        assert self._matrix is not None
        slots = np.empty(len(items), dtype=np.intp)
        for i, (kind, item_id, _) in enumerate(items):
            key = (kind, str(item_id))
            slot = self._slots.get(key)
            if slot is None:
                slot = self._slots[key] = len(self._keys)
                self._keys.append(key)
            slots[i] = slot
        self._matrix[slots] = block  # a key given twice: its last vector wins, as with add()

    def remove(self, kind: str, item_id: str) -> bool:
        """Forget (kind, item_id); False when it was not there."""
        key = (kind, str(item_id))
        slot = self._slots.pop(key, None)
        if slot is None:
            return False
        last = len(self._keys) - 1
        if slot != last:
            assert self._matrix is not None
            moved = self._keys[last]
            self._matrix[slot] = self._matrix[last]
            self._group_of_row[slot] = self._group_of_row[last]
            self._keys[slot] = moved
            self._slots[moved] = slot
        self._group_of_row[last] = _NO_GROUP
        self._keys.pop()
        return True

    def set_groups(self, groups: Iterable[tuple[ItemKey, str]]) -> int:
        """Put items already in the index into groups ((kind, id), group); keys not in the index
        are ignored. How many were set."""
        done = 0
        for key, group in groups:
            slot = self._slots.get(key)
            if slot is not None:
                self._group_of_row[slot] = self._group_id(group)
                done += 1
        return done

    def group_of(self, kind: str, item_id: str) -> str | None:
        slot = self._slots.get((kind, str(item_id)))
        if slot is None or self._group_of_row[slot] == _NO_GROUP:
            return None
        return self._group_names[int(self._group_of_row[slot])]

    def _group_id(self, group: str) -> int:
        gid = self._group_ids.get(group)
        if gid is None:
            gid = self._group_ids[group] = len(self._group_names)
            self._group_names.append(group)
        return gid

    def search(
        self, query: npt.ArrayLike, k: int, allow: Allow = None, *, groups: Collection[str] | None = None
    ) -> list[tuple[str, str, float]]:
        """The `k` items most similar to `query` (a unit vector) as (kind, item id, cosine), best
        first, exact. `allow` restricts the ranking to some items, before the top-k: a collection
        of (kind, id) keys, or a predicate `allow(kind, id)`; None: everything. `groups` restricts
        it to the items of those groups (with `allow` too: items that pass both).

        A small allowed set is scored on its own rows. For a large one, looking every key up (about
        0.5 us each: 25 ms for 50k keys) would cost more than the search, so membership is checked
        on candidates in score order instead, as for a predicate: the best first, from a pool that
        widens until k pass. Same result either way; each candidate is asked at most once."""
        n = len(self._keys)
        if k < 1 or n == 0:
            return []
        assert self._matrix is not None
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        if q.shape[0] != self.dim:
            raise ValueError(f"{self.model_id}: a {q.shape[0]}-dimensional query in a {self.dim}-dimensional index")
        if groups is not None:
            return self._search_groups(q, k, allow, groups)
        if allow is None:
            return self._top(self._matrix[:n] @ q, np.arange(n), k)
        if callable(allow):
            predicate = allow
            return self._top_filtered(self._matrix[:n] @ q, k, lambda key: predicate(*key))
        size = len(allow)
        if size == 0:
            return []
        if _lazy_is_cheaper(size, n, k):
            return self._top_filtered(self._matrix[:n] @ q, k, allow.__contains__)
        slots = np.fromiter((s for s in map(self._slots.get, allow) if s is not None), dtype=np.intp)
        if slots.size == 0:
            return []
        slots.sort()  # reading the rows in memory order is faster
        return self._top(self._matrix[slots] @ q, slots, k)

    def _search_groups(self, q: Vector, k: int, allow: Allow, groups: Collection[str]) -> list[tuple[str, str, float]]:
        gids = [self._group_ids[g] for g in groups if g in self._group_ids]
        if not gids:
            return []
        n = len(self._keys)
        assert self._matrix is not None
        inside = np.isin(self._group_of_row[:n], np.asarray(gids, dtype=np.int32))
        slots = np.flatnonzero(inside)
        if slots.size == 0:
            return []
        if slots.size * 4 < n:  # a small share: score its rows alone
            scores = self._matrix[slots] @ q
        else:  # most rows: one product over all, the others never picked
            scores = (self._matrix[:n] @ q)[slots]
        if allow is None:
            return self._top(scores, slots, k)
        accept = (lambda key: allow(*key)) if callable(allow) else allow.__contains__
        return self._top_filtered(scores, k, accept, slots)

    def _top(
        self, scores: npt.NDArray[np.float32], slots: npt.NDArray[np.intp], k: int
    ) -> list[tuple[str, str, float]]:
        k = min(k, scores.shape[0])
        part = np.argpartition(-scores, k - 1)[:k] if k < scores.shape[0] else np.arange(scores.shape[0])
        order = part[np.lexsort((slots[part], -scores[part]))]  # best first; ties in insertion order
        return [(*self._keys[slots[i]], float(scores[i])) for i in order]

    def _top_filtered(
        self,
        scores: npt.NDArray[np.float32],
        k: int,
        accept: Callable[[ItemKey], bool],
        slots: npt.NDArray[np.intp] | None = None,
    ) -> list[tuple[str, str, float]]:
        """Top-k of the items `accept` takes: candidates in score order from a pool that widens
        (4 times each round) until k pass or every item was asked; each item is asked once.
        `scores[i]` is row `slots[i]`'s (None: row i's)."""
        n = scores.shape[0]
        pool = min(n, max(4 * k, 64))
        verdicts: dict[int, bool] = {}
        while True:
            part = np.argpartition(-scores, pool - 1)[:pool] if pool < n else np.arange(n)
            order = part[np.lexsort((part, -scores[part]))]  # best first; ties in insertion order
            found = []
            for i in order.tolist():
                key = self._keys[i if slots is None else int(slots[i])]
                ok = verdicts.get(i)
                if ok is None:
                    ok = verdicts[i] = bool(accept(key))
                if ok:
                    found.append((*key, float(scores[i])))
                    if len(found) == k:
                        return found
            if pool >= n:
                return found
            pool = min(n, pool * 4)

    def _reserve(self, size: int) -> None:
        assert self.dim is not None
        if self._matrix is None:
            self._matrix = np.empty((max(self._capacity, size), self.dim), dtype=np.float32)
        elif size > self._matrix.shape[0]:
            grown = np.empty((max(size, 2 * self._matrix.shape[0]), self.dim), dtype=np.float32)
            grown[: len(self._keys)] = self._matrix[: len(self._keys)]
            self._matrix = grown
        rows = self._matrix.shape[0]
        if self._group_of_row.shape[0] < rows:
            more = np.full(rows, _NO_GROUP, dtype=np.int32)
            more[: self._group_of_row.shape[0]] = self._group_of_row
            self._group_of_row = more

    async def load(self, store: VectorStore, model_id: str | None = None, *, page: int = 5000) -> int:
        """Add every vector `store` holds for this index's model (or `model_id`). How many."""
        model = model_id or self.model_id
        after: ItemKey | None = None
        count = 0
        while True:
            rows = await store.vectors(model, after=after, limit=page)
            self.add_many(rows)
            count += len(rows)
            if len(rows) < page:
                return count
            after = (rows[-1][0], rows[-1][1])
