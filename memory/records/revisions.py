"""Revisions across records (DESIGN §6: every change is a revision that can be inspected and undone):
read them by their row id, change several records as one batch (a merge), undo by revision id.

A batch is one transaction whose revisions share a `batch` id, one revision per record. Undoing any
revision of a batch undoes the whole batch, in one transaction: every record of it is put back as it
was before the batch (each field a change can touch; the revision counter and `updated_at` move on,
since the undo is a revision too), and the undo revisions share a batch id of their own.

Undo only ever reverts a record's newest change not already undone (what RecordStore.undo would
revert next, so the two kinds of undo keep pairing with changes like brackets: store.undo_target).
It can never silently throw a later change away: a batch whose records changed since, or a lone
revision that is not its record's newest change, is refused with an error naming the newer revision
to undo first. An "undo" revision is not undone again (undo is not redo).
"""

from __future__ import annotations

import base64
import builtins
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection

from memory.records.fields import apply_changes, coerce_changes
from memory.records.model import MemoryRecord
from memory.records.rows import Revision, revision_of
from memory.records.store import (
    ACTIONS,
    RecordError,
    commit_change,
    current_for_change,
    revert,
    undo_target,
)
from memory.store.db import Database
from memory.store.schema import memory_revisions

BATCH_PREFIX = "bat-"
MAX_LIST = 500


class RevisionNotFound(RecordError):
    def __init__(self, revision_id: int) -> None:
        super().__init__(f"no memory revision {revision_id}")
        self.revision_id = revision_id


class NotUndoable(RecordError):
    """This revision cannot be undone (a newer change came after it, or it is itself an undo)."""


@dataclass(frozen=True, slots=True)
class Change:
    """One record's part of a batch: EDITABLE fields (see fields.coerce_changes), checked against
    the revision the caller read."""

    record_id: str
    action: str
    expected_revision: int | None
    fields: Mapping[str, Any] = field(default_factory=dict)
    note: str | None = None


@dataclass(frozen=True, slots=True)
class Undone:
    """What an undo by revision id did: the batch it undid (None for a lone revision), the undo's
    own batch id, and the records as they are now."""

    batch: str | None
    undo_batch: str | None
    records: list[MemoryRecord]


def new_batch_id() -> str:
    return BATCH_PREFIX + base64.b32encode(secrets.token_bytes(10)).decode("ascii").lower()


def _change_batch(
    conn: Connection, changes: Sequence[Change], actor: str, batch: str, now: datetime
) -> builtins.list[MemoryRecord]:
    done = []
    for change in changes:
        current = current_for_change(conn, change.record_id, change.expected_revision)
        changed = apply_changes(current, coerce_changes(change.fields), now)
        done.append(commit_change(conn, current, changed, change.action, actor, change.note, now, batch))
    return done


def _list(conn: Connection, record_id: str | None, batch: str | None, limit: int | None) -> builtins.list[Revision]:
    query = select(memory_revisions).order_by(memory_revisions.c.id.desc()).limit(limit)
    if record_id is not None:
        query = query.where(memory_revisions.c.record_id == record_id)
    if batch is not None:
        query = query.where(memory_revisions.c.batch == batch)
    return [revision_of(r) for r in conn.execute(query)]


def _get(conn: Connection, revision_id: int) -> Revision | None:
    row = conn.execute(select(memory_revisions).where(memory_revisions.c.id == revision_id)).first()
    return None if row is None else revision_of(row)


def _check_newest(conn: Connection, revision: Revision, what: str) -> None:
    """NotUndoable unless `revision` is its record's newest change not already undone (what
    RecordStore.undo would revert next): undoing anything older would throw a later change away."""
    history = conn.execute(
        select(memory_revisions.c.id, memory_revisions.c.revision, memory_revisions.c.action)
        .where(memory_revisions.c.record_id == revision.record_id)
        .order_by(memory_revisions.c.revision.desc())
    ).all()
    target = undo_target((r.revision, r.action) for r in history)
    if target == revision.revision:
        return
    if target is None or target < revision.revision:
        raise NotUndoable(f"{what} cannot be undone: revision {revision.id} was undone already")
    newer = next(r for r in history if r.revision == target)
    raise NotUndoable(
        f"{what} cannot be undone: {revision.record_id} changed after it (revision {newer.id}, {newer.action}); "
        f"undo revision {newer.id} first"
    )


def _undo(conn: Connection, revision_id: int, actor: str, now: datetime) -> Undone:
    target = _get(conn, revision_id)
    if target is None:
        raise RevisionNotFound(revision_id)
    if target.action == "undo":
        raise NotUndoable(f"revision {revision_id} is itself an undo: an undo is not undone again")
    if target.batch is None:
        _check_newest(conn, target, f"revision {revision_id}")
        current = current_for_change(conn, target.record_id, None)
        return Undone(None, None, [revert(conn, current, target.revision, actor, now)])
    members = sorted(_list(conn, None, target.batch, None), key=lambda r: r.id)
    if any(m.action == "undo" for m in members):
        raise NotUndoable(f"revision {revision_id} belongs to an undo: an undo is not undone again")
    for member in members:  # every record checked before any is changed
        _check_newest(conn, member, f"batch {target.batch}")
    undo_batch = new_batch_id()
    restored = []
    for member in members:
        current = current_for_change(conn, member.record_id, None)
        restored.append(revert(conn, current, member.revision, actor, now, undo_batch))
    return Undone(target.batch, undo_batch, restored)


class RevisionLog:
    """Revisions of every record, on the database; every method is one transaction."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def list(
        self, *, record_id: str | None = None, batch: str | None = None, limit: int = 50
    ) -> builtins.list[Revision]:
        """Newest first, of one record or one batch, or of all."""
        return await self._db.read(_list, record_id, batch, max(1, min(MAX_LIST, limit)))

    async def get(self, revision_id: int) -> Revision | None:
        return await self._db.read(_get, revision_id)

    async def change_batch(
        self, changes: Sequence[Change], *, actor: str, now: datetime | None = None
    ) -> tuple[str, builtins.list[MemoryRecord]]:
        """Apply every change in one transaction, all revisions sharing a new batch id: (the id, the
        records as changed). All or nothing: RecordNotFound, StaleRevision (a record moved on since
        it was read), or ValueError/TypeError for a bad change or a record named twice."""
        ids = [c.record_id for c in changes]
        if len(set(ids)) != len(ids):
            raise ValueError("a batch changes each record once")
        for change in changes:
            if change.action not in ACTIONS:
                raise ValueError(f"unknown action {change.action!r}: one of {sorted(ACTIONS)}")
            coerce_changes(change.fields)  # bad fields fail before touching the database
        batch = new_batch_id()
        done = await self._db.write(_change_batch, builtins.list(changes), actor, batch, now or datetime.now(UTC))
        return batch, done

    async def undo(self, revision_id: int, actor: str, *, now: datetime | None = None) -> Undone:
        """Undo revision `revision_id`, with its whole batch if it has one (see the module doc).
        RevisionNotFound, or NotUndoable naming the newer revision that stands in the way."""
        return await self._db.write(_undo, revision_id, actor, now or datetime.now(UTC))
