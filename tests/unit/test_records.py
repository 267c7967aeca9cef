"""The long-term memory record store over real SQLite files: every field kept, expiry per class,
revisions with undo, forgetting and purging, the search's filters (which are the privacy rules no
caller may bypass), all-or-nothing imports and the migration onto an existing database."""

from __future__ import annotations

import importlib
import re
import warnings
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, insert, inspect, select, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError, SAWarning

import memory.records.fields
import memory.records.rows
import memory.records.search
from memory.archive.fulltext import CJK_CHARS, query_terms
from memory.records.fields import NewRecord
from memory.records.model import (
    MemoryClass,
    MemoryRecord,
    Provenance,
    RecordStatus,
    ReviewStatus,
    Scope,
    ScopeKind,
    UsePolicy,
)
from memory.records.search import search_like
from memory.records.store import (
    MAX_SEARCH,
    UNDO_WINDOW,
    NothingToUndo,
    RecordError,
    RecordNotFound,
    RecordStore,
    StaleRevision,
    undo_target,
)
from memory.store.db import MIGRATIONS, Database
from memory.store.schema import archived_messages, memory_records, memory_revisions, metadata, sessions
from memory.store.storage import Storage
from tests.postgres import BACKENDS, database_url
from tests.unit.test_archive import cjk_consistent

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
ALICE = Scope.personal("alice")
BOB = Scope.personal("bob")
GROUP = Scope.channel("telegram:group:-100")
ATLAS = Scope(ScopeKind.PROJECT, "atlas")
EVIDENCE_ONLY = UsePolicy(can_use_as_instruction=False, requires_user_confirmation=True)
FILLER = [
    "the weather was lovely in the garden today",
    "the plumber comes on tuesday",
    "new shoes for the hiking trip",
    "the cat knocked a glass off the table",
    "a film about octopuses",
    "the train leaves at seven",
]


