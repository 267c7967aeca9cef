"""Recall ranking (DESIGN §7): which memories a turn sees, fused from a lexical and a vector leg.

Each candidate's score is

    (vector_weight * cosine + lexical_weight * squashed lexical  +  neighbour_weight * best neighbour)
        * class prior * recency * speaker * when

and the pieces are chosen by what measured best on LoCoMo (benchmarks/locomo.py, every number below
is evidence recall@10 over its categories 1-4, each conversation its own pool):

- Lexical squash: per-query min-max of the lexical leg's positive scores (-bm25 on SQLite, ts_rank
  on PostgreSQL) over its top `lexical_pool` hits, so the best lexical hit is 1 and the weakest 0,
  like a cosine's range, whatever the backend's units: the weights mean the same on both. BM25
  scores are not comparable between queries, so a fixed squash (x / (x + k)) measured 4-6 points
  lower (0.60-0.61 against 0.655 for min-max, plain 0.7 / 0.3 hybrid).
- Lexical pool of 20: hits further down a BM25 list of OR-joined terms are mostly one common word;
  admitting them added noise (0.650 at 200, 0.655 at 50, 0.663 at 20).
- Neighbours: in a conversation the answer is often a turn or two before or after the one that
  matches ("Did you go?" / "Yes, last Sunday"). A candidate gains `neighbour_weight` * the best base
  score among the items right next to it, plus half that weight * the best two steps away
  (`neighbour_decay`, `neighbour_reach`); the caller says what is next to what (adjacent turns of a
  thread), and the neighbours of every candidate are candidates too. One step: +5 points
  (0.655 -> 0.707); the second step a further +1.5. A third step cost 0.3 (0.766 against 0.769 with
  two, multi-hop 0.460 against 0.465) and brought half as many neighbours again: a fifth of a
  turn's recall at 10,000 memories.
- Speaker: a question that names a person is mostly about what that person said; a candidate whose
  speaker is named in the query is multiplied by 1 + speaker_boost. +2-3 points on top of neighbours.
- Names out of the search text (`search_without_names`): both legs search the query without the
  names of the people it names (the caller says who can be named). A name matches every turn that
  person said, for BM25 and for the embedding alike, and drowns the words that say what is asked
  ("What activities does Melanie partake in?"); the speaker boost says who instead, and is worth
  more once it alone does (0.3 -> 0.5). Multi-hop +3.5 points (0.425 -> 0.46), all +0.6.
- Class prior: durable facts over evidence, archive and daily notes a little lower; traces never.
- Recency: `floor + (1 - floor) * 0.5 ** (age / half_life)`: a 90-day half-life that never takes an
  old memory below RECENCY_FLOOR (0.95) of its score. Recency breaks near-ties in favour of what was
  said lately; it must not bury what was said months ago, which long-term memory exists for. On
  LoCoMo, where evidence is spread evenly over months, a floor of 0.6 cost 9 points, 0.8 two, 0.9 one,
  0.95 half a point. The half-life was chosen on the tune half of benchmarks/data/assistant_memory:
  30 and 60 days answered 87 of its 90 questions in the top 5, 90 days and longer 88; 90 is the
  shortest of the best (LoCoMo R@10 0.778 -> 0.780).
- Cosine floor: a candidate whose cosine is below the model's calibrated floor is not about the
  question and is dropped, whatever its other scores, unless it sits right next to a candidate
  above the floor (`floor_spares_thread`: a short reply says little on its own; its thread says the
  rest; +0.2 points). One without a vector (not embedded yet) is scored on the lexical leg alone (the
  caller logs the coverage gap); one with neither is dropped.

- Time in the question (memory.when; chosen on the tune half of our own assistant-memory set with
  benchmarks/time_in_questions.py: LoCoMo's questions are dated by its sessions, not by when they were
  asked). A hard window ("in May", "yesterday", "since September") multiplies what was written in it
  by 1 + time_boost, keeps it above the cosine floor and adds up to time_pool records written in it
  (the vector leg keeps the vector_pool closest), so "what did I note in May?" finds May's notes. The
  boost weighs the note's month named (tune MRR 0.700 without all this -> 0.888) against an event's
  month named instead (0.670 -> 0.833; asked without a month 0.839): 0.6 had the best mean of the
  two, on a curve flat within a question from 0.4 to 0.8. The vector leg searches without the
  expression, whose words blur the embedding; the lexical leg keeps them ("June" still finds "in June
  2026"; taking them from both legs lost a temporal question). A
  soft window ("recently", an event's date, a time not yet over in a question that does not look back)
  only multiplies by 1 + time_soft_boost (0.1: no measured cost; too few recent answers to measure a
  gain). Nothing outside a window is demoted (time_outside 1). LoCoMo: 0.776 -> 0.779.

Tried and dropped (measured, no gain): reciprocal-rank fusion (-5), min-max on cosines too (-1.7),
pseudo-relevance feedback on the query vector (mean of the top 3-10 added at 0.3-1.0: -1.4 to +0.1),
a vector pool of 100 or a lexical pool of 30 (-0.1, -0.2; a vector pool of 20 instead of 50 costs 0.06),
a boost for memories dated in a month or day the query names (±0.1), at most N per session (-1 to
-5), summing both neighbours instead of taking the best (-1).

Pure functions (`fuse`, `select`, `recency`, `squash`) plus `Retriever`, which gathers candidates
through callables given by the caller (the store's full-text search, a vector index in memory or
in the database, a loader) and so stays free of any storage code.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from types import MappingProxyType
from typing import Any

from memory.candidates import (
    Candidate,
    DatedLookup,
    Key,
    LexicalLeg,
    Loader,
    NeighbourLookup,
    QueryEmbedder,
    Scored,
    Vector,
    VectorLeg,
)
from memory.candidates import walk as walk  # where callers have always found it
from memory.names import Names, named, without_names
from memory.names import named_in as named_in  # where callers have always found it
from memory.records.model import MemoryClass
from memory.when import TimeHint, find

log = logging.getLogger(__name__)

RECENCY_FLOOR = 0.95
DEFAULT_PRIORS: Mapping[str, float] = MappingProxyType(
    {
        MemoryClass.DURABLE_FACT.value: 1.0,
        MemoryClass.EVIDENCE.value: 0.9,
        "daily": 0.85,  # a chunk of a daily file: notes, less distilled than a record
        "archive": 0.8,  # a raw archived message: what was said, not what was kept
    }
)
_NEVER = frozenset({MemoryClass.TRACE.value})  # whatever the priors say
_WORD = re.compile(r"[^\W_]+")
_SECONDS_PER_DAY = 86_400.0
_ONE_DAY = timedelta(days=1)
LOG_COOLDOWN_S = 300.0


@dataclass(frozen=True, slots=True)
class RecallSettings:
    vector_weight: float = 0.7
    lexical_weight: float = 0.3
    neighbour_weight: float = 0.6
    neighbour_decay: float = 0.5  # the weight of each further step, relative to the one before
    neighbour_reach: int = 2  # steps along the thread
    floor_spares_thread: bool = True  # a reply below the floor next to a hit above it is kept
    speaker_boost: float = 0.5
    search_without_names: bool = True  # the legs search the query without the names it mentions
    recency_half_life_days: float = 90.0  # 0: no recency
    recency_floor: float = RECENCY_FLOOR
    class_priors: Mapping[str, float] = field(default_factory=lambda: DEFAULT_PRIORS)
    min_cosine: float | None = None  # None: the model's calibrated floor from the manifest
    # Evidence is put into a prompt on its own only at or above this fused score (a strong match);
    # None: the calibrated value (the model's manifest, or EVIDENCE_FLOOR_LEXICAL without vectors).
    evidence_min_score: float | None = None
    max_chars: int = 2_000  # per turn, for select()
    k: int = 10
    lexical_pool: int = 20
    vector_pool: int = 20  # 50 measured the same on LoCoMo (0.7606 against 0.7600) at twice the candidates
    query_timeout_ms: float = 1_000.0  # over it: lexical only for the turn
    max_similar: float = 0.9  # select(): word-set overlap above which a text counts as a repeat
    # Time in the question (memory.when; chosen on the tune half, benchmarks/time_in_questions.py): a
    # memory made in the window it names is multiplied by 1 + time_boost (1 + time_soft_boost for a
    # soft one: "recently", an event's date, a time not yet over), one outside a hard window by
    # time_outside (0: left out); a hard window's words leave the search of the legs time_strip names
    # ("vector", "lexical", "both" or ""); what was made in it is spared the cosine floor
    # (time_spares_floor), and up to time_pool records made in it join the candidates (0: none).
    time_boost: float = 0.6
    time_soft_boost: float = 0.1
    time_outside: float = 1.0
    time_strip: str = "vector"
    time_pool: int = 200
    time_spares_floor: bool = True


# --- pure arithmetic ----------------------------------------------------------------------------


def recency(age_days: float, half_life_days: float, floor: float = RECENCY_FLOOR) -> float:
    """A multiplier in (floor, 1]: 1 for a new memory, halving its distance to `floor` every
    half-life. Never zero, so an old but relevant memory still competes. Future dates count as new."""
    if half_life_days <= 0:
        return 1.0
    return floor + (1.0 - floor) * 0.5 ** (max(0.0, age_days) / half_life_days)


def in_time(c: Candidate, when: TimeHint) -> bool:
    """Whether a candidate was made in the window; a day's notes (dated by the day's midnight, UTC)
    are when their day meets it."""
    return when.overlaps(c.created_at, c.created_at + _ONE_DAY) if c.kind == "daily" else when.contains(c.created_at)


def time_factor(inside: bool, when: TimeHint, settings: RecallSettings) -> float:
    """A candidate's multiplier for the time its question names: a boost inside the window, and
    time_outside outside a hard one."""
    if inside:
        return 1.0 + (settings.time_soft_boost if when.soft else settings.time_boost)
    return 1.0 if when.soft else settings.time_outside


def squash(scores: Mapping[Key, float]) -> dict[Key, float]:
    """Per-query min-max of positive lexical scores into [0, 1]; a lone (or all-equal) hit gets 1."""
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    span = high - low
    return {k: (s - low) / span if span > 0 else 1.0 for k, s in scores.items()}


def fuse(
    candidates: Iterable[Candidate],
    settings: RecallSettings,
    now: datetime,
    *,
    min_cosine: float | None = None,
    neighbours: Mapping[Key, Sequence[Key]] | None = None,
    query: str = "",
    when: TimeHint | None = None,
) -> list[Scored]:
    """Candidates scored as in the module docstring, best first; ties broken by newer first, then
    by key, so the same input always gives the same order. `min_cosine` is the resolved floor (None:
    no floor, as for an uncalibrated model). Traces and candidates without any score are dropped;
    lexical scores are squashed over the candidates given, so give them all at once."""
    pool = {c.key: c for c in candidates if c.prior_class not in _NEVER}
    # A window wholly ahead dates no memory; in a hard one, the time_spares_floor setting keeps what
    # was made then above the cosine floor ("what did I give up in September?": the words say little).
    timed = when if when is not None and when.bounded(now) is not None else None
    inside = {k for k, c in pool.items() if in_time(c, timed)} if timed is not None else set()
    spare = inside if timed is not None and not timed.soft and settings.time_spares_floor else set()
    lexical = squash({k: c.lexical for k, c in pool.items() if c.lexical is not None})
    total = settings.vector_weight + settings.lexical_weight
    base: dict[Key, tuple[float, float, float]] = {}  # key: (base score, lexical part, vector part)
    below: dict[Key, tuple[float, float, float]] = {}
    for k, c in pool.items():
        lex = lexical.get(k, 0.0)
        if c.cosine is None:
            if c.lexical is None:
                continue  # neither leg scored it
            base[k] = (total * lex, lex, 0.0)  # coverage gap: the lexical leg alone, at full weight
        elif min_cosine is not None and c.cosine < min_cosine and k not in spare:
            below[k] = (settings.vector_weight * c.cosine + settings.lexical_weight * lex, lex, c.cosine)
        else:
            base[k] = (settings.vector_weight * c.cosine + settings.lexical_weight * lex, lex, c.cosine)
    adjacent = _mutual(neighbours or {})
    if settings.floor_spares_thread:  # below the floor, but right next to a candidate above it
        spared = {k: v for k, v in below.items() if any(n in base for n in adjacent.get(k, ()))}
        base.update(spared)  # only next to a hit above the floor, not next to another spared one
    query_words = {w.lower() for w in _WORD.findall(query)}  # once, not once per candidate
    out = []
    for k, (score, lex, vec) in base.items():
        c = pool[k]
        lift = 0.0
        for step, ring in enumerate(_rings(adjacent, k, settings.neighbour_reach)):
            near = [base[n][0] for n in ring if n in base]
            if near:
                lift += settings.neighbour_weight * settings.neighbour_decay**step * max(near)
        prior = settings.class_priors.get(c.prior_class, 1.0)
        age = (now - c.created_at).total_seconds() / _SECONDS_PER_DAY
        fresh = recency(age, settings.recency_half_life_days, settings.recency_floor)
        speaker = 1.0 + settings.speaker_boost if query_words and named(query_words, c.speaker) else 1.0
        parts = {"lexical": lex, "vector": vec, "neighbour": lift, "prior": prior, "recency": fresh, "speaker": speaker}
        dated = time_factor(k in inside, timed, settings) if timed is not None else 1.0
        if dated <= 0:
            continue
        parts["when"] = dated
        out.append(Scored(c, (score + lift) * prior * fresh * speaker * dated, MappingProxyType(parts)))
    out.sort(key=lambda s: (-s.score, -s.candidate.created_at.timestamp(), s.candidate.key))
    return out


def _mutual(neighbours: Mapping[Key, Sequence[Key]]) -> dict[Key, set[Key]]:
    """Adjacency both ways: a caller may list only the neighbours of some keys (its hits), and the
    neighbours it added must see those hits too."""
    out: dict[Key, set[Key]] = {}
    for k, ns in neighbours.items():
        for n in ns:
            if n != k:
                out.setdefault(k, set()).add(n)
                out.setdefault(n, set()).add(k)
    return out


def _rings(adjacent: Mapping[Key, set[Key]], key: Key, reach: int) -> list[set[Key]]:
    """The keys exactly 1, 2, … `reach` steps from `key`."""
    seen, ring, rings = {key}, {key}, []
    for _ in range(reach):
        ring = {n for k in ring for n in adjacent.get(k, ()) if n not in seen}
        if not ring:
            break
        seen |= ring
        rings.append(ring)
    return rings


def _words(text: str) -> frozenset[str]:
    """A text's words as select() compares them (lowercase)."""
    return frozenset(w.lower() for w in _WORD.findall(text))


