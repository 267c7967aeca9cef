"""Short-term session memory end to end (DESIGN §4): summaries under a token budget with the model
chain, trimming without a summary, the archive, auto-flush into daily files, /new and /status."""

from __future__ import annotations

import json
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest

from gateway.app import Gateway
from gateway.session.budget import FLUSH_INSTRUCTIONS
from memory.formation.admission import INSTRUCTIONS as FORMATION_INSTRUCTIONS
from memory.store.db import Database
from memory.store.sessions import Message, SessionState
from memory.store.storage import Storage
from tests.conftest import auth
from tests.fakes.llm import Behavior, Fail, FakeLLM, Reply, ToolCall, echo
from tests.postgres import fresh_database_url

SUMMARY = "SUMMARY: the person talked about lorem ipsum."
WORDS = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "  # 80 chars, 20 tokens


def is_summary(req: dict[str, Any]) -> bool:
    return str(req["messages"][0]["content"]).startswith("You maintain the running summary")


def is_flush(req: dict[str, Any]) -> bool:
    return req["messages"][0]["content"] == FLUSH_INSTRUCTIONS


@dataclass
class Background:
    """Scripted answers to the gateway's background requests; turns are echoed."""

    summaries: deque[Behavior] = field(default_factory=deque)
    flushes: deque[Behavior] = field(default_factory=deque)
    # A flush whose transcript contains the key is answered with these notes (order-proof).
    notes: dict[str, str] = field(default_factory=dict)

    def __call__(self, req: dict[str, Any]) -> Behavior:
        if is_summary(req):
            return self.summaries.popleft() if self.summaries else Reply(SUMMARY)
        if is_flush(req):
            transcript = req["messages"][1]["content"]
            for key, notes in self.notes.items():
                if key in transcript:
                    return Reply(notes)
            return self.flushes.popleft() if self.flushes else Reply("NONE")
        return echo(req)


async def say(http: aiohttp.ClientSession, gw: Gateway, text: str, conversation: str = "c1") -> dict[str, Any]:
    r = await http.post(gw.url + "/api/v1/messages", json={"text": text, "conversation": conversation}, headers=auth())
    assert r.status == 200, await r.text()
    return dict(await r.json())


async def session(gw: Gateway, key: str) -> SessionState:
    assert gw.storage is not None
    return await gw.storage.sessions.active(key, "default", "alice")


def turns(fake: FakeLLM) -> list[dict[str, Any]]:
    return [r for r in fake.requests if not is_summary(r) and not is_flush(r) and not is_formation(r)]


def is_formation(req: dict[str, Any]) -> bool:
    return req["messages"][0]["content"] == FORMATION_INSTRUCTIONS


def summaries(fake: FakeLLM) -> list[dict[str, Any]]:
    return [r for r in fake.requests if is_summary(r)]


@pytest.fixture
def background() -> Background:
    return Background()


@pytest.fixture
async def small(gateway_factory, fake_llm: FakeLLM, background: Background) -> Gateway:  # type: ignore[no-untyped-def]
    """A gateway whose sessions hold 200 tokens (about three exchanges of the messages below)."""
    fake_llm.default = background
    gw: Gateway = await gateway_factory(fake_llm, memory__session_memory__max_tokens=200)
    return gw


