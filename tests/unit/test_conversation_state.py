"""Each platform conversation's own state (memory/store/platforms/conversations.py), on both databases:
what Teams and Messenger keep so that a restart or another instance can answer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memory.store.platforms.conversations import MAX_BYTES
from memory.store.storage import Storage
from tests.postgres import BACKENDS, database_url


@pytest.fixture(params=BACKENDS)
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Storage]:
    opened = await Storage.open(database_url(request.param, tmp_path))
    try:
        yield opened
    finally:
        await opened.close()


async def test_a_conversation_state_is_kept_whole_and_the_newest_write_wins(storage: Storage) -> None:
    state = storage.conversations
    assert await state.load("teams", "19:abc") is None
    first = {"service_url": "https://smba.example/emea/", "tenant": "t1", "bot": {"id": "28:bot", "name": "Claw"}}
    await state.save("teams", "19:abc", first)
    assert await state.load("teams", "19:abc") == first
    await state.save("teams", "19:abc", {"service_url": "https://smba.example/amer/"})
    assert await state.load("teams", "19:abc") == {"service_url": "https://smba.example/amer/"}  # whole, not merged
    # Another channel's conversation of the same id is another row.
    assert await state.load("teams-2", "19:abc") is None


async def test_two_handles_on_one_database_see_each_others_writes(storage: Storage) -> None:
    """A second instance (a second Storage on the same database) reads what the first wrote."""
    other = await Storage.open(storage.db.url)
    try:
        await storage.conversations.save("messenger", "psid-1", {"last_inbound": "2026-12-02T08:00:00+00:00"})
        assert await other.conversations.load("messenger", "psid-1") == {"last_inbound": "2026-12-02T08:00:00+00:00"}
    finally:
        await other.close()


async def test_an_oversized_state_is_refused_and_the_old_one_kept(storage: Storage) -> None:
    await storage.conversations.save("teams", "c", {"ok": True})
    with pytest.raises(ValueError, match=f"over {MAX_BYTES}"):
        await storage.conversations.save("teams", "c", {"blob": "x" * MAX_BYTES})
    assert await storage.conversations.load("teams", "c") == {"ok": True}
