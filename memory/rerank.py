"""The relevance gate's arithmetic (DESIGN §7): what a cross-encoder's scores do to a turn's ranked
recall. Pure: the model that produces the scores is loaded and run by gateway/recall/gate.py.

Recall ranks by a fused score built from cosines and keyword matches, and drops only what is under
the cosine floor: an item can pass that floor on a shared word or a loosely related topic ("the
balcony door sticks" for "what grows on my balcony?"). A cross-encoder reads the question and the
item together and says how well one answers the other. The gate scores the best `cap` items of the
ranked list (fusion order) and

- drops those scoring under the threshold (DROPPED_BY_GATE), and
- leaves out the rest, past the cap (BEYOND_GATE): with the gate on, only what it read and passed
  may reach the prompt. Otherwise an item ranked 30th, never read, would take the place of the
  better-ranked ones the gate had just dropped.

What is kept keeps recall's order: the gate filters, it does not rerank (reordering by its score
was not measured to be better; the fused score carries recency, class and neighbours, which a
cross-encoder does not see).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from memory.recall import Key, Scored

# Why the gate left a candidate out (recall traces show them; memory.store.traces.REASONS lists them).
DROPPED_BY_GATE = "dropped_by_gate"  # the cross-encoder scored it under the threshold
BEYOND_GATE = "beyond_gate"  # ranked past what the gate scores (max_candidates): never read, left out

TEXT_CHARS = 2_000  # of a candidate's text, given to the model (its tokenizer cuts the pair further)
QUERY_CHARS = 1_000
LOGGED_ITEMS = 12  # gateScores lists this many items, then counts the rest
LOGGED_ID_CHARS = 24


@dataclass(frozen=True, slots=True)
class GateVerdict:
    """The gate's decision on one turn's ranked list: each scored item's score, the threshold, and
    the items it left out with why (DROPPED_BY_GATE or BEYOND_GATE)."""

    threshold: float
    scores: Mapping[Key, float] = field(default_factory=dict)  # in the ranked list's order
    dropped: Mapping[Key, str] = field(default_factory=dict)

    @property
    def dropped_by_gate(self) -> int:
        return sum(1 for why in self.dropped.values() if why == DROPPED_BY_GATE)

    def detail(self, key: Key) -> str:
        """Why, in words, for a recall trace: the score against the threshold."""
        score = self.scores.get(key)
        if score is None:
            return ""
        return f"scored {score:.3f}, threshold {self.threshold:g}"


def pairs(query: str, ranked: Sequence[Scored], cap: int) -> list[tuple[str, str]]:
    """The (query, text) pairs the model scores: the best `cap` of `ranked`, in order, each side cut
    to a length the model's tokenizer then cuts to its own limit (a 10,000-character message costs
    no more than a long one)."""
    q = query[:QUERY_CHARS]
    return [(q, s.candidate.text[:TEXT_CHARS]) for s in ranked[: max(0, cap)]]


def judge(ranked: Sequence[Scored], scores: Sequence[float], threshold: float) -> GateVerdict:
    """The verdict for `ranked` given the model's `scores` of its first len(scores) items (what
    pairs() gave it): an item scoring under `threshold` is dropped, one past the scored ones is left
    out. ValueError for a score that is not a finite number (a broken model: the caller skips the gate
    rather than drop on noise)."""
    if len(scores) > len(ranked):
        raise ValueError(f"{len(scores)} scores for {len(ranked)} candidates")
    bad = [s for s in scores if not math.isfinite(s)]
    if bad:
        raise ValueError(f"the model gave {len(bad)} non-finite scores")
    scored: dict[Key, float] = {}
    dropped: dict[Key, str] = {}
    for n, s in enumerate(ranked):
        key = s.candidate.key
        if n >= len(scores):
            dropped[key] = BEYOND_GATE
            continue
        scored[key] = float(scores[n])
        if scores[n] < threshold:
            dropped[key] = DROPPED_BY_GATE
    return GateVerdict(threshold, scored, dropped)


def merge_decisions(
    ranked: Sequence[Scored], dropped: Mapping[Key, str], kept_decisions: Iterable[str | None]
) -> list[str | None]:
    """One decision per item of `ranked`: the gate's reason for the items it left out, else the
    selection's decision on it (`kept_decisions`: memory.recall.selection over the kept items, in order)."""
    rest = iter(kept_decisions)
    out: list[str | None] = []
    for s in ranked:
        why = dropped.get(s.candidate.key)
        out.append(why if why is not None else next(rest))
    if next(rest, _END) is not _END:
        raise ValueError("more decisions than items the gate kept")
    return out


_END = object()


def _label(key: Key) -> str:
    kind, item_id = key
    label = item_id if kind == "record" else f"{kind}/{item_id}"
    return label[:LOGGED_ID_CHARS]


def log_scores(verdict: GateVerdict, limit: int = LOGGED_ITEMS) -> str:
    """The scores as one log value, best-ranked first: `mem-a:0.912,archive/17:0.031(dropped)`, at
    most `limit` items (`+N` more after them). Ids and scores only, never what a memory says."""
    parts = [
        f"{_label(key)}:{score:.3f}" + ("(dropped)" if key in verdict.dropped else "")
        for key, score in list(verdict.scores.items())[:limit]
    ]
    more = len(verdict.scores) - limit
    if more > 0:
        parts.append(f"+{more}")
    return ",".join(parts)


def calibrate(relevant: Sequence[float], keep: float = 0.95) -> float:
    """A threshold for a model, from its scores of (question, memory that answers it) pairs on data
    like yours: the highest one that keeps at least `keep` of them (docs/recall.md, The relevance
    gate). Check on held-out pairs what share of the items that do not answer it then drops."""
    if not relevant:
        raise ValueError("no scores to calibrate on")
    if not 0 < keep <= 1:
        raise ValueError(f"keep is a share in (0, 1], not {keep}")
    ordered = sorted(relevant)
    return ordered[math.floor((1 - keep) * len(ordered) + 1e-9)]