class Records:
    """A migrated database, its record store and shortcuts for making records."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.db = storage.db
        self.store = RecordStore(storage.db)

    async def add(self, content: str, scope: Scope = ALICE, **overrides: Any) -> MemoryRecord:
        args: dict[str, Any] = {
            "memory_class": MemoryClass.DURABLE_FACT,
            "provenance": Provenance.USER_CONFIRMED,
            "use_policy": UsePolicy(),
            "scope": scope,
            "author": "alice",
            "review_status": ReviewStatus.NONE,
            "now": T0,
        }
        args.update(overrides)
        return await self.store.create(content, **args)

    async def found(self, query: str, scopes: list[Scope] | None = None, **kwargs: Any) -> list[str]:
        kwargs.setdefault("now", T0 + timedelta(minutes=1))
        hits = await self.store.search(query, scopes=[ALICE] if scopes is None else scopes, **kwargs)
        return [record.id for record, _ in hits]


@pytest.fixture(params=BACKENDS)
async def records(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Records]:
    storage = await Storage.open(database_url(request.param, tmp_path))
    try:
        yield Records(storage)
    finally:
        await storage.close()


@pytest.fixture
async def filled(records: Records) -> Records:
    """Ordinary facts, so that bm25 has a corpus in which the searched words are rare."""
    for line in FILLER:
        await records.add(line)
    return records


def _count(conn: Connection, table: str) -> int:
    return int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())


async def _counts(records: Records) -> tuple[int, int, int]:
    def run(conn: Connection) -> tuple[int, int, int]:
        records = _count(conn, "memory_records")
        # FTS5 keeps an index table beside the records; elsewhere the records are their own index.
        fts = _count(conn, "memory_records_fts") if conn.dialect.name == "sqlite" else records
        return records, _count(conn, "memory_revisions"), fts

    return await records.db.read(run)


def _fts_consistent(conn: Connection) -> None:
    # Raises when the index disagrees with memory_records (rank 1: compare with the content table).
    if conn.dialect.name != "sqlite":
        return
    conn.execute(text("INSERT INTO memory_records_fts(memory_records_fts, rank) VALUES ('integrity-check', 1)"))


def _item(content: str, **overrides: Any) -> NewRecord:
    args: dict[str, Any] = {
        "content": content,
        "memory_class": MemoryClass.EVIDENCE,
        "provenance": Provenance.IMPORTED,
        "use_policy": UsePolicy(),
        "scope": ALICE,
        "author": "import:notes",
        "review_status": ReviewStatus.NONE,
    }
    args.update(overrides)
    return NewRecord(**args)


# --- create and read ------------------------------------------------------------------------------


async def test_create_and_get_keep_every_field(records: Records) -> None:
    policy = UsePolicy(
        can_use_as_instruction=True,
        can_use_as_evidence=False,
        requires_user_confirmation=False,
        do_not_inject_automatically=True,
    )
    made = await records.store.create(
        "Alice prefers tea to coffee",
        memory_class=MemoryClass.EVIDENCE,
        provenance=Provenance.INFERRED,
        use_policy=policy,
        scope=GROUP,
        author="agent:main",
        review_status=ReviewStatus.PENDING,
        sensitivity="sensitive",
        source="telegram:42:1001",
        attribution="telegram:7",
        origin_audience="team",
        tags=("drinks", "preferences"),
        now=T0,
    )
    assert made == MemoryRecord(
        id=made.id,
        content="Alice prefers tea to coffee",
        memory_class=MemoryClass.EVIDENCE,
        provenance=Provenance.INFERRED,
        use_policy=policy,
        scope=GROUP,
        author="agent:main",
        created_at=T0,
        updated_at=T0,
        review_status=ReviewStatus.PENDING,
        status=RecordStatus.ACTIVE,
        sensitivity="sensitive",
        source="telegram:42:1001",
        attribution="telegram:7",
        origin_audience="team",
        expires_at=T0 + timedelta(days=30),
        superseded_by=None,
        revision=1,
        tags=("drinks", "preferences"),
    )
    assert await records.store.get(made.id) == made
    [create] = await records.store.revisions(made.id)
    assert (create.revision, create.action, create.actor, create.at, create.before) == (
        1,
        "create",
        "agent:main",
        T0,
        None,
    )
    assert memory.records.rows.from_snapshot(create.after) == made


async def test_ids_are_opaque_and_unique(records: Records) -> None:
    ids = await records.store.import_batch([_item(f"fact {i}") for i in range(300)])
    ids.append((await records.add("one more")).id)
    assert len(set(ids)) == len(ids) == 301
    assert all(re.fullmatch(r"mem-[a-z2-7]{16}", i) for i in ids)
    assert await records.store.get("mem-aaaaaaaaaaaaaaaa") is None


async def test_get_many_keeps_the_order_asked_and_skips_the_unknown(records: Records) -> None:
    a, b, c = [await records.add(t) for t in ("a fact", "b fact", "c fact")]
    await records.store.forget(b.id, "alice")
    got = await records.store.get_many([c.id, "mem-unknown", a.id, b.id])
    assert [r.id for r in got] == [c.id, a.id]
    with_deleted = await records.store.get_many([b.id, a.id], include_deleted=True)
    assert [r.id for r in with_deleted] == [b.id, a.id]
    assert await records.store.get_many([]) == []


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("content", "   "),
        ("author", ""),
        ("memory_class", "forever"),
        ("provenance", "rumour"),
        ("scope", "team:x"),
        ("sensitivity", "secret"),
        ("origin_audience", "world"),
        ("tags", "not-a-list"),
    ],
)
async def test_bad_values_are_refused_before_anything_is_written(records: Records, field: str, value: Any) -> None:
    with pytest.raises(ValueError):
        await records.store.import_batch([_item("fine"), replace(_item("bad"), **{field: value})])
    assert await _counts(records) == (0, 0, 0)


# --- expiry -------------------------------------------------------------------------------------


async def test_expiry_follows_the_class(records: Records) -> None:
    durable = await records.add("durable", memory_class=MemoryClass.DURABLE_FACT)
    evidence = await records.add("evidence", memory_class=MemoryClass.EVIDENCE)
    trace = await records.add("trace", memory_class=MemoryClass.TRACE)
    assert durable.expires_at is None
    assert evidence.expires_at == T0 + timedelta(days=30)
    assert trace.expires_at == T0 + timedelta(hours=72)

    assert await records.store.expire(T0 + timedelta(hours=72) - timedelta(seconds=1)) == 0
    assert await records.store.expire(T0 + timedelta(hours=72)) == 1
    assert await records.store.get(trace.id, include_deleted=True) is None
    assert await records.store.revisions(trace.id) == []
    assert await records.store.expire(T0 + timedelta(days=30)) == 1
    assert await records.store.expire(T0 + timedelta(days=3650)) == 0
    assert [r.id for r in await records.store.list()] == [durable.id]
    assert await _counts(records) == (1, 1, 1)


async def test_imported_memories_expire_from_when_they_were_made(records: Records) -> None:
    [old] = await records.store.import_batch([_item("old news", created_at=T0 - timedelta(days=40))], now=T0)
    record = await records.store.get(old)
    assert record is not None and record.expired(T0)
    assert record.created_at == T0 - timedelta(days=40) and record.updated_at == T0
    assert await records.store.expire(T0) == 1


async def test_a_change_of_class_restarts_the_clock(records: Records) -> None:
    record = await records.add("maybe", memory_class=MemoryClass.TRACE)
    later = T0 + timedelta(days=2)
    promoted = await records.store.update(
        record.id, actor="alice", action="evidence", memory_class=MemoryClass.EVIDENCE, now=later
    )
    assert promoted.expires_at == later + timedelta(days=30)
    durable = await records.store.update(
        record.id, actor="alice", action="confirm", memory_class=MemoryClass.DURABLE_FACT, now=later
    )
    assert durable.expires_at is None
    same = await records.store.update(record.id, actor="alice", action="edit", memory_class=MemoryClass.DURABLE_FACT)
    assert same.expires_at is None


async def test_forgotten_records_are_purged_after_the_undo_window(records: Records) -> None:
    record = await records.add("forget me")
    await records.store.forget(record.id, "alice", now=T0)
    assert await records.store.expire(T0 + UNDO_WINDOW - timedelta(seconds=1)) == 0
    assert await records.store.expire(T0 + UNDO_WINDOW) == 1
    assert await _counts(records) == (0, 0, 0)


# --- changes, revisions and undo ----------------------------------------------------------------


async def test_update_writes_a_revision_with_before_and_after(records: Records) -> None:
    record = await records.add("Alice likes tea", review_status=ReviewStatus.PENDING)
    later = T0 + timedelta(hours=1)
    edited = await records.store.update(
        record.id,
        actor="alice",
        action="edit",
        note="typo",
        now=later,
        content="Alice likes green tea",
        review_status=ReviewStatus.CONFIRMED,
        scope="personal:alice",
        tags=["tea"],
    )
    assert (edited.content, edited.review_status, edited.tags) == (
        "Alice likes green tea",
        ReviewStatus.CONFIRMED,
        ("tea",),
    )
    assert (edited.revision, edited.updated_at, edited.created_at) == (2, later, T0)
    assert await records.store.get(record.id) == edited
    _, change = await records.store.revisions(record.id)
    assert (change.revision, change.action, change.actor, change.at, change.note) == (2, "edit", "alice", later, "typo")
    assert change.before is not None
    assert memory.records.rows.from_snapshot(change.before) == record
    assert memory.records.rows.from_snapshot(change.after) == edited


async def test_update_refuses_what_it_cannot_do(records: Records) -> None:
    record = await records.add("a fact")
    with pytest.raises(RecordNotFound):
        await records.store.update("mem-nothinghere0000", actor="alice", action="edit", content="x")
    with pytest.raises(ValueError):
        await records.store.update(record.id, actor="alice", action="teleport", content="x")
    with pytest.raises(ValueError):
        await records.store.update(record.id, actor="alice", action="undo", content="x")
    with pytest.raises(TypeError):
        await records.store.update(record.id, actor="alice", action="edit", author="mallory")
    with pytest.raises(ValueError):
        await records.store.update(record.id, actor="alice", action="edit", use_policy={"can_use_as_instruction": True})
    assert await records.store.get(record.id) == record
    assert len(await records.store.revisions(record.id)) == 1


async def test_optimistic_concurrency(records: Records) -> None:
    record = await records.add("version one")
    await records.store.update(record.id, actor="alice", action="edit", expected_revision=1, content="version two")
    with pytest.raises(StaleRevision) as stale:
        await records.store.update(record.id, actor="bob", action="edit", expected_revision=1, content="lost update")
    assert (stale.value.expected, stale.value.current) == (1, 2)
    assert isinstance(stale.value, RecordError)
    current = await records.store.get(record.id)
    assert current is not None and (current.content, current.revision) == ("version two", 2)
    with pytest.raises(StaleRevision):
        await records.store.undo(record.id, "alice", expected_revision=1)


async def test_undo_restores_and_is_itself_a_revision(records: Records) -> None:
    record = await records.add("the meeting is on monday", memory_class=MemoryClass.EVIDENCE)
    edited = await records.store.update(
        record.id,
        actor="alice",
        action="confirm",
        content="the meeting is on tuesday",
        memory_class=MemoryClass.DURABLE_FACT,
        review_status=ReviewStatus.CONFIRMED,
        now=T0 + timedelta(hours=1),
    )
    undone = await records.store.undo(record.id, "alice", now=T0 + timedelta(hours=2))
    same_fields = ("content", "memory_class", "review_status", "expires_at", "scope", "use_policy", "tags")
    assert all(getattr(undone, f) == getattr(record, f) for f in same_fields)
    assert (undone.revision, undone.updated_at) == (3, T0 + timedelta(hours=2))
    last = (await records.store.revisions(record.id))[-1]
    assert (last.action, last.actor, last.note) == ("undo", "alice", "undo of revision 2")
    assert last.before is not None and memory.records.rows.from_snapshot(last.before) == edited
    assert await records.found("tuesday") == []
    assert await records.found("monday") == [record.id]


async def test_undo_walks_back_and_undoing_the_creation_forgets(records: Records) -> None:
    record = await records.add("v1")
    for text_ in ("v2", "v3"):
        await records.store.update(record.id, actor="alice", action="edit", content=text_)
    contents = []
    for _ in range(2):
        undone = await records.store.undo(record.id, "alice")
        contents.append(undone.content)
    assert contents == ["v2", "v1"]
    # A change after undos is undone first; then the walk resumes where it was.
    await records.store.update(record.id, actor="alice", action="edit", content="v4")
    assert (await records.store.undo(record.id, "alice")).content == "v1"
    gone = await records.store.undo(record.id, "alice")
    assert gone.status == RecordStatus.DELETED
    assert await records.store.get(record.id) is None
    with pytest.raises(NothingToUndo):
        await records.store.undo(record.id, "alice")
    actions = [r.action for r in await records.store.revisions(record.id)]
    assert actions == ["create", "edit", "edit", "undo", "undo", "edit", "undo", "undo"]
    with pytest.raises(RecordNotFound):
        await records.store.undo("mem-nothinghere0000", "alice")


@pytest.mark.parametrize(
    ("history", "target"),
    [
        ([], None),
        ([(1, "create")], 1),
        ([(2, "edit"), (1, "create")], 2),
        ([(3, "undo"), (2, "edit"), (1, "create")], 1),
        ([(4, "undo"), (3, "undo"), (2, "edit"), (1, "create")], None),
        ([(5, "edit"), (4, "undo"), (3, "edit"), (2, "edit"), (1, "create")], 5),
        ([(6, "undo"), (5, "edit"), (4, "undo"), (3, "edit"), (2, "edit"), (1, "create")], 2),
    ],
)
def test_undo_target_pairs_undos_with_changes_like_brackets(history: list[tuple[int, str]], target: int | None) -> None:
    assert undo_target(history) == target


# --- forget and purge ---------------------------------------------------------------------------


async def test_forget_hides_the_record_and_undo_brings_it_back(filled: Records) -> None:
    record = await filled.add("the alarm code is kept in the blue folder")
    forgotten = await filled.store.forget(record.id, "alice", note="asked to")
    assert forgotten.status == RecordStatus.DELETED and forgotten.content == ""
    assert await filled.store.get(record.id) is None
    assert await filled.found("alarm folder") == []
    assert record.id not in [r.id for r in await filled.store.list(status=None)]
    kept = await filled.store.get(record.id, include_deleted=True)
    assert kept is not None and kept.content == ""  # the text survives only in the revisions
    assert [r.before["content"] for r in await filled.store.revisions(record.id) if r.before] == [record.content]
    await filled.db.read(_fts_consistent)

    back = await filled.store.undo(record.id, "alice")
    assert (back.status, back.content) == (RecordStatus.ACTIVE, record.content)
    assert await filled.found("alarm folder") == [record.id]
    await filled.db.read(_fts_consistent)


async def test_purge_removes_the_record_and_every_revision(filled: Records) -> None:
    record = await filled.add("my passport number is in the drawer")
    await filled.store.update(record.id, actor="alice", action="edit", content="my passport is in the top drawer")
    before = await _counts(filled)
    assert await filled.store.purge(record.id)
    assert not await filled.store.purge(record.id)
    assert await filled.store.get(record.id, include_deleted=True) is None
    assert await filled.store.revisions(record.id) == []
    assert await filled.found("passport drawer") == []
    assert await _counts(filled) == (before[0] - 1, before[1] - 2, before[2] - 1)
    await filled.db.read(_fts_consistent)


# --- search -------------------------------------------------------------------------------------


async def test_a_multi_word_question_finds_a_record_with_one_of_its_words(filled: Records) -> None:
    record = await filled.add("the budget review moved to friday")
    assert await filled.found("When is the budget meeting?") == [record.id]


async def test_more_matching_words_rank_first_and_scores_are_positive(filled: Records) -> None:
    one = await filled.add("the budget is tight")
    both = await filled.add("the budget meeting is on friday")
    hits = await filled.store.search("budget meeting", scopes=[ALICE], now=T0)
    assert [r.id for r, _ in hits] == [both.id, one.id]
    assert hits[0][1] > hits[1][1] > 0


async def test_stemming_finds_other_forms_of_a_word(filled: Records) -> None:
    record = await filled.add("Alice runs every morning")
    assert await filled.found("running") == [record.id]


async def test_a_large_store_ranks_first_and_still_finds_a_sparse_owners_memory(
    records: Records, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past RANK_FIRST_FROM texts the leg joins only FTS5's best matches; a person whose matches
    are all further down (others own the best ones) falls back to every match, same answer."""
    many = [f"lighthouse lighthouse keeper log {i}" for i in range(60)]
    await records.store.import_batch(
        [
            NewRecord(
                t, MemoryClass.DURABLE_FACT, Provenance.USER_CONFIRMED, UsePolicy(), BOB, "bob", ReviewStatus.NONE
            )
            for t in many
        ],
        now=T0,
    )
    mine = await records.add("a note that mentions the lighthouse once, among many other words here")
    full = {q: await records.found(q, [ALICE, BOB], limit=10) for q in ("lighthouse", "keeper log 7")}
    alone = await records.found("lighthouse")
    monkeypatch.setattr(memory.records.search, "RANKED_FIRST", 20)
    monkeypatch.setattr(memory.records.search, "RANK_FIRST_FROM", 0)
    assert await records.found("lighthouse") == alone == [mine.id]  # beyond the first 20: fell back
    for q, expected in full.items():
        assert await records.found(q, [ALICE, BOB], limit=10) == expected  # ranked first: the same