def _similar(a: frozenset[str], b: frozenset[str], threshold: float) -> bool:
    """Whether two word sets overlap by `threshold` or more (Jaccard): select() keeps one of them."""
    if not a or not b:
        return a == b
    return len(a & b) / len(a | b) >= threshold


# Why select() leaves a candidate out (recall traces show them).
BEYOND_LIMIT = "beyond_limit"  # k items were already chosen
OVER_BUDGET = "over_memory_budget"  # longer than what was left of max_chars
NEAR_REPEAT = "near_repeat"  # says nearly what a chosen item says (word overlap)
# Why a turn's trust rules leave one out (gateway/recall/select.py decides them).
WEAK_EVIDENCE = "weak_evidence_match"  # unconfirmed evidence under the evidence floor
CONFLICTING = "conflicts_with_confirmed"  # its confirmed counterpart did not make it into the prompt
NOTICE = "gateway_notice"  # an archived notice the gateway itself wrote
SCREENED = "screened_"  # + what write-back's screens found in an archived message or note:
SCREENS = ("secret", "injection", "personal_data", "malformed")


def selection(
    scored: Sequence[Scored],
    max_chars: int,
    k: int = 10,
    max_similar: float = 0.9,
    held_back: Callable[[Scored], str | None] | None = None,
) -> list[str | None]:
    """select()'s decision on each of `scored`: None for a chosen one, else why it was left out
    (BEYOND_LIMIT, then `held_back`'s reason, OVER_BUDGET, NEAR_REPEAT: the first that applies, in
    that order). `held_back` (the caller's policy) is asked only about items that could still be
    chosen, so a costly check runs for a turn's few, not for everything ranked."""
    decisions: list[str | None] = []
    seen: list[frozenset[str]] = []
    left = max_chars
    for s in scored:
        if len(seen) >= k:
            decisions.append(BEYOND_LIMIT)
            continue
        why = held_back(s) if held_back is not None else None
        if why is not None:
            decisions.append(why)
            continue
        size = len(s.candidate.text)
        if size > left:
            decisions.append(OVER_BUDGET)
            continue
        words = _words(s.candidate.text)
        if any(_similar(words, w, max_similar) for w in seen):
            decisions.append(NEAR_REPEAT)
            continue
        decisions.append(None)
        seen.append(words)
        left -= size
    return decisions


