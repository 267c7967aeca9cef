from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from channels.web.adapter import WebAdapter
from gateway.app import Gateway
from gateway.core.events import event_to_payload
from gateway.session.budget import FLUSH_INSTRUCTIONS
from memory.formation.admission import INSTRUCTIONS as FORMATION_INSTRUCTIONS
from memory.store.db import Database
from memory.store.storage import Storage
from tests.conftest import ALICE_TOKEN, BOB_TOKEN, auth
from tests.fakes.llm import FakeLLM, Gate, Reply
from tests.postgres import fresh_database_url


async def post(
    http: aiohttp.ClientSession,
    gw: Gateway,
    body: object,
    token: str | None = ALICE_TOKEN,
    headers: dict[str, str] | None = None,
) -> aiohttp.ClientResponse:
    all_headers = {**(auth(token) if token else {}), **(headers or {})}
    return await http.post(gw.url + "/api/v1/messages", json=body, headers=all_headers)


async def test_message_gets_reply_and_history(gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession) -> None:
    fake_llm.script(Reply("Hi Alice!"))
    r = await post(http, gateway, {"text": "Hello there"})
    assert r.status == 200
    body = await r.json()
    assert body["reply"] == "Hi Alice!"
    assert body["session"] == "web:dm:alice"
    assert body["message_id"]
    sent = fake_llm.requests[-1]
    assert sent["model"] == "fake-model"
    assert sent["messages"][0]["role"] == "system"
    assert sent["messages"][-1] == {"role": "user", "content": "Hello there"}
    assert sent["_headers"]["Authorization"] == "Bearer sk-test-not-a-real-key-000000"

    r = await post(http, gateway, {"text": "and again"})
    second = fake_llm.requests[-1]["messages"]
    assert [m["content"] for m in second[1:]] == ["Hello there", "Hi Alice!", "and again"]

    hist = await (await http.get(gateway.url + "/api/v1/messages", headers=auth())).json()
    assert [m["text"] for m in hist["messages"]] == ["Hello there", "Hi Alice!", "and again", "echo: and again"]


