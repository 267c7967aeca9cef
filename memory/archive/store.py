"""Reading and searching the session archive: the messages pruned from a session's context (DESIGN §4).

On SQLite the search runs on the FTS5 index `archived_messages_fts` (porter stemming, ranked by
bm25) and, for CJK text (no spaces between words), on the trigram index `archived_messages_cjk`
(split_cjk). On PostgreSQL it runs on the stored tsvector `words` (migration 0012: English stemming
and stop words, ranked by ts_rank, as records are) and, for CJK, by LIKE over the messages holding
CJK letters; other databases use a portable LIKE scan. Free text never reaches either as syntax: it
is cut into word tokens (letters and digits), joined with OR (with AND a multi-word question would
find nothing); FTS5 gets each one quoted.

Privacy (DESIGN §5): a person sees the archive of their own sessions and of the conversation they
are in, never another person's; sessions kept out of memory and public conversations are never
returned, not even to the operator.
"""

from __future__ import annotations

import re
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    bindparam,
    case,
    column,
    false,
    func,
    literal_column,
    or_,
    select,
    table,
    text,
    union_all,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection, Engine, Row
from sqlalchemy.sql.selectable import CompoundSelect

from memory.store.db import Database
from memory.store.schema import archived_messages, sessions

SNIPPET_CHARS = 240
MAX_LIMIT = 50
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
_SEARCHED_ROLES = ("user", "assistant")
# Marks where FTS5 found the first match (a private-use character no one types).
_MARK = "\ue000"

_fts = table("archived_messages_fts", column("rowid", Integer))
_FTS_TABLE: ColumnElement[Any] = literal_column("archived_messages_fts")
_HIT_COLUMNS = (
    archived_messages.c.id,
    archived_messages.c.session_id,
    sessions.c.key,
    sessions.c.user_id,
    archived_messages.c.role,
    archived_messages.c.author,
    archived_messages.c.content,
    archived_messages.c.created_at,
    archived_messages.c.archived_at,
)


@dataclass(frozen=True, slots=True)
class ArchiveHit:
    id: int
    session_id: int
    session_key: str
    user_id: str | None  # the session's owner
    role: str
    author: str | None
    content: str
    snippet: str  # at most SNIPPET_CHARS, around the first match, "…" where cut
    created_at: datetime
    archived_at: datetime
    score: float  # higher is better; only comparable within one search


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


def _counts(conn: Connection) -> _Counts:
    counts = _COUNTS.get(conn.engine)
    if counts is None:
        counts = _COUNTS[conn.engine] = _Counts({}, {}, OrderedDict())
    return counts


def _has_texts(conn: Connection, fts_table: str) -> bool:
    """Whether an FTS5 table indexes any text, asked at most once a minute per database. (An
    external-content table reads its content table when scanned; its docsize table has a row per
    indexed text.)"""
    known = _counts(conn).has_texts
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
    rows = _counts(conn).rows
    now = time.monotonic()
    cached = rows.get(fts_table)
    if cached is None or now - cached[0] > COUNT_TTL_SECONDS:
        cached = rows[fts_table] = (now, int(conn.exec_driver_sql(f"SELECT count(*) FROM {fts_table}").scalar() or 0))
    return cached[1]


TERM_COUNTS_KEPT = 4096  # per database


def _term_count(conn: Connection, fts_table: str, term: str) -> int:
    """How many texts match `term`. Counting a common term walks its whole posting list, so a count
    is reused for a minute: a term's share moves slowly."""
    terms = _counts(conn).terms
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


# --- queries ------------------------------------------------------------------------------------


def _visible(by_user: bool, by_keys: bool) -> list[ColumnElement[bool]]:
    """Filters for what the asker may see (see the module docstring), the asker bound as parameters
    (`_visible_params`): with neither a user nor keys, every session (the operator's view)."""
    return [archived_messages.c.role.in_(_SEARCHED_ROLES), *_visible_sessions(by_user, by_keys)]


def _visible_sessions(by_user: bool, by_keys: bool) -> list[ColumnElement[bool]]:
    """The sessions part of _visible: which sessions' messages the asker may see."""
    rules: list[ColumnElement[bool]] = [sessions.c.memory_excluded.is_(false()), sessions.c.audience != "public"]
    mine: list[ColumnElement[bool]] = []
    if by_user:
        mine.append(sessions.c.user_id == bindparam("v_user"))
    if by_keys:
        mine.append(sessions.c.key.in_(bindparam("v_keys", expanding=True)))
    if mine:
        rules.append(or_(*mine))
    return rules


