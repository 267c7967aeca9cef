"""The console's pure parts and its session store: word diffs, revision views, sign-in sessions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import select

from gateway.web.auth import TokenAuth
from gateway.web.console.service import Viewer, revision_json, word_diff
from memory.records.rows import Revision
from memory.store.console_sessions import ConsoleSessionStore, digest
from memory.store.schema import console_sessions
from memory.store.storage import Storage
from tests.conftest import ALICE_TOKEN, make_config

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
words = st.text(alphabet=st.sampled_from("ab c\n"), max_size=40)


@given(words, words)
def test_word_diff_rebuilds_both_sides(before: str, after: str) -> None:
    ops = word_diff(before, after)
    assert "".join(o["text"] for o in ops if o["op"] != "insert") == before
    assert "".join(o["text"] for o in ops if o["op"] != "delete") == after
    assert all(o["text"] for o in ops)


def test_word_diff_marks_whole_words() -> None:
    assert word_diff("I like tea", "I like green tea") == [
        {"op": "equal", "text": "I like "},
        {"op": "insert", "text": "green "},
        {"op": "equal", "text": "tea"},
    ]
    assert word_diff("same", "same") == [{"op": "equal", "text": "same"}]


def _rev(before: dict[str, object] | None, after: dict[str, object], action: str = "edit") -> Revision:
    return Revision(2, action, "alice", T0, before, after, None, "mem-x", 7)


def test_revision_json_lists_changed_fields_only() -> None:
    before = {"content": "a", "review_status": "pending", "revision": 1, "updated_at": "t1", "scope": "global"}
    after = {"content": "b", "review_status": "confirmed", "revision": 2, "updated_at": "t2", "scope": "global"}
    view = revision_json(_rev(before, after))
    assert view["changes"] == [
        {"field": "content", "before": "a", "after": "b"},
        {"field": "review_status", "before": "pending", "after": "confirmed"},
    ]
    assert view["content_diff"] == [{"op": "delete", "text": "a"}, {"op": "insert", "text": "b"}]
    created = revision_json(_rev(None, after, "create"))
    assert created["changes"] == [] and created["content_diff"] == []


def test_system_is_an_administrator_in_the_console() -> None:
    assert Viewer("ops", frozenset({"system"})).actor.is_admin
    assert Viewer("ops", frozenset({"system"})).actor.run == "console"
    assert not Viewer("al", frozenset({"user"})).is_admin


@pytest.fixture
async def storage(tmp_path: Path) -> AsyncIterator[Storage]:
    s = await Storage.open(f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}")
    yield s
    await s.close()


async def test_sessions_store_only_digests_and_expire(storage: Storage) -> None:
    store = ConsoleSessionStore(storage.db, ttl=timedelta(hours=1))
    session_id, session = await store.create("alice", digest(ALICE_TOKEN), now=T0)
    assert (await store.get(session_id, now=T0 + timedelta(minutes=59))) == session
    assert await store.get(session_id, now=T0 + timedelta(hours=1)) is None
    assert await store.get("", now=T0) is None and await store.get("x" * 500, now=T0) is None

    def stored(conn: object) -> list[tuple[str, ...]]:
        return [tuple(r) for r in conn.execute(select(console_sessions))]  # type: ignore[attr-defined]

    rows = await storage.db.read(stored)
    assert session_id not in str(rows) and ALICE_TOKEN not in str(rows)

    # A new sign-in sweeps the expired ones; signing out deletes at once.
    later_id, _ = await store.create("bob", digest("b"), now=T0 + timedelta(hours=2))
    assert len(await storage.db.read(stored)) == 1
    assert await store.delete(later_id) is True
    assert await store.get(later_id, now=T0 + timedelta(hours=2)) is None


def test_a_session_ends_when_its_token_leaves_config(tmp_path: Path) -> None:
    before = TokenAuth(make_config(tmp_path, None))
    found = before.identify(ALICE_TOKEN)
    assert found is not None and found[0] == "alice" and ALICE_TOKEN not in found[1]
    assert before.holds("alice", found[1]) and not before.holds("bob", found[1])
    after = TokenAuth(
        make_config(tmp_path, None, users__alice={"roles": ["user"], "tokens": ["a-new-token-000000000"]})
    )
    assert not after.holds("alice", found[1])
    assert before.identify("x" * 5000) is None and before.identify(None) is None