async def test_conversations_and_users_are_separate(
    gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    await post(http, gateway, {"text": "alice secret plan", "conversation": "work"})
    r = await post(http, gateway, {"text": "hi from bob"}, token=BOB_TOKEN)
    assert (await r.json())["session"] == "web:dm:bob"
    bob_prompt = fake_llm.requests[-1]["messages"]
    assert all("alice secret plan" not in str(m.get("content")) for m in bob_prompt)
    r = await post(http, gateway, {"text": "other thread", "conversation": "home"})
    assert (await r.json())["session"] == "web:dm:alice:home"
    assert all("alice secret plan" not in str(m.get("content")) for m in fake_llm.requests[-1]["messages"])


async def test_auth_is_required(gateway: Gateway, http: aiohttp.ClientSession) -> None:
    r = await post(http, gateway, {"text": "hi"}, token=None)
    assert r.status == 401
    assert r.headers["WWW-Authenticate"] == "Bearer"
    r = await post(http, gateway, {"text": "hi"}, token="wrong-token-000000000")
    assert r.status == 401
    r = await http.get(gateway.url + "/api/v1/messages")
    assert r.status == 401


async def test_bad_input_is_refused_cleanly(gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession) -> None:
    url = gateway.url + "/api/v1/messages"
    cases = [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (b'{"text": ""}', 400, "non-empty string"),
        (b'{"text": 42}', 400, "non-empty string"),
        (b'{"text": "hi", "conversation": "../../etc"}', 400, "conversation"),
        (b'{"text": "\xff\xfe bad utf8"}', 400, "UTF-8"),
        (b'{"text": "\\ud800 lone surrogate"}', 400, "surrogates"),
    ]
    for raw, status, fragment in cases:
        r = await http.post(url, data=raw, headers={**auth(), "Content-Type": "application/json"})
        assert r.status == status, raw
        assert fragment in (await r.json())["error"], raw
    big = "x" * (1024 * 1024)
    r = await post(http, gateway, {"text": big})
    assert r.status == 413
    assert "limit" in (await r.json())["error"]
    assert fake_llm.requests == []
    r = await post(http, gateway, {"text": "still alive?"})
    assert r.status == 200


async def test_message_limit_is_configurable(
    gateway_factory,
    fake_llm: FakeLLM,  # type: ignore[no-untyped-def]
    http: aiohttp.ClientSession,
) -> None:
    gw = await gateway_factory(fake_llm, channels__web__max_message_bytes=100)
    try:
        assert (await post(http, gw, {"text": "y" * 101})).status == 413
        assert (await post(http, gw, {"text": "y" * 100})).status == 200
    finally:
        await gw.stop()


async def test_a_message_sent_in_pieces_is_read_whole(
    gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    text = "long message " * 3000  # 39 KB
    body = json.dumps({"text": text}).encode()

    async def slow_client() -> AsyncIterator[bytes]:
        # Pieces that arrive apart (chunked, on a slow link): the pause is the client's pace,
        # not a wait for anything. A single read() on the server used to see only the first.
        for start in range(0, len(body), 8192):
            yield body[start : start + 8192]
            await asyncio.sleep(0.02)

    r = await http.post(
        gateway.url + "/api/v1/messages", data=slow_client(), headers={**auth(), "Content-Type": "application/json"}
    )
    assert r.status == 200, await r.text()
    assert fake_llm.requests[-1]["messages"][-1]["content"] == text


async def test_a_retry_with_the_idempotency_key_gets_the_first_reply_without_a_second_turn(
    gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    headers = {"Idempotency-Key": "msg-1"}
    first = await post(http, gateway, {"text": "only once"}, headers=headers)
    assert first.status == 200 and "Idempotent-Replayed" not in first.headers
    again = await post(http, gateway, {"text": "only once"}, headers=headers)
    assert again.status == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert await again.json() == await first.json()  # the same reply, message id and session
    assert len(fake_llm.requests) == 1
    # The key with another message is a client bug, not a retry.
    other = await post(http, gateway, {"text": "something else"}, headers=headers)
    assert other.status == 422 and "different message" in (await other.json())["error"]
    # Another person's key of the same name is theirs alone.
    bobs = await post(http, gateway, {"text": "only once"}, token=BOB_TOKEN, headers=headers)
    assert bobs.status == 200 and "Idempotent-Replayed" not in bobs.headers
    assert len(fake_llm.requests) == 2
    # A command has no recorded reply to give again.
    assert (await post(http, gateway, {"text": "/help"}, headers={"Idempotency-Key": "cmd"})).status == 200
    assert (await post(http, gateway, {"text": "/help"}, headers={"Idempotency-Key": "cmd"})).status == 409


async def test_a_retry_while_the_first_try_runs_waits_for_its_reply(
    gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    fake_llm.script(Gate(then=Reply("worth the wait")))
    headers = {"Idempotency-Key": "slow-1"}
    first = asyncio.create_task(post(http, gateway, {"text": "take your time"}, headers=headers))
    await fake_llm.wait_requests(1)
    retry = asyncio.create_task(post(http, gateway, {"text": "take your time"}, headers=headers))
    await asyncio.sleep(0.1)  # the retry is in, waiting for the first try
    assert not retry.done()
    fake_llm.release()
    a, b = await first, await retry
    assert (a.status, b.status) == (200, 200) and b.headers["Idempotent-Replayed"] == "true"
    assert (await a.json())["reply"] == (await b.json())["reply"] == "worth the wait"
    assert len(fake_llm.requests) == 1


async def test_commands(gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession) -> None:
    async def say(text: str) -> str:
        return str((await (await post(http, gateway, {"text": text})).json())["reply"])

    await say("remember this")
    status = await say("/status")
    assert "Model: openai/fake-model" in status
    assert "Messages in context: 2" in status and "Estimated tokens:" in status
    who = await say("/whoami")
    assert "User: alice" in who and "telegram:1" in who and "web:alice" in who and "Roles: user" in who
    help_text = await say("/help")
    assert "/new" in help_text and "/whoami" in help_text
    assert "Started a new conversation" in await say("/new")
    assert "Messages in context: 0" in await say("/status")
    await say("fresh start")
    # (/new also has the cleared transcript distilled into the daily notes and formed into
    # memory: neither is a turn.)
    background = (FLUSH_INSTRUCTIONS, FORMATION_INSTRUCTIONS)
    turns = [r for r in fake_llm.requests if r["messages"][0]["content"] not in background]
    assert "remember this" not in str(turns[-1]["messages"])
    assert "Unknown command /frobnicate" in await say("/frobnicate")
    turns = [r for r in fake_llm.requests if r["messages"][0]["content"] not in background]
    assert len(turns) == 2  # commands never reach the model


async def test_unknown_sender_becomes_a_user(gateway: Gateway, http: aiohttp.ClientSession) -> None:
    assert gateway.storage is not None
    user = await gateway.storage.identities.resolve("telegram:999", "Zed")
    assert user.roles == ("user",)
    assert user.id == "telegram-999"
    again = await gateway.storage.identities.resolve("telegram:999")
    assert again.id == user.id
    alice = await gateway.storage.identities.resolve("telegram:1")
    assert alice.id == "alice"


async def test_a_crashing_turn_apologizes_and_is_not_retried(
    gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert gateway.router is not None and gateway.storage is not None

    def broken(*_args: object, **_kw: object) -> object:
        raise RuntimeError("bug in the turn")

    monkeypatch.setattr(gateway.router.engine, "run", broken)
    r = await post(http, gateway, {"text": "trigger the bug"})
    assert r.status == 200
    assert "internal error" in (await r.json())["reply"]
    assert await gateway.storage.journal.unfinished() == []
    assert (await gateway.storage.journal.counts()).get("failed") == 1
    monkeypatch.undo()
    assert (await (await post(http, gateway, {"text": "works again"})).json())["reply"] == "echo: works again"


async def test_a_retry_answers_a_request_whose_instance_died_before_replying(
    gateway_factory: Callable[..., Any], fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    # Several instances on PostgreSQL: instance A took a request (journaled it, started the turn)
    # and died before answering. The client's retry with the same key reaches instance B.
    url = fresh_database_url()
    dead = Storage(Database(url))
    b = await gateway_factory(fake_llm, storage__database_url=url)
    try:
        adapter = b.adapters["web"]
        assert isinstance(adapter, WebAdapter) and b.router is not None
        ev = adapter._event("alice", None, "are you there?", "lost-1", wants_stream=False)
        assert await dead.journal.record(ev.event_id, "web", ev.ref.session_key, event_to_payload(ev))
        await dead.journal.bump_attempts(ev.event_id)  # A started it; no lease is held any more
        headers = {"Idempotency-Key": "lost-1"}
        fake_llm.script(Reply("here now"))
        r = await post(http, b, {"text": "are you there?"}, headers=headers)
        assert r.status == 200 and "Idempotent-Replayed" not in r.headers
        assert (await r.json())["reply"] == "here now"
        again = await post(http, b, {"text": "are you there?"}, headers=headers)
        assert again.status == 200 and again.headers["Idempotent-Replayed"] == "true"
        assert (await again.json())["reply"] == "here now"
        assert len(fake_llm.requests) == 1
        assert (await dead.journal.journaled(ev.event_id) or ("?",))[0] == "done"
    finally:
        await dead.close()
