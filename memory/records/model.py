"""The vocabulary of long-term memory records (DESIGN §6), shared by the store, the policy and the
gateway. Plain values only: no I/O here."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum


class MemoryClass(StrEnum):
    DURABLE_FACT = "durable_fact"  # never expires
    EVIDENCE = "evidence"  # expires after 30 days
    TRACE = "trace"  # expires after 72 hours, never searched


EXPIRY: dict[MemoryClass, timedelta | None] = {
    MemoryClass.DURABLE_FACT: None,
    MemoryClass.EVIDENCE: timedelta(days=30),
    MemoryClass.TRACE: timedelta(hours=72),
}


class Provenance(StrEnum):
    OBSERVED = "observed"
    INFERRED = "inferred"
    USER_CONFIRMED = "user_confirmed"
    IMPORTED = "imported"
    GENERATED = "generated"
    SUPERSEDED = "superseded"
    DISPUTED = "disputed"


class ReviewStatus(StrEnum):
    NONE = "none"  # nothing to review
    PENDING = "pending"
    CONFIRMED = "confirmed"
    REJECTED = "rejected"
    STALE = "stale"
    DISPUTED = "disputed"


class RecordStatus(StrEnum):
    ACTIVE = "active"
    SUPERSEDED = "superseded"
    DELETED = "deleted"  # forgotten: kept only as revisions, never read


@dataclass(frozen=True, slots=True)
class UsePolicy:
    can_use_as_instruction: bool = False
    can_use_as_evidence: bool = True
    requires_user_confirmation: bool = True
    do_not_inject_automatically: bool = False


class ScopeKind(StrEnum):
    PERSONAL = "personal"
    CHANNEL = "channel"
    PROJECT = "project"
    GLOBAL = "global"


@dataclass(frozen=True, slots=True)
class Scope:
    """`personal:<user>` · `channel:<conversation>` · `project:<name>` · `global`."""

    kind: ScopeKind
    name: str | None = None  # the user, conversation or project; None for global

    def __str__(self) -> str:
        return self.kind.value if self.kind == ScopeKind.GLOBAL else f"{self.kind.value}:{self.name}"

    @staticmethod
    @functools.lru_cache(maxsize=4096)  # pure, and a scope is immutable: recall parses ~40 a turn
    def parse(text: str) -> Scope:
        """Parse `personal:alice`, `channel:telegram:group:-100`, `project:atlas` or `global`;
        ValueError with the reason otherwise."""
        kind, sep, name = text.strip().partition(":")
        try:
            scope_kind = ScopeKind(kind)
        except ValueError:
            raise ValueError(
                f"unknown scope {text!r}: use personal:<user>, channel:<conversation>, project:<name> or global"
            ) from None
        if scope_kind == ScopeKind.GLOBAL:
            if sep:
                raise ValueError("the global scope has no name")
            return Scope(scope_kind)
        if not name:
            raise ValueError(f"the {kind} scope needs a name: {kind}:<name>")
        return Scope(scope_kind, name)

    @staticmethod
    def personal(user_id: str) -> Scope:
        return Scope(ScopeKind.PERSONAL, user_id)

    @staticmethod
    def channel(conversation: str) -> Scope:
        return Scope(ScopeKind.CHANNEL, conversation)


GLOBAL = Scope(ScopeKind.GLOBAL)


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    id: str  # mem-<opaque>
    content: str
    memory_class: MemoryClass
    provenance: Provenance
    use_policy: UsePolicy
    scope: Scope
    author: str  # the user id (or "agent:<name>", "import:<source>") that wrote it
    created_at: datetime
    updated_at: datetime
    review_status: ReviewStatus = ReviewStatus.NONE
    status: RecordStatus = RecordStatus.ACTIVE
    sensitivity: str = "normal"  # normal | sensitive
    source: str | None = None  # the message or artifact it came from (e.g. an event id)
    attribution: str | None = None  # who said it, for attributed communication
    origin_audience: str = "personal"  # the audience of the session it was written in
    expires_at: datetime | None = None
    superseded_by: str | None = None
    revision: int = 1
    tags: tuple[str, ...] = field(default_factory=tuple)

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now
