"""Recall's ranking (memory/recall.py): fusion and floor arithmetic on hand-computed tables, recency,
class priors, neighbours, the coverage gap and degraded paths, budget selection, determinism."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory.recall import (
    RECENCY_FLOOR,
    Candidate,
    Cooldown,
    Key,
    Names,
    Recall,
    RecallSettings,
    Retriever,
    Scored,
    Vector,
    describe,
    fuse,
    named_in,
    recency,
    resolve_floor,
    select,
    squash,
    walk,
    without_names,
)
from memory.records.dated import created_in
from memory.records.fields import NewRecord
from memory.records.model import MemoryClass, Provenance, Scope
from memory.store.storage import Storage
from memory.trust.policy import trust_defaults
from memory.when import find
from tests.postgres import BACKENDS, database_url

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
# Fusion alone: no neighbours, no speaker, no recency, every class weighed 1.
BARE = RecallSettings(
    neighbour_weight=0.0,
    speaker_boost=0.0,
    recency_half_life_days=0.0,
    class_priors={"durable_fact": 1.0, "evidence": 1.0, "archive": 1.0, "daily": 1.0},
)


def cand(
    name: str,
    lexical: float | None = None,
    cosine: float | None = None,
    *,
    cls: MemoryClass | None = MemoryClass.DURABLE_FACT,
    kind: str = "record",
    age_days: float = 0.0,
    text: str | None = None,
    speaker: str | None = None,
) -> Candidate:
    return Candidate(
        kind,
        name,
        text if text is not None else f"memory {name}",
        "personal:alice",
        NOW - timedelta(days=age_days),
        cls,
        lexical,
        cosine,
        speaker,
    )


def scores(ranked: Sequence[Scored]) -> dict[str, float]:
    return {s.candidate.id: round(s.score, 6) for s in ranked}


def order(ranked: Sequence[Scored]) -> list[str]:
    return [s.candidate.id for s in ranked]


# --- fusion and floor ---------------------------------------------------------------------------


def test_fusion_table() -> None:
    # lexical 10 / 6 / 2 squash by min-max to 1 / 0.5 / 0; D has no lexical hit (0).
    ranked = fuse([cand("a", 10, 0.5), cand("b", 6, 0.8), cand("c", 2, 0.3), cand("d", None, 0.4)], BARE, NOW)
    assert scores(ranked) == {"b": 0.71, "a": 0.65, "d": 0.28, "c": 0.21}  # 0.7 * cos + 0.3 * lexical
    assert order(ranked) == ["b", "a", "d", "c"]
    assert ranked[0].parts["lexical"] == 0.5 and ranked[0].parts["vector"] == 0.8


def test_weights_are_settings() -> None:
    ranked = fuse([cand("a", 10, 0.5), cand("b", 6, 0.8)], replace(BARE, vector_weight=0.5, lexical_weight=0.5), NOW)
    assert scores(ranked) == {"a": 0.75, "b": 0.4}  # a: .25 + .5; b: .4 + 0 (b is the weakest lexical hit)


@pytest.mark.parametrize(
    ("floor", "kept"),
    [
        (None, ["b", "a", "d", "c"]),  # no floor (uncalibrated model)
        (0.3, ["b", "a", "d", "c"]),  # at the floor is kept
        (0.35, ["b", "a", "d"]),
        (0.45, ["b", "a"]),
        (0.9, []),  # a strong lexical hit does not save a candidate under the floor
    ],
)
def test_cosine_floor_drops_whatever_the_lexical_score(floor: float | None, kept: list[str]) -> None:
    items = [cand("a", 10, 0.5), cand("b", 6, 0.8), cand("c", 2, 0.3), cand("d", None, 0.4)]
    assert order(fuse(items, BARE, NOW, min_cosine=floor)) == kept


def test_squash_is_min_max_and_a_lone_hit_is_one() -> None:
    a, b, c = ("record", "a"), ("record", "b"), ("record", "c")
    assert squash({a: 10.0, b: 6.0, c: 2.0}) == {a: 1.0, b: 0.5, c: 0.0}
    assert squash({a: 3.2}) == {a: 1.0}
    assert squash({a: 2.0, b: 2.0}) == {a: 1.0, b: 1.0}
    assert squash({}) == {}


def test_coverage_gap_scores_the_lexical_leg_alone_at_full_weight() -> None:
    # "e" has no vector yet: lexical 1.0 * (0.7 + 0.3); the floor does not apply to it.
    ranked = fuse([cand("a", 10, 0.5), cand("c", 2, 0.9), cand("e", 6, None)], BARE, NOW, min_cosine=0.6)
    assert scores(ranked) == {"c": 0.63, "e": 0.5}  # a is under the floor; e: (6-2)/(10-2) = 0.5
    assert ranked[1].parts["vector"] == 0.0


def test_a_candidate_neither_leg_scored_is_dropped() -> None:
    assert fuse([cand("x")], BARE, NOW) == []


# --- recency ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("age", "half_life", "floor", "expected"),
    [
        (0, 30, 0.9, 1.0),
        (30, 30, 0.9, 0.95),  # halfway to the floor after one half-life
        (60, 30, 0.9, 0.925),
        (30, 30, 0.5, 0.75),
        (-5, 30, 0.9, 1.0),  # a future date counts as new
        (1000, 0, 0.9, 1.0),  # half-life 0: no recency
    ],
)
def test_recency_table(age: float, half_life: float, floor: float, expected: float) -> None:
    assert recency(age, half_life, floor) == pytest.approx(expected)


@given(age=st.floats(min_value=0, max_value=1e9), half_life=st.floats(min_value=0.01, max_value=1e4))
def test_recency_never_zeroes_an_old_memory(age: float, half_life: float) -> None:
    assert RECENCY_FLOOR <= recency(age, half_life) <= 1.0
    assert recency(age, half_life) > 0


def test_recency_orders_equal_memories_newest_first_but_keeps_old_ones() -> None:
    settings = replace(BARE, recency_half_life_days=30.0, recency_floor=0.5)
    ranked = fuse([cand("old", None, 0.8, age_days=3650), cand("new", None, 0.8)], settings, NOW)
    assert scores(ranked) == {"new": 0.56, "old": 0.28}  # 0.56 * (0.5 + 0.5 * 0.5 ** 121.7) = 0.28


# --- class priors -------------------------------------------------------------------------------


def test_class_priors_rank_durable_facts_over_evidence_and_never_traces() -> None:
    items = [
        cand("fact", None, 0.5),
        cand("evidence", None, 0.5, cls=MemoryClass.EVIDENCE),
        cand("trace", 10, 0.99, cls=MemoryClass.TRACE),
        cand("note", None, 0.5, cls=None, kind="daily"),
        cand("said", None, 0.5, cls=None, kind="archive"),
    ]
    ranked = fuse(items, replace(BARE, class_priors=RecallSettings().class_priors), NOW)
    assert scores(ranked) == {"fact": 0.35, "evidence": 0.315, "note": 0.2975, "said": 0.28}


def test_a_trace_is_excluded_whatever_its_prior() -> None:
    settings = replace(BARE, class_priors={"trace": 5.0, "durable_fact": 1.0})
    assert order(fuse([cand("t", 9, 0.9, cls=MemoryClass.TRACE)], settings, NOW)) == []


# --- neighbours and speaker ---------------------------------------------------------------------


def test_neighbours_lift_by_the_best_at_each_step() -> None:
    # A thread a - b - c - d; only the caller's view of b's neighbours is given: adjacency is mutual.
    items = [cand("a", None, 0.2, age_days=4), cand("b", None, 0.6, age_days=3), cand("c", None, 0.2, age_days=2)]
    items.append(cand("d", None, 0.2, age_days=1))
    a, b, c, d = (("record", n) for n in "abcd")
    settings = replace(BARE, neighbour_weight=0.5, neighbour_decay=0.5, neighbour_reach=2)
    ranked = fuse(items, settings, NOW, neighbours={b: [a, c], c: [d]})
    # base 0.14 / 0.42 / 0.14 / 0.14; + 0.5 * best one step away + 0.25 * best two steps away
    assert scores(ranked) == {"b": 0.525, "c": 0.385, "a": 0.385, "d": 0.315}
    assert order(ranked) == ["b", "c", "a", "d"]  # c and a tie: the newer first
    assert ranked[0].parts["neighbour"] == pytest.approx(0.105)
    one_step = fuse(items, replace(settings, neighbour_reach=1), NOW, neighbours={b: [a, c], c: [d]})
    assert scores(one_step) == {"b": 0.49, "c": 0.35, "a": 0.35, "d": 0.21}


def test_the_floor_spares_a_reply_next_to_a_hit_and_nothing_else() -> None:
    # "Did you go to the club?" (above the floor) - "Yes, last Sunday" (below it) - an unrelated
    # turn below it two steps away, and a lone one below it elsewhere.
    items = [cand("q", 0.9, 0.5), cand("yes", None, 0.1), cand("later", None, 0.1), cand("lone", None, 0.1)]
    q, yes, later = ("record", "q"), ("record", "yes"), ("record", "later")
    settings = replace(BARE, neighbour_weight=0.5, neighbour_reach=2)
    thread = {q: [yes], yes: [later]}
    ranked = fuse(items, settings, NOW, min_cosine=0.2, neighbours=thread)
    assert order(ranked) == ["q", "yes"]  # its own 0.07 plus half of q's 0.65
    assert scores(ranked)["yes"] == pytest.approx(0.07 + 0.5 * 0.65)
    strict = fuse(items, replace(settings, floor_spares_thread=False), NOW, min_cosine=0.2, neighbours=thread)
    assert order(strict) == ["q"]


def test_a_speaker_named_in_the_query_is_boosted() -> None:
    items = [cand("hers", None, 0.5, speaker="Caroline"), cand("his", None, 0.6, speaker="Jon Smith")]
    settings = replace(BARE, speaker_boost=0.3)
    assert scores(fuse(items, settings, NOW, query="What did Caroline paint?")) == {"hers": 0.455, "his": 0.42}
    assert scores(fuse(items, settings, NOW, query="what did jon smith say")) == {"his": 0.546, "hers": 0.35}
    assert scores(fuse(items, settings, NOW, query="What did Jon paint?")) == {"his": 0.42, "hers": 0.35}


@pytest.mark.parametrize(
    ("query", "speaker", "named"),
    [
        ("When did Caroline go?", "Caroline", True),
        ("When did caroline's friend go?", "Caroline", True),
        ("When did Carol go?", "Caroline", False),
        ("Where is Jon?", "Jon Smith", False),
        ("Anything", None, False),
        ("Anything", "", False),
    ],
)
def test_named_in(query: str, speaker: str | None, named: bool) -> None:
    assert named_in(query, speaker) is named


@pytest.mark.parametrize(
    ("query", "names", "searched"),
    [
        ("What activities does Melanie partake in?", ["Melanie", "Caroline"], "What activities does partake in?"),
        ("When did Melanie's kids go camping?", ["Melanie"], "When did kids go camping?"),
        ("What did jon smith say about tyres", ["Jon Smith"], "What did say about tyres"),
        ("What did Jon say about tyres", ["Jon Smith"], "What did Jon say about tyres"),  # not the whole name
        ("Is Melanies car red?", ["Melanie"], "Is Melanies car red?"),  # another word
        ("Caroline?", ["Caroline"], "Caroline?"),  # nothing else left: the query itself
        ("Where did they go?", ["Caroline"], "Where did they go?"),
        ("Where did they go?", [], "Where did they go?"),
    ],
)
def test_without_names(query: str, names: list[str], searched: str) -> None:
    assert without_names(query, names) == searched
    assert without_names(query, Names(names)) == searched  # built once, as the gateway does


def test_names_are_looked_up_by_the_query_words_among_thousands() -> None:
    crowd = Names([f"Member {n}" for n in range(5_000)] + ["Jon Smith", "Dana"])
    assert crowd.words_named({"what", "did", "jon", "smith", "and", "dana", "say"}) == {"jon", "smith", "dana"}
    assert crowd.words_named({"what", "did", "jon", "say"}) == set()  # not the whole name
    assert crowd.words_named({"member", "17"}) == {"member", "17"}


async def test_the_legs_search_without_the_names_and_the_boost_still_sees_them() -> None:
    pool = Pool()
    pool.items["m5"] = ("Melanie said Melanie likes Lisbon", [0.0, 1.0])
    searched: list[str] = []

    async def lexical(query: str, limit: int) -> list[tuple[Candidate, float]]:
        searched.append(query)
        return await pool.lexical(query, limit)

    async def embed(text: str) -> Vector:
        searched.append(text)
        return await pool.embed(text)

    def speaking(item_id: str) -> Candidate:
        return replace(cand(item_id, text=pool.items[item_id][0]), speaker="Melanie" if item_id == "m1" else None)

    pool.candidate = speaking  # type: ignore[method-assign]
    settings = RecallSettings(recency_half_life_days=0.0, neighbour_weight=0.0, speaker_boost=0.5)
    named = Retriever(settings, lexical, pool.load, vector=pool.vector, embed_query=embed, names=["Melanie"])
    result = await named.recall("Melanie Lisbon", NOW)
    assert sorted(searched) == ["Lisbon", "Lisbon"]  # both legs, without the name
    assert result.ranked[0].candidate.id == "m1" and result.ranked[0].parts["speaker"] == 1.5
    searched.clear()
    kept = Retriever(replace(settings, search_without_names=False), lexical, pool.load, names=["Melanie"])
    result = await kept.recall("Melanie Lisbon", NOW)
    assert searched == ["Melanie Lisbon"]
    assert result.ranked[0].candidate.id == "m5"  # the name matched m5's words; m1's lexical share is 0


# --- determinism --------------------------------------------------------------------------------


def test_ties_break_newest_first_then_by_key_whatever_the_input_order() -> None:
    items = [cand("b", None, 0.5, age_days=1), cand("a", None, 0.5, age_days=1), cand("c", None, 0.5)]
    items.append(cand("z", None, 0.5, kind="archive", cls=None, age_days=1))
    settings = replace(BARE, class_priors={"durable_fact": 1.0, "archive": 1.0})
    for perm in itertools.permutations(items):
        assert order(fuse(perm, settings, NOW)) == ["c", "z", "a", "b"]  # newest, then (kind, id)


@given(st.lists(st.tuples(st.floats(0, 50), st.floats(-1, 1)), min_size=1, max_size=12), st.randoms())
def test_fusion_is_independent_of_input_order(legs: list[tuple[float, float]], rnd: Any) -> None:
    items = [cand(f"m{i}", lex, cos, age_days=i % 3) for i, (lex, cos) in enumerate(legs)]
    shuffled = items[:]
    rnd.shuffle(shuffled)
    first, second = fuse(items, RecallSettings(), NOW), fuse(shuffled, RecallSettings(), NOW)
    assert order(first) == order(second)
    assert all(x.score >= y.score for x, y in itertools.pairwise(first))


# --- floor resolution ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("configured", "calibrated", "expected"),
    [
        (0.3, 0.22, (0.3, "config")),
        (None, 0.22, (0.22, "manifest")),
        (None, None, (None, "missing_calibration")),
        (0.0, None, (0.0, "config")),
    ],
)
def test_resolve_floor(configured: float | None, calibrated: float | None, expected: tuple[Any, str]) -> None:
    assert resolve_floor(RecallSettings(min_cosine=configured), calibrated) == expected


# --- budget selection ---------------------------------------------------------------------------


def scored(name: str, score: float, text: str) -> Scored:
    return Scored(cand(name, text=text), score, {})


def test_select_keeps_the_best_that_fit_the_budget() -> None:
    ranked = [scored("a", 0.9, "x" * 60), scored("b", 0.8, "y" * 50), scored("c", 0.7, "z" * 30)]
    ranked.append(scored("d", 0.6, "w" * 10))
    assert order(select(ranked, max_chars=100)) == ["a", "c", "d"]  # b does not fit after a; c and d do
    assert order(select(ranked, max_chars=100, k=2)) == ["a", "c"]
    assert order(select(ranked, max_chars=5)) == []  # injecting nothing is a normal outcome
    assert order(select(ranked, max_chars=1000)) == ["a", "b", "c", "d"]


def test_select_skips_a_near_repeat() -> None:
    ranked = [
        scored("a", 0.9, "Alice prefers tea in the morning"),
        scored("b", 0.8, "alice prefers TEA in the morning!"),  # same words
        scored("c", 0.7, "Alice prefers coffee after lunch"),
    ]
    assert order(select(ranked, max_chars=1000)) == ["a", "c"]
    assert order(select(ranked, max_chars=1000, max_similar=1.01)) == ["a", "b", "c"]


# --- the retriever: legs, neighbours, degradation ----------------------------------------------


class Pool:
    """A small searchable world: texts, vectors on 2 axes, a thread order; legs as plain functions."""

    def __init__(self) -> None:
        self.items = {
            "m1": ("We planned the trip to Lisbon", [1.0, 0.0]),
            "m2": ("Yes, in May, with the kids", [0.2, 0.98]),
            "m3": ("The car needs new tyres", [0.0, 1.0]),
            "m4": ("Lisbon was sunny", [0.9, 0.44]),
        }
        self.thread = ["m1", "m2", "m3"]
        self.embeds = 0

    def candidate(self, item_id: str) -> Candidate:
        return cand(item_id, text=self.items[item_id][0], age_days=int(item_id[1:]))

    async def lexical(self, query: str, limit: int) -> list[tuple[Candidate, float]]:
        words = {w.lower() for w in query.split()}
        hits = [(self.candidate(i), float(len(words & set(t.lower().split())))) for i, (t, _) in self.items.items()]
        return sorted((h for h in hits if h[1] > 0), key=lambda h: -h[1])[:limit]

    async def vector(self, q: Vector, limit: int, only: Collection[Key] | None) -> list[tuple[Key, float]]:
        ids = [i for i in self.items if only is None or ("record", i) in only]
        cos = {i: float(np.asarray(self.items[i][1], dtype=np.float32) @ q) for i in ids}
        return [(("record", i), c) for i, c in sorted(cos.items(), key=lambda x: -x[1])[:limit]]

    async def load(self, keys: Sequence[Key]) -> dict[Key, Candidate]:
        return {k: self.candidate(k[1]) for k in keys if k[1] in self.items}

    def next_to(self, keys: Sequence[Key]) -> dict[Key, list[Key]]:
        out = {}
        for kind, i in keys:
            if i in self.thread:
                at = self.thread.index(i)
                out[(kind, i)] = [("record", self.thread[j]) for j in (at - 1, at + 1) if 0 <= j < len(self.thread)]
        return out

    async def neighbours(self, keys: Sequence[Key], reach: int) -> dict[Key, list[Key]]:
        return walk(self.next_to, keys, reach)

    async def embed(self, text: str) -> Vector:
        self.embeds += 1
        return np.asarray([1.0, 0.0], dtype=np.float32)


async def test_retriever_fuses_both_legs_and_brings_in_neighbours() -> None:
    pool = Pool()
    settings = RecallSettings(vector_pool=1, lexical_pool=1, recency_half_life_days=0.0)
    retriever = Retriever(
        settings, pool.lexical, pool.load, vector=pool.vector, embed_query=pool.embed, neighbours=pool.neighbours
    )
    result = await retriever.recall("trip Lisbon", NOW)
    # The legs found m1 (both); m2 is its neighbour, m3 two steps away; m4 was in neither leg's top 1.
    assert order(result.ranked) == ["m1", "m2", "m3"]
    assert result.floor_source == "missing_calibration" and result.coverage_gap == 0
    assert pool.embeds == 1
    m2 = result.ranked[1]
    assert m2.candidate.cosine == pytest.approx(0.2) and m2.parts["neighbour"] > 0


async def test_retriever_without_vectors_ranks_by_the_lexical_leg(caplog: Any) -> None:
    pool = Pool()
    caplog.set_level(logging.WARNING, logger="memory.recall")
    retriever = Retriever(RecallSettings(recency_half_life_days=0.0), pool.lexical, pool.load)
    result = await retriever.recall("Lisbon trip", NOW)
    assert order(result.ranked) == ["m1", "m4"]
    assert not result.vector_degraded and "memory_recall" not in caplog.text  # keyword-only is configured


async def test_a_failing_query_embedding_degrades_to_lexical_logged_once(caplog: Any) -> None:
    pool = Pool()

    async def broken(text: str) -> Vector:
        raise RuntimeError("model gone")

    caplog.set_level(logging.WARNING, logger="memory.recall")
    retriever = Retriever(
        RecallSettings(), pool.lexical, pool.load, vector=pool.vector, embed_query=broken, cooldown=Cooldown()
    )
    for _ in range(3):
        result = await retriever.recall("Lisbon trip", NOW)
        assert result.vector_degraded and order(result.ranked) == ["m1", "m4"]
    assert caplog.text.count("memory_recall_vector_degraded reason=RuntimeError") == 1


async def test_a_slow_query_embedding_degrades_to_lexical() -> None:
    pool = Pool()
    never = asyncio.Event()

    async def stuck(text: str) -> Vector:
        await never.wait()
        raise AssertionError("unreachable")

    settings = RecallSettings(query_timeout_ms=20)
    retriever = Retriever(settings, pool.lexical, pool.load, vector=pool.vector, embed_query=stuck)
    result = await retriever.recall("Lisbon", NOW)
    assert result.vector_degraded and order(result.ranked) == ["m1", "m4"]


async def test_the_query_embedding_runs_while_the_lexical_leg_searches() -> None:
    pool = Pool()
    searching, embedding = asyncio.Event(), asyncio.Event()

    # Each waits for the other to have started: one after the other, they would wait forever.
    async def lexical(query: str, limit: int) -> list[tuple[Candidate, float]]:
        searching.set()
        await embedding.wait()
        return await pool.lexical(query, limit)

    async def embed(text: str) -> Vector:
        embedding.set()
        await searching.wait()
        return await pool.embed(text)

    settings = RecallSettings(recency_half_life_days=0.0)
    retriever = Retriever(settings, lexical, pool.load, vector=pool.vector, embed_query=embed)
    result = await asyncio.wait_for(retriever.recall("trip Lisbon", NOW), 5)
    assert not result.vector_degraded and order(result.ranked)[0] == "m1"


async def test_the_lexical_hits_neighbours_are_read_while_the_query_is_embedded() -> None:
    pool = Pool()
    asked: list[list[str]] = []
    threading, embedding = asyncio.Event(), asyncio.Event()

    async def neighbours(keys: Sequence[Key], reach: int) -> dict[Key, list[Key]]:
        asked.append([i for _, i in keys])
        threading.set()
        await embedding.wait()  # only once the query is being embedded: after it, this would wait forever
        return await pool.neighbours(keys, reach)

    async def embed(text: str) -> Vector:
        embedding.set()
        await threading.wait()
        return np.asarray([0.0, 1.0], dtype=np.float32)  # towards m3, which no word of the query names

    settings = RecallSettings(vector_pool=1, lexical_pool=1, recency_half_life_days=0.0)
    retriever = Retriever(
        settings, pool.lexical, pool.load, vector=pool.vector, embed_query=embed, neighbours=neighbours
    )
    result = await asyncio.wait_for(retriever.recall("trip Lisbon", NOW), 5)
    # First the lexical hit's thread, then the vector hit's, which the first did not ask for.
    assert asked == [["m1"], ["m3"]]
    parts = {s.candidate.id: s.parts for s in result.ranked}
    assert set(parts) == {"m1", "m2", "m3"}
    assert all(p["neighbour"] > 0 for p in parts.values())  # m2 sits between the two hits


async def test_a_failing_lexical_leg_cancels_the_query_embedding() -> None:
    pool = Pool()
    embedding = asyncio.Event()
    cancelled = asyncio.Event()

    async def broken(query: str, limit: int) -> list[tuple[Candidate, float]]:
        await embedding.wait()
        raise RuntimeError("database gone")

    async def embed(text: str) -> Vector:
        embedding.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    retriever = Retriever(RecallSettings(), broken, pool.load, vector=pool.vector, embed_query=embed)
    with pytest.raises(RuntimeError, match="database gone"):
        await retriever.recall("Lisbon", NOW)
    await asyncio.wait_for(cancelled.wait(), 5)


async def test_a_candidate_without_a_vector_is_a_logged_coverage_gap(caplog: Any) -> None:
    pool = Pool()

    async def partial(q: Vector, limit: int, only: Collection[Key] | None) -> list[tuple[Key, float]]:
        return [hit for hit in await pool.vector(q, limit, only) if hit[0] != ("record", "m4")]  # m4 not embedded

    caplog.set_level(logging.WARNING, logger="memory.recall")
    settings = RecallSettings(recency_half_life_days=0.0, min_cosine=0.5, neighbour_weight=0.0)
    cooldown = Cooldown()
    for _ in range(2):  # a retriever per turn, as the gateway builds them: still logged once
        retriever = Retriever(
            settings, pool.lexical, pool.load, vector=partial, embed_query=pool.embed, cooldown=cooldown
        )
        result = await retriever.recall("Lisbon sunny", NOW)
        assert result.coverage_gap == 1
        assert {s.candidate.id: s.parts["vector"] for s in result.ranked} == {"m4": 0.0, "m1": 1.0}
    assert caplog.text.count("memory_recall_coverage_gap") == 1


def test_scored_keeps_every_other_field() -> None:
    c = Candidate("archive", "7", "text", "s", NOW, MemoryClass.EVIDENCE, 0.5, 0.6, "Dana")
    assert c.scored(0.1, 0.2) == replace(c, lexical=0.1, cosine=0.2)


# --- time in the question (memory/when.py) ------------------------------------------------------

# NOW is Monday 2026-06-01 12:00 UTC: "in May" is the month just over.
MAY = "what did I note in May"


def test_a_dated_question_ranks_the_memory_made_then_above_an_otherwise_equal_one() -> None:
    made_then = cand("in-may", 5, 0.6, age_days=20)  # 12 May
    made_since = cand("june", 5, 0.6, age_days=0.25)  # this morning: newer, so recency prefers it
    settings = RecallSettings()
    assert order(fuse([made_then, made_since], settings, NOW, query=MAY)) == ["june", "in-may"]
    ranked = fuse([made_then, made_since], settings, NOW, query=MAY, when=find(MAY, NOW))
    assert order(ranked) == ["in-may", "june"]
    assert [s.parts["when"] for s in ranked] == [1.0 + settings.time_boost, 1.0]


@pytest.mark.parametrize(
    ("query", "boosted"),
    [
        ("what trip do I have in July?", None),  # a time ahead dates no memory
        ("what did I mention recently", "new"),  # soft: a leaning, the soft boost
        ("what did I note this week", "new"),
        ("what is my favourite coffee", None),
    ],
)
def test_which_windows_weigh(query: str, boosted: str | None) -> None:
    new, old = cand("new", 5, 0.6, age_days=0.25), cand("old", 5, 0.6, age_days=90)
    settings = RecallSettings(recency_half_life_days=0.0, time_outside=0.0)
    ranked = fuse([old, new], settings, NOW, query=query, when=find(query, NOW))
    when = {s.candidate.id: s.parts["when"] for s in ranked}
    assert when["new"] > 1.0 if boosted else when["new"] == 1.0
    # time_outside=0 leaves out what lies outside a hard window; "old" is outside every window here.
    assert ("old" in when) is (query != "what did I note this week")


def test_what_was_made_in_a_hard_window_is_spared_the_cosine_floor() -> None:
    faint_then = cand("then", None, 0.1, age_days=20)
    faint_later = cand("later", None, 0.1, age_days=0.25)
    strong = cand("strong", None, 0.9, age_days=40)
    when = find(MAY, NOW)
    items = [faint_then, faint_later, strong]
    assert order(fuse(items, RecallSettings(), NOW, min_cosine=0.3, when=when)) == ["strong", "then"]
    strict = RecallSettings(time_spares_floor=False)
    assert order(fuse(items, strict, NOW, min_cosine=0.3, when=when)) == ["strong"]


class Dated(Pool):
    """Pool's world, each item made on a day of its own, and who may see it (the loader's rule)."""

    def __init__(self) -> None:
        super().__init__()
        self.items = {
            "lisbon": ("Lisbon was sunny", [0.9, 0.44]),
            "desk": ("Ordered a standing desk", [0.3, 0.95]),  # below the floor, no word of the question
            "plant": ("Repotted the fig", [0.35, 0.94]),
            "bobs": ("Bob's standing desk", [0.95, 0.31]),  # another person's: the loader refuses it
            "moved": ("We moved to Lisbon", [0.0, 1.0]),
            "vim": ("Editing with vim", [0.6, 0.8]),
            "helix": ("Editing with helix", [0.6, 0.8]),
        }
        self.made = {
            "lisbon": "2026-05-20",
            "desk": "2026-05-10",
            "plant": "2026-03-03",
            "bobs": "2026-05-11",
            "moved": "2026-04-15",
            "vim": "2026-04-01",
            "helix": "2026-04-20",
        }
        self.thread = []
        self.asked: list[tuple[str, str]] = []

    def candidate(self, item_id: str) -> Candidate:
        made = datetime.fromisoformat(self.made[item_id]).replace(tzinfo=UTC)
        return replace(cand(item_id, text=self.items[item_id][0]), created_at=made)

    async def lexical(self, query: str, limit: int) -> list[tuple[Candidate, float]]:
        self.asked.append(("lexical", query))
        return [h for h in await super().lexical(query, limit) if h[0].id != "bobs"]

    async def load(self, keys: Sequence[Key]) -> dict[Key, Candidate]:
        return {k: c for k, c in (await super().load(keys)).items() if k[1] != "bobs"}

    async def dated(self, start: datetime | None, end: datetime, limit: int) -> list[Key]:
        made = {i: self.candidate(i).created_at for i in self.items}
        inside = [i for i, t in made.items() if (start is None or t >= start) and t < end]
        return [("record", i) for i in sorted(inside, key=made.__getitem__, reverse=True)][:limit]

    async def embed(self, text: str) -> Vector:
        self.asked.append(("vector", text))
        return await super().embed(text)


async def test_a_dated_question_finds_what_was_made_then_through_the_callers_rules() -> None:
    pool = Dated()
    settings = RecallSettings(min_cosine=0.5, vector_pool=2, recency_half_life_days=0.0)
    retriever = Retriever(
        settings, pool.lexical, pool.load, vector=pool.vector, embed_query=pool.embed, dated=pool.dated
    )
    result = await retriever.recall(MAY, NOW)
    # The vector leg's best are "bobs", which the loader turns away, and "lisbon"; "desk" was made in
    # May too, under the floor and named by no word of the question; "plant" is March's.
    assert order(result.ranked) == ["lisbon", "desk"]
    assert result.when is not None and result.when.phrase == "in May"
    # The vector leg searches without the time's words (time_strip="vector"), the lexical leg with them.
    assert sorted(pool.asked) == [("lexical", MAY), ("vector", "what did I note")]
    plain = Retriever(settings, pool.lexical, pool.load, vector=pool.vector, embed_query=pool.embed)
    assert order((await plain.recall(MAY, NOW)).ranked) == ["lisbon"]  # no dated lookup given


async def test_an_event_is_dated_by_the_best_lexical_hit_for_its_words() -> None:
    pool = Dated()
    settings = RecallSettings(recency_half_life_days=0.0, vector_pool=7)
    retriever = Retriever(settings, pool.lexical, pool.load, vector=pool.vector, embed_query=pool.embed)
    result = await retriever.recall("what did I edit with before we moved?", NOW)
    assert ("lexical", "moved") in pool.asked  # the event's words, through the caller's own leg
    assert result.when is not None and result.when.end == datetime(2026, 4, 15, tzinfo=UTC)
    ranks = order(result.ranked)
    assert ranks.index("vim") < ranks.index("helix")  # equal but for when: vim came before the move
    nothing = await retriever.recall("what did I edit with before the wedding?", NOW)  # no memory of it
    assert nothing.when is None


def test_the_window_is_logged_without_the_questions_words() -> None:
    hint = find(MAY, NOW)
    recall = Recall([], None, "config", False, 0, 1.0, hint)
    assert describe(recall)["time_window"] == "2026-05-01T00:00+00:00/2026-06-01T00:00+00:00"
    assert describe(recall)["time_hint"] == "hard" and "May" not in str(describe(recall))


@pytest.mark.parametrize("backend", BACKENDS)
async def test_records_made_in_a_window_are_only_the_askers(backend: str, tmp_path: Path) -> None:
    storage = await Storage.open(database_url(backend, tmp_path))
    try:

        def record(text: str, scope: str, made: str) -> NewRecord:
            policy, review, cls = trust_defaults(Provenance.USER_CONFIRMED, True, Scope.parse(scope), False)
            created = datetime.fromisoformat(made).replace(tzinfo=UTC)
            return NewRecord(text, cls, Provenance.USER_CONFIRMED, policy, scope, "alice", review, created_at=created)

        ids = await storage.records.import_batch(
            [
                record("desk", "personal:alice", "2026-05-10"),
                record("lisbon", "personal:alice", "2026-05-20"),
                record("fig", "personal:alice", "2026-03-03"),
                record("bob's desk", "personal:bob", "2026-05-11"),
                record("team rule", "global", "2026-05-31 23:59"),
            ],
            now=NOW,
        )
        may = (datetime(2026, 5, 1, tzinfo=UTC), datetime(2026, 6, 1, tzinfo=UTC))
        found = await storage.db.read(created_in, ["personal:alice", "global"], False, *may, 10, NOW)
        assert found == [ids[4], ids[1], ids[0]]  # newest first; not March's, never bob's
        assert await storage.db.read(created_in, ["personal:alice"], False, None, may[0], 10, NOW) == [ids[2]]
        assert await storage.db.read(created_in, [], False, *may, 10, NOW) == []
    finally:
        await storage.close()
