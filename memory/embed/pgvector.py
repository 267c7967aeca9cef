"""PostgreSQL: the database is the index. pgvector's HNSW indexes over the stored vectors, and
the statements that search them for one asker; nothing loaded into the process.

PostgreSQL computes `embedding`, a `vector`, from the stored blob (migration 0012), so the rows
are written exactly as on SQLite. Models differ in dimension, so the column has none, and each
model's vectors of each kind get an HNSW index of their own on `embedding::vector(<dim>)`, partial
on the model and kind (pgvector's way to index one column of several dimensions), made when such
vectors are first stored or when the model's index is opened (`VectorStore.prepare`). A search
asks each kind's index for its nearest items that the asker may see (`Reach`, the lexical legs'
rules, checked by a join in the same statement), with pgvector's iterative scan so that a filter
that turns most neighbours away still fills the top k, and an exact scan of the visible items when
it does not.

Apart from the store (memory.embed.vectors) because this is all SQL that only PostgreSQL with
pgvector speaks; the store calls it (an index per model and kind as vectors are stored, the
search behind `VectorStore.nearest`), and memory.embed.index's DatabaseIndex stands on it.
"""

from __future__ import annotations

import hashlib
import logging
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    Text,
    bindparam,
    cast,
    func,
    literal_column,
    or_,
    select,
    text,
    union_all,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql import CompoundSelect
from sqlalchemy.types import UserDefinedType

from memory.embed.items import CHUNK, ItemKey, ItemKind, Vector, item_kind, source
from memory.store.db import Database
from memory.store.schema import (
    UTCDateTime,
    archived_messages,
    daily_chunks,
    memory_records,
    memory_vectors,
    sessions,
)

log = logging.getLogger("clawgate.vectors")

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
    return sum(ensure_hnsw(conn, model_id, item_kind(kind), int(dim)) for kind, dim in found)


@dataclass(frozen=True, slots=True)
class Reach:
    """What one asker may see, as the vector search filters it in the database: the same rules as
    the lexical legs (records of these scopes, and of every project when `include_projects`;
    archived messages of the sessions `archive_user` owns or of `archive_keys`; daily chunks of
    `daily_scopes`), on top of what is searchable at all (`source`)."""

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
    _item_id, _key, where, frm = source(kind, bindparam("now", type_=UTCDateTime))
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


def nearest_pg(
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


def cosines_pg(conn: Connection, model_id: str, query: Vector, keys: Sequence[ItemKey]) -> list[tuple[str, str, float]]:
    """The cosine to `query` of each of `keys` with a vector of `model_id`: one statement on the
    primary key for up to CHUNK of them (every kind asked with every id: the extra pairs it may
    find are dropped here)."""
    asked = set(keys)
    q = _pg_text(query)
    out: list[tuple[str, str, float]] = []
    for start in range(0, len(keys), CHUNK):
        part = keys[start : start + CHUNK]
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
