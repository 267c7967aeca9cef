"""Secrets at rest, end to end (DESIGN §11): a key pasted in chat reaches the model in the turn it was
pasted in, and nothing else: not the session's rows, the archive or its full-text index, the journal,
the summary, flush and formation models, the daily file, nor the next turn's request."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from sqlalchemy import select, text
from sqlalchemy.engine import Connection

from gateway.app import Gateway
from gateway.session.budget import FLUSH_INSTRUCTIONS
from memory.formation.admission import INSTRUCTIONS as FORMATION_INSTRUCTIONS
from memory.store.schema import archived_messages, inbound_events, messages, sessions
from tests.conftest import ALICE_TOKEN, auth
from tests.fakes.llm import Behavior, FakeLLM, Reply, ToolCall, echo

SK = "sk-proj-" + "A1b2C3d4" * 6  # an OpenAI project key's shape
SK_WORD = "A1b2C3d4" * 6  # the word of it a full-text index would hold
GHP = "ghp_" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv1Wx2"  # a GitHub token's shape
WORDS = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "  # 20 tokens
REDACTED = "[redacted]"


def _kind(req: dict[str, Any]) -> str:
    first = str(req["messages"][0]["content"])
    if first.startswith("You maintain the running summary"):
        return "summary"
    if first == FLUSH_INSTRUCTIONS:
        return "flush"
    if first == FORMATION_INSTRUCTIONS:
        return "formation"
    return "turn"


def _background(req: dict[str, Any]) -> Behavior:
    """Turns are echoed (the reply repeats the key); the flush model copies every line it is shown
    that mentions a key or a token, as a careless model would."""
    kind = _kind(req)
    if kind == "summary":
        return Reply("SUMMARY: the person shared credentials " + str(req["messages"][1]["content"])[-200:])
    if kind == "flush":
        lines = str(req["messages"][1]["content"]).splitlines()
        notes = [f"- {ln}" for ln in lines if "key" in ln or "token" in ln]
        return Reply("\n".join(notes) or "NONE")
    return echo(req)


def _secret_free(value: Any) -> bool:
    dumped = json.dumps(value, default=str)
    return SK not in dumped and GHP not in dumped and SK_WORD not in dumped


async def _say(http: aiohttp.ClientSession, gw: Gateway, said: str) -> dict[str, Any]:
    r = await http.post(gw.url + "/api/v1/messages", json={"text": said, "conversation": "c1"}, headers=auth())
    assert r.status == 200, await r.text()
    return dict(await r.json())


def _rows(conn: Connection) -> dict[str, list[Any]]:
    """Everything of the chat the database holds, table by table."""
    return {
        "messages": [tuple(r) for r in conn.execute(select(messages.c.content, messages.c.tool_calls))],
        "archived": [
            tuple(r) for r in conn.execute(select(archived_messages.c.content, archived_messages.c.tool_calls))
        ],
        "summaries": list(conn.execute(select(sessions.c.summary)).scalars()),
        "journal": list(conn.execute(select(inbound_events.c.payload)).scalars()),
        "traces": list(conn.execute(text("SELECT query FROM recall_traces")).scalars()),
    }


def _fts_hits(conn: Connection, word: str) -> int:
    return int(
        conn.execute(
            text("SELECT count(*) FROM archived_messages_fts WHERE archived_messages_fts MATCH :q"), {"q": f'"{word}"'}
        ).scalar_one()
    )


def _token_totals(conn: Connection, session_id: int) -> tuple[int, int]:
    stored = conn.execute(select(sessions.c.token_count).where(sessions.c.id == session_id)).scalar_one()
    rows = conn.execute(select(messages.c.tokens).where(messages.c.session_id == session_id)).scalars()
    return int(stored), sum(int(t) for t in rows)


async def test_a_pasted_key_reaches_only_the_turn_it_was_pasted_in(
    gateway_factory, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:  # type: ignore[no-untyped-def]
    fake_llm.default = _background
    gw: Gateway = await gateway_factory(fake_llm, memory__session_memory__max_tokens=200)
    assert gw.storage is not None and gw.session_memory is not None and gw.jobs is not None
    live: list[dict[str, Any]] = []  # the requests that may carry the originals

    before = len(fake_llm.requests)
    key = (await _say(http, gw, f"my OpenAI key is {SK} and my GitHub token is {GHP}"))["session"]
    live += fake_llm.requests[before:]
    assert SK in live[-1]["messages"][-1]["content"] and GHP in live[-1]["messages"][-1]["content"]

    # The model passes the token to a tool: the call's arguments are stored redacted, as JSON still.
    fake_llm.script(ToolCall("search_archive", {"query": GHP}), Reply("Nothing about it in the archive."))
    before = len(fake_llm.requests)
    await _say(http, gw, f"did I ever mention {GHP} before?")
    live += fake_llm.requests[before:]
    assert any(m.get("tool_calls") for m in live[-1]["messages"])  # the tool loop ran

    before = len(fake_llm.requests)
    await _say(http, gw, "thanks, that is all")
    following = fake_llm.requests[before]
    assert _secret_free(following) and REDACTED in json.dumps(following)
    call = next(m for m in following["messages"] if m.get("tool_calls"))
    assert json.loads(call["tool_calls"][0]["function"]["arguments"]) == {"query": REDACTED}
    assert any(
        m["role"] == "user" and m["content"].startswith("my OpenAI key is [redacted]") for m in following["messages"]
    )

    # What the person sees again (history) and every row of the chat hold the redacted text.
    history = await gw.storage.sessions.history(key)
    assert history[0].content == f"my OpenAI key is {REDACTED} and my GitHub token is {REDACTED}"
    assert _secret_free([m.content for m in history])
    state = await gw.storage.sessions.active(key, "default", "alice")
    assert _secret_free([(m.content, m.tool_calls) for m in state.recent])
    stored, summed = await gw.storage.db.read(_token_totals, state.id)
    assert stored == summed == state.token_count  # the estimates are of the stored text

    # Past the budget: summarized, archived, and formation runs on the archived range.
    for i in range(8):
        await _say(http, gw, f"{i} {WORDS}")
        await gw.session_memory.idle()
        if state.summaries:
            break
    await gw.jobs.idle()
    summaries = [r for r in fake_llm.requests if _kind(r) == "summary"]
    assert summaries and REDACTED in summaries[0]["messages"][1]["content"]
    assert state.summary is not None and _secret_free(state.summary)

    archived = await gw.storage.archive.for_session(state.id)
    assert any(h.content.startswith("my OpenAI key is [redacted]") for h in archived)
    for query in (SK, SK_WORD, GHP):
        assert await gw.storage.archive.search(query, user_id="alice") == []
    assert await gw.storage.archive.search("GitHub token", user_id="alice")  # the index holds the rest
    assert await gw.storage.db.read(_fts_hits, SK_WORD.lower()) == 0
    assert await gw.storage.db.read(_fts_hits, "github") >= 1

    # /new flushes what is left to the daily file, through the flush model.
    before = len(fake_llm.requests)
    await _say(http, gw, f"one more key: {SK}")
    live += [r for r in fake_llm.requests[before:] if _kind(r) == "turn"]
    await _say(http, gw, "/new")
    await gw.session_memory.idle()
    await gw.jobs.idle()
    flushes = [r for r in fake_llm.requests if _kind(r) == "flush"]
    assert flushes and REDACTED in flushes[-1]["messages"][1]["content"]
    day = gw.session_memory.today().isoformat()
    daily = (gw.config.storage.data_dir / "memory" / "users" / "alice" / f"{day}.md").read_text()
    assert REDACTED in daily and _secret_free(daily)

    rows = await gw.storage.db.read(_rows)
    assert rows["messages"] == [] or _secret_free(rows["messages"])
    assert rows["archived"] and _secret_free(rows)
    assert any(REDACTED in str(p.get("text")) for p in rows["journal"])

    # Of every request the model got, only those of the turns the secrets were typed in carry them.
    carrying = [r for r in fake_llm.requests if not _secret_free(r)]
    assert carrying and all(any(r is x for x in live) for r in carrying)
    assert {_kind(r) for r in fake_llm.requests} >= {"turn", "summary", "flush", "formation"}


async def test_a_command_or_refusal_keeps_no_secret_in_the_journal(
    gateway_factory, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:  # type: ignore[no-untyped-def]
    gw: Gateway = await gateway_factory(fake_llm)
    assert gw.storage is not None
    await _say(http, gw, f"/help {SK}")
    journal = (await gw.storage.db.read(_rows))["journal"]
    assert journal and _secret_free(journal) and REDACTED in journal[0]["text"]


async def test_the_openai_api_keeps_a_session_without_the_key(
    gateway_factory, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:  # type: ignore[no-untyped-def]
    gw: Gateway = await gateway_factory(fake_llm)
    assert gw.storage is not None

    async def complete(said: str) -> None:
        body = {"model": "default", "user": "s1", "messages": [{"role": "user", "content": said}]}
        r = await http.post(gw.url + "/v1/chat/completions", json=body, headers=auth(ALICE_TOKEN))
        assert r.status == 200, await r.text()

    await complete(f"here is {GHP}")
    assert GHP in json.dumps(fake_llm.requests[-1])
    await complete("what did I give you?")
    assert _secret_free(fake_llm.requests[-1]) and REDACTED in json.dumps(fake_llm.requests[-1])
    assert _secret_free(await gw.storage.db.read(_rows))


@pytest.mark.parametrize("secret", [SK, GHP])
async def test_a_memory_backed_turn_keeps_no_secret_in_its_trace_or_rows(
    gateway_factory, fake_llm: FakeLLM, http: aiohttp.ClientSession, secret: str
) -> None:  # type: ignore[no-untyped-def]
    gw: Gateway = await gateway_factory(fake_llm)
    assert gw.storage is not None and gw.traces is not None
    await _say(http, gw, "/remember my favourite editor is helix")
    await _say(http, gw, f"which editor do I like? my key is {secret}")
    await gw.traces.settle()
    rows = await gw.storage.db.read(_rows)
    assert rows["traces"] and _secret_free(rows)


async def test_a_retry_of_a_request_with_a_key_gets_the_recorded_reply(
    gateway_factory, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:  # type: ignore[no-untyped-def]
    gw: Gateway = await gateway_factory(fake_llm)
    body = {"text": f"my key is {SK}", "conversation": "c1"}
    headers = {**auth(), "Idempotency-Key": "try-1"}
    first = await http.post(gw.url + "/api/v1/messages", json=body, headers=headers)
    assert first.status == 200
    again = await http.post(gw.url + "/api/v1/messages", json=body, headers=headers)
    assert again.status == 200 and again.headers.get("Idempotent-Replayed") == "true"
