"""A memory record's fields as callers give them, checked before any database sees them: a new
record (NewRecord, and build, which gives it an id and an expiry by its class), and a change
(EDITABLE, coerce_changes, and apply_changes, which restarts the expiry clock on a change of class).

Pure, and apart from the store so that a bad field or value fails the same way wherever it comes
from (RecordStore, a batch in memory/records/revisions.py, formation's proposals) before anything is
written.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from memory.records.model import (
    EXPIRY,
    MemoryClass,
    MemoryRecord,
    Provenance,
    RecordStatus,
    ReviewStatus,
    Scope,
    UsePolicy,
)

ID_PREFIX = "mem-"
SENSITIVITIES = frozenset({"normal", "sensitive"})
AUDIENCES = frozenset({"personal", "team", "public"})
EDITABLE = frozenset(
    {
        "content",
        "memory_class",
        "provenance",
        "use_policy",
        "scope",
        "review_status",
        "status",
        "sensitivity",
        "superseded_by",
        "tags",
    }
)


@dataclass(frozen=True, slots=True)
class NewRecord:
    """What create() takes, for import_batch; `created_at` (default: now) dates imported memories."""

    content: str
    memory_class: MemoryClass
    provenance: Provenance
    use_policy: UsePolicy
    scope: Scope | str
    author: str
    review_status: ReviewStatus
    sensitivity: str = "normal"
    source: str | None = None
    attribution: str | None = None
    origin_audience: str = "personal"
    tags: tuple[str, ...] = ()
    created_at: datetime | None = None


def new_id() -> str:
    """`mem-` and 16 base32 characters: 80 random bits, nothing guessable or meaningful."""
    return ID_PREFIX + base64.b32encode(secrets.token_bytes(10)).decode("ascii").lower()


def expiry(memory_class: MemoryClass, start: datetime) -> datetime | None:
    lifetime = EXPIRY[memory_class]
    return None if lifetime is None else start + lifetime


def _text(name: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{name} must be non-empty text")
        return value

    return check


def _one_of(name: str, allowed: frozenset[str]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in allowed:
            raise ValueError(f"{name} must be one of {sorted(allowed)}, not {value!r}")
        return str(value)

    return check


def _optional_text(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"expected text or None, not {value!r}")
    return value


def _use_policy(value: Any) -> UsePolicy:
    if not isinstance(value, UsePolicy):
        raise ValueError(f"use_policy must be a UsePolicy, not {value!r}")
    return value


def _scope(value: Any) -> Scope:
    return value if isinstance(value, Scope) else Scope.parse(value)


def _tags(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not all(isinstance(t, str) for t in value):
        raise ValueError(f"tags must be a sequence of text, not {value!r}")
    return tuple(value)


_COERCE: dict[str, Callable[[Any], Any]] = {
    "content": _text("content"),
    "memory_class": MemoryClass,
    "provenance": Provenance,
    "use_policy": _use_policy,
    "scope": _scope,
    "review_status": ReviewStatus,
    "status": RecordStatus,
    "sensitivity": _one_of("sensitivity", SENSITIVITIES),
    "superseded_by": _optional_text,
    "tags": _tags,
}


def build(item: NewRecord, now: datetime, record_id: str | None = None) -> MemoryRecord:
    """A new record from `item`, checked; ValueError naming what is wrong."""
    created_at = item.created_at or now
    if created_at.tzinfo is None or now.tzinfo is None:
        raise ValueError("naive datetime given for a memory record")
    memory_class = MemoryClass(item.memory_class)
    return MemoryRecord(
        id=record_id or new_id(),
        content=_text("content")(item.content),
        memory_class=memory_class,
        provenance=Provenance(item.provenance),
        use_policy=_use_policy(item.use_policy),
        scope=_scope(item.scope),
        author=_text("author")(item.author),
        created_at=created_at,
        updated_at=now,
        review_status=ReviewStatus(item.review_status),
        status=RecordStatus.ACTIVE,
        sensitivity=_one_of("sensitivity", SENSITIVITIES)(item.sensitivity),
        source=_optional_text(item.source),
        attribution=_optional_text(item.attribution),
        origin_audience=_one_of("origin_audience", AUDIENCES)(item.origin_audience),
        expires_at=expiry(memory_class, created_at),
        revision=1,
        tags=_tags(item.tags),
    )


def coerce_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    """`changes` checked and in their proper types; TypeError for a field that is not EDITABLE,
    ValueError for a bad value."""
    unknown = set(changes) - EDITABLE
    if unknown:
        raise TypeError(f"not editable: {', '.join(sorted(unknown))}")
    return {name: _COERCE[name](value) for name, value in changes.items()}


def apply_changes(current: MemoryRecord, fields: Mapping[str, Any], now: datetime) -> MemoryRecord:
    """`current` with coerced `fields`; a change of class restarts the expiry clock from `now`."""
    changed = replace(current, **fields)
    if changed.memory_class != current.memory_class:
        changed = replace(changed, expires_at=expiry(changed.memory_class, now))
    return changed