def _visible_params(user_id: str | None, session_keys: Sequence[str]) -> tuple[bool, bool, dict[str, Any]]:
    params: dict[str, Any] = {}
    if user_id is not None:
        params["v_user"] = user_id
    if session_keys:
        params["v_keys"] = list(session_keys)
    return user_id is not None, bool(session_keys), params


def _hit(row: Row[*tuple[Any, ...]], snippet: str, score: float) -> ArchiveHit:
    return ArchiveHit(
        id=row.id,
        session_id=row.session_id,
        session_key=row.key,
        user_id=row.user_id,
        role=row.role,
        author=row.author,
        content=row.content,
        snippet=snippet,
        created_at=row.created_at,
        archived_at=row.archived_at,
        score=score,
    )


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
    by_user, by_keys, params = _visible_params(user_id, session_keys)

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
    return _hit(row, snippet, score)


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
        select(*_HIT_COLUMNS, score)
        .select_from(archived_messages.join(sessions, sessions.c.id == archived_messages.c.session_id))
        # IN, not a join: SQLite then walks the index's ids instead of scanning every message.
        .where(archived_messages.c.id.in_(select(docs.c.id)), or_(*matched), *_visible(by_user, by_keys))
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
        return [_hit(r, "", -float(r.rank)) for r in plain]
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
        .where(match, *_visible(by_user, by_keys))
        .order_by(rank, archived_messages.c.id.desc())
        .limit(limit)
    )
    ranked_rows = ranked.subquery()
    rows = conn.execute(
        select(*_HIT_COLUMNS, ranked_rows.c.rank, marked.label("marked"))
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
        hits.append(_hit(row, make_snippet(row.content, start), -float(row.rank)))
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
        select(*_HIT_COLUMNS, rank.label("rank"))
        .select_from(
            fts.join(archived_messages, archived_messages.c.id == fts.c.rowid).join(
                sessions, sessions.c.id == archived_messages.c.session_id
            )
        )
        .where(fts_ref.op("MATCH")(bindparam("q")), *_visible(by_user, by_keys))
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
    by_user, by_keys, params = _visible_params(user_id, session_keys)
    rows = conn.execute(
        select(*_HIT_COLUMNS, score)
        .select_from(archived_messages.join(sessions, sessions.c.id == archived_messages.c.session_id))
        .where(or_(*matched), *_visible(by_user, by_keys), *also)
        .order_by(score.desc(), archived_messages.c.id.desc())
        .limit(limit),
        params,
    ).all()
    return [_hit(r, make_snippet(r.content, first_match(r.content, terms)), float(r.score)) for r in rows]


# --- PostgreSQL ---------------------------------------------------------------------------------

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
    known = _counts(conn).has_texts
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
    known = _counts(conn).common
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
    cache = _counts(conn).lexemes
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
    into words, by LIKE over the messages with CJK letters. Scores on the scale of records.search_pg."""
    words, runs = split_cjk(terms)
    by_user, by_keys, params = _visible_params(user_id, session_keys)
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
            hits.append(_hit(row, snippet, float(row.rank)))
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
        select(*_HIT_COLUMNS, rank.label("rank"))
        .select_from(archived_messages.join(sessions, sessions.c.id == archived_messages.c.session_id))
        .where(_WORDS.op("@@")(pg_tsquery()), *_visible(by_user, by_keys))
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


def _escape_like(term: str) -> str:
    return term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


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


def _for_session(conn: Connection, session_id: int, limit: int) -> list[ArchiveHit]:
    rows = conn.execute(
        select(*_HIT_COLUMNS)
        .select_from(archived_messages.join(sessions, sessions.c.id == archived_messages.c.session_id))
        .where(archived_messages.c.session_id == session_id)
        .order_by(archived_messages.c.id)
        .limit(limit)
    ).all()
    return [_hit(r, make_snippet(r.content), 0.0) for r in rows]


def _by_ids_statement(by_user: bool, by_keys: bool) -> Select[Any]:
    """Messages by id behind the visibility rules, built once per shape of asker (recall loads its
    vector hits and neighbours with it every turn; building it cost ten times running it)."""
    cached = _BY_IDS.get((by_user, by_keys))
    if cached is not None:
        return cached
    stmt: Select[Any] = (
        select(*_HIT_COLUMNS)
        .select_from(archived_messages.join(sessions, sessions.c.id == archived_messages.c.session_id))
        .where(archived_messages.c.id.in_(bindparam("ids", expanding=True)), *_visible(by_user, by_keys))
    )
    _BY_IDS[(by_user, by_keys)] = stmt
    return stmt


_BY_IDS: dict[tuple[bool, bool], Select[Any]] = {}


def visible_in(
    conn: Connection, ids: Sequence[int], user_id: str | None, session_keys: Sequence[str], *, snippets: bool = True
) -> list[ArchiveHit]:
    """The messages of `ids` the asker may see (ArchiveStore.visible, in a caller's transaction).
    Without `snippets` (recall reads the whole text) each hit's snippet is empty."""
    by_user, by_keys, params = _visible_params(user_id, session_keys)
    rows = conn.execute(_by_ids_statement(by_user, by_keys), {**params, "ids": list(ids)}).all()
    return [_hit(r, make_snippet(r.content) if snippets else "", 0.0) for r in rows]


class Neighbour(NamedTuple):
    """A message found next to a hit (threads_in), with what recall shows of it."""

    hit: int  # the message it was found around
    id: int
    session_key: str
    author: str | None
    content: str
    created_at: datetime


def _thread_statement(by_user: bool, by_keys: bool) -> CompoundSelect:
    # For each id, its `reach` nearest searched messages on either side, in its own session: two
    # correlated LIMIT subqueries walk ix_archived_messages_session_id_id from the id outwards, so
    # the cost does not grow with the session's length. The rows come with them (recall reads a
    # hundred a turn: one statement, not one for the ids and one for their rows), behind the same
    # rules as every other read of the archive.
    hit, near, step = archived_messages.alias("h"), archived_messages.alias("c"), archived_messages.alias("s")
    sides = []
    for before in (True, False):
        window = (
            select(step.c.id)
            .where(
                step.c.session_id == hit.c.session_id,
                step.c.role.in_(_SEARCHED_ROLES),
                step.c.id < hit.c.id if before else step.c.id > hit.c.id,
            )
            .order_by(step.c.id.desc() if before else step.c.id)
            .limit(bindparam("reach", type_=Integer))
            .correlate(hit)
        )
        sides.append(
            select(
                hit.c.id.label("hit"),
                near.c.id,
                sessions.c.key.label("session_key"),
                near.c.author,
                near.c.content,
                near.c.created_at,
            )
            .select_from(hit.join(near, near.c.id.in_(window)).join(sessions, sessions.c.id == near.c.session_id))
            .where(hit.c.id.in_(bindparam("ids", expanding=True)), *_visible_sessions(by_user, by_keys))
        )
    return union_all(*sides)


_THREADS = {(u, k): _thread_statement(u, k) for u in (False, True) for k in (False, True)}


def threads_in(
    conn: Connection, ids: Sequence[int], reach: int, user_id: str | None, session_keys: Sequence[str]
) -> list[Neighbour]:
    """The searched messages around each of `ids` in its session, up to `reach` on either side,
    that the asker may see (the thread a reply like "yes, last Sunday" belongs to). One statement,
    whatever `reach` is."""
    if not ids or reach < 1:
        return []
    by_user, by_keys, params = _visible_params(user_id, session_keys)
    rows = conn.execute(_THREADS[(by_user, by_keys)], {**params, "ids": list(ids), "reach": reach})
    return [Neighbour._make(row) for row in rows]


def _count(conn: Connection, session_id: int | None) -> int:
    stmt = select(func.count()).select_from(archived_messages)
    if session_id is not None:
        stmt = stmt.where(archived_messages.c.session_id == session_id)
    return int(conn.execute(stmt).scalar_one())


class ArchiveStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def search(
        self, query: str, *, user_id: str | None = None, session_keys: Sequence[str] = (), limit: int = 10
    ) -> list[ArchiveHit]:
        """Archived user and assistant messages matching any word of `query`, best first.

        With `user_id` and/or `session_keys`, only the sessions that person owns or the given
        conversations; with neither, every session (the operator's view). A query with no words
        finds nothing."""
        terms = query_terms(query)
        if not terms:
            return []
        return await self._db.read(search_in, terms, user_id, tuple(session_keys), max(1, min(MAX_LIMIT, limit)))

    async def visible(
        self, ids: Sequence[int], *, user_id: str | None = None, session_keys: Sequence[str] = ()
    ) -> list[ArchiveHit]:
        """The messages of `ids` the asker may see, by the same rules as search (for vector hits).
        With neither `user_id` nor `session_keys` nothing is returned: no operator view here."""
        if not ids or (user_id is None and not session_keys):
            return []
        return await self._db.read(visible_in, tuple(ids), user_id, tuple(session_keys))

    async def for_session(self, session_id: int, limit: int = 200) -> list[ArchiveHit]:
        """The archived messages of one session, every role, oldest first (score 0)."""
        return await self._db.read(_for_session, session_id, limit)

    async def count(self, session_id: int | None = None) -> int:
        return await self._db.read(_count, session_id)
