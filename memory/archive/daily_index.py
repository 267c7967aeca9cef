"""Daily Markdown files cut into overlapping chunks for search (DESIGN §5, §7): they are never
injected whole, only found. About 400 tokens a chunk with 80 tokens of overlap, cut at line
boundaries so a bullet is never split (a single overlong line is its own chunk).

A chunk carries the scope of its file: `global` for `<root>/`, `personal:<user>` for
`users/<dir>/`, `channel:<conversation>` for `channels/<dir>/`. The directory's owner is read from
its `.owner` marker (written with the first file), or is the directory name itself when that name
was never altered (see daily.safe_component). A file is re-indexed only when it changed (mtime).

Search: on SQLite the FTS5 indexes `daily_chunks_fts` (porter, bm25) and `daily_chunks_cjk`
(trigrams); on PostgreSQL the stored tsvector `words` (migration 0012, ts_rank) and LIKE for CJK,
as memory.archive.search searches the archive; elsewhere a LIKE scan.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, Select, bindparam, case, delete, func, insert, literal_column, or_, select, text
from sqlalchemy.engine import Connection

from memory.archive.daily import DailyFiles
from memory.archive.fulltext import (
    CjkQuery,
    fts_expression,
    informative_terms,
    merge_hits,
    porter_and_trigram,
    query_terms,
    split_cjk,
)
from memory.archive.fulltext_pg import pg_cjk_text, pg_like_score, pg_needles, pg_tsquery, pg_words_for
from memory.store.db import Database
from memory.store.schema import daily_chunks
from memory.tokens import estimate_tokens

CHUNK_TOKENS = 400
OVERLAP_TOKENS = 80
OWNER_MARKER = ".owner"
_SCOPE_OF_DIR = {"users": "personal", "channels": "channel"}


def chunk(content: str, size: int = CHUNK_TOKENS, overlap: int = OVERLAP_TOKENS) -> list[str]:
    """Overlapping chunks of whole lines, each about `size` tokens, the next starting with about
    `overlap` tokens of the previous one's end."""
    lines = [ln for ln in content.splitlines() if ln.strip()]
    chunks: list[str] = []
    start = 0
    while start < len(lines):
        end, tokens = start, 0
        while end < len(lines) and (end == start or tokens + estimate_tokens(lines[end]) <= size):
            tokens += estimate_tokens(lines[end])
            end += 1
        chunks.append("\n".join(lines[start:end]))
        if end >= len(lines):
            break
        back, carried = end, 0  # step back over about `overlap` tokens, always moving forward
        while back - 1 > start and carried + estimate_tokens(lines[back - 1]) <= overlap:
            back -= 1
            carried += estimate_tokens(lines[back])
        start = back
    return chunks


@dataclass(frozen=True, slots=True)
class ChunkHit:
    id: int
    path: str
    scope: str
    day: str
    content: str
    score: float  # higher is better (-bm25, ts_rank on PostgreSQL), comparable within one search


def write_owner_marker(directory: Path, owner: str) -> None:
    """Remember whose directory this is (its name may be a hashed, shortened form of the owner)."""
    marker = directory / OWNER_MARKER
    if not marker.exists():
        directory.mkdir(parents=True, exist_ok=True)
        marker.write_text(owner, encoding="utf-8")


def scope_of(root: Path, path: Path) -> str | None:
    """The scope of a daily file from where it lies under the memory root; None when unknown."""
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        return None
    if len(parts) == 1:
        return "global"
    if len(parts) == 3 and parts[0] in _SCOPE_OF_DIR:
        marker = path.parent / OWNER_MARKER
        try:
            owner = marker.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            owner = "" if "~" in parts[1] else parts[1]  # a name with "~" was altered: owner unknown
        return f"{_SCOPE_OF_DIR[parts[0]]}:{owner}" if owner else None
    return None


def _replace(conn: Connection, rel: str, scope: str, day: str, pieces: list[str], mtime_ns: int) -> None:
    conn.execute(delete(daily_chunks).where(daily_chunks.c.path == rel))
    if pieces:
        conn.execute(
            insert(daily_chunks),
            [
                {"path": rel, "scope": scope, "day": day, "chunk_no": i, "content": p, "file_mtime_ns": mtime_ns}
                for i, p in enumerate(pieces)
            ],
        )


def _drop(conn: Connection, rel: str) -> int:
    return int(conn.execute(delete(daily_chunks).where(daily_chunks.c.path == rel)).rowcount)


def _mtime(conn: Connection, rel: str) -> int | None:
    row = conn.execute(select(daily_chunks.c.file_mtime_ns).where(daily_chunks.c.path == rel).limit(1)).first()
    return None if row is None else int(row[0])


def search_in(conn: Connection, terms: Sequence[str], scopes: Sequence[str], limit: int) -> list[ChunkHit]:
    dialect = conn.dialect.name
    if dialect == "sqlite":
        return _search_fts(conn, terms, scopes, limit)
    if dialect == "postgresql":
        return _search_pg(conn, terms, scopes, limit)
    return _search_like(conn, terms, scopes, limit)