async def test_search_looks_only_in_the_scopes_given(filled: Records) -> None:
    mine = await filled.add("lighthouse keeper notes", ALICE)
    theirs = await filled.add("lighthouse keeper notes", BOB)
    group = await filled.add("lighthouse keeper notes", GROUP)
    project = await filled.add("lighthouse keeper notes", ATLAS)
    glob = await filled.add("lighthouse keeper notes", Scope(ScopeKind.GLOBAL))
    assert await filled.found("lighthouse") == [mine.id]
    assert set(await filled.found("lighthouse", [ALICE, GROUP, Scope(ScopeKind.GLOBAL)])) == {
        mine.id,
        group.id,
        glob.id,
    }
    assert set(await filled.found("lighthouse", [ALICE], include_projects=True)) == {mine.id, project.id}
    assert await filled.found("lighthouse", [ATLAS]) == [project.id]
    assert await filled.found("lighthouse", []) == []
    assert await filled.found("lighthouse", [], include_projects=True) == [project.id]
    # Scopes as text work the same; a personal scope not listed never appears.
    hits = await filled.store.search("lighthouse", scopes=["personal:alice", "global"], include_projects=True, now=T0)
    assert theirs.id not in {r.id for r, _ in hits} and len(hits) == 3


async def test_search_never_finds_traces_expired_public_superseded_or_forgotten(filled: Records) -> None:
    visible = await filled.add("lighthouse visible")
    await filled.add("lighthouse trace", memory_class=MemoryClass.TRACE)
    expired = await filled.add("lighthouse evidence", memory_class=MemoryClass.EVIDENCE)
    await filled.add("lighthouse said in public", origin_audience="public")
    old = await filled.add("lighthouse old")
    await filled.store.update(old.id, actor="alice", action="supersede", status=RecordStatus.SUPERSEDED)
    gone = await filled.add("lighthouse forgotten")
    await filled.store.forget(gone.id, "alice")
    assert set(await filled.found("lighthouse")) == {visible.id, expired.id}
    assert await filled.found("lighthouse", now=T0 + timedelta(days=30)) == [visible.id]
    assert await filled.found("trace public old forgotten", include_projects=True) == []


