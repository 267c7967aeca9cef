"""What recall ranks and how it gathers it (memory/recall.py): a candidate and its scores, a ranked
one, and the callables a caller gives the Retriever for each leg (they decide what is searchable),
with `walk`, which turns a one-step neighbour lookup into the NeighbourLookup a leg answers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import numpy.typing as npt

from memory.records.model import MemoryClass, MemoryRecord

Key = tuple[str, str]  # (kind, id), as memory.embed.items names items
Vector = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class Candidate:
    """One searchable item and what each leg said of it (None: that leg did not score it)."""

    kind: str  # record | archive | daily
    id: str
    text: str
    scope: str
    created_at: datetime
    memory_class: MemoryClass | None = None  # records only; archive and daily items have none
    lexical: float | None = None  # positive relevance, higher is better (e.g. -bm25)
    cosine: float | None = None
    speaker: str | None = None  # who said it, as people name them (attribution, message author)
    author: str | None = None  # the identity that said it (archived user messages), for the prompt's label

    @property
    def key(self) -> Key:
        return (self.kind, self.id)

    @staticmethod
    def of_record(record: MemoryRecord) -> Candidate:
        """A long-term record as recall sees it (who said it: its attribution)."""
        return Candidate(
            "record",
            record.id,
            record.content,
            str(record.scope),
            record.created_at,
            record.memory_class,
            speaker=record.attribution,
        )

    def scored(self, lexical: float | None, cosine: float | None) -> Candidate:
        """This candidate with both legs' scores (dataclasses.replace, at ~200 candidates a
        turn, cost 2 ms of a 20 ms recall)."""
        return Candidate(
            self.kind,
            self.id,
            self.text,
            self.scope,
            self.created_at,
            self.memory_class,
            lexical,
            cosine,
            self.speaker,
            self.author,
        )

    @property
    def prior_class(self) -> str:
        return self.memory_class.value if self.memory_class is not None else self.kind


@dataclass(frozen=True, slots=True)
class Scored:
    candidate: Candidate
    score: float
    parts: Mapping[str, float]  # lexical (squashed), vector, neighbour, prior, recency, speaker, when


# --- gathering candidates -----------------------------------------------------------------------

LexicalLeg = Callable[[str, int], Awaitable[Sequence[tuple[Candidate, float]]]]
"""(query, limit) → the best lexical hits as (candidate, positive score), best first."""
VectorLeg = Callable[[Vector, int, Collection[Key] | None], Awaitable[Sequence[tuple[Key, float]]]]
"""(unit query vector, limit, only these keys or None) → (key, cosine), best first."""
Loader = Callable[[Sequence[Key]], Awaitable[Mapping[Key, Candidate]]]
"""Keys → their candidates (text and metadata, no scores); keys no longer searchable are left out."""
NeighbourLookup = Callable[[Sequence[Key], int], Awaitable[Mapping[Key, Sequence[Key]]]]
"""(keys, reach) → the searchable items right before and after each key in its thread, and of each
item found up to `reach` - 1 steps from them (`walk` does the stepping): one call, so a caller
backed by a database answers in one transaction."""


def walk(
    step: Callable[[Sequence[Key]], Mapping[Key, Sequence[Key]]], keys: Sequence[Key], reach: int
) -> dict[Key, list[Key]]:
    """What a NeighbourLookup answers, given `step`: the items right next to each key it is given."""
    adjacent: dict[Key, list[Key]] = {}
    seen = set(keys)
    frontier = list(keys)
    for _ in range(reach):
        if not frontier:
            break
        found = step(frontier)
        adjacent.update((k, list(ns)) for k, ns in found.items())
        frontier = list(dict.fromkeys(n for ns in found.values() for n in ns if n not in seen))
        seen.update(frontier)
    return adjacent


QueryEmbedder = Callable[[str], Awaitable[Vector]]
DatedLookup = Callable[[datetime | None, datetime, int], Awaitable[Sequence[Key]]]
"""(start or None, end, limit) → searchable items created in [start, end), newest first."""
