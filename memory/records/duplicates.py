"""Near-duplicate and superseding memories (docs/recall.md, "Duplicates and supersession"), the pure
parts: which existing records a new statement is nominated against, the rules that may settle a
nomination without a model, the guard a merged body must pass, and what a verdict becomes for the
records at hand. Records in, decisions out.

Nomination is a filter, never a decision. A record of the new statement's own scope is nominated
when its cosine to the statement reaches MIN_COSINE (with embeddings), or, without a vector, when
the share of the shorter text's content words the two have in common reaches MIN_OVERLAP; at most
MAX_NOMINEES, the closest first. Both thresholds were chosen on the 20 superseded pairs of
benchmarks/data/assistant_memory against the 6,176 unrelated pairs of the same scopes
(benchmarks/nomination.py): cosine 0.40 (all-MiniLM-L6-v2) nominates 18 of the 20 old memories and
1.4% of unrelated pairs; replaying each scope in date order with the closest three, 27% of new
memories meet a nomination. Word overlap 0.25 nominates 14 of 20 and 1.6% of unrelated pairs (29% of
new memories): "I moved to Lisbon" shares no word with "I live in Porto", so without embeddings a
changed fact is found only when it repeats the subject's words.

What similarity alone may decide is what the daily merge decides (memory/records/merge.py, whose word
sets and negation rule are used here): a statement whose words are all in an existing record, with
the same negations and close enough, says nothing new (`contained`). Everything else waits for the
background model's verdict, and a merged body it writes must keep every content word (numbers and
negations among them) of both statements and bring in few of its own; otherwise the new statement is
appended to the old body instead (`appended`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from memory.archive.fulltext import STOP_WORDS as SEARCH_STOP_WORDS
from memory.records.merge import NEGATIONS, folds_into, words
from memory.records.model import MemoryClass, MemoryRecord, RecordStatus, ReviewStatus
from memory.trust.policy import instruction_grade, is_proposal

MIN_COSINE = 0.40
MIN_OVERLAP = 0.25
MAX_NOMINEES = 3
MAX_MERGED_CHARS = 1_000
# Words a merged body may bring in beyond its sources ("and", "since", "now"): at least this many,
# or a quarter of the sources' words when they are many.
MIN_NEW_WORDS = 3
# Words that say nothing about a subject, for nomination only ("my", "we", "can"): the search stop
# words on top of the merge's own. Negations are never among them.
_FUNCTION_WORDS = (SEARCH_STOP_WORDS | {"i", "my", "me", "we", "our"}) - NEGATIONS

Action = Literal["skip", "update", "consolidate", "create"]
ACTIONS: tuple[Action, ...] = ("skip", "update", "consolidate", "create")
Outcome = Literal["created", "skipped", "replaced", "merged", "proposed", "queued"]
DecidedBy = Literal["model", "rule", "none"]


# --- nomination ------------------------------------------------------------------------------------


def subject_words(text: str) -> frozenset[str]:
    """The content words of `text` (merge.words) without the words that name no subject."""
    return words(text) - _FUNCTION_WORDS


def overlap(a: str, b: str) -> float:
    """The share of the shorter text's subject words the two have in common (0 when either has none)."""
    wa, wb = subject_words(a), subject_words(b)
    if not wa or not wb:
        return 0.0
    return len(wa & wb) / min(len(wa), len(wb))


def candidate_ok(record: MemoryRecord, scope: str) -> bool:
    """May `record` be compared with a new statement of `scope` at all? An active record of that very
    scope that is not a trace, a proposed change, rejected, or from a public conversation. (Expiry is
    the caller's check: it needs the clock.)"""
    return (
        str(record.scope) == scope
        and record.status == RecordStatus.ACTIVE
        and record.memory_class != MemoryClass.TRACE
        and record.review_status != ReviewStatus.REJECTED
        and record.origin_audience != "public"
        and not is_proposal(record)
    )


@dataclass(frozen=True, slots=True)
class Candidate:
    record: MemoryRecord
    cosine: float | None = None  # None: no vector to compare (embeddings off, or not embedded yet)


@dataclass(frozen=True, slots=True)
class Nominee:
    record: MemoryRecord
    score: float  # the cosine, or the word overlap without a vector
    measure: Literal["cosine", "words"]
    contained: bool  # the new statement's words are all in this record's (merge.folds_into)
    same: bool  # the very same words


def nominate(
    text: str,
    candidates: Sequence[Candidate],
    *,
    min_cosine: float = MIN_COSINE,
    min_overlap: float = MIN_OVERLAP,
    limit: int = MAX_NOMINEES,
) -> list[Nominee]:
    """The near-duplicates of `text` among `candidates` (records of its scope), closest first: at
    least `min_cosine` (or `min_overlap` without a vector), or containing it. At most `limit`, a
    containing record always among them."""
    mine = words(text)
    found: list[Nominee] = []
    seen: set[str] = set()
    for c in candidates:
        if c.record.id in seen:
            continue
        seen.add(c.record.id)
        theirs = words(c.record.content)
        contained = folds_into(mine, theirs)
        measure: Literal["cosine", "words"] = "cosine" if c.cosine is not None else "words"
        score = c.cosine if c.cosine is not None else overlap(text, c.record.content)
        if score >= (min_cosine if measure == "cosine" else min_overlap) or contained:
            found.append(Nominee(c.record, score, measure, contained, bool(mine) and mine == theirs))
    found.sort(key=lambda n: (not n.contained, -n.score, n.record.id))
    return sorted(found[: max(1, limit)], key=lambda n: (-n.score, n.record.id))


