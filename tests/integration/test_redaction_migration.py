"""Migration 0014 (DESIGN §11): secrets stored before the gateway redacted chat text are redacted in
place, on SQLite and PostgreSQL, and can no longer be found through the full-text index; what a
crashed turn still needs, and text with nothing secret in it, is left as it was."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import insert, select, text
from sqlalchemy.engine import Connection

from memory.store.db import MIGRATIONS, Database
from memory.store.schema import archived_messages, inbound_events, memory_vectors, messages, sessions
from memory.store.sessions import Message
from memory.store.storage import Storage
from memory.trust.redact import REDACTED
from tests.postgres import BACKENDS, database_url

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SK = "sk-proj-" + "A1b2C3d4" * 6
SK_WORD = "A1b2C3d4" * 6
GHP = "ghp_" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv1Wx2"
CALLS = [{"id": "c1", "type": "function", "function": {"name": "search_archive", "arguments": f'{{"query": "{GHP}"}}'}}]


def _to(revision: str) -> Callable[[Connection], None]:
    def run(conn: Connection) -> None:
        cfg = AlembicConfig()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)

    return run


def _message(
    mid: int, sid: int, content: str, role: str = "user", calls: Any = None, **archived: Any
) -> dict[str, Any]:
    return {
        "id": mid,
        "session_id": sid,
        "role": role,
        "content": content,
        "tool_calls": calls,
        "tool_call_id": None,
        "author": "web:alice" if role == "user" else None,
        "event_id": None,
        "tokens": Message(role, content, tool_calls=calls).tokens,
        "created_at": T0,
        **archived,
    }


def _fill(conn: Connection) -> None:
    """A database as a gateway before 0014 left it: raw secrets in every place chat text went."""
    base = {"agent": "main", "user_id": "alice", "created_at": T0, "audience": "personal", "memory_excluded": False}
    conn.execute(
        insert(sessions),
        [
            {**base, "id": 1, "key": "web:dm:alice:c1", "message_count": 0, "token_count": 0, "summary": None},
            {**base, "id": 2, "key": "web:dm:alice:c2", "message_count": 2, "token_count": 0, "summary": f"Key {SK}."},
        ],
    )
    gone = {"archived_at": T0, "reason": "summarized"}
    conn.execute(
        insert(archived_messages),
        [
            _message(1, 1, f"my OpenAI key is {SK} for the lighthouse project", **gone),
            _message(2, 1, f"echo: my OpenAI key is {SK} for the lighthouse project", "assistant", **gone),
            _message(3, 1, "", "assistant", CALLS, **gone),
            _message(4, 1, "the lighthouse is white", **gone),
        ]
        + [_message(10 + i, 1, f"ordinary message {i} about the harbour", **gone) for i in range(1200)],
    )
    active = [_message(5000, 2, f"and the token is {GHP}"), _message(5001, 2, "noted", "assistant")]
    conn.execute(insert(messages), active)
    conn.execute(sessions.update().where(sessions.c.id == 2).values(token_count=sum(m["tokens"] for m in active)))
    events = [
        ("e-done", "done", f"my OpenAI key is {SK}"),
        ("e-open", "received", f"retry this: {SK}"),  # unfinished: a resumed turn needs it as it was
        ("e-plain", "done", "hello"),
    ]
    conn.execute(
        insert(inbound_events),
        [
            {
                "event_id": eid,
                "channel": "web",
                "session_key": "web:dm:alice:c1",
                "payload": {"event_id": eid, "text": said, "sender": "web:alice"},
                "status": status,
                "received_at": T0,
                "attempts": 0,
            }
            for eid, status, said in events
        ],
    )
    conn.execute(
        text(
            "INSERT INTO recall_traces (session_key, user_id, event_id, query, items, written, created_at) "
            "VALUES ('web:dm:alice:c1', 'alice', 'e-done', :q, '[]', '[]', :at)"
        ),
        {"q": f"what about {SK}", "at": T0},
    )
    conn.execute(
        insert(memory_vectors),
        [
            {
                "item_kind": "archive",
                "item_id": str(i),
                "model_id": "m",
                "dim": 1,
                "vector": b"\0\0\0\0",
                "text_hash": "x",
                "created_at": T0,
            }
            for i in (1, 4)
        ],
    )


def _state(conn: Connection) -> dict[str, Any]:
    return {
        "archived": dict(conn.execute(select(archived_messages.c.id, archived_messages.c.content)).all()),
        "calls": conn.execute(select(archived_messages.c.tool_calls).where(archived_messages.c.id == 3)).scalar_one(),
        "tokens": dict(conn.execute(select(archived_messages.c.id, archived_messages.c.tokens)).all()),
        "active": list(conn.execute(select(messages.c.content).order_by(messages.c.id)).scalars()),
        "active_tokens": sum(conn.execute(select(messages.c.tokens)).scalars()),
        "sessions": dict(conn.execute(select(sessions.c.id, sessions.c.token_count)).all()),
        "summary": conn.execute(select(sessions.c.summary).where(sessions.c.id == 2)).scalar_one(),
        "events": {r.event_id: r.payload["text"] for r in conn.execute(select(inbound_events))},
        "trace": conn.execute(text("SELECT query FROM recall_traces")).scalar_one(),
        "vectors": set(conn.execute(select(memory_vectors.c.item_id)).scalars()),
    }


def _fts_consistent(conn: Connection) -> None:
    """SQLite: the external-content indexes agree with the table they index (raises otherwise)."""
    for fts in ("archived_messages_fts", "archived_messages_cjk"):
        conn.execute(text(f"INSERT INTO {fts}({fts}) VALUES ('integrity-check')"))


@pytest.mark.parametrize("backend", BACKENDS)
async def test_secrets_stored_before_are_redacted_and_not_found_again(backend: str, tmp_path: Path) -> None:
    url = database_url(backend, tmp_path)
    old = Database(url)
    await old.write(_to("0013"))
    await old.write(_fill)
    hits = {h.id for h in await Storage(old).archive.search(SK_WORD)}
    assert hits == {1, 2}  # found before: what this migration is for
    await old.close()

    storage = await Storage.open(url)
    try:
        state = await storage.db.read(_state)
        assert state["archived"][1] == f"my OpenAI key is {REDACTED} for the lighthouse project"
        assert state["archived"][2] == f"echo: my OpenAI key is {REDACTED} for the lighthouse project"
        assert state["calls"][0]["function"]["arguments"] == f'{{"query": "{REDACTED}"}}'
        assert state["archived"][4] == "the lighthouse is white" and state["archived"][10] == (
            "ordinary message 0 about the harbour"
        )
        assert state["tokens"][1] == Message("user", state["archived"][1]).tokens
        assert state["active"] == [f"and the token is {REDACTED}", "noted"]
        assert state["sessions"][2] == state["active_tokens"]  # the running total follows its rows
        assert state["summary"] == f"Key {REDACTED}."
        assert state["events"] == {
            "e-done": f"my OpenAI key is {REDACTED}",
            "e-open": f"retry this: {SK}",
            "e-plain": "hello",
        }
        assert state["trace"] == f"what about {REDACTED}"
        assert state["vectors"] == {"4"}  # a changed text is embedded again from its redacted form

        for query in (SK, SK_WORD, GHP):
            assert await storage.archive.search(query) == []
        assert {h.id for h in await storage.archive.search("lighthouse")} == {1, 2, 4}
        assert [h.id for h in await storage.archive.search("harbour", limit=1)]
        if backend == "sqlite":
            await storage.db.read(_fts_consistent)
        current, head = await storage.db.revision()
        assert current == head
    finally:
        await storage.close()
