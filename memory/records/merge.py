"""Which learned notes say the same thing, for the daily merge (DESIGN §8). Pure: records in, groups out.

Learned notes are what the agent wrote or formed: provenance `inferred` or `generated`, active, not
expired, not traces, and neither confirmed by a person nor rejected, disputed or marked stale (review
status none or pending). Only notes of the same scope, attribution and sensitivity are compared: a
merge never moves words between scopes or speakers, nor from a sensitive note into a normal one.

"The same thing" is decided on word sets: casefolded words, without a short list of function words
(never a negation), a plural "s" dropped. Note A folds into note B when

- every word of A is among B's (A says nothing that B does not),
- both hold the same negations ("likes coffee" is not "does not like coffee", though the first's
  words are all in the second), and
- their Jaccard similarity (shared words over all words), which containment makes |A| / |B|, is at
  least 0.6: B adds at most two words for every three of A's. "Alice uses vim" folds into "Alice uses
  vim with the solarized theme" (3/5); "Prefers tea" stays apart from "Prefers tea in the morning
  before stand-ups" (2/6), a bigger statement that merely mentions it.

Why containment and not a Jaccard threshold alone: two notes that differ in one word ("deploys on
Tuesdays" / "deploys on Thursdays") pass any threshold once they are long enough, and merging them
would silently drop a contradiction. With containment nothing a folded note said is lost: the note
that survives says all of it. Stored vectors are not used: cosine similarity cannot tell those two
apart either. Text without spaces between words (CJK) is one word here, so it folds only when equal.

Each group is built around its survivor, the fullest note (most words, then the longest text, then
the newest, which expires last): every other member is contained in it, never merely in another
member (no chains).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from memory.records.model import MemoryClass, MemoryRecord, Provenance, RecordStatus, ReviewStatus

MIN_JACCARD = 0.6
LEARNED = frozenset({Provenance.INFERRED, Provenance.GENERATED})
_OPEN_REVIEW = frozenset({ReviewStatus.NONE, ReviewStatus.PENDING})
_WORD = re.compile(r"\w+")
_NOT = re.compile(r"\bcan't\b|\bcannot\b|n't\b")  # "doesn't", "can't", "cannot": a "not" of their own
NEGATIONS = frozenset("not no never none nothing nobody nowhere neither nor without".split())
# Words that carry no claim of their own. Negations ("not", "never", "no") are deliberately absent.
STOP_WORDS = frozenset(
    "a an the to of in on at for with by from into as is are was were be been being and that this it its".split()
)


@dataclass(frozen=True, slots=True)
class MergeGroup:
    survivor: MemoryRecord
    merged: tuple[MemoryRecord, ...]  # each one's words are all in the survivor's


def _spell_out(match: re.Match[str]) -> str:
    return " not" if match.group(0) == "n't" else "can not"


def words(text: str) -> frozenset[str]:
    """The content words of `text` (see the module doc)."""
    out = set()
    folded = _NOT.sub(_spell_out, text.casefold().replace("\u2019", "'"))
    for word in _WORD.findall(folded):
        if word in STOP_WORDS:
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
            word = word[:-1]
        out.add(word)
    return frozenset(out)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    union = a | b
    return len(a & b) / len(union) if union else 1.0


def folds_into(note: frozenset[str], survivor: frozenset[str], threshold: float = MIN_JACCARD) -> bool:
    """Whether a note with words `note` says nothing beyond a note with words `survivor`, and is close
    enough to it to be the same statement."""
    return (
        bool(note)
        and note <= survivor
        and note & NEGATIONS == survivor & NEGATIONS
        and jaccard(note, survivor) >= threshold
    )


def is_learned(record: MemoryRecord, now: datetime) -> bool:
    return (
        record.provenance in LEARNED
        and record.status == RecordStatus.ACTIVE
        and record.memory_class != MemoryClass.TRACE
        and record.review_status in _OPEN_REVIEW
        and not record.use_policy.can_use_as_instruction
        and not record.expired(now)
    )


def _fullness(item: tuple[MemoryRecord, frozenset[str]]) -> tuple[int, int, datetime, str]:
    record, its_words = item
    return (len(its_words), len(record.content), record.created_at, record.id)


def merge_groups(records: Iterable[MemoryRecord], now: datetime, threshold: float = MIN_JACCARD) -> list[MergeGroup]:
    """Groups of learned notes that say the same thing (two or more notes each), in a stable order."""
    by_key: dict[tuple[str, str | None, str], list[tuple[MemoryRecord, frozenset[str]]]] = {}
    for record in records:
        if is_learned(record, now):
            key = (str(record.scope), record.attribution, record.sensitivity)
            by_key.setdefault(key, []).append((record, words(record.content)))
    groups = []
    for key in sorted(by_key, key=lambda k: (k[0], k[1] or "", k[2])):
        groups += _groups_of(sorted(by_key[key], key=_fullness, reverse=True), threshold)
    return groups


def _groups_of(notes: list[tuple[MemoryRecord, frozenset[str]]], threshold: float) -> list[MergeGroup]:
    """Greedy, fullest first. A note can fold only into a survivor holding all its words, its rarest
    word included: indexing each note under that one word finds its possible survivors without
    comparing every pair (a scope of thousands of notes stays fast)."""
    frequency = Counter(w for _, ws in notes for w in ws)
    by_rarest: dict[str, list[int]] = {}
    for position, (_, ws) in enumerate(notes):
        if ws:
            by_rarest.setdefault(min(ws, key=lambda w: (frequency[w], w)), []).append(position)
    taken: set[int] = set()
    groups = []
    for i, (survivor, survivor_words) in enumerate(notes):
        if i in taken:
            continue
        candidates = sorted({j for w in survivor_words for j in by_rarest.get(w, ()) if j > i and j not in taken})
        folded = [j for j in candidates if folds_into(notes[j][1], survivor_words, threshold)]
        if folded:
            taken.update(folded)
            groups.append(MergeGroup(survivor, tuple(notes[j][0] for j in folded)))
    return groups
