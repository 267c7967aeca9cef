"""What of a turn's ranked recall may go into its prompt (DESIGN §6, §11), besides the size limits
memory.recall.selection applies. Pure: the ranked items and records in, a reason per item out.

- Records: what memory.trust.policy.held_back refuses (superseded, disputed, rejected, proposals, a policy
  that says do_not_inject_automatically) never goes in; evidence goes in only on a strong match (the
  evidence floor, calibrated like the cosine floor), instruction-grade memory at any rank.
- Archived messages and daily notes pass the same screens as write-back before they are shown
  (secrets, injection-shaped text, other people's contact details, malformed text): what formation
  refused to keep must not come back as "earlier messages". The gateway's own notices stay out.
- Conflicts: when a record a person confirmed and one nobody confirmed say different things about
  the same subject, the confirmed one is what the prompt presents as current. It is moved ahead of
  the other, and the other is labelled conflicting, or left out when the confirmed one did not fit.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from memory.archive.fulltext import STOP_WORDS
from memory.formation.admission import text_problem
from memory.recall import CONFLICTING, NOTICE, SCREENED, WEAK_EVIDENCE, Scored
from memory.records.model import MemoryRecord
from memory.trust import policy

UNKNOWN = "not_found"  # a ranked record the turn did not load (it vanished meanwhile)

_WORD = re.compile(r"[^\W_]+")


def _subject_words(text: str) -> frozenset[str]:
    return frozenset(w for w in (m.lower() for m in _WORD.findall(text)) if w not in STOP_WORDS)


def disagree(a: str, b: str) -> bool:
    """Do two statements say different things about the same subject? They share at least half the
    content words of the shorter one, and each says something the other does not ("the laptop's
    hostname is heron" / "laptop hostname is crow"). A cheap lexical test, on purpose: it decides a
    label, never what is stored."""
    x, y = _subject_words(a), _subject_words(b)
    shared = x & y
    if not shared or not (x - y) or not (y - x):
        return False
    return len(shared) >= math.ceil(min(len(x), len(y)) / 2)


def conflicts(ranked: Sequence[Scored], records: Mapping[str, MemoryRecord]) -> dict[str, str]:
    """Unconfirmed record id → the instruction-grade record it disagrees with (the best ranked one),
    among the records of `ranked`."""
    confirmed: list[MemoryRecord] = []
    other: list[MemoryRecord] = []
    for s in ranked:
        record = records.get(s.candidate.id) if s.candidate.kind == "record" else None
        if record is None or policy.held_back(record) is not None:
            continue
        (confirmed if policy.instruction_grade(record) else other).append(record)
    out: dict[str, str] = {}
    for record in other:
        match = next((c for c in confirmed if c.scope == record.scope and disagree(c.content, record.content)), None)
        if match is None:  # the same subject in another scope still conflicts, a weaker claim
            match = next((c for c in confirmed if disagree(c.content, record.content)), None)
        if match is not None:
            out[record.id] = match.id
    return out


def confirmed_first(ranked: Sequence[Scored], conflicting: Mapping[str, str]) -> list[Scored]:
    """`ranked` with each confirmed record moved just ahead of the first unconfirmed one that
    disagrees with it, so the limits of a turn take the confirmed one first."""
    if not conflicting:
        return list(ranked)
    position = {s.candidate.id: n for n, s in enumerate(ranked) if s.candidate.kind == "record"}
    before: dict[int, list[int]] = {}  # index of an unconfirmed record → confirmed ones to put ahead
    moved: set[int] = set()
    for rid, cid in conflicting.items():
        at, target = position.get(rid), position.get(cid)
        if at is None or target is None or target < at or target in moved:
            continue
        before.setdefault(at, []).append(target)
        moved.add(target)
    out: list[Scored] = []
    for n, s in enumerate(ranked):
        if n in moved:
            continue
        out.extend(ranked[i] for i in before.get(n, ()))
        out.append(s)
    return out


def fused_strength(s: Scored) -> float:
    """How strong a match is, with a vector leg: its fused score (cosines are absolute)."""
    return s.score


def lexical_strength(ranked: Sequence[Scored]) -> Callable[[Scored], float]:
    """How strong a match is by keywords alone: its full-text score against the best one of the
    turn. The fused score cannot say it there: its lexical part is squashed between the turn's best
    and weakest hit, so of two hits the weaker always scores 0, however good a match it is."""
    top = max((s.candidate.lexical for s in ranked if s.candidate.lexical), default=0.0)

    def strength(s: Scored) -> float:
        return (s.candidate.lexical or 0.0) / top if top > 0 else 0.0

    return strength


@dataclass(slots=True)
class TurnPolicy:
    """held_back for memory.recall.selection, for one turn."""

    records: Mapping[str, MemoryRecord]
    evidence_floor: float
    strength: Callable[[Scored], float] = fused_strength
    secrets: Sequence[str] = ()
    notice_author: str | None = None
    screened: dict[tuple[str, str], str | None] | None = None  # shared cache: archived text never changes

    def __call__(self, s: Scored) -> str | None:
        c = s.candidate
        if c.kind == "record":
            record = self.records.get(c.id)
            if record is None:
                return UNKNOWN
            held = policy.held_back(record)
            if held is not None:
                return held
            if not policy.instruction_grade(record) and self.strength(s) < self.evidence_floor:
                return WEAK_EVIDENCE
            return None
        if c.kind == "archive" and self.notice_author is not None and c.author == self.notice_author:
            return NOTICE
        cache = self.screened
        if cache is not None and c.key in cache:
            return cache[c.key]
        problem = text_problem(c.text, self.secrets)
        why = None if problem is None else SCREENED + problem
        if cache is not None:
            if len(cache) >= 8192:
                cache.clear()
            cache[c.key] = why
        return why


def settle_conflicts(
    chosen_ids: set[str], decisions: list[str | None], ranked: Sequence[Scored], conflicting: Mapping[str, str]
) -> dict[str, str]:
    """After selection: an unconfirmed record chosen without its confirmed counterpart is left out
    (its decision becomes CONFLICTING, in place); the ones chosen beside it, unconfirmed id →
    confirmed id, to be labelled."""
    labelled: dict[str, str] = {}
    for n, s in enumerate(ranked):
        cid = conflicting.get(s.candidate.id) if s.candidate.kind == "record" else None
        if cid is None or decisions[n] is not None:
            continue
        if cid in chosen_ids:
            labelled[s.candidate.id] = cid
        else:
            decisions[n] = CONFLICTING
    return labelled