async def test_limit_is_capped_and_ties_put_the_newest_first(filled: Records) -> None:
    ids = (await filled.store.import_batch([_item("lighthouse note") for _ in range(MAX_SEARCH + 5)], now=T0))[::-1]
    assert await filled.found("lighthouse", limit=0) == ids[:1]
    assert await filled.found("lighthouse", limit=3) == ids[:3]
    assert await filled.found("lighthouse", limit=10_000) == ids[:MAX_SEARCH]


async def test_a_query_without_words_does_not_touch_the_database(records: Records) -> None:
    await records.storage.close()  # any database work would now raise DatabaseClosed
    for query in ("", "   ", "?!", "-- ** ()", "🎉"):
        assert await records.store.search(query, scopes=[ALICE]) == []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.text(max_size=300))
@example(query='" OR "')
@example(query="NEAR(a b")
@example(query="content:* AND ^x -y {z}")
@example(query="%_\\ lighthouse")
async def test_hostile_queries_never_raise(filled: Records, query: str) -> None:
    hits = await filled.store.search(query, scopes=[ALICE, "personal:' OR 1=1 --"], include_projects=True)
    assert len(hits) <= MAX_SEARCH
    assert all(r.scope == ALICE for r, _ in hits)
    like = await filled.db.read(search_like, query_terms(query) or ["x"], ["personal:alice"], False, 10, T0)
    assert all(r.scope == ALICE for r, _ in like)


