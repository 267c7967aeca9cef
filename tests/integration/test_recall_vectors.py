"""The vector leg inside a running gateway, with a deterministic embedder (tests/fakes/embedder.py):
a person's vector search ranks only what they may see (another's crowd of close memories never
hides their own), neighbours of archived messages are found, a new model id re-embeds everything
in the background, and each degradation is logged once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import aiohttp
import pytest

import gateway.app
import gateway.recall.engine
from gateway.app import Gateway
from memory.embed.index import VectorIndex
from memory.records.fields import NewRecord
from memory.records.model import MemoryClass, Provenance, ReviewStatus, UsePolicy
from memory.trust.policy import Actor, Where
from tests.conftest import BOB_TOKEN
from tests.fakes.embedder import ConceptEmbedder
from tests.fakes.llm import FakeLLM, Reply
from tests.integration.test_recall import say, storage_overrides, system_of
from tests.waits import until

__all__ = ["storage_overrides"]  # the fixture: every test runs on SQLite and on PostgreSQL

PLANTS = {w: "plants" for w in ("basil", "tomatoes", "garden", "grow", "balcony", "herbs")}
Start = Callable[..., Awaitable[Gateway]]


@pytest.fixture
def start(
    gateway_factory: Any, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch, storage_overrides: dict[str, Any]
) -> Start:
    """A gateway whose embedder is the given ConceptEmbedder (the config still says `local`), on
    SQLite or PostgreSQL (each gateway of a test on the same database)."""

    async def factory(embedder: ConceptEmbedder, **overrides: Any) -> Gateway:
        monkeypatch.setattr(gateway.app, "embedder_from_config", lambda config: embedder)
        overrides.setdefault("memory__recall__min_cosine_similarity", 0.2)
        # The test model has no calibrated evidence floor: what these tests store is let in by meaning.
        overrides.setdefault("memory__recall__evidence_min_score", 0.0)
        overrides.update(storage_overrides)
        gw: Gateway = await gateway_factory(fake_llm, memory__search__provider="local", **overrides)
        return gw

    return factory


def fact(content: str, owner: str) -> NewRecord:
    return NewRecord(
        content,
        MemoryClass.DURABLE_FACT,
        Provenance.USER_CONFIRMED,
        UsePolicy(),
        f"personal:{owner}",
        owner,
        ReviewStatus.NONE,
    )


async def test_another_persons_crowd_of_close_memories_never_hides_your_own(
    start: Start, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    embedder = ConceptEmbedder(concepts=PLANTS)
    gw = await start(embedder)
    assert gw.storage is not None and gw.recall is not None
    # 300 of Alice's memories are closer to the question than Bob's one: a search over everyone's
    # vectors, filtered afterwards, would find only hers and show Bob nothing.
    crowd = [fact(f"tomatoes garden herbs grow batch {i}", "alice") for i in range(300)]
    await gw.storage.records.import_batch([*crowd, fact("basil thrives on the balcony", "bob")])
    gw.recall.wake()
    await gw.recall.caught_up(timeout=30)
    await say(http, gw, "what should I plant?", BOB_TOKEN)  # no word in common with either
    assert "tomatoes" not in system_of(fake_llm)
    await say(http, gw, "which herbs could I grow?", BOB_TOKEN)
    system = system_of(fake_llm)
    assert "basil thrives on the balcony" in system and "tomatoes" not in system
    await say(http, gw, "which herbs could I grow?")
    system = system_of(fake_llm)
    assert "tomatoes garden herbs" in system and "basil" not in system


async def test_a_narrowed_scope_moves_the_vector_out_of_sight(
    start: Start, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    gw = await start(ConceptEmbedder(concepts=PLANTS))
    assert gw.storage is not None and gw.recall is not None
    [mid] = await gw.storage.records.import_batch(
        [
            NewRecord(
                "basil thrives on the balcony",
                MemoryClass.DURABLE_FACT,
                Provenance.USER_CONFIRMED,
                UsePolicy(),
                "global",
                "root",
                ReviewStatus.NONE,
            )
        ]
    )
    gw.recall.wake()
    await gw.recall.caught_up(timeout=30)
    index = gw.recall.index
    assert index is not None
    if isinstance(index, VectorIndex):  # in memory (SQLite): the record's group says who sees it
        assert index.group_of("record", mid) == "record|global"
    await say(http, gw, "which herbs could I grow?", BOB_TOKEN)  # no word in common: the vector leg
    assert "basil thrives on the balcony" in system_of(fake_llm)
    await gw.storage.records.update(mid, actor="root", action="scope", scope="personal:alice")
    await gw.recall.caught_up(timeout=30)  # the next sweep regroups it (in the database: nothing to do)
    if isinstance(index, VectorIndex):
        assert index.group_of("record", mid) == "record|personal:alice"
    await say(http, gw, "which herbs could I grow?", BOB_TOKEN)
    assert "basil" not in system_of(fake_llm)


async def test_archived_neighbours_are_found_through_the_thread(
    start: Start, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    gw = await start(ConceptEmbedder(concepts={"club": "outing", "sunday": "outing"}))
    assert gw.storage is not None and gw.recall is not None
    fake_llm.script(Reply("Yes, last Sunday, with Marta."))
    await say(http, gw, "Did you finally go to the Blue Note club?")
    await say(http, gw, "/new")
    fake_llm.script(Reply("Noted."))
    await say(http, gw, "I'm reading a book about gardens")
    await say(http, gw, "/new")
    hits = await gw.storage.archive.search("Blue Note club", user_id="alice")
    assert hits
    key = hits[0].session_key
    archived = await gw.storage.archive.search("Blue Note Sunday Marta gardens book", user_id="alice", limit=20)
    ids = {h.content: h.id for h in archived}
    question = ids["Did you finally go to the Blue Note club?"]
    answer = ids["Yes, last Sunday, with Marta."]
    from gateway.recall.legs import Legs

    legs = Legs(gw.recall, Actor("alice", frozenset({"user"})), Where("personal", key), {})
    near = await legs.neighbours([("archive", str(question))], 1)
    q, a = ("archive", str(question)), ("archive", str(answer))
    assert near == {q: [a], a: [q]}  # both ways, and nothing of the next session
    gw.recall.wake()
    await gw.recall.caught_up(timeout=30)
    sections = await gw.recall.sections(Actor("alice", frozenset({"user"})), Where("personal", key), "Blue Note club")
    notes = "\n".join(s.text for s in sections)
    assert "Yes, last Sunday, with Marta." in notes  # no word of the query: the reply in its thread
    assert "gardens" not in notes


async def test_a_new_model_id_re_embeds_everything_in_the_background(
    start: Start, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    first = await start(ConceptEmbedder("test/model-a", concepts=PLANTS))
    assert first.storage is not None and first.recall is not None
    await first.storage.records.import_batch([fact(f"grow basil number {i}", "alice") for i in range(5)])
    first.recall.wake()
    await first.recall.caught_up(timeout=30)
    await first.stop()
    newer = ConceptEmbedder("test/model-b", concepts=PLANTS)
    second = await start(newer)
    assert second.storage is not None and second.recall is not None
    await second.recall.caught_up(timeout=30)
    assert newer.documents == 5
    coverage = await second.recall.vectors.coverage("test/model-b")
    assert coverage["record"] == (5, 5)
    assert (await second.recall.vectors.models())["test/model-a"] == 5  # old vectors stay until pruned
    await say(http, second, "which herbs?")
    assert "grow basil number" in system_of(fake_llm)


async def test_each_degradation_is_logged_once(
    start: Start, fake_llm: FakeLLM, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    slow = ConceptEmbedder(query_delay=0.3)  # past the 50 ms budget: lexical only for the turn
    gw = await start(slow, memory__recall__query_embedding_budget_ms=50)
    assert gw.recall is not None
    await say(http, gw, "/remember my bike is a blue Gazelle")
    await gw.recall.caught_up(timeout=30)
    await gw.recall.stop()  # the upkeep stops: what is written next has no vector
    await say(http, gw, "/remember my car is a red Fiat")
    for _ in range(3):
        await say(http, gw, "what colour is my bike?")
        assert "blue Gazelle" in system_of(fake_llm)  # the lexical leg still answers
    slow.query_delay = 0
    for _ in range(2):
        await say(http, gw, "what colour is my car?")
        assert "red Fiat" in system_of(fake_llm)  # no vector yet: scored on its words alone
    text = caplog.text
    assert text.count("memory_recall_vector_degraded") == 1
    assert text.count("memory_recall_coverage_gap") == 1


async def test_a_model_without_a_calibrated_floor_is_searched_by_keywords_only(
    start: Start, fake_llm: FakeLLM, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    """With no cosine floor, every vector neighbour would pass, however unrelated (5 of 5 candidates
    were injected): recall degrades to keywords and says so, once, until a floor is configured."""
    caplog.set_level(logging.INFO)
    gw = await start(ConceptEmbedder(concepts=PLANTS), memory__recall__min_cosine_similarity=None)
    assert gw.storage is not None and gw.recall is not None
    await gw.storage.records.import_batch([fact(f"tomatoes garden herbs grow batch {i}", "alice") for i in range(5)])
    await say(http, gw, "/remember my bike is a blue Gazelle")
    gw.recall.wake()
    await gw.recall.caught_up(timeout=30)
    for _ in range(3):
        await say(http, gw, "anything nice for my balcony?")  # close in meaning, no word in common
        assert "tomatoes" not in system_of(fake_llm)
    await say(http, gw, "what colour is my bike?")
    assert "blue Gazelle" in system_of(fake_llm)
    assert caplog.text.count("memory_recall_vector_degraded") == 1
    assert "memory_recall_vector_degraded reason=missing_calibration model=test/concepts" in caplog.text
    assert "memory_recall_coverage_gap" not in caplog.text


async def test_evidence_needs_a_strong_match_where_confirmed_memory_does_not(
    start: Start, fake_llm: FakeLLM, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    """A fused score of 0.24 passes the cosine floor but is a weak match: evidence stays out under the
    evidence floor (configured here; calibrated per model otherwise), a person's memory goes in."""
    caplog.set_level(logging.INFO)
    gw = await start(ConceptEmbedder(concepts=PLANTS), memory__recall__evidence_min_score=0.3)
    assert gw.storage is not None and gw.recall is not None
    weak = NewRecord(
        "basil lorem ipsum dolor",  # one word of the topic in four: a cosine of 0.38 to the question
        MemoryClass.EVIDENCE,
        Provenance.INFERRED,
        UsePolicy(),
        "personal:alice",
        "agent:default",
        ReviewStatus.PENDING,
    )
    confirmed = fact("tomatoes lorem ipsum dolor", "alice")
    confirmed = replace(confirmed, use_policy=UsePolicy(True, True, False))
    strong = replace(weak, content="herbs grow well in sun")
    weak_id, confirmed_id, strong_id = await gw.storage.records.import_batch([weak, confirmed, strong])
    gw.recall.wake()
    await gw.recall.caught_up(timeout=30)
    await say(http, gw, "which herbs could I grow?")
    system = system_of(fake_llm)
    assert "herbs grow well" in system and "tomatoes lorem" in system and "basil lorem" not in system
    assert gw.traces is not None
    await gw.traces.settle()
    (view,) = await gw.traces.store.recent(user_id="alice", limit=1)
    items = {i.id: i for i in view.trace.items}
    assert items[weak_id].reason == "weak_evidence_match" and 0.2 < items[weak_id].score < 0.3
    assert items[confirmed_id].used and items[strong_id].used
    assert "evidence_floor=0.3 evidence_floor_source=config" in caplog.text


async def test_the_upkeep_looks_only_at_the_kinds_of_item_written(
    start: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn archives messages: the upkeep then scans the archive for items without a vector, not
    every record and daily note as well (those scans grew the cost of every turn). A writer that
    does not say what it wrote has every kind looked at."""
    monkeypatch.setattr(gateway.recall.engine, "UPKEEP_DEBOUNCE_SECONDS", 0.0)
    gw = await start(ConceptEmbedder(concepts=PLANTS))
    assert gw.recall is not None
    await gw.recall.caught_up(timeout=30)
    scanned: list[str] = []
    missing = gw.recall.vectors.missing

    async def counted(kind: Any, *args: Any, **kwargs: Any) -> Any:
        scanned.append(kind)
        return await missing(kind, *args, **kwargs)

    monkeypatch.setattr(gw.recall.vectors, "missing", counted)
    gw.recall.wake("archive")
    await until(lambda: bool(scanned))
    await asyncio.sleep(0.1)  # a second sweep, had the first asked for one
    assert set(scanned) == {"archive"}
    scanned.clear()
    gw.recall.wake()
    await until(lambda: {"record", "archive", "daily"} <= set(scanned))
