"""Memory on the OpenAI-compatible API (the official openai SDK as the client): the token's person
gets the recall, memory tools, recall traces and formation a chat or REST turn gets, and never
anyone else's memory."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import openai

from gateway.app import Gateway
from gateway.jobs.formation import KIND
from memory.formation.admission import INSTRUCTIONS as FORMATION_INSTRUCTIONS
from memory.records.model import ReviewStatus
from memory.store.traces import FORMED, TraceView
from tests.conftest import ALICE_TOKEN, BOB_TOKEN, say
from tests.fakes.llm import Behavior, FakeLLM, Reply, echo
from tests.memories import memory_id
from tests.prompts import memory_of, recall_of

MEMORY_TOOLS = {"find_memories", "get_memories", "store_memory", "update_memory", "search_archive"}
WORDS = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "  # 20 tokens


def client(gw: Gateway, token: str = ALICE_TOKEN) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key=token, max_retries=0, timeout=20)


async def ask(gw: Gateway, fake: FakeLLM, text: str, *, token: str = ALICE_TOKEN, **extra: Any) -> tuple[str, dict]:
    """One completion; its id and the turn's request as the model received it."""
    before = len(fake.requests)
    resp = await client(gw, token).chat.completions.create(
        model="default", messages=[{"role": "user", "content": text}], **extra
    )
    (request,) = [r for r in fake.requests[before:] if "tools" in r]  # background asks offer no tools
    return resp.id, request


def tools_of(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools", ())}


async def traces(gw: Gateway, **who: str) -> list[TraceView]:
    assert gw.traces is not None
    await gw.traces.settle()
    return await gw.traces.store.recent(limit=10, **who)


async def test_a_kept_session_gets_the_persons_recall_tools_and_trace(
    gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    root = gateway.config.storage.data_dir / "memory"
    (root / "users" / "bob").mkdir(parents=True)
    (root / "users" / "bob" / "Memory.md").write_text("Bob's core: the vault code is 4417.")
    helix = memory_id(await say(http, gateway, "/remember my favourite editor is Helix"))
    emacs = memory_id(await say(http, gateway, "/remember my favourite editor is Emacs", BOB_TOKEN))

    cid, request = await ask(gateway, fake_llm, "which editor should I configure?", user="s1")
    recall = recall_of(request)
    assert "favourite editor is Helix" in recall and helix in recall  # before the newest message
    prompt = json.dumps(request["messages"], ensure_ascii=False)
    assert "Emacs" not in prompt and emacs not in prompt and "4417" not in prompt  # never bob's
    assert MEMORY_TOOLS <= tools_of(request)
    (view,) = await traces(gateway, session_key="api:dm:alice:s1")
    assert view.trace.user_id == "alice" and view.trace.event_id == cid
    assert view.trace.query == "which editor should I configure?"
    assert [i.id for i in view.trace.items if i.used] == [helix]

    # Bob, even naming the same `user`, is in a session of his own with his own memory only.
    _, theirs = await ask(gateway, fake_llm, "which editor should I configure?", token=BOB_TOKEN, user="s1")
    assert "Emacs" in recall_of(theirs) and "4417" in memory_of(theirs)
    assert "Helix" not in json.dumps(theirs["messages"]) and helix not in json.dumps(theirs["messages"])
    assert "which editor should I configure?" not in json.dumps(theirs["messages"][:-1])  # not alice's session
    (view,) = await traces(gateway, session_key="api:dm:bob:s1")
    assert view.trace.user_id == "bob" and [i.id for i in view.trace.items if i.used] == [emacs]
    # A request naming alice's session for bob still reaches bob's own.
    _, theirs = await ask(gateway, fake_llm, "what was my last question?", token=BOB_TOKEN, user="alice:s1")
    assert "Helix" not in json.dumps(theirs["messages"])


async def test_without_user_the_request_is_the_persons_own_and_keeps_nothing(
    gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    root = gateway.config.storage.data_dir / "memory"
    (root / "users" / "alice").mkdir(parents=True)
    (root / "users" / "alice" / "Memory.md").write_text("Alice prefers short answers.")
    helix = memory_id(await say(http, gateway, "/remember my favourite editor is Helix"))
    await say(http, gateway, "/remember my favourite editor is Emacs", BOB_TOKEN)
    assert gateway.storage is not None
    sessions_before = await gateway.storage.db.read(lambda c: c.exec_driver_sql("SELECT count(*) FROM sessions").one())

    _, request = await ask(gateway, fake_llm, "which editor should I configure?")
    assert "Alice prefers short answers" in str(request["messages"][0]["content"])
    assert helix in recall_of(request) and "Emacs" not in json.dumps(request["messages"])
    assert MEMORY_TOOLS <= tools_of(request)
    sessions_after = await gateway.storage.db.read(lambda c: c.exec_driver_sql("SELECT count(*) FROM sessions").one())
    assert sessions_after == sessions_before  # nothing kept
    (view,) = await traces(gateway, user_id="alice")
    assert view.trace.session_key.startswith("api:ephemeral:") and [i.id for i in view.trace.items if i.used] == [helix]


def model(req: dict[str, Any]) -> Behavior:
    """Summaries and formation answered (one preference, from the first line); turns echoed."""
    system = str(req["messages"][0]["content"])
    if system.startswith("You maintain the running summary"):
        return Reply("SUMMARY: they talked about tea.")
    if system == FORMATION_INSTRUCTIONS:
        candidates = [{"type": "preference", "text": "Prefers green tea over coffee.", "sources": [1]}]
        return Reply(json.dumps({"candidates": candidates}))
    return echo(req)


async def test_a_kept_session_forms_memory_as_a_chat_does(
    gateway_factory: Any, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    fake_llm.default = model
    gw: Gateway = await gateway_factory(fake_llm, memory__session_memory__max_tokens=200)
    assert gw.session_memory is not None and gw.jobs is not None and gw.storage is not None
    await say(http, gw, "/remember I take my green tea without sugar")  # every turn recalls it: traced
    ids = []
    for i in range(6):
        cid, _ = await ask(gw, fake_llm, f"{i} I prefer green tea over coffee. {WORDS}", user="s1")
        ids.append(cid)
        await gw.session_memory.idle()
        await gw.jobs.idle()
        if await gw.storage.jobs.list(kind=KIND):
            break
    (job,) = await gw.storage.jobs.list(kind=KIND)
    assert job.key == "api:dm:alice:s1" and job.payload["why"] == "summarized"
    formed = [r for r in await gw.storage.records.list(status=None, limit=50) if r.author == "system:formation"]
    (record,) = formed
    assert str(record.scope) == "personal:alice" and record.review_status == ReviewStatus.PENDING
    # The turn whose message formed it learns so in its trace, found by the completion's id.
    views = {v.trace.event_id: v for v in await traces(gw, session_key="api:dm:alice:s1")}
    assert (record.id, FORMED) in {(w.id, w.action) for w in views[ids[0]].trace.written}