# --- verdicts ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verdict:
    """What was decided about a new statement: `target` names a nominee (skip, update, consolidate),
    `text` is the merged body (consolidate). `why` is a log value: never content."""

    action: Action
    target: str | None = None
    text: str | None = None
    why: str = ""


CREATE = Verdict("create", why="none_nominated")


def by_rule(nominees: Sequence[Nominee], model: bool) -> Verdict | None:
    """A verdict similarity may give on its own (merge.py's rules), or None to ask the model. The
    same words as a nominee: skip, model or not. Without a model, also a statement contained in a
    nominee: skip; anything else is created (similarity alone never merges)."""
    same = next((n for n in nominees if n.same), None)
    if same is not None:
        return Verdict("skip", same.record.id, why="same_words")
    if model:
        return None
    inside = next((n for n in nominees if n.contained), None)
    if inside is not None:
        return Verdict("skip", inside.record.id, why="contained")
    return Verdict("create", why="no_model")


# --- the merged body ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Guard:
    ok: bool
    why: str  # "ok", "dropped_words", "new_negation", "new_words", "empty", "too_long"


def keeps_every_fact(merged: str, sources: Sequence[str]) -> Guard:
    """Whether `merged` may stand for every text of `sources`: it holds every content word of each
    (merge.words, in which numbers and negations are words: "9:30" is 9 and 30, "doesn't" holds
    "not"), no negation none of them held, and at most a few words of its own. It checks words, not
    meaning: "likes coffee, not tea" passes for "likes tea" and "not coffee"."""
    if not merged.strip():
        return Guard(False, "empty")
    if len(merged) > MAX_MERGED_CHARS:
        return Guard(False, "too_long")
    have = words(merged)
    theirs = frozenset().union(*(words(s) for s in sources)) if sources else frozenset()
    if theirs - have:
        return Guard(False, "dropped_words")
    added = have - theirs
    if added & NEGATIONS:
        return Guard(False, "new_negation")
    if len(added) > max(MIN_NEW_WORDS, len(theirs) // 4):
        return Guard(False, "new_words")
    return Guard(True, "ok")


def appended(old: str, new: str) -> str:
    """The old body with the new statement after it: what a merge becomes when the model's merged
    body fails the guard (nothing either said is lost)."""
    old, new = old.rstrip(), new.strip()
    if not old:
        return new
    return f"{old} {new}" if old.endswith((".", "!", "?", "…", ";")) else f"{old}; {new}"


# --- what a verdict does ---------------------------------------------------------------------------------


def standing(record: MemoryRecord) -> int:
    """2 for instruction-grade memory (a person stands behind it), 1 for evidence."""
    return 2 if instruction_grade(record) else 1


@dataclass(frozen=True, slots=True)
class Step:
    """What to do with a new record and one nominee.

    keep: nothing (both stay). drop_new: the new record says nothing new, it is forgotten.
    supersede: the target becomes superseded by the new record. merge: the new record's body becomes
    `text` and the target superseded by it. propose: the writer may not change the target, so a
    supersede proposal with `text` waits for its reviewer (the new record stays)."""

    kind: Literal["keep", "drop_new", "supersede", "merge", "propose"]
    target: MemoryRecord | None = None
    text: str | None = None
    why: str = ""


def resolve(
    verdict: Verdict, new: MemoryRecord, nominees: Sequence[Nominee], may_change: Callable[[MemoryRecord], bool]
) -> Step:
    """What `verdict` becomes for `new` and the nominee it names, under the writer's rights
    (`may_change(target)`: may the writer change that record without review).

    - A statement someone else said in a group (attributed) never changes other memory: skip at most.
    - skip forgets the new record, unless it stands higher than its target (a person's confirmed
      words over the assistant's evidence): then the same words replace the target, or both stay.
    - update supersedes the target, or proposes that.
    - consolidate needs both of the same standing and sensitivity (a merge must not make evidence
      instruction-grade, nor move a sensitive word into a normal record); its body is the model's
      when it passes the guard, else the old body with the new statement appended."""
    if verdict.action == "create":
        return Step("keep", why=verdict.why or "model_create")
    nominee = next((n for n in nominees if n.record.id == verdict.target), None)
    if nominee is None:
        return Step("keep", why="unknown_target")
    target = nominee.record
    if new.attribution is not None and verdict.action != "skip":
        return Step("keep", target, why="attributed")
    if verdict.action == "skip":
        if standing(target) >= standing(new):
            return Step("drop_new", target, why="said_already")
        if nominee.same and may_change(target):
            return Step("supersede", target, why="outranks")
        return Step("keep", target, why="outranks")
    if verdict.action == "update":
        if may_change(target):
            return Step("supersede", target, why="update")
        return Step("propose", target, new.content, why="update")
    if standing(target) != standing(new) or target.sensitivity != new.sensitivity:
        return Step("keep", target, why="mixed_standing")
    guard = keeps_every_fact(verdict.text or "", [target.content, new.content])
    text = (verdict.text or "").strip() if guard.ok else appended(target.content, new.content)
    why = "consolidate" if guard.ok else f"appended_{guard.why}"
    if may_change(target):
        return Step("merge", target, text, why=why)
    return Step("propose", target, text, why=why)


@dataclass(frozen=True, slots=True)
class Settled:
    """What became of a new record once compared with what was there: `record` is the new record as
    it is now (forgotten when skipped), `target` the existing memory concerned as it was, `proposal`
    the proposed change (proposed), `batch` the revisions' batch id (one undo undoes it)."""

    outcome: Outcome
    record: MemoryRecord
    target: MemoryRecord | None = None
    proposal: MemoryRecord | None = None
    batch: str | None = None
    decided_by: DecidedBy = "none"
