"""Long-term memories made directly in storage, for tests that need some to look at or review."""

from __future__ import annotations

import re

from gateway.session.memory_service import EVIDENCE_ONLY
from memory.records.model import MemoryClass, MemoryRecord, Provenance, ReviewStatus, Scope
from memory.store.storage import Storage


async def make_memory(
    storage: Storage | None,
    text: str,
    scope: str = "global",
    *,
    pending: bool = True,
    memory_class: MemoryClass = MemoryClass.EVIDENCE,
    provenance: Provenance = Provenance.INFERRED,
    author: str = "assistant",
) -> MemoryRecord:
    """A memory as the assistant would leave it: evidence only, waiting for review unless `pending`
    is False."""
    assert storage is not None
    return await storage.records.create(
        text,
        memory_class=memory_class,
        provenance=provenance,
        use_policy=EVIDENCE_ONLY,
        scope=Scope.parse(scope),
        author=author,
        review_status=ReviewStatus.PENDING if pending else ReviewStatus.NONE,
    )


def memory_id(reply: str) -> str:
    """The memory id a chat reply names (`/remember` answers "Remembered as mem-… (scope).")."""
    m = re.search(r"mem-[a-z0-9]+", reply)
    assert m, reply
    return m.group(0)