async def test_past_the_limit_a_session_is_summarized_and_trimmed_to_60_percent(
    small: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    key = ""
    for i in range(3):
        key = (await say(http, small, f"{i} {WORDS}"))["session"]  # each exchange is about 45 tokens
    state = await session(small, key)
    assert state.token_count <= 200 and not summaries(fake_llm)  # not past the limit yet
    assert small.session_memory is not None
    for i in range(3, 6):
        await say(http, small, f"{i} {WORDS}")
        await small.session_memory.idle()
        if state.summaries:
            break
    assert state.summary == SUMMARY and state.summaries == 1
    assert state.token_count <= 120  # 60 % of 200
    assert state.recent[0].role == "user"
    # What left the context is in the archive, whole.
    assert small.storage is not None
    archived = await small.storage.archive.for_session(state.id)
    assert archived and archived[0].content.startswith("0 lorem")
    # The summarizer saw the messages it folds in.
    assert "0 lorem ipsum" in summaries(fake_llm)[0]["messages"][1]["content"]

    # The next requests carry the summary right after the instructions, and keep their prefix.
    await say(http, small, "what did we talk about?")
    await say(http, small, "and then?")
    first, second = turns(fake_llm)[-2:]
    assert first["messages"][1] == {
        "role": "system",
        "content": "Summary of the earlier part of this conversation (older messages were archived):\n" + SUMMARY,
    }
    assert second["messages"][: len(first["messages"])] == first["messages"]


async def test_summary_failures_walk_the_chain(
    gateway_factory, fake_llm: FakeLLM, background: Background, http: aiohttp.ClientSession
) -> None:  # type: ignore[no-untyped-def]
    fake_llm.default = background
    gw: Gateway = await gateway_factory(
        fake_llm, memory__session_memory__max_tokens=100, ai__fallback=["openai/backup-model"], ai__retries=2
    )
    background.summaries.extend([Fail(429), Fail(503), Fail(503), Reply("from the backup model")])
    for i in range(3):
        key = (await say(http, gw, f"{i} {WORDS}"))["session"]
    assert gw.session_memory is not None
    await gw.session_memory.idle()
    assert [r["model"] for r in summaries(fake_llm)] == ["fake-model"] * 3 + ["backup-model"]
    assert (await session(gw, key)).summary == "from the backup model"


async def test_when_every_model_fails_nothing_is_trimmed_until_twice_the_limit(
    small: Gateway,
    fake_llm: FakeLLM,
    background: Background,
    http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    background.summaries.extend([Fail(500)] * 100)
    assert small.session_memory is not None and small.storage is not None
    caplog.set_level(logging.INFO, "clawgate")
    key = ""
    for i in range(5):  # about 225 tokens: past 200, not past 400
        key = (await say(http, small, f"{i} {WORDS}"))["session"]
        await small.session_memory.idle()
    state = await session(small, key)
    assert state.token_count > 200 and state.summary is None
    assert await small.storage.archive.count(state.id) == 0
    assert "session_summary_failed" in caplog.text
    tries = len(summaries(fake_llm))
    assert tries >= 2  # every turn past the limit tries again
    for i in range(5, 12):  # until past 400
        await say(http, small, f"{i} {WORDS}")
        await small.session_memory.idle()
        if "session_trimmed_without_summary" in caplog.text:
            break
    assert "session_trimmed_without_summary" in caplog.text and "reason=twice_limit" in caplog.text
    assert state.summary is None and state.token_count <= 120
    assert await small.storage.archive.count(state.id) > 0


async def test_with_no_model_at_all_the_session_is_trimmed_without_a_summary(
    gateway_factory, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    gw: Gateway = await gateway_factory(None, ai__model=None, memory__session_memory__max_tokens=300)
    caplog.set_level(logging.INFO, "clawgate")
    for i in range(5):  # each answer is the long "no model configured" notice
        key = (await say(http, gw, f"{i} {WORDS}"))["session"]
    assert gw.session_memory is not None and gw.storage is not None
    await gw.session_memory.idle()
    assert "reason=no_model" in caplog.text
    state = await session(gw, key)
    assert state.token_count <= 180 and await gw.storage.archive.count(state.id) > 0


async def test_message_mode_counts_messages(
    gateway_factory, fake_llm: FakeLLM, background: Background, http: aiohttp.ClientSession
) -> None:  # type: ignore[no-untyped-def]
    fake_llm.default = background
    gw: Gateway = await gateway_factory(
        fake_llm, memory__session_memory__max_tokens=0, memory__session_memory__messages=6
    )
    for i in range(4):  # 8 messages: past 6
        key = (await say(http, gw, f"short {i}"))["session"]
    assert gw.session_memory is not None
    await gw.session_memory.idle()
    state = await session(gw, key)
    assert state.summaries == 1 and state.message_count <= 3  # 60 % of 6


async def test_a_request_past_auto_flush_writes_the_daily_file_and_drops_what_it_flushed(
    gateway_factory, fake_llm: FakeLLM, background: Background, http: aiohttp.ClientSession
) -> None:  # type: ignore[no-untyped-def]
    fake_llm.default = background
    gw: Gateway = await gateway_factory(fake_llm, memory__auto_flush_tokens=400)
    assert gw.session_memory is not None and gw.storage is not None
    await say(http, gw, "my project is called Zephyr")
    await say(http, gw, "and I like tea")
    background.notes["Zephyr"] = "- The person's project is called Zephyr.\n- They like tea."
    background.notes["Miso"] = "- They like tea.\n- They have a cat named Miso."
    big = "please review this text: " + WORDS * 18  # about 370 tokens: the request passes 400
    key = (await say(http, gw, big))["session"]
    request = turns(fake_llm)[-1]
    assert [m["role"] for m in request["messages"]] == ["system", "user"]  # the older messages were dropped
    await gw.session_memory.idle()
    day = gw.session_memory.today().isoformat()
    path = gw.config.storage.data_dir / "memory" / "users" / "alice" / f"{day}.md"
    text = path.read_text()
    assert text.startswith(f"# {day}\n")
    assert "- The person's project is called Zephyr." in text and "- They like tea." in text
    assert "Zephyr" in next(r for r in fake_llm.requests if is_flush(r))["messages"][1]["content"]
    assert gw.daily_index is not None  # the new notes are searchable at once, by their owner only
    assert [h.day for h in await gw.daily_index.search("zephyr project", scopes=["personal:alice"])] == [day]
    assert await gw.daily_index.search("zephyr project", scopes=["personal:bob"]) == []
    state = await session(gw, key)
    assert state.last_flush_at is not None
    assert [h.content for h in await gw.storage.archive.search("zephyr", user_id="alice")]

    # A second flush the same day adds only what is new.
    await say(http, gw, "I also have a cat named Miso")
    await gw.session_memory.idle()
    await say(http, gw, "another review: " + WORDS * 19)  # past 400 with the Miso exchange
    await gw.session_memory.idle()
    text = path.read_text()
    assert text.count("They like tea") == 1 and text.count("cat named Miso") == 1
    assert text.count("\n## ") == 2


async def test_secrets_never_reach_the_daily_file(
    gateway_factory, fake_llm: FakeLLM, background: Background, http: aiohttp.ClientSession
) -> None:  # type: ignore[no-untyped-def]
    fake_llm.default = background
    gw: Gateway = await gateway_factory(fake_llm, memory__auto_flush_tokens=400)
    assert gw.session_memory is not None
    secret = "sk-proj-" + "A1b2C3d4" * 6
    await say(http, gw, f"my key is {secret}")
    background.flushes.append(Reply(f"- Their OpenAI key is {secret}"))
    await say(http, gw, "review: " + WORDS * 19)  # past 400 with the (redacted, shorter) first exchange
    await gw.session_memory.idle()
    flush_request = next(r for r in fake_llm.requests if is_flush(r))
    assert secret not in json.dumps(flush_request)  # not even shown to the model
    day = gw.session_memory.today().isoformat()
    text = (gw.config.storage.data_dir / "memory" / "users" / "alice" / f"{day}.md").read_text()
    assert secret not in text and "[redacted]" in text


async def test_new_archives_and_flushes_the_cleared_transcript(
    gateway_factory, fake_llm: FakeLLM, background: Background, http: aiohttp.ClientSession
) -> None:  # type: ignore[no-untyped-def]
    fake_llm.default = background
    gw: Gateway = await gateway_factory(fake_llm)
    assert gw.session_memory is not None and gw.storage is not None
    await say(http, gw, "remember that the launch is on Friday")
    background.flushes.append(Reply("- The launch is on Friday."))
    reply = (await say(http, gw, "/new"))["reply"]
    assert "archived" in reply
    await gw.session_memory.idle()
    day = gw.session_memory.today().isoformat()
    assert (
        "launch is on Friday" in (gw.config.storage.data_dir / "memory" / "users" / "alice" / f"{day}.md").read_text()
    )
    assert await gw.storage.archive.search("launch friday", user_id="alice")
    found = (await say(http, gw, "/archive launch"))["reply"]
    assert "launch is on Friday" in found


async def test_with_session_memory_disabled_a_cleared_transcript_stays_out_of_memory(
    gateway_factory, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:  # type: ignore[no-untyped-def]
    gw: Gateway = await gateway_factory(fake_llm, memory__session_memory__enabled=False)
    assert gw.session_memory is not None and gw.storage is not None
    await say(http, gw, "my secret plan is to learn the accordion")
    assert "kept out of memory" in (await say(http, gw, "/reset"))["reply"]
    await gw.session_memory.idle()
    assert not any(is_flush(r) for r in fake_llm.requests)
    assert await gw.storage.archive.search("accordion") == []
    assert not (gw.config.storage.data_dir / "memory" / "users").exists()


async def test_status_shows_the_budget_summaries_and_last_flush(small: Gateway, http: aiohttp.ClientSession) -> None:
    for i in range(6):
        await say(http, small, f"{i} {WORDS}")
    assert small.session_memory is not None
    await small.session_memory.idle()
    status = (await say(http, small, "/status"))["reply"]
    assert "of 200 tokens" in status
    assert "Summaries made: 1" in status
    assert "Last flush to the daily notes: never" in status


async def test_the_model_can_search_the_archive(small: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession) -> None:
    await say(http, small, "the wifi password hint is 'blue kettle' " + WORDS)
    for i in range(5):
        await say(http, small, f"{i} {WORDS}")
    assert small.session_memory is not None and small.jobs is not None
    await small.session_memory.idle()
    await small.jobs.idle()  # memory formation asks the model too: let it finish before scripting
    fake_llm.script(ToolCall("search_archive", {"query": "kettle"}), Reply("It was blue kettle."))
    assert (await say(http, small, "what was the hint?"))["reply"] == "It was blue kettle."
    tool_result = turns(fake_llm)[-1]["messages"][-1]
    assert tool_result["role"] == "tool" and "blue kettle" in tool_result["content"]
    assert "search_archive" in [t["function"]["name"] for t in turns(fake_llm)[-2]["tools"]]


async def test_a_restarted_gateway_keeps_the_summary(
    gateway_factory, fake_llm: FakeLLM, background: Background, http: aiohttp.ClientSession
) -> None:  # type: ignore[no-untyped-def]
    fake_llm.default = background
    gw: Gateway = await gateway_factory(fake_llm, memory__session_memory__max_tokens=200)
    for i in range(6):
        await say(http, gw, f"{i} {WORDS}")
    assert gw.session_memory is not None
    await gw.session_memory.idle()
    await gw.stop()
    again: Gateway = await gateway_factory(fake_llm, memory__session_memory__max_tokens=200)
    await say(http, again, "hello again")
    assert turns(fake_llm)[-1]["messages"][1]["content"].endswith(SUMMARY)


async def test_a_failing_flush_is_retried_and_finally_given_up(
    gateway_factory,
    fake_llm: FakeLLM,
    background: Background,
    http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:  # type: ignore[no-untyped-def]
    fake_llm.default = background
    gw: Gateway = await gateway_factory(fake_llm, ai__retries=0)
    assert gw.session_memory is not None and gw.storage is not None
    caplog.set_level(logging.INFO, "clawgate")
    gw.session_memory.flush_retry_seconds = 0.05
    background.flushes.extend([Fail(503), Reply("- The launch moved to Monday.")])
    await say(http, gw, "the launch moved to Monday")
    await say(http, gw, "/new")
    await gw.session_memory.idle()  # the first attempt failed, the retry wrote the note
    assert "session_flush_failed" in caplog.text and "final=False" in caplog.text
    day = gw.session_memory.today().isoformat()
    assert "Monday" in (gw.config.storage.data_dir / "memory" / "users" / "alice" / f"{day}.md").read_text()

    background.flushes.extend([Fail(500)] * 10)
    await say(http, gw, "something else entirely")
    await say(http, gw, "/new")
    await gw.session_memory.idle()
    assert "final=True" in caplog.text
    assert await gw.storage.flushes.counts() == {"done": 1, "failed": 1}
    assert await gw.storage.archive.search("entirely", user_id="alice")  # nothing lost: still archived


async def test_two_instances_past_the_budget_together_summarize_the_session_once(
    gateway_factory, fake_llm: FakeLLM, background: Background
) -> None:  # type: ignore[no-untyped-def]
    # Several instances answering one conversation in turn both see it pass its budget.
    fake_llm.default = background
    url = fresh_database_url()
    budget = {"memory__session_memory__max_tokens": 0, "memory__session_memory__messages": 6}
    a: Gateway = await gateway_factory(fake_llm, storage__database_url=url, **budget)
    b: Gateway = await gateway_factory(fake_llm, storage__database_url=url, **budget)
    assert a.storage is not None and b.storage is not None
    assert a.session_memory is not None and b.session_memory is not None
    key = "web:dm:alice:c9"
    on_a = await a.storage.sessions.active(key, "default", "alice")
    await a.storage.sessions.append(on_a, [Message("user" if i % 2 == 0 else "assistant", f"m{i}") for i in range(8)])
    on_b = await b.storage.sessions.active(key, "default", "alice")
    agent = a.config.agent(None)
    assert agent is not None
    a.session_memory.after_turn(agent, on_a)
    b.session_memory.after_turn(agent, on_b)
    await a.session_memory.idle()
    await b.session_memory.idle()
    assert len([r for r in fake_llm.requests if is_summary(r)]) == 1  # not one per instance
    third = Storage(Database(url))  # nothing cached
    try:
        fresh = await third.sessions.active(key, "default", "alice")
    finally:
        await third.close()
    assert fresh.summaries == 1 and fresh.summary == SUMMARY and fresh.message_count <= 3