def select(scored: Sequence[Scored], max_chars: int, k: int = 10, max_similar: float = 0.9) -> list[Scored]:
    """The best of `scored` (already in order) that fit `max_chars` together, at most `k`; a text
    whose words overlap an already chosen one by `max_similar` (Jaccard) or more is a repeat and is
    skipped, so that one fact said five times does not fill the budget. A candidate too long for
    what is left is skipped and smaller ones further down may still fit."""
    return [s for s, why in zip(scored, selection(scored, max_chars, k, max_similar), strict=True) if why is None]


def resolve_floor(settings: RecallSettings, calibrated: float | None) -> tuple[float | None, str]:
    """The cosine floor for this turn and where it came from: `config` (min_cosine set), `manifest`
    (the model's calibrated value) or `missing_calibration` (neither: no floor, and the caller says so)."""
    if settings.min_cosine is not None:
        return settings.min_cosine, "config"
    if calibrated is not None:
        return calibrated, "manifest"
    return None, "missing_calibration"


# The evidence floor without a vector leg, on a hit's full-text score relative to the turn's best
# (gateway/recall/select.py lexical_strength): it keeps 90 % of the answers recall ranks on the tune
# half of benchmarks/data/assistant_memory and keeps out 67 % of the other items of a turn's top 8
# (on the test half: 90 % kept, 62 % kept out).
EVIDENCE_FLOOR_LEXICAL = 0.7