def _search_like(
    conn: Connection, terms: Sequence[str], scopes: Sequence[str], limit: int, *also: ColumnElement[bool]
) -> list[ChunkHit]:
    """Any database: `lower(content) LIKE %term%`, scored by how many terms match, newest day first
    on ties; no stemming. `also`: more conditions (PostgreSQL's CJK leg)."""
    content = func.lower(daily_chunks.c.content)
    matched = [content.contains(t, autoescape=True) for t in terms]
    score = sum((case((m, 1), else_=0) for m in matched), start=literal_column("0")).label("score")
    rows = conn.execute(
        select(daily_chunks, score)
        .where(or_(*matched), daily_chunks.c.scope.in_(list(scopes)), *also)
        .order_by(score.desc(), daily_chunks.c.day.desc(), daily_chunks.c.id.desc())
        .limit(limit)
    ).all()
    return [ChunkHit(r.id, r.path, r.scope, r.day, r.content, float(r.score)) for r in rows]


_WORDS: ColumnElement[Any] = literal_column("daily_chunks.words")  # PostgreSQL only: migration 0012


def _search_pg(conn: Connection, terms: Sequence[str], scopes: Sequence[str], limit: int) -> list[ChunkHit]:
    """PostgreSQL: the stored words ranked by ts_rank, and CJK by LIKE over the chunks with CJK
    letters, scored as memory.archive.search.search_pg scores the archive (and
    memory.records.search.search_pg records)."""
    words, runs = split_cjk(terms)
    found: list[list[tuple[ChunkHit, float]]] = []
    if words:
        asked = pg_words_for(conn, "daily_chunks", words)
        params = {"q": asked.match, "r": asked.rank, "scopes": list(scopes), "limit": limit}
        rows = conn.execute(_PG_MATCHING, params).all()
        found.append(_scored([ChunkHit(r.id, r.path, r.scope, r.day, r.content, float(r.rank)) for r in rows]))
    needles = pg_needles(conn, "daily_chunks", words, runs)
    if needles:
        like = _search_like(conn, needles, scopes, limit, pg_cjk_text("daily_chunks"))
        found.append(_scored([replace(h, score=pg_like_score(h.score, len(needles))) for h in like]))
    return [hit for hit, _ in merge_hits(found, lambda h: h.id, limit)]


def _pg_matching() -> Select[Any]:
    rank = func.ts_rank(_WORDS, pg_tsquery(param="r"))
    return (
        select(daily_chunks, rank.label("rank"))
        .where(_WORDS.op("@@")(pg_tsquery()), daily_chunks.c.scope.in_(bindparam("scopes", expanding=True)))
        .order_by(literal_column("rank").desc(), daily_chunks.c.day.desc(), daily_chunks.c.id.desc())
        .limit(bindparam("limit"))
    )


_PG_MATCHING = _pg_matching()  # built once: recall runs it every turn


def _search_fts(conn: Connection, terms: Sequence[str], scopes: Sequence[str], limit: int) -> list[ChunkHit]:
    """The porter index ranked by bm25, and the CJK trigram one when the query holds CJK
    (memory.archive.fulltext.porter_and_trigram)."""

    def porter(words: Sequence[str]) -> list[tuple[ChunkHit, float]]:
        q = fts_expression(informative_terms(conn, "daily_chunks_fts", words))
        return _scored(_rows(conn, _MATCHING.format(fts="daily_chunks_fts"), {"q": q}, scopes, limit))

    def trigram(cjk: CjkQuery) -> list[tuple[ChunkHit, float]]:
        assert cjk.match is not None
        return _scored(_rows(conn, _MATCHING.format(fts="daily_chunks_cjk"), {"q": cjk.match}, scopes, limit))

    def short(cjk: CjkQuery) -> list[tuple[ChunkHit, float]]:
        # Too short for a trigram: a scan of the chunks the trigram index holds (those with CJK in
        # them), scored by how many runs match. A run is CJK letters only: no LIKE escaping.
        likes = {f"s{i}": f"%{run}%" for i, run in enumerate(cjk.short)}
        score = " + ".join(f"(c.content LIKE :{name})" for name in likes)
        any_of = " OR ".join(f"c.content LIKE :{name}" for name in likes)
        sql = (
            f"SELECT c.id, c.path, c.scope, c.day, c.content, {score} AS score "
            "FROM daily_chunks c WHERE c.id IN (SELECT id FROM daily_chunks_cjk_docsize) "
            f"AND ({any_of}) AND c.scope IN (SELECT value FROM json_each(:scopes)) "
            "ORDER BY score DESC, c.id DESC LIMIT :limit"
        )
        return _scored(_rows(conn, sql, likes, scopes, limit))

    found = porter_and_trigram(conn, terms, "daily_chunks_cjk", porter, trigram, short, lambda h: h.id, limit)
    return [hit for hit, _ in found]


def _scored(hits: list[ChunkHit]) -> list[tuple[ChunkHit, float]]:
    return [(h, h.score) for h in hits]