async def test_like_fallback_has_the_same_filters_and_scores_by_matched_terms(filled: Records) -> None:
    both = await filled.add("budget meeting on friday")
    one = await filled.add("budget is tight")
    await filled.add("budget meeting for bob", BOB)
    await filled.add("budget trace", memory_class=MemoryClass.TRACE)
    await filled.add("100% of the budget_meeting")
    hits = await filled.db.read(search_like, ["budget", "meeting"], ["personal:alice"], False, 10, T0)
    assert [(r.content, score) for r, score in hits] == [
        ("100% of the budget_meeting", 2.0),  # newest first among equals
        (both.content, 2.0),
        (one.content, 1.0),
    ]
    wildcard = await filled.db.read(search_like, ["%"], ["personal:alice"], False, 10, T0)
    assert [r.content for r, _ in wildcard] == ["100% of the budget_meeting"]


# --- listing ------------------------------------------------------------------------------------


async def test_list_and_count(records: Records) -> None:
    first = await records.add("first", review_status=ReviewStatus.PENDING)
    second = await records.add("second", GROUP, now=T0 + timedelta(minutes=1))
    third = await records.add("third", review_status=ReviewStatus.PENDING, now=T0 + timedelta(minutes=2))
    await records.store.update(first.id, actor="alice", action="supersede", status=RecordStatus.SUPERSEDED)
    assert [r.id for r in await records.store.list()] == [third.id, second.id]
    assert [r.id for r in await records.store.list(status=None)] == [third.id, second.id, first.id]
    assert [r.id for r in await records.store.list(review_status=ReviewStatus.PENDING, status=None)] == [
        third.id,
        first.id,
    ]
    assert [r.id for r in await records.store.list(scopes=[GROUP])] == [second.id]
    assert [r.id for r in await records.store.list(limit=1, offset=1)] == [second.id]
    assert await records.store.count() == 2
    assert await records.store.count(scopes=["personal:alice"], status=None) == 2
    assert await records.store.count(status=RecordStatus.SUPERSEDED) == 1


