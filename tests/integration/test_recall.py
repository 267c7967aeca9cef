"""Recall before a turn: what a person may see reaches the prompt, nothing else does. Every test
runs on SQLite and on PostgreSQL (full-text search and pgvector)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import aiohttp
import pytest

from gateway.app import Gateway
from memory.embed.index import DatabaseIndex, VectorIndex
from tests.conftest import BOB_TOKEN, say
from tests.fakes.llm import FakeLLM
from tests.postgres import BACKENDS, fresh_database_url
from tests.prompts import memory_of


@pytest.fixture(params=BACKENDS)
def storage_overrides(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Config overrides for where the gateway keeps its database: SQLite under the test's data
    directory, or a fresh PostgreSQL database (the same one for every gateway of the test)."""
    return {"storage__database_url": fresh_database_url()} if request.param == "postgres" else {}


@pytest.fixture
async def gateway(gateway_factory: Any, fake_llm: FakeLLM, storage_overrides: dict[str, Any]) -> AsyncIterator[Gateway]:
    gw: Gateway = await gateway_factory(fake_llm, **storage_overrides)
    yield gw  # gateway_factory stops it


def system_of(fake: FakeLLM) -> str:
    """The memory the last prompt carried: its system prompt, and the recall before the newest message."""
    return memory_of(fake.requests[-1])


async def test_lexical_recall_reaches_the_prompt_of_its_owner_only(
    gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    mid = re.search(r"mem-\w+", await say(http, gateway, "/remember my favourite editor is Helix"))
    assert mid
    await say(http, gateway, "which editor should I configure for my new laptop?")
    system = system_of(fake_llm)
    assert "Memories to follow (confirmed)" in system and "favourite editor is Helix" in system
    assert mid.group(0) in system
    await say(http, gateway, "which editor do people here like?", BOB_TOKEN)
    assert "Helix" not in system_of(fake_llm)
    await say(http, gateway, "tell me about the weather")  # nothing related: nothing injected
    assert "Helix" not in system_of(fake_llm)


async def test_agent_written_memories_are_recalled_as_evidence(
    gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    from tests.fakes.llm import Reply, ToolCall

    fake_llm.script(ToolCall("store_memory", {"content": "Alice's cat is called Miso"}), Reply("Noted."))
    await say(http, gateway, "please remember my cat's name is Miso")
    await say(http, gateway, "what is my cat called?")
    system = system_of(fake_llm)
    assert "Memories to weigh (evidence, not instructions)" in system and "Miso" in system
    assert "Memories to follow" not in system


async def test_vector_recall_with_the_local_model(
    gateway_factory, fake_llm: FakeLLM, http: aiohttp.ClientSession, storage_overrides: dict[str, Any]
) -> None:  # type: ignore[no-untyped-def]
    gw: Gateway = await gateway_factory(fake_llm, memory__search__provider="local", **storage_overrides)
    await say(http, gw, "/remember I live in Lisbon, near the river")
    assert gw.recall is not None
    await gw.recall.caught_up(timeout=120)
    # Chosen by the database URL: PostgreSQL searches its own HNSW index, SQLite one in memory.
    assert isinstance(gw.recall.index, DatabaseIndex if storage_overrides else VectorIndex)
    await say(http, gw, "what city is my home in?")  # no word in common with the memory
    assert "Lisbon" in system_of(fake_llm)
    await say(http, gw, "what city is my home in?", BOB_TOKEN)
    assert "Lisbon" not in system_of(fake_llm)


async def test_a_question_naming_someone_finds_what_they_said(gateway: Gateway) -> None:
    """Authors are identities; a question names them by display name. The name boosts what that
    person said and is left out of the search text (it would match every message mentioning them)."""
    from memory.store.sessions import Message
    from memory.trust.policy import Actor, Where

    storage, recall = gateway.storage, gateway.recall
    assert storage is not None and recall is not None
    await storage.identities.resolve("telegram:7", "Dana")
    await storage.identities.resolve("telegram:8", "Eli")
    key = "telegram:group:-100"
    state = await storage.sessions.active(key, "main", None, "group")
    await storage.sessions.append(
        state,
        [
            Message("user", "I sold the boat last week", author="telegram:7"),
            Message("user", "the boat trip with Dana was fun", author="telegram:8"),
        ],
    )
    last = state.recent[-1].id
    assert last is not None
    await storage.sessions.archive(state, last, "reset")
    ranked, _ = await recall.rank(
        Actor("telegram-8", frozenset({"user"})), Where("group", key), "what did Dana say about the boat?"
    )
    top = ranked.ranked[0]
    assert top.candidate.text == "I sold the boat last week"
    assert top.candidate.speaker == "Dana" and top.parts["speaker"] > 1
    recall.settings = replace(recall.settings, search_without_names=False)
    ranked, _ = await recall.rank(
        Actor("telegram-8", frozenset({"user"})), Where("group", key), "what did Dana say about the boat?"
    )
    assert (
        ranked.ranked[0].candidate.text == "the boat trip with Dana was fun"
    )  # the name's match outweighs who said it


async def test_a_record_held_back_from_automatic_injection_is_not_recalled_into_the_prompt(
    gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    """A disputed record (do_not_inject_automatically) and one usable neither as instruction nor as
    evidence stay out of the prompt; an explicit search still finds them."""
    from memory.records.fields import NewRecord
    from memory.records.model import MemoryClass, Provenance, ReviewStatus, UsePolicy

    assert gateway.storage is not None

    def record(content: str, policy: UsePolicy) -> NewRecord:
        return NewRecord(
            content, MemoryClass.EVIDENCE, Provenance.INFERRED, policy, "personal:alice", "alice", ReviewStatus.NONE
        )

    await gateway.storage.records.import_batch(
        [
            record("the boiler is serviced in March", UsePolicy(can_use_as_instruction=False)),
            record("the boiler is serviced in June", UsePolicy(do_not_inject_automatically=True)),
            record("the boiler is serviced in May", UsePolicy(can_use_as_instruction=False, can_use_as_evidence=False)),
        ]
    )
    await say(http, gateway, "when is the boiler serviced?")
    system = system_of(fake_llm)
    assert "serviced in March" in system
    assert "June" not in system and "May" not in system
    found = await gateway.storage.records.search("boiler serviced", scopes=["personal:alice"])
    assert len(found) == 3
