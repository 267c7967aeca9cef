"""The query side of full-text search, shared by every store that searches text: the archive
(search.py), memory records (memory/records/) and the daily notes (daily_index.py).

Free text never reaches a database as syntax: it is cut into word tokens (letters and digits),
stop words dropped, joined with OR (with AND a multi-word question would find nothing); FTS5 gets
each one quoted. CJK text (no spaces between words) is split into runs for the `<table>_cjk`
trigram indexes (split_cjk). On SQLite, terms too common to matter are left out by the FTS5
tables' own counts, kept a minute per database; the legs of a search are merged best first, and
snippets are cut around the first match. Apart from the archive's own searches because it knows
no table of its own: each store passes its statements in. PostgreSQL's side is fulltext_pg.py.
"""

from __future__ import annotations

import re
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from sqlalchemy.engine import Connection, Engine

SNIPPET_CHARS = 240
# A pasted page as a query would otherwise walk the posting list of every word in it; the first
# distinct words carry the question well enough.
MAX_TERMS = 64
ELLIPSIS = "…"

# Words that would match nearly every message and drown the ones that mean something.
STOP_WORDS = frozenset(
    """
    a about an and are as at be been but by can could did do does for from had has have how i if in
    is it its me my of on or our so than that the their them then there these they this to us was we
    were what when where which who why will with would you your
    """.split()
)

_WORD = re.compile(r"[^\W_]+")  # letters and digits, as FTS5's unicode61 tokenizer sees words


# --- pure helpers -------------------------------------------------------------------------------


def query_terms(query: str) -> list[str]:
    """The lowercase, distinct words of a free-text query, stop words dropped unless nothing else is left."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))
    meaningful = [w for w in words if w not in STOP_WORDS]
    return (meaningful or words)[:MAX_TERMS]


def fts_expression(terms: Sequence[str]) -> str:
    """An FTS5 MATCH expression finding any of `terms`: each a quoted string, so nothing is syntax."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


# CJK letters as the `<table>_cjk` trigram indexes see them (migration 0006 indexes the texts that
# hold any of these): CJK radicals to the end of the unified ideographs (kana, Hangul jamo and
# Bopomofo included), Hangul syllables, compatibility ideographs, half-width katakana.
CJK_CHARS = "\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f"
_CJK_RUN = re.compile(f"[{CJK_CHARS}]+")
TRIGRAM = 3


def split_cjk(terms: Sequence[str]) -> tuple[list[str], list[str]]:
    """The words of `terms` for the porter index and their CJK runs for the trigram one.

    CJK text has no spaces, so unicode61 sees "我在Tokyo工作" as one word: it becomes the word
    "tokyo" and the runs "我在" and "工作". Terms without CJK come back as they are."""
    if not any(_CJK_RUN.search(t) for t in terms):
        return list(terms), []
    words: list[str] = []
    runs: list[str] = []
    for term in terms:
        runs += _CJK_RUN.findall(term)
        words += [w for w in _CJK_RUN.split(term) if w and w not in STOP_WORDS]
    return list(dict.fromkeys(words)), list(dict.fromkeys(runs))[:MAX_TERMS]


@dataclass(frozen=True, slots=True)
class CjkQuery:
    """What to ask a `<table>_cjk` trigram index."""

    match: str | None  # MATCH expression: CJK runs and words of 3+ characters, each a phrase of trigrams
    short: tuple[str, ...]  # CJK runs of 1-2 characters, too short for a trigram: found by LIKE
    needles: tuple[str, ...]  # all of the above, for snippets