async def test_texts_are_the_active_unexpired_statements_of_one_scope_newest_first(records: Records) -> None:
    await records.add("old fact", attribution="Dana")
    gone = await records.add("superseded fact", now=T0 + timedelta(minutes=1))
    await records.store.update(gone.id, actor="alice", action="supersede", status=RecordStatus.SUPERSEDED)
    await records.add("short-lived", memory_class=MemoryClass.EVIDENCE, now=T0 - timedelta(days=40))
    await records.add("new fact", now=T0 + timedelta(minutes=2))
    await records.add("someone else's", BOB)
    now = T0 + timedelta(minutes=3)
    assert await records.store.texts(ALICE, now=now) == [("new fact", None), ("old fact", "Dana")]
    assert await records.store.texts("personal:alice", limit=1, now=now) == [("new fact", None)]


# --- import -------------------------------------------------------------------------------------


async def test_import_batch_writes_records_and_import_revisions(records: Records) -> None:
    items = [_item(f"imported fact {i}", tags=("import",)) for i in range(50)]
    ids = await records.store.import_batch(items, now=T0)
    got = await records.store.get_many(ids)
    assert [r.content for r in got] == [i.content for i in items]
    assert all(r.provenance == Provenance.IMPORTED and r.tags == ("import",) for r in got)
    [rev] = await records.store.revisions(ids[7])
    assert (rev.action, rev.actor, rev.before) == ("import", "import:notes", None)
    assert await records.store.import_batch([]) == []
    await records.db.read(_fts_consistent)