_MATCHING = (
    "SELECT c.id, c.path, c.scope, c.day, c.content, -bm25({fts}) AS score "
    "FROM {fts} JOIN daily_chunks c ON c.id = {fts}.rowid "
    "WHERE {fts} MATCH :q AND c.scope IN (SELECT value FROM json_each(:scopes)) "
    "ORDER BY bm25({fts}) LIMIT :limit"
)


def _rows(conn: Connection, sql: str, params: dict[str, str], scopes: Sequence[str], limit: int) -> list[ChunkHit]:
    rows = conn.execute(text(sql), {**params, "scopes": _json_list(scopes), "limit": limit}).all()
    return [ChunkHit(r.id, r.path, r.scope, r.day, r.content, float(r.score)) for r in rows]


def visible_in(conn: Connection, ids: Sequence[int], scopes: Sequence[str]) -> list[ChunkHit]:
    """The chunks of `ids` in these scopes (DailyIndex.visible, in a caller's transaction)."""
    rows = conn.execute(
        select(daily_chunks).where(daily_chunks.c.id.in_(list(ids)), daily_chunks.c.scope.in_(list(scopes)))
    ).all()
    return [ChunkHit(r.id, r.path, r.scope, r.day, r.content, 0.0) for r in rows]


class NearChunk(NamedTuple):
    """A chunk found next to a hit (threads_in), with what recall shows of it."""

    hit: int  # the chunk it was found around
    id: int
    chunk_no: int
    scope: str
    day: str
    content: str


_THREADS = text(
    "SELECT c.id AS hit, n.id AS id, n.chunk_no AS chunk_no, n.scope AS scope, n.day AS day, n.content AS content "
    "FROM daily_chunks c JOIN daily_chunks n ON n.path = c.path "
    "AND n.chunk_no BETWEEN c.chunk_no - :reach AND c.chunk_no + :reach "
    "WHERE c.id IN :ids AND n.scope IN :scopes"
).bindparams(bindparam("ids", expanding=True), bindparam("scopes", expanding=True))


def threads_in(conn: Connection, ids: Sequence[int], reach: int, scopes: Sequence[str]) -> list[NearChunk]:
    """The chunks around each of `ids` in its daily file, up to `reach` on either side, and the
    chunk itself, in these scopes (a file has one: its hit's). One statement, rows included,
    whatever `reach` is."""
    if not ids or reach < 1 or not scopes:
        return []
    rows = conn.execute(_THREADS, {"ids": list(ids), "reach": reach, "scopes": list(scopes)})
    return [NearChunk._make(row) for row in rows]


def _mtime_of(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return None


def _daily_files(root: Path) -> list[Path]:
    found = []
    for directory, _dirs, names in os.walk(root):
        if Path(directory).relative_to(root).parts[:1] == ("archived",):
            continue  # consolidated files: indexed no more
        found += [Path(directory) / n for n in names if n.endswith(".md") and n != "Memory.md" and n[0] != "."]
    return sorted(found)


def _json_list(values: Sequence[str]) -> str:
    return json.dumps(list(values))


class DailyIndex:
    def __init__(self, db: Database, files: DailyFiles) -> None:
        self._db = db
        self.files = files

    async def index_file(self, path: Path, scope: str | None = None) -> int:
        """(Re-)index one daily file when it changed since it was indexed; how many chunks it has
        now (0 when unchanged or unknown)."""
        scope = scope or await asyncio.to_thread(scope_of, self.files.root, path)
        if scope is None:
            return 0
        mtime = await asyncio.to_thread(_mtime_of, path)
        if mtime is None:
            return 0
        rel = path.relative_to(self.files.root).as_posix()
        if await self._db.read(_mtime, rel) == mtime:
            return 0
        pieces = chunk(await asyncio.to_thread(self.files.read, path))
        await self._db.write(_replace, rel, scope, path.stem, pieces, mtime)
        return len(pieces)

    async def drop(self, path: Path) -> int:
        """Take a daily file that left the memory root's notes (archived by consolidation) out of the
        index; how many chunks went. Their vectors go with the next prune."""
        return await self._db.write(_drop, path.relative_to(self.files.root).as_posix())

    async def scan(self) -> int:
        """Index every daily file under the root that changed (at start, after hand edits)."""
        done = 0
        for path in await asyncio.to_thread(_daily_files, self.files.root):
            done += await self.index_file(path)
        return done

    async def visible(self, ids: Sequence[int], *, scopes: Sequence[str]) -> list[ChunkHit]:
        """The chunks of `ids` that lie in `scopes` (for vector hits)."""
        if not ids or not scopes:
            return []
        return await self._db.read(visible_in, tuple(ids), tuple(scopes))

    async def search(self, query: str, *, scopes: Sequence[str], limit: int = 10) -> list[ChunkHit]:
        terms = query_terms(query)
        if not terms or not scopes:
            return []
        return await self._db.read(search_in, terms, tuple(scopes), max(1, min(limit, 50)))