def resolve_evidence_floor(
    settings: RecallSettings, calibrated: float | None, vectors: bool
) -> tuple[float, str, bool]:
    """The strong-match score evidence needs to be injected on its own, where it came from, and
    whether it is a fused score (else a full-text score relative to the turn's best): `config`
    (evidence_min_score set; fused when the vector leg ran), `manifest` (the embedding model's
    calibrated value, fused), `lexical` (keyword recall's own) or `missing_calibration` (a vector
    leg whose model has no calibrated value: judged by keywords, as `lexical`)."""
    if settings.evidence_min_score is not None:
        return settings.evidence_min_score, "config", vectors
    if not vectors:
        return EVIDENCE_FLOOR_LEXICAL, "lexical", False
    if calibrated is not None:
        return calibrated, "manifest", True
    return EVIDENCE_FLOOR_LEXICAL, "missing_calibration", False


# --- the retriever ------------------------------------------------------------------------------


@dataclass(slots=True)
class Cooldown:
    """Logs an event at most once per LOG_COOLDOWN_S, so a degraded turn loop does not flood. One is
    shared by every Retriever (one is built per turn) unless a caller gives its own."""

    last: dict[str, float] = field(default_factory=dict)

    def ready(self, event: str) -> bool:
        now = time.monotonic()
        if now - self.last.get(event, -math.inf) < LOG_COOLDOWN_S:
            return False
        self.last[event] = now
        return True