async def test_import_batch_is_all_or_nothing(records: Records, monkeypatch: pytest.MonkeyPatch) -> None:
    existing = await records.add("already here")
    before = await _counts(records)
    fresh = iter(["mem-aaaaaaaaaaaaaaaa", "mem-bbbbbbbbbbbbbbbb", existing.id, "mem-cccccccccccccccc"])
    monkeypatch.setattr(memory.records.fields, "new_id", lambda: next(fresh))
    with pytest.raises(IntegrityError):  # the third id is taken: the database refuses mid-batch
        await records.store.import_batch([_item(f"new {i}") for i in range(4)])
    assert await _counts(records) == before
    assert await records.store.get("mem-aaaaaaaaaaaaaaaa") is None
    await records.db.read(_fts_consistent)


# --- CJK: the trigram index beside the porter one -----------------------------------------------


async def test_cjk_words_are_found_inside_a_run_without_spaces(filled: Records) -> None:
    tokyo = await filled.add("我住在东京已经三年了")
    coffee = await filled.add("私は毎朝コーヒーを飲みます")
    seoul = await filled.add("서울에서 한국어를 공부해요")
    mixed = await filled.add("我在Tokyo工作")
    assert await filled.found("东京") == [tokyo.id]  # two characters: no trigram, found by LIKE
    assert await filled.found("住在东京") == [tokyo.id]  # four: a trigram phrase inside a longer run
    assert await filled.found("コーヒー") == [coffee.id]
    assert await filled.found("毎朝") == [coffee.id]
    assert await filled.found("한국어") == [seoul.id]
    assert await filled.found("서울") == [seoul.id]
    assert await filled.found("工作") == [mixed.id]
    assert await filled.found("tokyo") == [mixed.id]  # a Latin word inside CJK text
    assert set(await filled.found("東京 or 东京 and Tokyo")) == {tokyo.id, mixed.id}
    assert await filled.found("北京") == []
    assert await filled.found("weather garden") != []  # English as before


async def test_cjk_search_keeps_the_privacy_filters(filled: Records) -> None:
    mine = await filled.add("我住在东京")
    bobs = await filled.add("我住在东京的公寓", scope=BOB)
    await filled.add("东京的会议记录", scope=GROUP, memory_class=MemoryClass.TRACE)  # traces are never found
    for query in ("东京", "住在东京"):
        assert await filled.found(query) == [mine.id]
        assert await filled.found(query, scopes=[BOB]) == [bobs.id]
        assert await filled.found(query, scopes=[GROUP]) == []
    weather = await filled.add("东京的天气很好", memory_class=MemoryClass.EVIDENCE)
    assert weather.id in await filled.found("东京")
    assert weather.id not in await filled.found("东京", now=T0 + timedelta(days=31))  # expired


def _cjk_consistent(conn: Connection) -> None:
    if conn.dialect.name == "sqlite":  # PostgreSQL has no separate trigram index to disagree with
        cjk_consistent(conn, "memory_records", "seq")


async def test_forgetting_editing_and_purging_a_cjk_record_leaves_no_stale_hit(filled: Records) -> None:
    record = await filled.add("我住在东京")
    english = await filled.add("the lighthouse is white")
    await filled.store.update(record.id, actor="alice", action="edit", content="我住在大阪")
    await filled.db.read(_cjk_consistent)
    assert await filled.found("东京") == [] and await filled.found("住在东京") == []
    assert await filled.found("大阪") == [record.id]
    # In and out of the trigram index as the text gains or loses CJK.
    await filled.store.update(english.id, actor="alice", action="edit", content="the lighthouse in 大阪")
    await filled.store.update(record.id, actor="alice", action="edit", content="I moved away")
    await filled.db.read(_cjk_consistent)
    assert await filled.found("大阪") == [english.id]
    await filled.store.forget(english.id, "alice")
    await filled.db.read(_cjk_consistent)
    assert await filled.found("大阪") == []
    await filled.store.undo(english.id, "alice")
    assert await filled.found("大阪") == [english.id]
    assert await filled.store.purge(english.id)
    await filled.db.read(_cjk_consistent)
    await filled.db.read(_fts_consistent)
    assert await filled.found("大阪") == [] and await filled.found("lighthouse") == []


# --- migrations ---------------------------------------------------------------------------------


def _alembic(revision: str, down: bool = False) -> Callable[[Connection], None]:
    def run(conn: Connection) -> None:
        cfg = AlembicConfig()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.attributes["connection"] = conn
        (command.downgrade if down else command.upgrade)(cfg, revision)

    return run


