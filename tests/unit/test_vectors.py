"""Stored vectors and the in-memory index: exact top-k against brute force, filtering, growth, and
the store over a real SQLite file and a real PostgreSQL (what counts as searchable per kind, changed
texts, stale vectors refused, pruning what was forgotten); on PostgreSQL the vectors computed from
the stored blobs, the HNSW index per model and kind, and the search behind each asker's reach."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import event, insert, update
from sqlalchemy import text as sql_text
from sqlalchemy.engine import Connection

import memory.embed.pgvector
import memory.embed.vectors
from memory.embed.index import VectorIndex, _lazy_is_cheaper
from memory.embed.pgvector import INDEX_BUILD_MEMORY_MAX, Reach, build_memory
from memory.embed.vectors import VectorStore, text_hash
from memory.records.fields import NewRecord
from memory.records.model import MemoryClass, Provenance, ReviewStatus, Scope, UsePolicy
from memory.records.store import RecordStore
from memory.store.db import Database
from memory.store.schema import archived_messages, daily_chunks, memory_vectors, sessions
from memory.store.storage import Storage
from tests.postgres import fresh_database_url

MODEL = "test/model-a"
OTHER = "test/model-b"
WHEN = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
Matrix = npt.NDArray[np.float32]


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> Matrix:
    m = rng.standard_normal((n, dim)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def brute_force(rows: dict[tuple[str, str], Matrix], query: Matrix, k: int) -> list[tuple[tuple[str, str], float]]:
    scored = [(key, float(np.dot(vec.astype(np.float64), query.astype(np.float64)))) for key, vec in rows.items()]
    return sorted(scored, key=lambda item: -item[1])[:k]


def assert_same_top(found: list[tuple[str, str, float]], expected: list[tuple[tuple[str, str], float]]) -> None:
    """Same length, same scores in order, each found item's score its true score (ties may swap)."""
    truth = dict(expected)
    assert len(found) == len(expected)
    assert [s for *_, s in found] == pytest.approx([s for _, s in expected], abs=1e-5)
    assert len({(kind, item) for kind, item, _ in found}) == len(found)
    for kind, item, score in found:
        if (kind, item) in truth:
            assert score == pytest.approx(truth[(kind, item)], abs=1e-5)
        else:  # a tie at the boundary: it must score as much as the last expected one
            assert score == pytest.approx(expected[-1][1], abs=1e-5)


