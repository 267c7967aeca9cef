"""Searching the session archive (DESIGN §4) on each database, behind visibility.py's rules.

On SQLite the search runs on the FTS5 index `archived_messages_fts` (porter stemming, ranked by
bm25) and, for CJK text (no spaces between words), on the trigram index `archived_messages_cjk`
(split_cjk). On PostgreSQL it runs on the stored tsvector `words` (migration 0012: English stemming
and stop words, ranked by ts_rank, as records are) and, for CJK, by LIKE over the messages holding
CJK letters; other databases use a portable LIKE scan. The terms come from fulltext.query_terms.

Apart from store.py because it is the archive's half of the full-text search: its statements,
built once per shape of asker, over the shared helpers of fulltext.py and fulltext_pg.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    bindparam,
    case,
    column,
    func,
    literal_column,
    or_,
    select,
    table,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection, Row

from memory.archive.fulltext import (
    CjkQuery,
    first_match,
    fts_expression,
    informative_terms,
    make_snippet,
    merge_hits,
    porter_and_trigram,
    split_cjk,
)
from memory.archive.fulltext_pg import (
    PG_LANGUAGE,
    pg_cjk_text,
    pg_like_score,
    pg_needles,
    pg_tsquery,
    pg_words_for,
)
from memory.archive.visibility import HIT_COLUMNS, ArchiveHit, to_hit, visible, visible_params
from memory.store.schema import archived_messages, sessions

# Marks where FTS5 found the first match (a private-use character no one types).
_MARK = "\ue000"

_fts = table("archived_messages_fts", column("rowid", Integer))
_FTS_TABLE: ColumnElement[Any] = literal_column("archived_messages_fts")


def search_in(
    conn: Connection,
    terms: Sequence[str],
    user_id: str | None,
    session_keys: Sequence[str],
    limit: int,
    snippets: bool = True,
) -> list[ArchiveHit]:
    dialect = conn.dialect.name
    if dialect == "sqlite":
        return search_fts(conn, terms, user_id, session_keys, limit, snippets)
    if dialect == "postgresql":
        return search_pg(conn, terms, user_id, session_keys, limit, snippets)
    return search_like(conn, terms, user_id, session_keys, limit)


def search_fts(
    conn: Connection,
    terms: Sequence[str],
    user_id: str | None,
    session_keys: Sequence[str],
    limit: int,
    snippets: bool = True,
) -> list[ArchiveHit]:
    """SQLite: FTS5 with porter stemming, ranked by bm25 (negative, lower is better: flipped here),
    and the CJK trigram index when the query holds CJK (split_cjk). Without `snippets` (recall
    reads whole messages) the match runs once instead of twice."""
    by_user, by_keys, params = visible_params(user_id, session_keys)

    def porter(words: Sequence[str]) -> list[tuple[ArchiveHit, float]]:
        return [(h, h.score) for h in _porter_hits(conn, words, by_user, by_keys, params, limit, snippets)]

    def trigram(cjk: CjkQuery) -> list[tuple[ArchiveHit, float]]:
        statement = _plain(by_user, by_keys, "archived_messages_cjk")
        rows = conn.execute(statement, {**params, "q": cjk.match, "limit": limit}).all()
        return [(_cjk_hit(r, cjk, snippets, -float(r.rank)), -float(r.rank)) for r in rows]

    def short(cjk: CjkQuery) -> list[tuple[ArchiveHit, float]]:
        rows = _short_rows(conn, cjk, by_user, by_keys, params, limit)
        return [(_cjk_hit(r, cjk, snippets, float(r.score)), float(r.score)) for r in rows]

    found = porter_and_trigram(conn, terms, "archived_messages_cjk", porter, trigram, short, lambda h: h.id, limit)
    return [hit for hit, _ in found]


def _cjk_hit(row: Row[*tuple[Any, ...]], cjk: CjkQuery, snippets: bool, score: float) -> ArchiveHit:
    snippet = make_snippet(row.content, first_match(row.content, cjk.needles)) if snippets else ""
    return to_hit(row, snippet, score)


def _short_rows(
    conn: Connection, cjk: CjkQuery, by_user: bool, by_keys: bool, params: dict[str, Any], limit: int
) -> Sequence[Row[*tuple[Any, ...]]]:
    """Visible messages holding one of the 1-2 character CJK runs (no trigram to look up: a scan of
    the messages the trigram index holds, the ones with CJK in them), scored by how many match.
    A run is CJK letters only, so it needs no LIKE escaping."""
    docs = table("archived_messages_cjk_docsize", column("id", Integer))
    matched = [archived_messages.c.content.like(f"%{run}%") for run in cjk.short]
    score = sum((case((m, 1), else_=0) for m in matched), start=literal_column("0")).label("score")
    return conn.execute(
        select(*HIT_COLUMNS, score)
        .select_from(archived_messages.join(sessions, sessions.c.id == archived_messages.c.session_id))
        # IN, not a join: SQLite then walks the index's ids instead of scanning every message.
        .where(archived_messages.c.id.in_(select(docs.c.id)), or_(*matched), *visible(by_user, by_keys))
        .order_by(score.desc(), archived_messages.c.id.desc())
        .limit(limit),
        params,
    ).all()


def _porter_hits(
    conn: Connection,
    terms: Sequence[str],
    by_user: bool,
    by_keys: bool,
    params: dict[str, Any],
    limit: int,
    snippets: bool,
) -> list[ArchiveHit]:
    terms = informative_terms(conn, "archived_messages_fts", terms)
    if not snippets:
        plain = conn.execute(_plain(by_user, by_keys), {**params, "q": fts_expression(terms), "limit": limit}).all()
        return [to_hit(r, "", -float(r.rank)) for r in plain]
    match = _FTS_TABLE.op("MATCH")(fts_expression(terms))
    rank = func.bm25(_FTS_TABLE)
    # highlight() marks where the first matching token starts, stemming included ("running" finds
    # "runs"); it reads the whole message, so it is asked only for the rows that are returned.
    marked = func.highlight(_FTS_TABLE, 0, _MARK, "")
    ranked = (
        select(archived_messages.c.id, rank.label("rank"))
        .select_from(
            _fts.join(archived_messages, archived_messages.c.id == _fts.c.rowid).join(
                sessions, sessions.c.id == archived_messages.c.session_id
            )
        )
        .where(match, *visible(by_user, by_keys))
        .order_by(rank, archived_messages.c.id.desc())
        .limit(limit)
    )
    ranked_rows = ranked.subquery()
    rows = conn.execute(
        select(*HIT_COLUMNS, ranked_rows.c.rank, marked.label("marked"))
        .select_from(
            ranked_rows.join(_fts, _fts.c.rowid == ranked_rows.c.id)
            .join(archived_messages, archived_messages.c.id == ranked_rows.c.id)
            .join(sessions, sessions.c.id == archived_messages.c.session_id)
        )
        .where(match)
        .order_by(ranked_rows.c.rank, archived_messages.c.id.desc()),
        params,
    ).all()
    hits = []
    for row in rows:
        at = row.marked.find(_MARK) if _MARK not in row.content else -1
        start = at if at != -1 else first_match(row.content, terms)
        hits.append(to_hit(row, make_snippet(row.content, start), -float(row.rank)))
    return hits


_PLAIN: dict[tuple[str, bool, bool], Select[Any]] = {}


def _plain(by_user: bool, by_keys: bool, fts_table: str = "archived_messages_fts") -> Select[Any]:
    """The search of `fts_table` without snippets, built once per table and shape of asker with
    everything bound as a parameter: recall runs it every turn, and building it cost more than
    running it."""
    cached = _PLAIN.get((fts_table, by_user, by_keys))
    if cached is not None:
        return cached
    fts = table(fts_table, column("rowid", Integer))
    fts_ref: ColumnElement[Any] = literal_column(fts_table)
    rank = func.bm25(fts_ref)
    stmt: Select[Any] = (
        select(*HIT_COLUMNS, rank.label("rank"))
        .select_from(
            fts.join(archived_messages, archived_messages.c.id == fts.c.rowid).join(
                sessions, sessions.c.id == archived_messages.c.session_id
            )
        )
        .where(fts_ref.op("MATCH")(bindparam("q")), *visible(by_user, by_keys))
        # By the selected column, not the function again: bm25 once per matching row, not twice.
        .order_by(literal_column("rank"), archived_messages.c.id.desc())
        .limit(bindparam("limit"))
    )
    _PLAIN[(fts_table, by_user, by_keys)] = stmt
    return stmt


def search_like(
    conn: Connection,
    terms: Sequence[str],
    user_id: str | None,
    session_keys: Sequence[str],
    limit: int,
    *also: ColumnElement[bool],
) -> list[ArchiveHit]:
    """Any database: a scan with `lower(content) LIKE %term%`, scored by how many terms match; no
    stemming. `also`: more conditions (PostgreSQL's CJK leg narrows to the messages with CJK text)."""
    content = func.lower(archived_messages.c.content)
    matched = [content.like("%" + _escape_like(t) + "%", escape="\\") for t in terms]
    score = sum((case((m, 1), else_=0) for m in matched), start=literal_column("0")).label("score")
    by_user, by_keys, params = visible_params(user_id, session_keys)
    rows = conn.execute(
        select(*HIT_COLUMNS, score)
        .select_from(archived_messages.join(sessions, sessions.c.id == archived_messages.c.session_id))
        .where(or_(*matched), *visible(by_user, by_keys), *also)
        .order_by(score.desc(), archived_messages.c.id.desc())
        .limit(limit),
        params,
    ).all()
    return [to_hit(r, make_snippet(r.content, first_match(r.content, terms)), float(r.score)) for r in rows]


def _escape_like(term: str) -> str:
    return term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


# --- PostgreSQL ---------------------------------------------------------------------------------

_WORDS: ColumnElement[Any] = literal_column("archived_messages.words")  # PostgreSQL only: migration 0012
# ts_headline marks each match (stemmed, as the search found it) in the whole text; only the first
# mark's place is used, and the text before it is unchanged.
_HEADLINE_OPTIONS = f'HighlightAll=true, StartSel={_MARK}, StopSel=""'


def search_pg(
    conn: Connection,
    terms: Sequence[str],
    user_id: str | None,
    session_keys: Sequence[str],
    limit: int,
    snippets: bool = True,
) -> list[ArchiveHit]:
    """PostgreSQL: its full-text search over the stored words (English stemming and stop words), any
    term matching, ranked by ts_rank, newest first on ties; CJK runs, which its parser does not split
    into words, by LIKE over the messages with CJK letters. Scores on the scale of memory.records.search.search_pg."""
    words, runs = split_cjk(terms)
    by_user, by_keys, params = visible_params(user_id, session_keys)
    found: list[list[tuple[ArchiveHit, float]]] = []
    if words:
        asked = pg_words_for(conn, "archived_messages", words)
        statement = _pg_statement(by_user, by_keys, snippets)
        rows = conn.execute(statement, {**params, "q": asked.match, "r": asked.rank, "limit": limit})
        hits = []
        for row in rows:
            snippet = ""
            if snippets:
                at = row.marked.find(_MARK) if _MARK not in row.content else -1
                snippet = make_snippet(row.content, at if at != -1 else first_match(row.content, words))
            hits.append(to_hit(row, snippet, float(row.rank)))
        found.append([(h, h.score) for h in hits])
    needles = pg_needles(conn, "archived_messages", words, runs)
    if needles:
        like = search_like(conn, needles, user_id, session_keys, limit, pg_cjk_text("archived_messages"))
        scored = [(h, pg_like_score(h.score, len(needles))) for h in like]
        found.append([(replace(h, score=s, snippet=h.snippet if snippets else ""), s) for h, s in scored])
    return [hit for hit, _ in merge_hits(found, lambda h: h.id, limit)]


_PG: dict[tuple[bool, bool, bool], Select[Any]] = {}


def _pg_statement(by_user: bool, by_keys: bool, snippets: bool) -> Select[Any]:
    """The word search, built once per shape of asker (recall runs it every turn), everything bound:
    the OR-joined words as `q`, `limit`. With `snippets`, ts_headline for the returned rows only."""
    cached = _PG.get((by_user, by_keys, snippets))
    if cached is not None:
        return cached
    rank = func.ts_rank(_WORDS, pg_tsquery(param="r"))
    ranked: Select[Any] = (
        select(*HIT_COLUMNS, rank.label("rank"))
        .select_from(archived_messages.join(sessions, sessions.c.id == archived_messages.c.session_id))
        .where(_WORDS.op("@@")(pg_tsquery()), *visible(by_user, by_keys))
        .order_by(literal_column("rank").desc(), archived_messages.c.id.desc())
        .limit(bindparam("limit"))
    )
    stmt = ranked
    if snippets:
        best = ranked.subquery()
        marked = postgresql.ts_headline(PG_LANGUAGE, best.c.content, pg_tsquery(param="r"), _HEADLINE_OPTIONS)
        stmt = select(best, marked.label("marked")).order_by(best.c.rank.desc(), best.c.id.desc())
    _PG[(by_user, by_keys, snippets)] = stmt
    return stmt
