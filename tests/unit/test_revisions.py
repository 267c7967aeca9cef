"""Revisions across records (memory/records/revisions.py) over a real SQLite database: a batch changes several
records in one transaction with one shared batch id, all or nothing; undoing any revision of a batch
puts every record of it back exactly as before; a lone revision is undone only when it is its
record's newest change; an undo is never undone. Also RecordStore.active, the input of background work."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

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
from memory.records.revisions import Change, NotUndoable, RevisionLog, RevisionNotFound
from memory.records.rows import snapshot
from memory.records.store import RecordNotFound, RecordStore, StaleRevision
from memory.store.storage import Storage
from tests.postgres import BACKENDS, database_url

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
ALICE = Scope.personal("alice")
BOOKKEEPING = ("revision", "updated_at")


class Store:
    def __init__(self, storage: Storage) -> None:
        self.records = RecordStore(storage.db)
        self.log = RevisionLog(storage.db)

    async def add(self, content: str, **kw: Any) -> MemoryRecord:
        args: dict[str, Any] = {
            "memory_class": MemoryClass.EVIDENCE,
            "provenance": Provenance.INFERRED,
            "use_policy": UsePolicy(can_use_as_instruction=False, requires_user_confirmation=True),
            "scope": ALICE,
            "author": "agent:main",
            "review_status": ReviewStatus.PENDING,
            "now": T0,
        }
        return await self.records.create(content, **(args | kw))

    async def state(self, *ids: str) -> str:
        """The records as JSON (sort_keys), bookkeeping fields aside: what "exactly as before" compares."""
        found = await self.records.get_many(list(ids), include_deleted=True)
        return json.dumps(
            [{k: v for k, v in snapshot(r).items() if k not in BOOKKEEPING} for r in found], sort_keys=True
        )


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    storage = await Storage.open(database_url(request.param, tmp_path))
    try:
        yield Store(storage)
    finally:
        await storage.close()


def merge(survivor: MemoryRecord, *others: MemoryRecord) -> list[Change]:
    return [Change(survivor.id, "merge", survivor.revision, {}, "merged")] + [
        Change(o.id, "merge", o.revision, {"status": RecordStatus.SUPERSEDED, "superseded_by": survivor.id})
        for o in others
    ]


async def test_a_batch_shares_one_id_and_its_undo_restores_every_record_exactly(store: Store) -> None:
    a, b, c = [await store.add(t) for t in ("uses vim", "Alice uses vim daily", "uses vim.")]
    before = await store.state(a.id, b.id, c.id)
    batch, changed = await store.log.change_batch(merge(b, a, c), actor="system", now=T0 + timedelta(hours=1))
    assert [r.id for r in changed] == [b.id, a.id, c.id]
    revs = await store.log.list(batch=batch)
    assert len(revs) == 3 and {r.batch for r in revs} == {batch} and {r.actor for r in revs} == {"system"}
    assert (await store.records.get(a.id)).status == RecordStatus.SUPERSEDED  # type: ignore[union-attr]
    assert await store.state(a.id, b.id, c.id) != before

    some = next(r for r in revs if r.record_id == c.id)
    undone = await store.log.undo(some.id, "cli", now=T0 + timedelta(hours=2))
    assert undone.batch == batch and undone.undo_batch and undone.undo_batch != batch
    assert {r.id for r in undone.records} == {a.id, b.id, c.id}
    assert await store.state(a.id, b.id, c.id) == before  # byte for byte
    now = {r.id: r for r in await store.records.get_many([a.id, b.id, c.id])}
    assert all(now[r.id].revision == r.revision + 2 for r in (a, b, c))  # merge + undo, both kept
    assert {r.action for r in await store.log.list(batch=undone.undo_batch)} == {"undo"}

    with pytest.raises(NotUndoable, match="undone already"):
        await store.log.undo(some.id, "cli")
    undo_rev = (await store.log.list(record_id=a.id, limit=1))[0]
    with pytest.raises(NotUndoable, match="itself an undo"):
        await store.log.undo(undo_rev.id, "cli")


async def test_a_batch_is_all_or_nothing(store: Store) -> None:
    a, b = await store.add("uses vim"), await store.add("Alice uses vim daily")
    await store.records.update(a.id, actor="alice", action="edit", content="uses neovim")  # a moved on
    before = await store.state(a.id, b.id)
    with pytest.raises(StaleRevision):
        await store.log.change_batch(merge(b, a), actor="system")
    assert await store.state(a.id, b.id) == before
    assert [r.action for r in await store.log.list(record_id=b.id)] == ["create"]
    with pytest.raises(RecordNotFound):
        await store.log.change_batch([*merge(b, a)[:1], Change("mem-nope", "merge", None, {})], actor="system")
    with pytest.raises(ValueError, match="once"):
        await store.log.change_batch([Change(a.id, "merge", None), Change(a.id, "merge", None)], actor="system")
    with pytest.raises(TypeError, match="not editable"):
        await store.log.change_batch([Change(a.id, "merge", None, {"author": "x"})], actor="system")
    assert await store.state(a.id, b.id) == before


async def test_a_batch_whose_record_changed_since_is_not_undone_until_that_change_is(store: Store) -> None:
    a, b = await store.add("uses vim"), await store.add("Alice uses vim daily")
    batch, _ = await store.log.change_batch(merge(b, a), actor="system")
    before_edit = await store.state(a.id, b.id)
    edited = await store.records.update(b.id, actor="alice", action="edit", content="Alice uses vim every day")
    edit_rev = (await store.log.list(record_id=b.id, limit=1))[0]
    member = next(r for r in await store.log.list(batch=batch) if r.record_id == a.id)
    with pytest.raises(NotUndoable, match=f"revision {edit_rev.id}, edit"):
        await store.log.undo(member.id, "cli")
    assert (await store.records.get(b.id)).content == edited.content  # type: ignore[union-attr]
    await store.log.undo(edit_rev.id, "cli")  # the newer change first, then the batch
    assert await store.state(a.id, b.id) == before_edit
    await store.log.undo(member.id, "cli")
    assert (await store.records.get(a.id)).status == RecordStatus.ACTIVE  # type: ignore[union-attr]


async def test_a_lone_revision_is_undone_only_as_its_records_newest_change(store: Store) -> None:
    rec = await store.add("Alice prefers tea")
    await store.records.update(rec.id, actor="alice", action="edit", content="Alice prefers green tea")
    await store.records.forget(rec.id, "system", note="consolidated into Memory.md")
    edit, forget = sorted((await store.log.list(record_id=rec.id))[:2], key=lambda r: r.id)
    with pytest.raises(NotUndoable, match=f"revision {forget.id}, forget"):
        await store.log.undo(edit.id, "cli")
    undone = await store.log.undo(forget.id, "cli")
    assert undone.batch is None and undone.records[0].content == "Alice prefers green tea"
    assert undone.records[0].status == RecordStatus.ACTIVE
    await store.log.undo(edit.id, "cli")  # now the newest change not undone
    assert (await store.records.get(rec.id)).content == "Alice prefers tea"  # type: ignore[union-attr]
    with pytest.raises(RevisionNotFound):
        await store.log.undo(10_000, "cli")


async def test_revisions_are_listed_newest_first_with_their_ids(store: Store) -> None:
    a, b = await store.add("one"), await store.add("two")
    await store.records.update(a.id, actor="alice", action="stale", review_status=ReviewStatus.STALE)
    everything = await store.log.list()
    assert [r.id for r in everything] == sorted((r.id for r in everything), reverse=True)
    assert everything[0].record_id == a.id and everything[0].action == "stale"
    assert [r.revision for r in await store.log.list(record_id=a.id)] == [2, 1]
    shown = await store.log.get(everything[0].id)
    assert shown is not None and shown.before is not None and shown.after["review_status"] == "stale"
    assert await store.log.get(10_000) is None
    assert len(await store.log.list(limit=1)) == 1
    assert [r.action for r in await store.log.list(record_id=b.id)] == ["create"]


async def test_active_filters_what_background_work_reads(store: Store) -> None:
    old = await store.add(
        "old global", scope="global", provenance=Provenance.USER_CONFIRMED, now=T0 - timedelta(days=60)
    )
    await store.add("recent global", scope="global", provenance=Provenance.USER_CONFIRMED)
    learned = await store.add("old inferred", now=T0 - timedelta(days=40))
    await store.add("channel note", scope="channel:web:room", now=T0 - timedelta(days=40))
    gone = await store.add("forgotten", scope="global", now=T0 - timedelta(days=60))
    await store.records.forget(gone.id, "alice", now=T0 - timedelta(days=59))
    found = await store.records.active(
        scope_kinds=[ScopeKind.GLOBAL, ScopeKind.PERSONAL], updated_before=T0 - timedelta(days=30)
    )
    assert [r.id for r in found] == [old.id, learned.id]
    assert [r.id for r in await store.records.active(provenances=[Provenance.USER_CONFIRMED])][:1] == [old.id]
    assert len(await store.records.active(limit=2)) == 2
