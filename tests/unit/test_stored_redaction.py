"""What the session store and the journal keep of a secret (DESIGN §11), on SQLite and PostgreSQL:
messages of every role are stored redacted, tool-call arguments stay the JSON they were, the cached
context holds the stored copies with their token estimates, and a journaled event keeps the text as
it came in only until it is finished."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.engine import Connection

from memory.store.db import Database
from memory.store.schema import inbound_events, messages, sessions
from memory.store.sessions import Message, stored_copy
from memory.store.storage import Storage
from memory.trust.redact import REDACTED
from memory.trust.redact.tool_calls import redact_arguments
from tests.postgres import BACKENDS, database_url

SK = "sk-proj-" + "A1b2C3d4" * 6
GHP = "ghp_" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv1Wx2"
CONFIGURED = "plain-words-but-configured"  # no secret-like shape: only the config knows it


@pytest.fixture(params=BACKENDS)
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Storage]:
    db = Database(database_url(request.param, tmp_path))
    await db.migrate()
    yield Storage(db, [CONFIGURED])
    await db.close()


def _payload(conn: Connection, event_id: str) -> dict[str, Any]:
    return dict(
        conn.execute(select(inbound_events.c.payload).where(inbound_events.c.event_id == event_id)).scalar_one()
    )


def _stored(conn: Connection, session_id: int) -> list[tuple[str, Any, int]]:
    rows = conn.execute(
        select(messages.c.content, messages.c.tool_calls, messages.c.tokens)
        .where(messages.c.session_id == session_id)
        .order_by(messages.c.id)
    )
    return [(r.content, r.tool_calls, r.tokens) for r in rows]


def _session_tokens(conn: Connection, session_id: int) -> int:
    return int(conn.execute(select(sessions.c.token_count).where(sessions.c.id == session_id)).scalar_one())


def _call(arguments: str) -> list[dict[str, Any]]:
    return [{"id": "call_1", "type": "function", "function": {"name": "search_archive", "arguments": arguments}}]


async def test_a_turn_is_stored_redacted_and_its_event_finished_redacted(storage: Storage) -> None:
    said = f"my key is {SK}, the config one is {CONFIGURED}"
    assert await storage.journal.record("e1", "web", "k", {"event_id": "e1", "text": said})
    state = await storage.sessions.active("k", "default", "ann")
    user = Message("user", said, author="web:ann", event_id="e1")
    call = Message("assistant", "", tool_calls=_call(json.dumps({"query": GHP})), event_id="e1")
    result = Message("tool", f"found {GHP} in note 3", tool_call_id="call_1", event_id="e1")
    reply = Message("assistant", f"Your key {SK} is noted.", event_id="e1")
    turn = [user, call, result, reply]
    await storage.sessions.append(state, turn, finish_event="e1")

    # The messages given are the live turn's: they keep their text, and get their ids.
    assert user.content == said and all(m.id is not None for m in turn)
    stored = await storage.db.read(_stored, state.id)
    assert [content for content, _, _ in stored] == [
        f"my key is {REDACTED}, the config one is {REDACTED}",
        "",
        f"found {REDACTED} in note 3",
        f"Your key {REDACTED} is noted.",
    ]
    assert json.loads(stored[1][1][0]["function"]["arguments"]) == {"query": REDACTED}
    # The cached context is the stored copy, and the totals are those of the stored text.
    assert [(m.content, m.tool_calls) for m in state.recent] == [(c, t) for c, t, _ in stored]
    assert [m.id for m in state.recent] == [m.id for m in turn]
    assert [m.tokens for m in state.recent] == [tokens for _, _, tokens in stored]
    assert state.token_count == sum(t for _, _, t in stored) == await storage.db.read(_session_tokens, state.id)
    assert state.token_count < sum(m.tokens for m in turn)
    assert await storage.journal.counts() == {"done": 1}
    assert (await storage.db.read(_payload, "e1"))["text"] == f"my key is {REDACTED}, the config one is {REDACTED}"
    # Read back whole (a restart), the session is what was stored.
    again = await Storage(storage.db).sessions.active("k", "default", "ann")
    assert [m.content for m in again.recent] == [c for c, _, _ in stored]


async def test_an_ordinary_turn_is_stored_as_it_is(storage: Storage) -> None:
    assert await storage.journal.record("e1", "web", "k", {"event_id": "e1", "text": "hello there"})
    state = await storage.sessions.active("k", "default", "ann")
    user = Message("user", "hello there", event_id="e1")
    reply = Message("assistant", "hi!", event_id="e1")
    await storage.sessions.append(state, [user, reply], finish_event="e1")
    assert list(state.recent) == [user, reply] and state.recent[0] is user  # nothing copied
    assert (await storage.db.read(_payload, "e1"))["text"] == "hello there"


async def test_a_journaled_event_keeps_its_text_until_it_is_finished(storage: Storage) -> None:
    said = f"/help {GHP}"
    assert await storage.journal.record("e1", "web", "k", {"event_id": "e1", "text": said})
    assert [p.payload["text"] for p in await storage.journal.unfinished()] == [said]  # a resumed turn needs it
    await storage.journal.finish("e1", "done")
    found = await storage.journal.journaled("e1")
    assert found is not None and found[0] == "done" and found[1].payload["text"] == f"/help {REDACTED}"
    # A retry with the same text is recognised as the same message; another text is not.
    assert storage.journal.matches(found[1], said)
    assert not storage.journal.matches(found[1], "/help something else")


async def test_an_appended_reply_finishing_an_event_redacts_its_journaled_text(storage: Storage) -> None:
    # No user message of the event in this append: the journal redacts on its own.
    assert await storage.journal.record("e1", "web", "k", {"event_id": "e1", "text": f"key {SK}"})
    state = await storage.sessions.active("k", "default", None)
    await storage.sessions.append(state, [Message("assistant", "ok", event_id="e1")], finish_event="e1")
    assert (await storage.db.read(_payload, "e1"))["text"] == f"key {REDACTED}"


async def test_a_summary_is_stored_redacted(storage: Storage) -> None:
    state = await storage.sessions.active("k", "default", None)
    await storage.sessions.append(state, [Message("user", "one"), Message("assistant", "two")])
    last = state.recent[-1].id
    assert last is not None
    done = await storage.sessions.archive(state, last, "summarized", summary=f"They gave {SK}.", summary_tokens=99)
    assert done is not None and state.summary == f"They gave {REDACTED}."
    assert state.summary_tokens < 99


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (json.dumps({"query": "weather"}), {"query": "weather"}),
        (json.dumps({"query": SK, "limit": 3}), {"query": REDACTED, "limit": 3}),
        (json.dumps({"note": {"items": [f"token {GHP}", "fine"]}}), {"note": {"items": [f"token {REDACTED}", "fine"]}}),
        # An assignment: the key beside the value is what makes it a secret.
        (json.dumps({"password": "hunter2x9"}), {"password": REDACTED}),
        # A private key block cut short: a span to the end of the text would eat the closing quote.
        (
            json.dumps({"key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEow", "name": "laptop"}),
            {"key": REDACTED, "name": "laptop"},
        ),
    ],
)
def test_tool_call_arguments_stay_json(arguments: str, expected: dict[str, Any]) -> None:
    stored = redact_arguments(arguments, ())
    assert json.loads(stored) == expected
    if expected == json.loads(arguments):
        assert stored is arguments  # untouched text is not re-encoded (the prompt prefix stays the same)


def test_arguments_that_are_not_json_are_redacted_as_text() -> None:
    assert redact_arguments(f"query={SK}", ()) == f"query={REDACTED}"


def test_a_stored_copy_is_the_message_itself_when_nothing_is_secret() -> None:
    message = Message("assistant", "", tool_calls=_call('{"query": "weather"}'))
    assert stored_copy(message, ()) is message
    secret = Message("assistant", "", tool_calls=_call(json.dumps({"query": GHP})))
    copy = stored_copy(secret, ())
    assert copy is not secret and secret.tool_calls is not None and GHP in json.dumps(secret.tool_calls)
    assert copy.tokens == Message("assistant", "", tool_calls=copy.tool_calls).tokens