# --- the index ----------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 80),
    dim=st.integers(1, 12),
    k=st.integers(1, 90),
    removed=st.sets(st.integers(0, 79), max_size=30),
    seed=st.integers(0, 2**32 - 1),
)
def test_search_is_exact_top_k(n: int, dim: int, k: int, removed: set[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    vectors = unit_rows(rng, n, dim)
    index = VectorIndex(MODEL, capacity=1)
    rows: dict[tuple[str, str], Matrix] = {}
    for i, vec in enumerate(vectors):
        kind = ("record", "archive", "daily")[i % 3]
        index.add(kind, str(i), vec)
        rows[(kind, str(i))] = vec
    for i in removed:
        if i < n:
            kind = ("record", "archive", "daily")[i % 3]
            assert index.remove(kind, str(i))
            del rows[(kind, str(i))]
    assert len(index) == len(rows)
    query = unit_rows(rng, 1, dim)[0]
    assert_same_top(index.search(query, k), brute_force(rows, query, k))


@settings(max_examples=100, deadline=None)
@given(
    n=st.integers(1, 120),
    allowed=st.sets(st.integers(0, 130), max_size=120),
    k=st.integers(1, 20),
    seed=st.integers(0, 2**32 - 1),
)
def test_filtered_search_is_top_k_of_the_allowed(n: int, allowed: set[int], k: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    index = VectorIndex(MODEL)
    rows = {("record", str(i)): vec for i, vec in enumerate(unit_rows(rng, n, 8))}
    for (kind, item), vec in rows.items():
        index.add(kind, item, vec)
    keys = {("record", str(i)) for i in allowed}  # some name items the index does not have
    query = unit_rows(rng, 1, 8)[0]
    expected = brute_force({key: v for key, v in rows.items() if key in keys}, query, k)
    assert_same_top(index.search(query, k, allow=keys), expected)
    assert_same_top(index.search(query, k, allow=lambda kind, item: (kind, item) in keys), expected)


def test_both_set_paths_and_a_predicate_agree() -> None:
    rng = np.random.default_rng(7)
    index = VectorIndex(MODEL)
    for i, vec in enumerate(unit_rows(rng, 2000, 16)):
        index.add("archive", str(i), vec)
    query = unit_rows(rng, 1, 16)[0]
    few = {("archive", str(i)) for i in range(0, 2000, 50)}  # 40: scored on their rows only
    many = {("archive", str(i)) for i in range(2000) if i % 3}  # most: membership asked in score order
    assert not _lazy_is_cheaper(len(few), 2000, 10) and _lazy_is_cheaper(len(many), 2000, 10)
    for keys in (few, many):
        by_set = index.search(query, 10, allow=keys)
        assert all((kind, item) in keys for kind, item, _ in by_set)

        def allowed(kind: str, item: str, keys: set[tuple[str, str]] = keys) -> bool:
            return (kind, item) in keys

        assert by_set == index.search(query, 10, allow=allowed)
    assert index.search(query, 5, allow=set()) == []
    assert index.search(query, 5, allow=lambda kind, item: False) == []


@settings(max_examples=120, deadline=None)
@given(
    n=st.integers(1, 120),
    k=st.integers(1, 30),
    ngroups=st.integers(1, 6),
    wanted=st.sets(st.integers(0, 7), max_size=5),
    removed=st.sets(st.integers(0, 119), max_size=40),
    ungrouped=st.sets(st.integers(0, 119), max_size=10),
    allow_some=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_group_search_is_top_k_of_those_groups(
    n: int,
    k: int,
    ngroups: int,
    wanted: set[int],
    removed: set[int],
    ungrouped: set[int],
    allow_some: bool,
    seed: int,
) -> None:
    """Whatever was added, moved by removals or left without a group, a search in some groups
    ranks exactly the rows of those groups (and of `allow`, when given)."""
    rng = np.random.default_rng(seed)
    index = VectorIndex(MODEL, capacity=1)  # grows while adding: the groups must grow with it
    rows: dict[tuple[str, str], Matrix] = {}
    group: dict[tuple[str, str], str] = {}
    for i, vec in enumerate(unit_rows(rng, n, 6)):
        key = ("record", str(i))
        rows[key] = vec
        if i in ungrouped:
            index.add(*key, vec)
        else:
            group[key] = f"g{i % ngroups}"
            index.add(*key, vec, group=group[key])
    for i in removed & set(range(n)):
        assert index.remove("record", str(i))
        rows.pop(("record", str(i)))
    names = {f"g{w}" for w in wanted}  # some name groups nobody is in
    allow = {key for j, key in enumerate(rows) if j % 2} if allow_some else None
    query = unit_rows(rng, 1, 6)[0]
    inside = {key: v for key, v in rows.items() if group.get(key) in names and (allow is None or key in allow)}
    found = index.search(query, k, allow, groups=names)
    assert_same_top(found, brute_force(inside, query, k))
    for kind, item, _ in found:
        assert index.group_of(kind, item) in names


def test_groups_follow_set_groups_and_replacement() -> None:
    index = VectorIndex(MODEL)
    a, b = unit_rows(np.random.default_rng(1), 2, 4)
    index.add("record", "1", a, group="personal:alice")
    index.add("archive", "2", b)
    assert index.search(a, 5, groups={"personal:bob"}) == []
    assert index.set_groups([(("archive", "2"), "personal:bob"), (("daily", "9"), "global")]) == 1
    assert [item for _, item, _ in index.search(a, 5, groups={"personal:bob"})] == ["2"]
    index.add("record", "1", a, group="personal:bob")  # a narrowed scope: the new group, not both
    assert {item for _, item, _ in index.search(a, 5, groups={"personal:bob"})} == {"1", "2"}
    assert index.search(a, 5, groups={"personal:alice"}) == []
    index.add("record", "1", b)  # a new vector without a group keeps the one it had
    assert index.group_of("record", "1") == "personal:bob"
    assert index.search(a, 5, groups=set()) == []


def test_a_predicate_is_asked_once_per_item_even_when_the_pool_widens() -> None:
    rng = np.random.default_rng(3)
    index = VectorIndex(MODEL)
    for i, vec in enumerate(unit_rows(rng, 1000, 8)):
        index.add("record", str(i), vec)
    asked: list[str] = []

    def allow(kind: str, item: str) -> bool:
        asked.append(item)
        return int(item) % 97 == 0  # 11 of 1000: the first pool holds few of them

    found = index.search(unit_rows(rng, 1, 8)[0], 10, allow=allow)
    assert len(found) == 10 and all(int(item) % 97 == 0 for _, item, _ in found)
    assert len(asked) == len(set(asked))


def test_growth_is_amortized_and_replacing_keeps_one_row() -> None:
    rng = np.random.default_rng(1)
    index = VectorIndex(MODEL, capacity=1)
    capacities = set()
    for i, vec in enumerate(unit_rows(rng, 1000, 4)):
        index.add("daily", str(i), vec)
        capacities.add(index.capacity)
    assert len(index) == 1000
    assert len(capacities) <= 11  # doubling: 1, 2, 4, …, 1024
    assert index.capacity < 2 * 1000
    replacement = np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32)
    index.add("daily", "5", replacement)
    assert len(index) == 1000
    assert index.search(replacement, 1)[0][:2] == ("daily", "5")
    assert not index.remove("daily", "nope") and ("daily", "5") in index
    assert index.remove("daily", "5") and ("daily", "5") not in index
    assert all(item != "5" for _, item, _ in index.search(replacement, 1000))


def test_add_many_is_add_in_order() -> None:
    rng = np.random.default_rng(5)
    vectors = unit_rows(rng, 50, 6)
    items = [("record", str(i % 40), vectors[i]) for i in range(50)]  # 10 keys given twice: the last wins
    one_by_one, at_once = VectorIndex(MODEL, capacity=1), VectorIndex(MODEL, capacity=1)
    one_by_one.add("record", "3", vectors[0])
    at_once.add("record", "3", vectors[0])  # an existing key is replaced in place
    for kind, item, vec in items:
        one_by_one.add(kind, item, vec)
    at_once.add_many(items)
    at_once.add_many([])
    assert len(at_once) == len(one_by_one) == 40
    query = unit_rows(rng, 1, 6)[0]
    assert at_once.search(query, 40) == one_by_one.search(query, 40)
    with pytest.raises(ValueError, match="5-dimensional vectors in a 6-dimensional index"):
        at_once.add_many([("record", "x", np.ones(5))])


def test_dimension_mismatches_are_refused() -> None:
    index = VectorIndex(MODEL, dim=3)
    with pytest.raises(ValueError, match="4-dimensional vector in a 3-dimensional index"):
        index.add("record", "x", np.ones(4, dtype=np.float32))
    index.add("record", "x", np.ones(3, dtype=np.float32) / np.sqrt(3))
    with pytest.raises(ValueError, match="2-dimensional query"):
        index.search(np.ones(2, dtype=np.float32), 1)
    assert VectorIndex(MODEL).search(np.ones(3, dtype=np.float32), 5) == []  # empty: nothing to find


def test_text_hash() -> None:
    assert len(text_hash("hello")) == 16 and int(text_hash("hello"), 16) >= 0
    assert text_hash("hello") == text_hash("hello") != text_hash("hello!")
    assert text_hash("") != text_hash(" ")


# --- the store ----------------------------------------------------------------------------------


class Items:
    """A migrated database with records, archived messages and daily chunks to embed."""

    def __init__(self, storage: Storage) -> None:
        self.db = storage.db
        self.records = RecordStore(storage.db)
        self.vectors = VectorStore(storage.db)

    async def record(self, content: str, memory_class: MemoryClass = MemoryClass.DURABLE_FACT) -> str:
        record = await self.records.create(
            content,
            memory_class=memory_class,
            provenance=Provenance.USER_CONFIRMED,
            use_policy=UsePolicy(),
            scope=Scope.personal("alice"),
            author="alice",
            review_status=ReviewStatus.NONE,
        )
        return record.id

    async def run(self, sql: Any) -> None:
        def go(conn: Connection) -> None:
            conn.execute(sql)

        await self.db.write(go)


def _session(sid: int, audience: str = "personal", excluded: bool = False) -> dict[str, Any]:
    return {
        "id": sid,
        "key": f"web:{sid}",
        "agent": "main",
        "user_id": "alice",
        "created_at": WHEN,
        "message_count": 0,
        "token_count": 0,
        "audience": audience,
        "memory_excluded": excluded,
    }


def _message(mid: int, sid: int, role: str, content: str) -> dict[str, Any]:
    return {
        "id": mid,
        "session_id": sid,
        "role": role,
        "content": content,
        "tool_calls": None,
        "tool_call_id": None,
        "author": None,
        "event_id": None,
        "tokens": 3,
        "created_at": WHEN,
        "archived_at": WHEN,
        "reason": "trimmed",
    }


def _chunk(cid: int, content: str, chunk_no: int = 0) -> dict[str, Any]:
    return {
        "id": cid,
        "path": f"users/alice/2026-11-{cid:02d}.md",
        "scope": "personal:alice",
        "day": f"2026-11-{cid:02d}",
        "chunk_no": chunk_no,
        "content": content,
        "file_mtime_ns": 1,
    }


@pytest.fixture(params=["thread", "async", "postgres"])
async def items(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Items]:
    """Both ways SQLite runs (its own thread, and SQLAlchemy async, the path PostgreSQL takes), and
    PostgreSQL with pgvector."""
    if request.param == "postgres":
        db = Database(fresh_database_url())
    else:
        db = Database(f"sqlite:///{tmp_path}/t.db", runner=request.param)
    await db.migrate()
    try:
        yield Items(Storage(db))
    finally:
        await db.close()


def _vec(seed: int, dim: int = 4) -> Matrix:
    return unit_rows(np.random.default_rng(seed), 1, dim)[0]


async def test_what_each_kind_offers_for_embedding(items: Items) -> None:
    fact = await items.record("Alice drinks oolong tea")
    await items.record("a passing trace", MemoryClass.TRACE)
    forgotten = await items.record("something Alice took back")
    await items.records.forget(forgotten, "alice")
    await items.run(insert(sessions).values([_session(1), _session(2, excluded=True), _session(3, "public")]))
    await items.run(
        insert(archived_messages).values(
            [
                _message(10, 1, "user", "what tea do I like?"),
                _message(11, 1, "assistant", "oolong"),
                _message(12, 1, "tool", "{}"),
                _message(13, 2, "user", "kept out of memory"),
                _message(14, 3, "user", "said in public"),
            ]
        )
    )
    await items.run(insert(daily_chunks).values([_chunk(1, "- tea tasting"), _chunk(2, "- a hike")]))

    assert await items.vectors.missing("record", MODEL, 10) == [(fact, "Alice drinks oolong tea")]
    assert await items.vectors.missing("archive", MODEL, 10) == [("10", "what tea do I like?"), ("11", "oolong")]
    assert await items.vectors.missing("daily", MODEL, 10) == [("1", "- tea tasting"), ("2", "- a hike")]
    assert await items.vectors.coverage(MODEL) == {"record": (0, 1), "archive": (0, 2), "daily": (0, 2)}
    with pytest.raises(ValueError, match="unknown item kind 'file'"):
        await items.vectors.missing("file", MODEL, 10)


async def test_upsert_missing_and_coverage_per_model(items: Items) -> None:
    ids = [await items.record(f"fact number {n}") for n in range(5)]
    store = items.vectors
    todo = await store.missing("record", MODEL, 3)
    assert len(todo) == 3
    stored = await store.upsert("record", [(i, text_hash(t), _vec(n)) for n, (i, t) in enumerate(todo)], MODEL)
    assert stored == 3
    assert await store.coverage(MODEL) == {"record": (3, 5), "archive": (0, 0), "daily": (0, 0)}
    assert await store.coverage(OTHER) == {"record": (0, 5), "archive": (0, 0), "daily": (0, 0)}
    rest = await store.missing("record", MODEL, 10)
    assert sorted(i for i, _ in rest) == sorted(set(ids) - {i for i, _ in todo})
    assert len(await store.missing("record", OTHER, 10)) == 5  # vectors are per model
    assert await store.models() == {MODEL: 3}
    # Upserting again replaces, never duplicates.
    again = [(i, text_hash(t), _vec(99)) for i, t in todo]
    assert await store.upsert("record", again, MODEL) == 3
    assert await store.models() == {MODEL: 3}
    loaded = {(kind, item): vec for kind, item, vec in await store.vectors(MODEL)}
    assert set(loaded) == {("record", i) for i, _ in todo}
    assert all(np.array_equal(vec, _vec(99)) for vec in loaded.values())


async def test_changed_text_is_embedded_again(items: Items) -> None:
    rid = await items.record("Alice lives in Lyon")
    await items.run(insert(daily_chunks).values([_chunk(1, "- moved to Lyon")]))
    store = items.vectors
    for kind in ("record", "daily"):
        (item_id, content), *_ = await store.missing(kind, MODEL, 10)
        assert await store.upsert(kind, [(item_id, text_hash(content), _vec(1))], MODEL) == 1
        assert await store.missing(kind, MODEL, 10) == []

    await items.records.update(rid, actor="alice", action="edit", content="Alice lives in Nantes")
    await items.records.update(rid, actor="alice", action="confirm", review_status=ReviewStatus.CONFIRMED)
    await items.run(update(daily_chunks).where(daily_chunks.c.id == 1).values(content="- moved to Nantes"))
    assert await store.missing("record", MODEL, 10) == [(rid, "Alice lives in Nantes")]
    assert await store.missing("daily", MODEL, 10) == [("1", "- moved to Nantes")]
    assert await store.coverage(MODEL) == {"record": (1, 1), "archive": (0, 0), "daily": (1, 1)}  # stale, present

    assert await store.upsert("record", [(rid, text_hash("Alice lives in Nantes"), _vec(2))], MODEL) == 1
    assert await store.missing("record", MODEL, 10) == []
    # A status change after embedding does not make the text look changed.
    await items.records.update(rid, actor="alice", action="stale", review_status=ReviewStatus.STALE)
    assert await store.missing("record", MODEL, 10) == []


async def test_a_vector_of_an_outdated_or_vanished_text_is_refused(items: Items, caplog: Any) -> None:
    rid = await items.record("Alice's locker code is on a sticky note")
    other = await items.record("Alice likes jazz")
    store = items.vectors
    (_, content), *_ = await store.missing("record", MODEL, 10)
    await items.records.update(rid, actor="alice", action="edit", content="Alice's locker is number 12")
    await items.records.forget(other, "alice")
    caplog.set_level("INFO", logger="clawgate.vectors")
    batch = [(rid, text_hash("Alice's locker code is on a sticky note"), _vec(1)), (other, text_hash(content), _vec(2))]
    assert await store.upsert("record", batch, MODEL) == 0
    assert "memory_vectors_stale kind=record model=test/model-a skipped=2" in caplog.text
    assert await store.models() == {}
    assert await store.upsert("archive", [("not-a-number", "0" * 16, _vec(1))], MODEL) == 0
    with pytest.raises(ValueError, match="1-D"):
        await store.upsert("record", [(rid, "0" * 16, np.ones((2, 2)))], MODEL)


async def test_delete_and_prune_leave_nothing_of_a_forgotten_text(items: Items) -> None:
    kept = await items.record("Alice's cat is called Miso")
    gone = await items.record("Alice's old address")
    await items.run(insert(sessions).values([_session(1)]))
    await items.run(insert(archived_messages).values([_message(10, 1, "user", "hello there")]))
    await items.run(insert(daily_chunks).values([_chunk(1, "- fed Miso")]))
    store = items.vectors
    for model in (MODEL, OTHER):
        for kind in ("record", "archive", "daily"):
            todo = await store.missing(kind, model, 10)
            await store.upsert(kind, [(i, text_hash(t), _vec(3)) for i, t in todo], model)
    assert await store.models() == {MODEL: 4, OTHER: 4}

    await items.records.forget(gone, "alice")
    await items.run(daily_chunks.delete())
    assert await store.prune() == 4  # the forgotten record's and the chunk's, for both models
    assert {item for _, item, _ in await store.vectors(MODEL)} == {kept, "10"}
    assert await store.delete("archive", ["10"]) == 2
    assert await store.delete("archive", []) == 0
    assert [item for _, item, _ in await store.vectors(OTHER)] == [kept]


async def test_missing_pages_through_everything_with_a_cursor(items: Items, monkeypatch: Any) -> None:
    monkeypatch.setattr(memory.embed.vectors, "_PAGE", 3)  # several database pages per call
    await items.run(insert(sessions).values([_session(1)]))
    await items.run(insert(archived_messages).values([_message(i, 1, "user", f"message {i}") for i in range(1, 21)]))
    store = items.vectors
    half = await store.missing("archive", MODEL, 10)
    await store.upsert("archive", [(i, text_hash(t), _vec(1)) for i, t in half[::2]], MODEL)
    seen: list[str] = []
    after = None
    while batch := await store.missing("archive", MODEL, 4, after=after):
        seen += [i for i, _ in batch]
        after = batch[-1][0]
    # Integer order (2 before 10), each once, the embedded ones skipped.
    assert seen == [str(i) for i in range(1, 21) if not (i <= 10 and i % 2 == 1)]
    every = await store.items("archive", 100)
    assert [i for i, _ in every] == [str(i) for i in range(1, 21)]
    assert [i for i, _ in await store.items("archive", 5, after="18")] == ["19", "20"]


async def test_the_upkeep_reads_records_by_their_key_not_by_status(tmp_path: Path) -> None:
    """The upkeep's reads walk records by id (a page after a cursor, a batch of ids). SQLite without
    statistics took the console's (status, created_at) index for them and walked every active
    record per batch: 100 memories/s at 100,000 records instead of 1,400."""
    db = Database(f"sqlite:///{tmp_path}/t.db", runner="thread")
    await db.migrate()
    statements: list[tuple[str, Any]] = []
    engine = db._engine
    assert engine is not None

    def seen(conn: Any, cursor: Any, statement: str, params: Any, context: Any, executemany: bool) -> None:
        if "FROM memory_records" in statement and not executemany:
            statements.append((statement, params))

    try:
        items = Items(Storage(db))
        ids = [await items.record(f"fact {n}") for n in range(3)]
        event.listen(engine, "before_cursor_execute", seen)
        batch = await items.vectors.missing("record", MODEL, 2)
        await items.vectors.missing("record", MODEL, 2, after=batch[-1][0])
        await items.vectors.upsert("record", [(i, text_hash(t), _vec(1)) for i, t in batch], MODEL)
        event.remove(engine, "before_cursor_execute", seen)
        assert len(batch) == 2 and {i for i, _ in batch} <= set(ids)

        def plans(conn: Connection) -> list[str]:
            return [
                " / ".join(row[3] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params))
                for sql, params in statements
            ]

        found = await db.read(plans)
        assert len(found) == 3
        for plan in found:  # in id order from the start, from the cursor on, or id by id
            assert "memory_records USING INDEX sqlite_autoindex_memory_records_1" in plan, plan
            assert "status" not in plan and "TEMP B-TREE" not in plan, plan
    finally:
        await db.close()


async def test_an_index_loads_one_models_vectors(items: Items, monkeypatch: Any) -> None:
    ids = [await items.record(f"fact {n}") for n in range(7)]
    store = items.vectors
    rows = [(i, text_hash(f"fact {n}"), _vec(n, 8)) for n, i in enumerate(ids)]
    assert await store.upsert("record", rows, MODEL) == 7
    assert await store.upsert("record", [(ids[0], text_hash("fact 0"), _vec(0, 3))], OTHER) == 1
    index = VectorIndex(MODEL)
    assert await index.load(store, page=2) == 7
    assert len(index) == 7 and index.dim == 8
    top = index.search(_vec(4, 8), 1)
    assert top[0][:2] == ("record", ids[4]) and top[0][2] == pytest.approx(1.0, abs=1e-6)


# --- PostgreSQL: the database is the index ---------------------------------------------------------


@pytest.fixture
async def pg() -> AsyncIterator[Items]:
    db = Database(fresh_database_url())
    await db.migrate()
    try:
        yield Items(Storage(db))
    finally:
        await db.close()


def _pg_vector(text: str) -> Matrix:
    return np.array([float(x) for x in text.strip("[]").split(",")], dtype=np.float32)


def _rows(conn: Connection, sql: str, **params: Any) -> list[Any]:
    return list(conn.execute(sql_text(sql), params).all())


async def test_postgresql_computes_each_vector_from_its_blob_exactly(pg: Items) -> None:
    ids = [await pg.record(f"fact {n}") for n in range(3)]
    tricky = np.array([0.0, -0.0, 1e-45, -1e-40, 3.4e38, -1.17549435e-38, 0.1, 1 / 3], dtype=np.float32)
    vectors = [tricky, _vec(1, 8), -_vec(2, 8)]
    rows = [(i, text_hash(f"fact {n}"), vec) for n, (i, vec) in enumerate(zip(ids, vectors, strict=True))]
    assert await pg.vectors.upsert("record", rows, MODEL) == 3
    # A row written as a copy from SQLite writes it: the blob alone.
    await pg.run(insert(sessions).values([_session(1)]))
    await pg.run(insert(archived_messages).values([_message(10, 1, "user", "hello")]))
    blob = memory.embed.vectors.to_blob(_vec(3, 8))
    await pg.run(
        insert(memory_vectors).values(
            item_kind="archive", item_id="10", model_id=MODEL, dim=8, vector=blob, text_hash="0" * 16, created_at=WHEN
        )
    )
    stored = await pg.db.read(lambda conn: _rows(conn, "SELECT item_id, embedding::text AS e FROM memory_vectors"))
    got = {r.item_id: _pg_vector(r.e) for r in stored}
    for item_id, vec in [*zip(ids, vectors, strict=True), ("10", _vec(3, 8))]:
        assert got[item_id].tobytes() == vec.astype("<f4").tobytes()  # bit for bit, -0.0 and subnormals included


async def _hnsw_indexes(items: Items) -> dict[str, str]:
    found = await items.db.read(
        lambda conn: _rows(conn, "SELECT indexname, indexdef FROM pg_indexes WHERE indexname LIKE '%hnsw%'")
    )
    return {r.indexname: r.indexdef for r in found}


async def test_each_model_and_kind_gets_an_index_of_its_dimension(pg: Items) -> None:
    rid = await pg.record("Alice grows basil")
    await pg.run(insert(daily_chunks).values([_chunk(1, "- watered the basil")]))
    small, half, huge = _vec(1, 8), _vec(2, 2001), _vec(3, 4001)
    for model, vec in ((MODEL, small), (OTHER, half), ("test/huge", huge)):
        assert await pg.vectors.upsert("record", [(rid, text_hash("Alice grows basil"), vec)], model) == 1
    await pg.vectors.upsert("daily", [("1", text_hash("- watered the basil"), small)], MODEL)
    indexes = await _hnsw_indexes(pg)
    assert set(indexes) == {
        memory.embed.pgvector.hnsw_index_name(MODEL, "record", 8),
        memory.embed.pgvector.hnsw_index_name(MODEL, "daily", 8),
        memory.embed.pgvector.hnsw_index_name(OTHER, "record", 2001),
    }  # 4,001 dimensions are beyond pgvector's index: searched exactly
    assert (
        "(embedding)::vector(8)) vector_cosine_ops"
        in indexes[memory.embed.pgvector.hnsw_index_name(MODEL, "record", 8)]
    )
    assert "halfvec(2001)) halfvec_cosine_ops" in indexes[memory.embed.pgvector.hnsw_index_name(OTHER, "record", 2001)]
    reach = Reach(record_scopes=("personal:alice",), daily_scopes=("personal:alice",))
    for model, vec in ((MODEL, small), (OTHER, half), ("test/huge", huge)):
        [(kind, item, cosine), *rest] = await pg.vectors.nearest(model, vec, 5, reach)
        assert (kind, item) == ("record", rid) and cosine == pytest.approx(1.0, abs=1e-6)
        assert rest == ([("daily", "1", pytest.approx(1.0, abs=1e-6))] if model == MODEL else [])


async def test_a_copy_gets_its_indexes_when_the_model_is_opened(pg: Items) -> None:
    """Vectors that arrived as rows (a copy from SQLite, vectors stored before migration 0012) have no
    index until `prepare`: the gateway calls it as it opens the model's index."""
    ids = [await pg.record(f"fact {n}") for n in range(4)]
    rows = [
        {
            "item_kind": "record",
            "item_id": i,
            "model_id": MODEL,
            "dim": 6,
            "vector": memory.embed.vectors.to_blob(_vec(n, 6)),
            "text_hash": text_hash(f"fact {n}"),
            "created_at": WHEN,
        }
        for n, i in enumerate(ids)
    ]
    await pg.run(insert(memory_vectors).values(rows))
    assert await _hnsw_indexes(pg) == {}
    assert await pg.vectors.prepare(MODEL) == 1
    assert set(await _hnsw_indexes(pg)) == {memory.embed.pgvector.hnsw_index_name(MODEL, "record", 6)}
    assert await pg.vectors.prepare(MODEL) == 0
    found = await pg.vectors.nearest(MODEL, _vec(2, 6), 1, Reach(record_scopes=("personal:alice",)))
    assert found[0][:2] == ("record", ids[2])


async def _world(items: Items, dim: int, rng: np.random.Generator) -> dict[tuple[str, str], tuple[Matrix, str]]:
    """Records, archived messages and daily chunks of several owners, each with a random vector;
    (kind, id) → (vector, where it lives: a scope, or a session's key and owner)."""
    made: dict[tuple[str, str], tuple[Matrix, str]] = {}
    store = RecordStore(items.db)

    async def record(content: str, scope: str, **kw: Any) -> None:
        r = await store.create(
            content,
            memory_class=kw.pop("memory_class", MemoryClass.DURABLE_FACT),
            provenance=Provenance.USER_CONFIRMED,
            use_policy=UsePolicy(),
            scope=Scope.parse(scope),
            author="alice",
            review_status=ReviewStatus.NONE,
            **kw,
        )
        vec = unit_rows(rng, 1, dim)[0]
        if await items.vectors.upsert("record", [(r.id, text_hash(content), vec)], MODEL):  # a trace is not
            made[("record", r.id)] = (vec, scope)

    for n in range(6):
        for scope in ("personal:alice", "personal:bob", "global", "project:atlas", "channel:telegram:group:-100"):
            await record(f"{scope} fact {n}", scope)
    await record("said in public", "personal:alice", origin_audience="public")
    await record("a trace", "personal:alice", memory_class=MemoryClass.TRACE)
    sessions_rows = [
        {**_session(1), "user_id": "alice"},
        {**_session(2), "user_id": "bob"},
        {**_session(3), "user_id": None, "key": "telegram:group:-100", "audience": "team"},
        {**_session(4, excluded=True), "user_id": "alice"},
        {**_session(5, "public"), "user_id": None},
    ]
    await items.run(insert(sessions).values(sessions_rows))
    messages = [
        _message(100 * s + n, s, ("user", "assistant", "tool")[n % 3], f"m {s} {n}")
        for s in range(1, 6)
        for n in range(6)
    ]
    await items.run(insert(archived_messages).values(messages))
    owner = {1: "web:1|alice", 2: "web:2|bob", 3: "telegram:group:-100|", 4: "web:4|alice", 5: "web:5|"}
    todo = await items.vectors.missing("archive", MODEL, 100)
    vecs = unit_rows(rng, len(todo), dim)
    await items.vectors.upsert("archive", [(i, text_hash(t), vecs[n]) for n, (i, t) in enumerate(todo)], MODEL)
    for n, (i, _t) in enumerate(todo):
        made[("archive", i)] = (vecs[n], owner[int(i) // 100])
    chunks = [
        {**_chunk(c, f"- note {c}"), "scope": s}
        for c, s in enumerate(["personal:alice", "personal:bob", "global"] * 3, 1)
    ]
    await items.run(insert(daily_chunks).values(chunks))
    todo = await items.vectors.missing("daily", MODEL, 100)
    vecs = unit_rows(rng, len(todo), dim)
    await items.vectors.upsert("daily", [(i, text_hash(t), vecs[n]) for n, (i, t) in enumerate(todo)], MODEL)
    for n, (i, _t) in enumerate(todo):
        made[("daily", i)] = (vecs[n], chunks[int(i) - 1]["scope"])
    return made


def _visible(key: tuple[str, str], place: str, reach: Reach, text_of: dict[tuple[str, str], str]) -> bool:
    kind, _ = key
    if kind == "record":
        if text_of[key] in ("said in public", "a trace"):
            return False
        return place in reach.record_scopes or (reach.include_projects and place.startswith("project:"))
    if kind == "archive":
        session_key, owner = place.split("|")
        if session_key in ("web:4", "web:5"):  # kept out of memory; public
            return False
        return owner == reach.archive_user or session_key in reach.archive_keys
    return place in reach.daily_scopes


async def test_the_database_index_ranks_exactly_what_each_asker_may_see(pg: Items) -> None:
    rng = np.random.default_rng(11)
    made = await _world(pg, 12, rng)
    records = {r.id: r.content for r in await pg.records.get_many([i for k, i in made if k == "record"])}
    text_of = {key: records.get(key[1], "") for key in made}
    # Tool messages are never embedded: the archive offers user and assistant messages only.
    assert not any(kind == "archive" and int(i) % 100 % 3 == 2 for kind, i in made)
    askers = [
        Reach(("personal:alice", "global"), True, "alice", ("web:1",), ("personal:alice", "global")),
        Reach(("personal:bob",), False, "bob", (), ("personal:bob",)),
        Reach(("channel:telegram:group:-100", "global"), False, None, ("telegram:group:-100",), ("global",)),
        Reach(("personal:alice",), False, "alice", ("web:5", "web:4"), ()),  # public and excluded sessions stay out
        Reach(),
    ]
    for reach in askers:
        for k in (3, 25, 200, 1500):
            query = unit_rows(rng, 1, 12)[0]
            inside = {key: vec for key, (vec, place) in made.items() if _visible(key, place, reach, text_of)}
            expected = brute_force(inside, query, k)
            for exact in (False, True):
                found = await pg.vectors.nearest(MODEL, query, k, reach, exact=exact)
                assert_same_top(found, expected)


async def test_cosines_of_given_items_by_kind_and_id(pg: Items) -> None:
    rng = np.random.default_rng(5)
    made = await _world(pg, 6, rng)
    query = unit_rows(rng, 1, 6)[0]
    archive_ids = sorted(i for k, i in made if k == "archive")
    asked = [("daily", "1"), ("archive", archive_ids[0]), ("record", "mem-none"), ("daily", archive_ids[0])]
    found = await pg.vectors.cosines(MODEL, query, asked)
    expected = brute_force({key: made[key][0] for key in asked if key in made}, query, 10)
    assert_same_top(found, expected)
    assert await pg.vectors.cosines(MODEL, query, []) == []


async def test_hnsw_serves_the_search_and_a_sparse_asker_still_gets_all_theirs(pg: Items) -> None:
    """With enough rows the planner walks the HNSW graph (approximate: most of the exact top k);
    someone who may see a handful of items among thousands gets every one of them, in order."""
    rng = np.random.default_rng(3)
    n, dim = 1500, 16
    store = RecordStore(pg.db)

    def item(i: int) -> NewRecord:
        owner = "bob" if i % 300 == 7 else "alice"
        return NewRecord(
            f"fact {i}",
            MemoryClass.DURABLE_FACT,
            Provenance.IMPORTED,
            UsePolicy(),
            f"personal:{owner}",
            owner,
            ReviewStatus.NONE,
        )

    ids = await store.import_batch([item(i) for i in range(n)])
    vecs = unit_rows(rng, n, dim)
    await pg.vectors.upsert("record", [(i, text_hash(f"fact {n}"), vecs[n]) for n, i in enumerate(ids)], MODEL)
    await pg.db.write(lambda conn: conn.exec_driver_sql("ANALYZE"))
    alice, bob = Reach(("personal:alice",)), Reach(("personal:bob",))
    shares = []
    for _ in range(10):
        query = unit_rows(rng, 1, dim)[0]
        approx = await pg.vectors.nearest(MODEL, query, 20, alice)
        exact = await pg.vectors.nearest(MODEL, query, 20, alice, exact=True)
        assert len(approx) == 20 and [c for *_, c in approx] == sorted((c for *_, c in approx), reverse=True)
        shares.append(len({i for _, i, _ in approx} & {i for _, i, _ in exact}) / 20)
        theirs = await pg.vectors.nearest(MODEL, query, 20, bob)
        assert [i for _, i, _ in theirs] == [
            i for _, i, _ in await pg.vectors.nearest(MODEL, query, 20, bob, exact=True)
        ]
        assert len(theirs) == 5
    assert sum(shares) / len(shares) >= 0.9

    def plan(conn: Connection) -> str:
        """The plan of the search's own statement, with its parameters, as PostgreSQL would run it."""

        def explain(*args: Any) -> tuple[str, Any]:
            return "EXPLAIN " + args[2], args[3]

        stmt = memory.embed.pgvector._nearest_statement(MODEL, dim, memory.embed.pgvector._shape(alice), "vector")
        q = memory.embed.pgvector._pg_text(vecs[0])
        params = {"q": q, "now": WHEN, "limit": 20, **memory.embed.pgvector._reach_params(alice)}
        event.listen(conn, "before_cursor_execute", explain, retval=True)
        try:
            return "\n".join(str(r[0]) for r in conn.execute(stmt, params))
        finally:
            event.remove(conn, "before_cursor_execute", explain)

    assert memory.embed.pgvector.hnsw_index_name(MODEL, "record", dim) in await pg.db.read(plan)


def _to_revision(revision: str) -> Callable[[Connection], None]:
    def run(conn: Connection) -> None:
        from alembic import command
        from alembic.config import Config as AlembicConfig

        from memory.store.db import MIGRATIONS

        cfg = AlembicConfig()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)

    return run


async def test_migration_0012_brings_pgvector_and_goes_down_and_up_again() -> None:
    db = Database(fresh_database_url())
    try:
        await db.write(lambda conn: conn.exec_driver_sql("DROP EXTENSION vector"))
        await db.migrate()  # the extension is created again, where the server has it
        items = Items(Storage(db))
        rid = await items.record("Alice grows basil on the balcony")
        assert await items.vectors.upsert(
            "record", [(rid, text_hash("Alice grows basil on the balcony"), _vec(1, 5))], MODEL
        )
        await items.run(insert(sessions).values([_session(1)]))
        await items.run(insert(archived_messages).values([_message(10, 1, "user", "the balcony gets sun")]))
        assert set(await _hnsw_indexes(items)) == {memory.embed.pgvector.hnsw_index_name(MODEL, "record", 5)}

        await db.write(_to_revision("0011"))
        columns = await db.read(
            lambda conn: _rows(
                conn,
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE column_name IN ('embedding', 'words') AND table_name <> 'memory_records'",
            )
        )
        assert columns == [] and await _hnsw_indexes(items) == {}

        memory.embed.pgvector._HNSW_KNOWN.clear()  # this process saw the index before it was dropped
        await db.migrate()  # the columns are computed again from what the rows hold
        assert [h.id for h in await Storage(db).archive.search("sunny balconies", user_id="alice")] == [10]
        assert await items.vectors.prepare(MODEL) == 1
        found = await items.vectors.nearest(MODEL, _vec(1, 5), 3, Reach(record_scopes=("personal:alice",)))
        assert found == [("record", rid, pytest.approx(1.0, abs=1e-6))]
    finally:
        await db.close()


def test_an_hnsw_build_asks_for_memory_by_its_size_within_bounds() -> None:
    assert build_memory(0, 384) == build_memory(50_000, 384) == "256MB"  # the floor
    mid = int(build_memory(330_000, 384).removesuffix("MB"))
    assert 700 < mid < 1024  # the graph of 330,000 MiniLM vectors fits, so it is built in memory
    assert build_memory(5_000_000, 1536) == f"{INDEX_BUILD_MEMORY_MAX // 1024**2}MB"  # never more
