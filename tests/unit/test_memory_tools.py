"""Memory tools are offered only where memory may be touched, and see only what the asker may."""

from __future__ import annotations

import json
from pathlib import Path

from gateway.session.memory_tools import search_archive_tool
from gateway.turn.tools import CURRENT_TIME, ToolContext, ToolRegistry
from memory.store.storage import Storage
from memory.trust.policy import archive_scope


def ctx(audience: str) -> ToolContext:
    return ToolContext(user_id="alice", session_key="telegram:group:-1", timezone="UTC", audience=audience)


async def test_memory_tools_are_hidden_from_a_public_audience(tmp_path: Path) -> None:
    storage = await Storage.open(f"sqlite:///{tmp_path}/t.db")
    try:
        tools = ToolRegistry([CURRENT_TIME, search_archive_tool(storage.archive)])
        names = lambda c: [s["function"]["name"] for s in tools.schemas(c)]  # noqa: E731
        assert names(ctx("personal")) == ["get_current_time", "search_archive"]
        assert names(ctx("team")) == ["get_current_time", "search_archive"]
        assert names(ctx("public")) == ["get_current_time"]
        # Called anyway (a model may hallucinate the name): refused as unknown.
        refused = json.loads(await tools.call(ctx("public"), "search_archive", '{"query": "x"}'))
        assert "unknown tool" in refused["error"] and refused["available"] == ["get_current_time"]
        found = json.loads(await tools.call(ctx("personal"), "search_archive", '{"query": "x"}'))
        assert found == {"results": []}
        assert "query is required" in await tools.call(ctx("personal"), "search_archive", "{}")
    finally:
        await storage.close()


def test_archive_scope_never_shows_dms_in_a_group() -> None:
    # In a DM: her own sessions, not the DM's earlier sessions of another owner.
    assert archive_scope("alice", "telegram:dm:1", "personal") == ("alice", [])
    assert archive_scope("alice", "telegram:group:-1", "team") == (None, ["telegram:group:-1"])