PG_SEARCH = {("column", "words"), ("index", "ix_memory_records_words"), ("index", "ix_memory_records_cjk")}


def _drift(conn: Connection) -> list[Any]:
    """Differences between memory/store/schema.py and the migrated database, for the memory tables."""

    def ours(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
        if (type_, name) in PG_SEARCH:
            return False  # PostgreSQL's search column and indexes: made by migration 0010, not in schema.py
        return type_ != "table" or name in {"memory_records", "memory_revisions"}

    context = MigrationContext.configure(conn, opts={"compare_type": True, "include_object": ours})
    with warnings.catch_warnings():
        # Reflection meets pgvector's `vector` (memory_vectors.embedding, migration 0012), a type
        # SQLAlchemy does not know; that table is not compared here.
        warnings.filterwarnings("ignore", "Did not recognize type 'vector'", SAWarning)
        return list(compare_metadata(context, metadata))


def _tables(conn: Connection) -> set[str]:
    return set(inspect(conn).get_table_names())


async def test_a_fresh_database_gets_the_tables_as_the_schema_declares_them(records: Records) -> None:
    sqlite = records.db.url.startswith("sqlite")
    expected = {"memory_records", "memory_revisions"} | ({"memory_records_fts"} if sqlite else set())
    assert expected <= await records.db.read(_tables)
    assert await records.db.read(_drift) == []
    current, head = await records.db.revision()
    assert current == head and current is not None and current >= "0004"


async def test_migrating_a_database_at_0003_keeps_its_data(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/old.db"
    old = Database(url)
    await old.write(_alembic("0003"))

    def fill(conn: Connection) -> None:
        sid = conn.execute(
            insert(sessions)
            .values(key="web:alice", agent="main", user_id="alice", created_at=T0, message_count=0, token_count=0)
            .returning(sessions.c.id)
        ).scalar_one()
        conn.execute(
            insert(archived_messages).values(
                id=1,
                session_id=sid,
                role="user",
                content="remember the lighthouse",
                tokens=5,
                created_at=T0,
                archived_at=T0,
                reason="trimmed",
            )
        )

    await old.write(fill)
    assert "memory_records" not in await old.read(_tables)
    await old.close()

    storage = await Storage.open(url)
    try:
        assert [h.id for h in await storage.archive.search("lighthouse", user_id="alice")] == [1]
        records = Records(storage)
        record = await records.add("the lighthouse is white")
        assert await records.found("lighthouse") == [record.id]
        # And back down to 0003 and up again: the downgrade drops only what 0004 made.
        await storage.db.write(_alembic("0003", down=True))
        assert not {"memory_records", "memory_revisions", "memory_records_fts"} & await storage.db.read(_tables)
        await storage.db.migrate()
        assert await records.store.get(record.id) is None
        assert [h.id for h in await storage.archive.search("lighthouse", user_id="alice")] == [1]

        def count_memory(conn: Connection) -> int:
            return int(conn.execute(select(func.count()).select_from(memory_records)).scalar_one()) + int(
                conn.execute(select(func.count()).select_from(memory_revisions)).scalar_one()
            )

        assert await storage.db.read(count_memory) == 0
    finally:
        await storage.close()


async def test_migrating_to_0006_indexes_the_cjk_already_stored(tmp_path: Path) -> None:
    migration = importlib.import_module("memory.store.migrations.versions.0006_cjk_trigram")
    assert migration.CJK_GLOB == f"*[{CJK_CHARS}]*"  # the index and the query agree on what CJK is
    storage = await Storage.open(f"sqlite:///{tmp_path}/t.db")
    try:
        await storage.db.write(_alembic("0005", down=True))
        records = Records(storage)
        before = [await records.add("我住在东京"), await records.add("the lighthouse is white")]
        await storage.db.migrate()
        await storage.db.read(_cjk_consistent)
        assert await records.found("东京") == [before[0].id]
        assert await records.found("住在东京") == [before[0].id]
        # Down again: the trigram tables and their triggers go, and the store works as before.
        await storage.db.write(_alembic("0005", down=True))
        assert not {"memory_records_cjk", "archived_messages_cjk", "daily_chunks_cjk"} & await storage.db.read(_tables)
        later = await records.add("我在Tokyo工作")
        await storage.db.read(_fts_consistent)
        await storage.db.migrate()
        await storage.db.read(_cjk_consistent)
        assert await records.found("工作") == [later.id]
    finally:
        await storage.close()
