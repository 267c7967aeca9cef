"""PostgreSQL's side of the shared full-text search (fulltext.py): to_tsquery over a table's
stored tsvector `words` (migrations 0010 and 0012: English stemming and stop words, ranked by
ts_rank), which words to match judged on PostgreSQL's own statistics (pg_words_for), and the LIKE
leg for CJK text, which its parser does not split into words (pg_needles, pg_like_score).

Used by the archive (search.py), memory records and the daily notes; apart from fulltext.py
because only PostgreSQL runs it. It shares fulltext.py's per-database cache of counts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, bindparam, literal_column, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection

from memory.archive.fulltext import (
    CJK_CHARS,
    COMMON_SHARE,
    COUNT_TTL_SECONDS,
    TERM_COUNTS_KEPT,
    TRIGRAM,
    counts,
)

# The text search configuration of every query: the one the stored `words` columns are made with
# (migrations 0010 and 0012).
PG_LANGUAGE = "english"
# What a CJK hit of the LIKE leg holding every needle scores: about what ts_rank gives a text that
# holds every word of the query once, so that neither leg outranks the other by its units alone.
PG_LIKE_FULL_MATCH = 0.1


def pg_tsquery(words: Sequence[str] | None = None, *, param: str = "q") -> ColumnElement[Any]:
    """`to_tsquery` of any of `words` (None: of the bound parameter `param`, pg_words(words) or a
    PgWords's). Terms are letters and digits only (query_terms): nothing in them is tsquery syntax."""
    return postgresql.to_tsquery(PG_LANGUAGE, bindparam(param) if words is None else pg_words(words))


def pg_words(words: Sequence[str]) -> str:
    return " | ".join(words)


def pg_cjk_text(table: str) -> ColumnElement[bool]:
    """The rows of `table` holding CJK letters: the predicate of its partial index `ix_<table>_cjk`."""
    return literal_column(f"{table}.content ~ '[{CJK_CHARS}]'")


def pg_needles(conn: Connection, table: str, words: Sequence[str], runs: Sequence[str]) -> list[str]:
    """What PostgreSQL's CJK leg looks for by LIKE in `table`: split_cjk's runs, and words that may
    sit inside CJK text ("Tokyo" in "我在Tokyo工作" is no word of the parser's). The words only when
    the table holds any CJK text (asked at most once a minute, as cjk_query asks on SQLite), so that
    an all-English store runs one statement per search, not two."""
    long_words = [w for w in words if len(w) >= TRIGRAM]
    if not runs and not (long_words and _pg_has_cjk(conn, table)):
        return []
    return [*runs, *long_words]


def _pg_has_cjk(conn: Connection, table: str) -> bool:
    known = counts(conn).has_texts
    now = time.monotonic()
    cached = known.get(table)
    if cached is None or now - cached[0] > COUNT_TTL_SECONDS:
        found = conn.execute(text(f"SELECT 1 FROM {table} WHERE {table}.content ~ '[{CJK_CHARS}]' LIMIT 1"))
        cached = known[table] = (now, found.first() is not None)
    return cached[1]


@dataclass(frozen=True, slots=True)
class PgWords:
    """What PostgreSQL's word search asks: a row must hold one of `match`, and is ranked by `rank`."""

    match: str  # OR-joined words: to_tsquery's text
    rank: str


# The word search finds the rows holding any of the rarest words, about this many rows at most, and
# ranks them by every informative word. ts_rank weighs a common word as much as a rare one (it
# knows no document frequency), and ranking every row a common word matches is what costs: at
# 110,000 records a question matched up to 40,000 of them (76 ms median, 242 ms p95 for the records
# alone); rows holding only commoner words rarely make the top k. With 5,000: 13 / 40 ms, and 89 %
# of the same top 20 (10,000: 26 / 78 ms, 97 %; measured with benchmarks/pg_recall.py's data).
PG_MATCH_BUDGET = 5_000


def pg_words_for(conn: Connection, table: str, words: Sequence[str]) -> PgWords:
    """The word search of `table` for `words`, judged on PostgreSQL's own statistics of the stored
    words (ANALYZE keeps the share of rows holding each of the most common lexemes, and the table's
    size: no count is run), read at most once a minute. A word is judged by its lexeme (stemmed as
    PostgreSQL stems it, asked once per word); one without any (a stop word there) is left out, as
    the search would leave it. Words in more than COMMON_SHARE of the rows are left out of both,
    as informative_terms does on SQLite, the rarest always kept; of the rest the rarest match, as
    many as PG_MATCH_BUDGET rows allow (one at least). Without statistics yet, every word does both."""
    every = pg_words(words)
    stats = _pg_stats(conn, table)
    if stats is None or len(words) < 2:
        return PgWords(every, every)
    rows, common, rarest = stats
    lexemes = _pg_lexemes(conn, words)
    # A word the statistics do not list is in fewer rows than the rarest one they do.
    shares = sorted((min(common.get(x, rarest) for x in lexemes[w]), w) for w in words if lexemes[w])
    if not shares:
        return PgWords(every, every)
    ranked = [(share, w) for share, w in shares if share <= COMMON_SHARE] or shares[:1]
    match: list[str] = []
    total = 0.0
    for share, w in ranked:
        if match and (total + share) * rows > PG_MATCH_BUDGET:
            break
        match.append(w)
        total += share
    return PgWords(pg_words(match), pg_words([w for _, w in ranked]))


def _pg_stats(conn: Connection, table: str) -> tuple[float, dict[str, float], float] | None:
    """(rows, lexeme -> share of the rows holding it for the most common lexemes, the smallest such
    share) of `table`'s stored words, from pg_stats; None before the table was first analyzed."""
    known = counts(conn).common
    now = time.monotonic()
    cached = known.get(table)
    if cached is None or now - cached[0] > COUNT_TTL_SECONDS:
        row = conn.execute(_PG_STATS, {"table": table, "relation": table}).first()
        found = None
        if row is not None and row.elems and row.rows > 0:
            # The shares come first, then the smallest and the largest of them.
            shares = {str(k): float(v) for k, v in zip(row.elems, row.shares, strict=False)}
            found = (float(row.rows), shares, float(row.shares[-2]))
        cached = known[table] = (now, found)
    return cached[1]


_PG_STATS = text(
    "SELECT most_common_elems::text::text[] AS elems, most_common_elem_freqs AS shares, "
    "(SELECT reltuples FROM pg_class WHERE oid = CAST(:relation AS regclass)) AS rows FROM pg_stats "
    "WHERE schemaname = current_schema() AND tablename = :table AND attname = 'words'"
)
_PG_LEXEMES = text(
    f"SELECT w, tsvector_to_array(to_tsvector('{PG_LANGUAGE}', w)) FROM unnest(CAST(:words AS text[])) AS w"
)


def _pg_lexemes(conn: Connection, words: Sequence[str]) -> dict[str, tuple[str, ...]]:
    cache = counts(conn).lexemes
    missing = [w for w in dict.fromkeys(words) if w not in cache]
    if missing:
        for word, found in conn.execute(_PG_LEXEMES, {"words": missing}):
            cache[word] = tuple(found or ())
    out = {}
    for w in words:
        out[w] = cache.get(w, ())
        if w in cache:
            cache.move_to_end(w)
    while len(cache) > TERM_COUNTS_KEPT:
        cache.popitem(last=False)
    return out


def pg_like_score(matched: float, needles: int) -> float:
    """A LIKE hit's score on ts_rank's scale: the share of the needles it holds."""
    return PG_LIKE_FULL_MATCH * matched / needles
