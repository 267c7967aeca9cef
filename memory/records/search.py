"""Full-text search over the memory records: RecordStore.search, and recall's records leg in its own
transaction (search_in), one way per database.

What search may find: active, unexpired records that are not traces, in the scopes asked (and every
project when asked), and never a record formed in a public conversation.

On SQLite the FTS5 index `memory_records_fts` (porter stemming, bm25), keyed by the
records' integer `seq` (see memory/store/schema.py), and for CJK text, which has no spaces between words,
`memory_records_cjk` (trigrams, records with CJK only); free text is cut into quoted terms joined
with OR by memory.archive.fulltext's helpers, so it never reaches FTS5 as syntax. PostgreSQL uses its
own full-text search (the `words` column of migration 0010); other databases use a LIKE scan.

Apart from the store because this is the part that knows the indexes and their query syntax.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, ColumnElement, Integer, and_, bindparam, case, column, func, literal_column, or_, select
from sqlalchemy import table as sql_table
from sqlalchemy.engine import Connection
from sqlalchemy.sql import Executable

from memory.archive.fulltext import (
    CjkQuery,
    fts_expression,
    indexed_count,
    informative_terms,
    merge_hits,
    porter_and_trigram,
    split_cjk,
)
from memory.archive.fulltext_pg import PG_LANGUAGE, pg_cjk_text, pg_like_score, pg_needles, pg_words_for
from memory.records.model import MemoryClass, MemoryRecord, RecordStatus, ScopeKind
from memory.records.rows import record_of
from memory.store.schema import memory_records

# The porter index and the CJK trigram one (migration 0006), each as a table and as the name MATCH takes.
_FTS_TABLES: dict[str, tuple[Any, ColumnElement[Any]]] = {
    name: (sql_table(name, column("rowid", Integer)), literal_column(name))
    for name in ("memory_records_fts", "memory_records_cjk")
}


# What search may return (see the module docstring), with the scopes asked, whether every project's
# memory counts too and the time as parameters (searchable_params): every statement here is built
# with it, the hot ones once at import, so that a turn only binds values. Building a select with its
# filters each call cost more than SQLite's own work on a small store (1.5 ms of 3.9 at 10,000 records).
SEARCHABLE = (
    or_(
        memory_records.c.scope.in_(bindparam("b_scopes", expanding=True)),
        and_(bindparam("b_projects", type_=Boolean), memory_records.c.scope_kind == ScopeKind.PROJECT.value),
    ),
    memory_records.c.status == RecordStatus.ACTIVE.value,
    memory_records.c.memory_class != MemoryClass.TRACE.value,
    or_(memory_records.c.expires_at.is_(None), memory_records.c.expires_at > bindparam("b_now")),
    memory_records.c.origin_audience != "public",
)


def searchable_params(scopes: Sequence[str], include_projects: bool, now: datetime) -> dict[str, Any]:
    """The values SEARCHABLE binds."""
    return {"b_scopes": list(scopes), "b_projects": include_projects, "b_now": now}


def search_fts(
    conn: Connection, terms: Sequence[str], scopes: Sequence[str], include_projects: bool, limit: int, now: datetime
) -> list[tuple[MemoryRecord, float]]:
    """SQLite: FTS5 ranked by bm25 (negative, lower is better: flipped here), newest first on ties;
    the CJK trigram index too when the query holds CJK (memory.archive.fulltext.split_cjk)."""
    params = searchable_params(scopes, include_projects, now)

    def porter(words: Sequence[str]) -> list[tuple[MemoryRecord, float]]:
        q = fts_expression(informative_terms(conn, "memory_records_fts", words))
        return _matching(conn, "memory_records_fts", q, params, limit)

    def trigram(cjk: CjkQuery) -> list[tuple[MemoryRecord, float]]:
        assert cjk.match is not None
        return _matching(conn, "memory_records_cjk", cjk.match, params, limit)

    def short(cjk: CjkQuery) -> list[tuple[MemoryRecord, float]]:
        # Too short for a trigram: a scan of the records the trigram index holds (those with CJK
        # in them). A run is CJK letters only, so it needs no LIKE escaping.
        docs = sql_table("memory_records_cjk_docsize", column("id", Integer))
        matched = [memory_records.c.content.like(f"%{run}%") for run in cjk.short]
        score = sum((case((m, 1), else_=0) for m in matched), start=literal_column("0")).label("score")
        rows = conn.execute(
            select(memory_records, score)
            # IN, not a join: SQLite then walks the index's ids instead of scanning every record.
            .where(memory_records.c.seq.in_(select(docs.c.id)), or_(*matched), *SEARCHABLE)
            .order_by(score.desc(), memory_records.c.seq.desc())
            .limit(limit),
            params,
        ).all()
        return [(record_of(r), float(r.score)) for r in rows]

    found = porter_and_trigram(conn, terms, "memory_records_cjk", porter, trigram, short, lambda r: r.id, limit)
    return list(found)


# On a large store the full-text leg ranks this many of FTS5's best matches before joining the
# records and their filters: at 100k records a question matches ~15k of them, and joining every
# match cost more than ranking them (30 ms against 17). A person who owns few of the matches may
# find fewer than asked among them: then every match is joined, as on a small store.
RANKED_FIRST = 200
RANK_FIRST_FROM = 5_000  # indexed texts


def _statements(fts_table: str) -> tuple[Executable, Executable, Executable]:
    """(the best `b_pool` matches joined and filtered, every match joined and filtered, whether there
    are `b_pool` matches or more) for one FTS5 table; `b_match` is the MATCH expression."""
    fts, fts_ref = _FTS_TABLES[fts_table]
    rank = func.bm25(fts_ref)
    matches = fts_ref.op("MATCH")(bindparam("b_match"))
    best = select(fts.c.rowid.label("seq"), rank.label("rank")).where(matches).order_by(rank).limit(bindparam("b_pool"))
    best_sub = best.subquery()
    ranked_first = (
        select(memory_records, best_sub.c.rank)
        .select_from(best_sub.join(memory_records, memory_records.c.seq == best_sub.c.seq))
        .where(*SEARCHABLE)
        .order_by(best_sub.c.rank, memory_records.c.seq.desc())
        .limit(bindparam("b_limit"))
    )
    every = (
        select(memory_records, rank.label("rank"))
        .select_from(fts.join(memory_records, memory_records.c.seq == fts.c.rowid))
        .where(matches, *SEARCHABLE)
        .order_by(rank, memory_records.c.seq.desc())
        .limit(bindparam("b_limit"))
    )
    inner = select(fts.c.rowid).where(matches).limit(bindparam("b_pool")).subquery()
    at_least = select(func.count()).select_from(inner)
    return ranked_first, every, at_least


_STATEMENTS = {name: _statements(name) for name in _FTS_TABLES}


def _matching(
    conn: Connection, fts_table: str, expression: str, params: dict[str, Any], limit: int
) -> list[tuple[MemoryRecord, float]]:
    ranked_first, every, at_least = _STATEMENTS[fts_table]
    pool = max(RANKED_FIRST, 10 * limit)
    bound = {**params, "b_match": expression, "b_limit": limit, "b_pool": pool}
    if indexed_count(conn, fts_table) >= RANK_FIRST_FROM:
        rows = conn.execute(ranked_first, bound).all()
        # A person who owns few of the best matches: every match is joined, as on a small store.
        if len(rows) >= limit or int(conn.execute(at_least, bound).scalar_one()) < pool:
            return [(record_of(r), -float(r.rank)) for r in rows]
    return [(record_of(r), -float(r.rank)) for r in conn.execute(every, bound).all()]


def search_like(
    conn: Connection,
    terms: Sequence[str],
    scopes: Sequence[str],
    include_projects: bool,
    limit: int,
    now: datetime,
    *also: ColumnElement[bool],
) -> list[tuple[MemoryRecord, float]]:
    """Any database: `lower(content) LIKE %term%`, scored by how many terms match; no stemming.
    `also`: more conditions (PostgreSQL's CJK leg narrows to the records with CJK text)."""
    content = func.lower(memory_records.c.content)
    matched = [content.contains(t, autoescape=True) for t in terms]
    score = sum((case((m, 1), else_=0) for m in matched), start=literal_column("0")).label("score")
    rows = conn.execute(
        select(memory_records, score)
        .where(or_(*matched), *SEARCHABLE, *also)
        .order_by(score.desc(), memory_records.c.seq.desc())
        .limit(limit),
        searchable_params(scopes, include_projects, now),
    ).all()
    return [(record_of(r), float(r.score)) for r in rows]


def search_pg(
    conn: Connection, terms: Sequence[str], scopes: Sequence[str], include_projects: bool, limit: int, now: datetime
) -> list[tuple[MemoryRecord, float]]:
    """PostgreSQL: its full-text search (English stemming and stop words), any term matching, ranked
    by ts_rank, newest first on ties; CJK runs, which it does not split into words, by LIKE."""
    words, runs = split_cjk(terms)
    found: list[list[tuple[MemoryRecord, float]]] = []
    if words:
        # Terms are letters and digits only (memory.archive.fulltext.query_terms): nothing in them is tsquery syntax.
        # Rows holding one of the rarest words, ranked by every informative one (fulltext_pg.pg_words_for).
        asked = pg_words_for(conn, "memory_records", words)
        query = func.to_tsquery(PG_LANGUAGE, asked.match)
        vector: ColumnElement[Any] = literal_column("memory_records.words")  # PostgreSQL only: migration 0010
        rank = func.ts_rank(vector, func.to_tsquery(PG_LANGUAGE, asked.rank)).label("rank")
        rows = conn.execute(
            select(memory_records, rank)
            .where(vector.op("@@")(query), *SEARCHABLE)
            .order_by(rank.desc(), memory_records.c.seq.desc())
            .limit(limit),
            searchable_params(scopes, include_projects, now),
        ).all()
        found.append([(record_of(r), float(r.rank)) for r in rows])
    # CJK runs, and words inside CJK text ("Tokyo" in "我在Tokyo工作"), by LIKE over the records that
    # hold CJK letters only: the predicate is the one migration 0010's partial index is built on.
    needles = pg_needles(conn, "memory_records", words, runs)  # words only where CJK text exists
    if needles:
        hits = search_like(conn, needles, scopes, include_projects, limit, now, pg_cjk_text("memory_records"))
        found.append([(r, pg_like_score(n, len(needles))) for r, n in hits])
    return merge_hits(found, lambda r: r.id, limit)


def search_in(
    conn: Connection, terms: Sequence[str], scopes: Sequence[str], include_projects: bool, limit: int, now: datetime
) -> list[tuple[MemoryRecord, float]]:
    dialect = conn.dialect.name
    run = search_fts if dialect == "sqlite" else search_pg if dialect == "postgresql" else search_like
    return run(conn, terms, scopes, include_projects, limit, now)