def cjk_query(conn: Connection, cjk_table: str, words: Sequence[str], runs: Sequence[str]) -> CjkQuery | None:
    """The trigram search for `words` and `runs` (split_cjk), None when there is nothing to ask.

    Words are looked for there too: a word inside CJK text ("Tokyo" in "我在Tokyo工作") is not a
    token of the porter index. Without CJK runs in the query this costs a query per turn only where
    the index holds any text (checked at most once a minute), so an all-English store runs exactly
    what it ran before."""
    long_words = [w for w in words if len(w) >= TRIGRAM]
    if not runs and not (long_words and _has_texts(conn, cjk_table)):
        return None
    phrases = [r for r in runs if len(r) >= TRIGRAM] + long_words
    short = tuple(r for r in runs if len(r) < TRIGRAM)
    return CjkQuery(fts_expression(phrases) if phrases else None, short, (*runs, *long_words))


@dataclass(slots=True)
class _Counts:
    """What one database's FTS5 tables were found to hold, with when it was counted (monotonic);
    on PostgreSQL, the shares of its most common lexemes and the lexemes of the words asked."""

    has_texts: dict[str, tuple[float, bool]]
    rows: dict[str, tuple[float, int]]
    terms: OrderedDict[tuple[str, str], tuple[float, int]]
    common: dict[str, tuple[float, tuple[float, dict[str, float], float] | None]] = field(default_factory=dict)
    lexemes: OrderedDict[str, tuple[str, ...]] = field(default_factory=OrderedDict)


# Per engine, and weakly: a new engine (a test's, a reopened store) never sees an old one's counts.
_COUNTS: weakref.WeakKeyDictionary[Engine, _Counts] = weakref.WeakKeyDictionary()
COUNT_TTL_SECONDS = 60.0


def counts(conn: Connection) -> _Counts:
    """The cache of counts of `conn`'s database (fulltext_pg.py keeps its statistics there too)."""
    found = _COUNTS.get(conn.engine)
    if found is None:
        found = _COUNTS[conn.engine] = _Counts({}, {}, OrderedDict())
    return found


def _has_texts(conn: Connection, fts_table: str) -> bool:
    """Whether an FTS5 table indexes any text, asked at most once a minute per database. (An
    external-content table reads its content table when scanned; its docsize table has a row per
    indexed text.)"""
    known = counts(conn).has_texts
    now = time.monotonic()
    cached = known.get(fts_table)
    if cached is None or now - cached[0] > COUNT_TTL_SECONDS:
        found = conn.exec_driver_sql(f"SELECT EXISTS (SELECT 1 FROM {fts_table}_docsize)").scalar()
        cached = known[fts_table] = (now, bool(found))
    return cached[1]


H = TypeVar("H")


def merge_hits(
    lists: Iterable[Iterable[tuple[H, float]]], key: Callable[[H], object], limit: int
) -> list[tuple[H, float]]:
    """Hits of several searches of one store as one list, best score first, at most `limit`, each
    item once with its best score."""
    best: dict[object, tuple[H, float]] = {}
    for hits in lists:
        for hit, score in hits:
            k = key(hit)
            if k not in best or score > best[k][1]:
                best[k] = (hit, score)
    return sorted(best.values(), key=lambda pair: -pair[1])[:limit]


def porter_and_trigram(
    conn: Connection,
    terms: Sequence[str],
    cjk_table: str,
    porter: Callable[[Sequence[str]], Sequence[tuple[H, float]]],
    trigram: Callable[[CjkQuery], Sequence[tuple[H, float]]],
    short: Callable[[CjkQuery], Sequence[tuple[H, float]]],
    key: Callable[[H], object],
    limit: int,
) -> Sequence[tuple[H, float]]:
    """One store's full-text search on SQLite, as (hit, positive score) best first: its porter
    index for the words of `terms` and, when cjk_query says so, its trigram index `cjk_table`
    (`trigram` for CjkQuery.match, `short` for runs too short for a trigram), merged. Each store
    passes its own statements; the order of the legs and the merge live here."""
    words, runs = split_cjk(terms)
    hits = porter(words) if words else []
    cjk = cjk_query(conn, cjk_table, words, runs)
    if cjk is None:
        return hits
    found = [hits]
    if cjk.match is not None:
        found.append(trigram(cjk))
    if cjk.short:
        found.append(short(cjk))
    return merge_hits(found, key, limit)


