"""Embeddings of searchable items, stored per model (DESIGN §7): written, checked, pruned, counted.

Which items are searchable is memory.embed.items' to say. An item's text is its `content`,
exactly: the vector stored for it carries the hash of the text that was embedded, so a changed
text shows up as missing again and is re-embedded.

`VectorStore.upsert` checks each vector against the item's current text in the same transaction and
skips it when the item changed or left the searchable set since it was read (edited, forgotten,
re-chunked): a vector in the table always describes text that was searchable when it was written.
Vectors of items that stopped being searchable are removed by `delete` (the writer knows) or
`prune` (a sweep), so nothing derived from a forgotten text outlives it.

Finding changed texts without hashing every row on every call: archived messages never change (ids
are never reused, archived rows never updated), records change only with a newer `updated_at`, and
daily chunks are few; only those candidates are hashed.

The search over these vectors is elsewhere: memory.embed.index (in memory, SQLite) and
memory.embed.pgvector (in the database, PostgreSQL), which `VectorStore` asks on PostgreSQL.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Collection, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import (
    ColumnElement,
    and_,
    case,
    delete,
    exists,
    false,
    func,
    insert,
    null,
    or_,
    select,
    true,
)
from sqlalchemy.engine import Connection
from sqlalchemy.sql import Select

from memory.embed.items import CHUNK, KINDS, ItemKey, ItemKind, Vector, item_kind, source
from memory.embed.pgvector import (
    Reach,
    cosines_pg,
    ensure_hnsw,
    nearest_pg,
    prepare_indexes,
    searched_in_database,
)
from memory.store.db import Database
from memory.store.schema import archived_messages, daily_chunks, memory_records, memory_vectors, sessions

log = logging.getLogger("clawgate.vectors")

_PAGE = 1000  # rows per read when scanning for missing vectors or loading an index


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


# --- each kind's texts, keys and vectors ---------------------------------------------------------


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
    item_id, key, where, frm = source(kind, now)
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
    item_id, key, where, frm = source(kind, now)
    keys = [_key_value(kind, i) for i in ids if kind == "record" or i.isdigit()]
    hashes: dict[str, str] = {}
    for start in range(0, len(keys), CHUNK):
        part = keys[start : start + CHUNK]
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
    for start in range(0, len(ids), CHUNK):
        conn.execute(
            delete(memory_vectors).where(
                v.item_kind == kind, v.model_id == model_id, v.item_id.in_(ids[start : start + CHUNK])
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
    for start in range(0, len(ids), CHUNK):
        part = list(ids[start : start + CHUNK])
        where = and_(memory_vectors.c.item_kind == kind, memory_vectors.c.item_id.in_(part))
        gone += int(conn.execute(delete(memory_vectors).where(where)).rowcount)
    return gone


def _prune(conn: Connection, now: datetime) -> int:
    gone = 0
    for kind in KINDS:
        item_id, _key, where, frm = source(kind, now)
        searchable = select(item_id).select_from(frm).where(*where)
        stmt = delete(memory_vectors).where(
            memory_vectors.c.item_kind == kind, memory_vectors.c.item_id.not_in(searchable)
        )
        gone += int(conn.execute(stmt).rowcount)
    return gone


def _coverage(conn: Connection, model_id: str, now: datetime) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for kind in KINDS:
        item_id, _key, where, frm = source(kind, now)
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
    for start in range(0, len(values), CHUNK):
        rows = conn.execute(stmt.where(key.in_(values[start : start + CHUNK]))).all()
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
        k = item_kind(kind)
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
        return await self._db.write(_delete, item_kind(kind), ids) if ids else 0

    async def missing(
        self, kind: str, model_id: str, limit: int, *, after: str | None = None, now: datetime | None = None
    ) -> list[tuple[str, str]]:
        """Up to `limit` searchable items of `kind` as (item id, text) without a current vector for
        `model_id` (none yet, or one of an older text), in id order. `after`: continue past this
        item id (a backfill passes the last id it got, so a pass over everything reads each row
        once)."""
        if limit < 1:
            return []
        return await self._db.read(_missing, item_kind(kind), model_id, limit, after, False, now or datetime.now(UTC))

    async def items(
        self, kind: str, limit: int, *, after: str | None = None, now: datetime | None = None
    ) -> list[tuple[str, str]]:
        """Every searchable item of `kind` as (item id, text), in id order, a page at a time (for a
        forced re-embedding)."""
        if limit < 1:
            return []
        return await self._db.read(_missing, item_kind(kind), "", limit, after, True, now or datetime.now(UTC))

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
        return await self._db.read(_places, item_kind(kind), ids) if ids else {}

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
        cosine), best first (see memory.embed.pgvector). `exact`: without the HNSW index (what tests
        and benchmarks measure the index against)."""
        q = _query_vector(query)
        if k < 1:
            return []
        return await self._db.read_in_transaction(nearest_pg, model_id, q, k, reach, now or datetime.now(UTC), exact)

    async def cosines(
        self, model_id: str, query: npt.ArrayLike, keys: Collection[ItemKey]
    ) -> list[tuple[str, str, float]]:
        """PostgreSQL: the cosine to `query` of each of `keys` with a vector of `model_id`, best first."""
        q = _query_vector(query)
        if not keys:
            return []
        return await self._db.read(cosines_pg, model_id, q, [(str(kind), str(i)) for kind, i in keys])

    async def vectors(
        self, model_id: str, *, after: ItemKey | None = None, limit: int = _PAGE
    ) -> list[tuple[str, str, Vector]]:
        """Stored vectors of `model_id` as (kind, item id, vector), ordered by (kind, id), a page at a time."""
        rows = await self._db.read(_vectors, model_id, after, limit)
        return [(kind, item_id, from_blob(blob, dim)) for kind, item_id, blob, dim in rows]
