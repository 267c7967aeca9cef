"""Daily files cut into overlapping chunks and found by scope."""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory.archive.daily import DailyFiles
from memory.archive.daily_index import DailyIndex, chunk, scope_of, threads_in, write_owner_marker
from memory.store.storage import Storage
from memory.tokens import estimate_tokens
from tests.postgres import BACKENDS, database_url
from tests.unit.test_archive import trigrams_consistent


@dataclass
class Notes:
    storage: Storage
    files: DailyFiles
    index: DailyIndex


@pytest.fixture(params=BACKENDS)
async def notes(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Notes]:
    """A migrated database (SQLite, PostgreSQL) with daily files under tmp_path/memory and their index."""
    storage = await Storage.open(database_url(request.param, tmp_path))
    try:
        files = DailyFiles(tmp_path / "memory")
        yield Notes(storage, files, DailyIndex(storage.db, files))
    finally:
        await storage.close()


def test_chunks_are_about_400_tokens_and_overlap() -> None:
    lines = [f"- note {i}: " + "word " * 20 for i in range(100)]  # ~27 tokens a line
    pieces = chunk("\n".join(lines))
    assert len(pieces) > 3
    assert all(estimate_tokens(p) <= 400 for p in pieces)
    for a, b in itertools.pairwise(pieces):
        assert a.splitlines()[-1] in b.splitlines()  # the next chunk starts inside the previous one


@given(
    st.lists(
        st.text(min_size=1, max_size=200).filter(lambda s: s.strip() and "\n" not in s and "\r" not in s), max_size=60
    )
)
def test_every_line_is_in_some_chunk(lines: list[str]) -> None:
    pieces = chunk("\n".join(lines))
    joined = "\n".join(pieces).splitlines()
    for line in lines:
        if line.strip() and line.splitlines() == [line]:
            assert line in joined


def test_scope_comes_from_where_the_file_lies(tmp_path: Path) -> None:
    files = DailyFiles(tmp_path)
    assert scope_of(tmp_path, tmp_path / "2026-11-30.md") == "global"
    assert scope_of(tmp_path, files.path("user", "alice", date(2026, 11, 30))) == "personal:alice"
    altered = files.path("channel", "telegram:group:-100", date(2026, 11, 30))
    assert scope_of(tmp_path, altered) is None  # the directory name was altered: owner unknown ...
    write_owner_marker(altered.parent, "telegram:group:-100")
    assert scope_of(tmp_path, altered) == "channel:telegram:group:-100"  # ... until its marker says


async def test_index_search_and_reindex_on_change(notes: Notes) -> None:
    files, index = notes.files, notes.index
    alice = files.path("user", "alice", date(2026, 11, 30))
    files.append(alice, "10:00 · web dm", ["The staging database moved to host db-7."])
    shared = files.path("global", None, date(2026, 11, 30))
    files.append(shared, "11:00", ["Deploys are frozen during the holidays."])
    assert await index.scan() == 2
    assert await index.scan() == 0  # unchanged files are skipped
    [hit] = await index.search("where is the staging database?", scopes=["personal:alice"])
    assert "db-7" in hit.content and hit.day == "2026-11-30" and hit.scope == "personal:alice"
    assert await index.search("staging database", scopes=["personal:bob", "global"]) == []
    files.append(alice, "12:00 · web dm", ["The staging database moved again, to db-9."])
    os.utime(alice, ns=(alice.stat().st_atime_ns, alice.stat().st_mtime_ns + 1))
    assert await index.index_file(alice) == 1
    [hit] = await index.search("staging database", scopes=["personal:alice"])
    assert "db-9" in hit.content


async def test_cjk_notes_are_found_by_a_word_inside_a_run(notes: Notes) -> None:
    storage, files, index = notes.storage, notes.files, notes.index
    alice = files.path("user", "alice", date(2026, 11, 30))
    files.append(alice, "10:00 · web dm", ["我住在东京已经三年了", "私は毎朝コーヒーを飲みます"])
    bob = files.path("user", "bob", date(2026, 11, 30))
    files.append(bob, "10:00 · web dm", ["서울에서 한국어를 공부해요", "我在Tokyo工作"])
    assert await index.scan() == 2
    for query, scope in [
        ("东京", "personal:alice"),
        ("住在东京", "personal:alice"),
        ("コーヒー", "personal:alice"),
        ("毎朝", "personal:alice"),
        ("한국어", "personal:bob"),
        ("工作", "personal:bob"),
        ("Tokyo", "personal:bob"),
    ]:
        [hit] = await index.search(query, scopes=[scope])
        assert query in hit.content and hit.score > 0, query
        other = "personal:bob" if scope == "personal:alice" else "personal:alice"
        assert await index.search(query, scopes=[other, "global"]) == [], query
    # A file rewritten: its chunks are replaced (deleted, inserted), the trigram index follows.
    files.append(alice, "11:00 · web dm", ["搬到大阪了"])
    os.utime(alice, ns=(alice.stat().st_atime_ns, alice.stat().st_mtime_ns + 1))
    assert await index.index_file(alice) == 1
    alice.write_text("nothing in CJK any more\n", encoding="utf-8")
    os.utime(alice, ns=(alice.stat().st_atime_ns, alice.stat().st_mtime_ns + 1))
    assert await index.index_file(alice) == 1
    await storage.db.read(trigrams_consistent, "daily_chunks", "id")
    assert await index.search("东京", scopes=["personal:alice"]) == []
    assert await index.search("大阪", scopes=["personal:alice"]) == []


async def test_a_chunk_thread_is_its_neighbours_in_file_order(notes: Notes) -> None:
    storage, files, index = notes.storage, notes.files, notes.index
    alice = files.path("user", "alice", date(2026, 11, 30))
    for n in range(12):  # long enough for several chunks
        files.append(alice, f"{n:02d}:00", [f"Note {n}: " + "the harbour cranes were busy all day. " * 40])
    bob = files.path("user", "bob", date(2026, 11, 30))
    files.append(bob, "09:00", ["One short note of Bob's."])
    assert await index.scan() > 4
    hits = await index.search("harbour cranes", scopes=["personal:alice"], limit=50)
    ids = sorted(h.id for h in hits)
    middle = ids[len(ids) // 2]
    [theirs] = await index.search("short note", scopes=["personal:bob"])

    async def threads(ids: list[int], reach: int, scopes: list[str]) -> dict[int, list[int]]:
        out: dict[int, list[tuple[int, int]]] = {}
        for c in await storage.db.read(threads_in, ids, reach, scopes):
            out.setdefault(c.hit, []).append((c.chunk_no, c.id))
        return {hit: [i for _, i in sorted(thread)] for hit, thread in out.items()}

    both = ["personal:alice", "personal:bob"]
    near = await threads([middle, theirs.id], 1, both)
    assert near[theirs.id] == [theirs.id]  # another file: no neighbours from Alice's
    assert len(near[middle]) == 3 and near[middle][1] == middle
    wide = (await threads([middle], 2, both))[middle]
    assert len(wide) == 5 and wide[1:4] == near[middle]
    assert await threads([middle], 1, ["personal:bob"]) == {}  # only in the scopes asked for
    [row] = [c for c in await storage.db.read(threads_in, [middle], 1, both) if c.id == near[middle][0]]
    assert row.scope == "personal:alice" and "harbour cranes" in row.content and row.day == "2026-11-30"