# A term found in more than this share of the indexed texts says little about any of them (its
# BM25 weight is near zero) but makes the search rank all of them: it is left out of the MATCH when
# rarer terms remain. ("benchmark message 5" over an archive where every message says "benchmark
# message" ranks a handful of rows instead of all of them.) Below MIN_ROWS_FOR_PRUNING texts,
# ranking every match costs less than counting the terms (a turn's daily notes: 0.6 ms of counts).
COMMON_SHARE = 0.3
MIN_ROWS_FOR_PRUNING = 1_000


def indexed_count(conn: Connection, fts_table: str) -> int:
    """How many texts the table indexes, counted at most once a minute (a count reads them all;
    an estimate is enough to tell a common term from a rare one, or a small table from a large one)."""
    rows = counts(conn).rows
    now = time.monotonic()
    cached = rows.get(fts_table)
    if cached is None or now - cached[0] > COUNT_TTL_SECONDS:
        cached = rows[fts_table] = (now, int(conn.exec_driver_sql(f"SELECT count(*) FROM {fts_table}").scalar() or 0))
    return cached[1]


TERM_COUNTS_KEPT = 4096  # per database


def _term_count(conn: Connection, fts_table: str, term: str) -> int:
    """How many texts match `term`. Counting a common term walks its whole posting list, so a count
    is reused for a minute: a term's share moves slowly."""
    terms = counts(conn).terms
    key = (fts_table, term)
    now = time.monotonic()
    cached = terms.get(key)
    if cached is not None and now - cached[0] <= COUNT_TTL_SECONDS:
        terms.move_to_end(key)
        return cached[1]
    n = int(
        conn.exec_driver_sql(
            f"SELECT count(*) FROM {fts_table} WHERE {fts_table} MATCH ?", (fts_expression([term]),)
        ).scalar()
        or 0
    )
    terms[key] = (now, n)
    terms.move_to_end(key)
    if len(terms) > TERM_COUNTS_KEPT:
        terms.popitem(last=False)
    return n


def informative_terms(conn: Connection, fts_table: str, terms: Sequence[str]) -> list[str]:
    """`terms` without those too common to matter, judged on the FTS5 table's own document counts
    (stemming included); the rarest term is always kept. SQLite only: one cheap count per term,
    reused for a minute."""
    if len(terms) < 2:
        return list(terms)
    total = indexed_count(conn, fts_table)
    if total < MIN_ROWS_FOR_PRUNING:
        return list(terms)
    counted = [(_term_count(conn, fts_table, t), t) for t in terms]
    kept = [t for n, t in counted if n <= total * COMMON_SHARE]
    return kept or [min(counted)[1]]


def make_snippet(content: str, match_at: int | None = None, width: int = SNIPPET_CHARS) -> str:
    """At most `width` characters of `content` around `match_at` (its start when None), whitespace
    collapsed, cut at word boundaries where one is near, with "…" on each side that was cut."""
    if len(content) <= width:
        return " ".join(content.split())
    budget = width - 2 * len(ELLIPSIS)
    at = min(max(match_at or 0, 0), len(content))
    start = max(0, at - budget // 4)  # some context before the match, most of the room after it
    end = min(len(content), start + budget)
    start = max(0, end - budget)
    slack = 20
    if start > 0:
        space = content.find(" ", start, min(at, start + slack))
        if space != -1:
            start = space + 1
    if end < len(content):
        space = content.rfind(" ", max(at, end - slack), end)
        if space != -1:
            end = space
    body = " ".join(content[start:end].split())
    return (ELLIPSIS if start > 0 else "") + body + (ELLIPSIS if end < len(content) else "")


def first_match(content: str, terms: Sequence[str]) -> int | None:
    """Where the earliest of `terms` occurs in `content`, ignoring case; None when none does."""
    if not terms:
        return None
    found = re.search("|".join(re.escape(t) for t in terms), content, re.IGNORECASE)
    return None if found is None else found.start()
