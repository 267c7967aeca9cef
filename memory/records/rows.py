"""A memory record as the database holds it: a `memory_records` row (row_values, and record_of back),
and the whole record as a JSON snapshot in a `memory_revisions` row (snapshot, from_snapshot,
revision_row, and revision_of back as a Revision).

Pure conversions, apart from the queries that use them (the store, its reads, search, revisions) so
that they all read and write one shape.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, TypeVar

from sqlalchemy.engine import Row

from memory.records.model import (
    MemoryClass,
    MemoryRecord,
    Provenance,
    RecordStatus,
    ReviewStatus,
    Scope,
    UsePolicy,
)

_NOTE_CHARS = 255


@dataclass(frozen=True, slots=True)
class Revision:
    revision: int
    action: str
    actor: str
    at: datetime
    before: dict[str, Any] | None  # the whole record (see snapshot()); None for create and import
    after: dict[str, Any]
    note: str | None
    record_id: str = ""
    id: int = 0  # the row's own id: how `clawgate memory revisions show|undo ID` names it
    batch: str | None = None  # shared by the revisions of one change of several records (a merge)

    def to_json(self) -> dict[str, Any]:
        """The revision without its snapshots, as `clawgate memory revisions` and the console show it."""
        return {
            "id": self.id,
            "record": self.record_id,
            "revision": self.revision,
            "action": self.action,
            "actor": self.actor,
            "at": self.at.isoformat(),
            "batch": self.batch,
            "note": self.note,
        }


def snapshot(record: MemoryRecord) -> dict[str, Any]:
    """The whole record as JSON values, for revision rows."""
    policy = record.use_policy
    return {
        "id": record.id,
        "content": record.content,
        "memory_class": record.memory_class.value,
        "provenance": record.provenance.value,
        "use_policy": {
            "can_use_as_instruction": policy.can_use_as_instruction,
            "can_use_as_evidence": policy.can_use_as_evidence,
            "requires_user_confirmation": policy.requires_user_confirmation,
            "do_not_inject_automatically": policy.do_not_inject_automatically,
        },
        "scope": str(record.scope),
        "author": record.author,
        "created_at": record.created_at.isoformat(),
        "updated_at": record.updated_at.isoformat(),
        "review_status": record.review_status.value,
        "status": record.status.value,
        "sensitivity": record.sensitivity,
        "source": record.source,
        "attribution": record.attribution,
        "origin_audience": record.origin_audience,
        "expires_at": None if record.expires_at is None else record.expires_at.isoformat(),
        "superseded_by": record.superseded_by,
        "revision": record.revision,
        "tags": list(record.tags),
    }


def from_snapshot(data: Mapping[str, Any]) -> MemoryRecord:
    expires_at = data["expires_at"]
    return MemoryRecord(
        id=data["id"],
        content=data["content"],
        memory_class=MemoryClass(data["memory_class"]),
        provenance=Provenance(data["provenance"]),
        use_policy=UsePolicy(**data["use_policy"]),
        scope=Scope.parse(data["scope"]),
        author=data["author"],
        created_at=datetime.fromisoformat(data["created_at"]),
        updated_at=datetime.fromisoformat(data["updated_at"]),
        review_status=ReviewStatus(data["review_status"]),
        status=RecordStatus(data["status"]),
        sensitivity=data["sensitivity"],
        source=data["source"],
        attribution=data["attribution"],
        origin_audience=data["origin_audience"],
        expires_at=None if expires_at is None else datetime.fromisoformat(expires_at),
        superseded_by=data["superseded_by"],
        revision=data["revision"],
        tags=tuple(data["tags"]),
    )


def row_values(record: MemoryRecord) -> dict[str, Any]:
    policy = record.use_policy
    return {
        "id": record.id,
        "content": record.content,
        "memory_class": record.memory_class.value,
        "provenance": record.provenance.value,
        "use_instruction": policy.can_use_as_instruction,
        "use_evidence": policy.can_use_as_evidence,
        "needs_confirmation": policy.requires_user_confirmation,
        "no_auto_inject": policy.do_not_inject_automatically,
        "scope": str(record.scope),
        "scope_kind": record.scope.kind.value,
        "sensitivity": record.sensitivity,
        "review_status": record.review_status.value,
        "status": record.status.value,
        "author": record.author,
        "source": record.source,
        "attribution": record.attribution,
        "origin_audience": record.origin_audience,
        "tags": list(record.tags),
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "expires_at": record.expires_at,
        "superseded_by": record.superseded_by,
        "revision": record.revision,
    }


E = TypeVar("E", bound=Enum)
_RECORD_FIELDS = (
    "id",
    "content",
    "memory_class",
    "provenance",
    "use_instruction",
    "use_evidence",
    "needs_confirmation",
    "no_auto_inject",
    "scope",
    "author",
    "created_at",
    "updated_at",
    "review_status",
    "status",
    "sensitivity",
    "source",
    "attribution",
    "origin_audience",
    "expires_at",
    "superseded_by",
    "revision",
    "tags",
)


@functools.cache
def _fields_of(keys: tuple[str, ...]) -> Callable[[Row[Any]], tuple[Any, ...]]:
    """What record_of reads of a row with these columns, by position: a row's attributes by name cost
    half a microsecond each (recall reads some forty records a turn)."""
    return operator.itemgetter(*(keys.index(name) for name in _RECORD_FIELDS))


def _enum(kind: type[E], value: str) -> E:
    member = kind._value2member_map_.get(value)  # a dict lookup: kind(value) costs ten times as much
    return member if member is not None else kind(value)  # type: ignore[return-value]


def record_of(row: Row[Any]) -> MemoryRecord:
    (
        record_id,
        content,
        memory_class,
        provenance,
        use_instruction,
        use_evidence,
        needs_confirmation,
        no_auto_inject,
        scope,
        author,
        created_at,
        updated_at,
        review_status,
        status,
        sensitivity,
        source,
        attribution,
        origin_audience,
        expires_at,
        superseded_by,
        revision,
        tags,
    ) = _fields_of(row._fields)(row)
    return MemoryRecord(
        id=record_id,
        content=content,
        memory_class=_enum(MemoryClass, memory_class),
        provenance=_enum(Provenance, provenance),
        use_policy=UsePolicy(use_instruction, use_evidence, needs_confirmation, no_auto_inject),
        scope=Scope.parse(scope),
        author=author,
        created_at=created_at,
        updated_at=updated_at,
        review_status=_enum(ReviewStatus, review_status),
        status=_enum(RecordStatus, status),
        sensitivity=sensitivity,
        source=source,
        attribution=attribution,
        origin_audience=origin_audience,
        expires_at=expires_at,
        superseded_by=superseded_by,
        revision=revision,
        tags=tuple(tags),
    )


def revision_row(
    record: MemoryRecord,
    action: str,
    actor: str,
    at: datetime,
    before: MemoryRecord | None,
    note: str | None,
    batch: str | None = None,
) -> dict[str, Any]:
    row = {
        "record_id": record.id,
        "revision": record.revision,
        "action": action,
        "actor": actor[:_NOTE_CHARS],
        "at": at,
        "before": None if before is None else snapshot(before),
        "after": snapshot(record),
        "note": None if note is None else note[:_NOTE_CHARS],
    }
    if batch is not None:  # only then: a change outside any batch also works on a schema before 0007
        row["batch"] = batch
    return row


def revision_of(row: Row[Any]) -> Revision:
    """A `memory_revisions` row as a Revision."""
    return Revision(
        row.revision, row.action, row.actor, row.at, row.before, row.after, row.note, row.record_id, row.id, row.batch
    )