_SHARED_COOLDOWN = Cooldown()


@dataclass(frozen=True, slots=True)
class Recall:
    ranked: list[Scored]
    floor: float | None
    floor_source: str
    vector_degraded: bool
    coverage_gap: int  # candidates scored without a vector
    ms: float
    when: TimeHint | None = None  # the time the query named, as recall used it


class Retriever:
    """One turn's recall: both legs, neighbours, fusion. The callables decide what is searchable
    (scope and policy filters belong in them); this decides the order."""

    def __init__(
        self,
        settings: RecallSettings,
        lexical: LexicalLeg,
        load: Loader,
        *,
        vector: VectorLeg | None = None,
        embed_query: QueryEmbedder | None = None,
        neighbours: NeighbourLookup | None = None,
        calibrated_floor: float | None = None,
        cooldown: Cooldown | None = None,
        names: Names | Collection[str] = (),
        dated: DatedLookup | None = None,
        zone: str | tzinfo = "UTC",
    ) -> None:
        self.settings = settings
        self._names = names if isinstance(names, Names) else Names(names)  # who a query may name
        self._lexical = lexical
        self._load = load
        self._vector = vector
        self._embed = embed_query
        self._neighbours = neighbours
        self._dated = dated
        self._zone = zone  # the person's time zone: "yesterday" is theirs
        self.floor, self.floor_source = resolve_floor(settings, calibrated_floor)
        self._cooldown = cooldown or _SHARED_COOLDOWN
        missing = self.floor_source == "missing_calibration" and vector is not None
        if missing and self._cooldown.ready("memory_recall_missing_calibration"):
            log.warning("memory_recall_missing_calibration floor=none")

    async def recall(self, query: str, now: datetime) -> Recall:
        t0 = time.perf_counter()
        s = self.settings
        when = await self._when(query, now)
        # A hard window says when something was written, and its words blur what the vector leg
        # compares (time_strip: the legs that search without them); an event's time ("the trip in
        # March") is in the memory's own words, and stays.
        strip = s.time_strip if when is not None and not when.soft and when.event is None else ""
        search = self._search_text(query)
        bare = self._search_text(when.rest) if strip and when is not None else search
        # The query embedding (another thread) and then the vector search run while the full-text
        # legs ask the database, and then the lexical hits' neighbours: the model, numpy and SQLite
        # each release the GIL. The vector hits' own neighbours are asked for once they are known.
        vector_leg = asyncio.ensure_future(self._vector_hits(bare if strip in ("vector", "both") else search))
        adjacent: dict[Key, list[Key]] = {}
        threads = self._neighbours is not None and s.neighbour_weight > 0
        try:
            hits = await self._lexical(bare if strip in ("lexical", "both") else search, s.lexical_pool)
            pool: dict[Key, Candidate] = {c.key: c for c, _ in hits}
            if threads and pool:
                await self._thread_of(list(pool), adjacent)
        except BaseException:
            vector_leg.cancel()
            if vector_leg.done() and not vector_leg.cancelled():
                vector_leg.exception()  # failed too: retrieved, so asyncio does not log it as lost
            raise
        qvec, cosines = await vector_leg
        if when is not None and qvec is not None:
            cosines.update(await self._in_window(when, qvec, now, {*pool, *cosines}))
        lexical = {c.key: score for c, score in hits}
        found_by_vector = [k for k in cosines if k not in pool]
        if threads and found_by_vector:
            await self._thread_of(found_by_vector, adjacent)
        wanted = list(dict.fromkeys([*pool, *cosines]))
        known = set(wanted)
        wanted += list(dict.fromkeys(n for ns in adjacent.values() for n in ns if n not in known))
        if qvec is not None and self._vector is not None:
            unscored = [k for k in wanted if k not in cosines]
            if unscored:  # lexical hits and neighbours the vector leg's top did not reach
                cosines.update(await self._vector(qvec, len(unscored), unscored))
        missing = [k for k in wanted if k not in pool]
        if missing:
            pool.update(await self._load(missing))
        candidates = [c.scored(lexical.get(k), cosines.get(k)) for k, c in pool.items()]
        gap = 0 if qvec is None else sum(1 for c in candidates if c.cosine is None)
        if gap and self._cooldown.ready("memory_recall_coverage_gap"):
            log.warning("memory_recall_coverage_gap candidates=%d without_vector=%d", len(candidates), gap)
        ranked = fuse(candidates, s, now, min_cosine=self.floor, neighbours=adjacent, query=query, when=when)
        ms = (time.perf_counter() - t0) * 1000
        return Recall(ranked, self.floor, self.floor_source, qvec is None and self._embed is not None, gap, ms, when)

    def _search_text(self, text: str) -> str:
        return without_names(text, self._names) if self.settings.search_without_names else text

    async def _when(self, query: str, now: datetime) -> TimeHint | None:
        """The time the query names; an event's ("before the move") dated by the best lexical hit for
        its words, among what this person may see (the lexical leg's own rules): None if none."""
        when = find(query, now, self._zone)
        if when is None or when.event is None:
            return when
        hits = await self._lexical(when.event, 1)
        return when.anchored(hits[0][0].created_at) if hits else None

    async def _in_window(
        self, when: TimeHint, qvec: Vector, now: datetime, known: AbstractSet[Key]
    ) -> Mapping[Key, float]:
        """The records created in a hard window that the vector leg ranks best, with their cosines:
        "what did I note in May" finds May's notes even when its words are not theirs."""
        window = when.bounded(now)
        if window is None or when.soft or self._dated is None or self._vector is None or self.settings.time_pool <= 0:
            return {}
        keys = [k for k in await self._dated(window[0], window[1], self.settings.time_pool) if k not in known]
        return dict(await self._vector(qvec, self.settings.vector_pool, keys)) if keys else {}

    async def _thread_of(self, keys: Sequence[Key], adjacent: dict[Key, list[Key]]) -> None:
        """Add what is next to `keys` (up to the reach) to `adjacent`. Asked for two sets of keys
        apart, this gives what one call for both would: an item's neighbours are its own, and an item
        within reach of either set is within reach of both together."""
        assert self._neighbours is not None
        for key, near in (await self._neighbours(keys, self.settings.neighbour_reach)).items():
            adjacent.setdefault(key, []).extend(near)

    async def _vector_hits(self, query: str) -> tuple[Vector | None, dict[Key, float]]:
        """The query's vector (None: no embedder, or degraded) and the vector leg's best, by cosine."""
        qvec = await self._query_vector(query)
        if qvec is None or self._vector is None:
            return qvec, {}
        return qvec, dict(await self._vector(qvec, self.settings.vector_pool, None))

    async def _query_vector(self, query: str) -> Vector | None:
        if self._embed is None or self._vector is None:
            return None
        try:
            async with asyncio.timeout(self.settings.query_timeout_ms / 1000):  # wait_for may lose a cancel on 3.11
                return await self._embed(query)
        except Exception as exc:  # a timeout or any failure: this turn goes lexical-only, said once
            if self._cooldown.ready("memory_recall_vector_degraded"):
                log.warning("memory_recall_vector_degraded reason=%s", type(exc).__name__)
            return None


def describe(recall: Recall) -> dict[str, Any]:
    """The turn's recall as log context (memory_retrieval_final)."""
    return {
        "count": len(recall.ranked),
        "floor": recall.floor,
        "floor_source": recall.floor_source,
        "vector_degraded": recall.vector_degraded,
        "coverage_gap": recall.coverage_gap,
        "ms": round(recall.ms, 2),
        **_window(recall.when),
    }


def _window(when: TimeHint | None) -> dict[str, Any]:
    """The time a query named, as log context: its bounds and kind, never its words."""
    if when is None:
        return {}
    bounds = "/".join(t.isoformat(timespec="minutes") if t is not None else ".." for t in (when.start, when.end))
    return {"time_window": bounds, "time_hint": "soft" if when.soft else "hard"}
