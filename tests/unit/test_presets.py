"""Tool presets: what may be saved (and the reason when not), the store over real SQLite, and what a
failed tool call gives the model back: a hint, and the approved presets only."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from gateway.turn.tools import CURRENT_TIME, RAISED_HINT, Tool, ToolContext, ToolRegistry
from memory.store.presets import (
    MAX_ARGUMENTS_CHARS,
    MAX_NOTE_CHARS,
    MAX_OFFERED,
    Preset,
    PresetError,
    PresetStore,
    parse_command,
    validate,
)
from memory.store.storage import Storage
from tests.postgres import BACKENDS, database_url

SECRET = "sk-proj-" + "Q9w8E7r6" * 6
CTX = ToolContext(user_id="alice", session_key="web:alice", timezone="UTC")


# --- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "name", "arguments", "note", "says"),
    [
        ("", "berlin", {}, None, "tool name"),
        ("get current time", "berlin", {}, None, "tool name"),
        ("x" * 65, "berlin", {}, None, "tool name"),
        ("get_current_time", "two words", {}, None, "preset name"),
        ("get_current_time", "", {}, None, "preset name"),
        ("get_current_time", "berlin", ["Europe/Berlin"], None, "one JSON object"),
        ("get_current_time", "berlin", "Europe/Berlin", None, "one JSON object"),
        ("get_current_time", "berlin", {"t": float("nan")}, None, "plain JSON"),
        ("get_current_time", "berlin", {"t": "x" * MAX_ARGUMENTS_CHARS}, None, "too long"),
        ("get_current_time", "berlin", {}, "n" * (MAX_NOTE_CHARS + 1), "note is too long"),
        ("get_current_time", "berlin", {}, "line one\nline two", "one line"),
        ("get_current_time", "berlin", {"api_key": SECRET}, None, "secret"),
        ("get_current_time", "berlin", {}, f"use the key {SECRET}", "secret"),
    ],
)
def test_bad_preset_input_is_refused_with_the_reason(
    tool: str, name: str, arguments: Any, note: str | None, says: str
) -> None:
    with pytest.raises(PresetError) as refused:
        validate(tool, name, arguments, note)
    assert says in str(refused.value) and SECRET not in str(refused.value)


def test_configured_secrets_are_refused_too() -> None:
    with pytest.raises(PresetError, match="secret"):
        validate("find_memories", "mine", {"query": "gateway password pa55word-Xy"}, None, ["pa55word-Xy"])


def test_good_input_is_cleaned() -> None:
    assert validate(" find_memories ", "deploy.days", {"query": "deploy", "limit": 5}, "  ") == (
        "find_memories",
        "deploy.days",
        {"query": "deploy", "limit": 5},
        None,
    )


def test_the_chat_command_shape() -> None:
    assert parse_command('get_current_time berlin {"timezone": "Europe/Berlin"} an IANA zone, not a city') == (
        "get_current_time",
        "berlin",
        {"timezone": "Europe/Berlin"},
        "an IANA zone, not a city",
    )
    assert parse_command("find_memories all {}") == ("find_memories", "all", {}, None)
    for bad, says in [
        ("get_current_time berlin", "use: TOOL NAME"),
        ("get_current_time berlin Europe/Berlin", "starting with '{'"),
        ('get_current_time berlin {"timezone": }', "not valid JSON"),
    ]:
        with pytest.raises(PresetError, match=says):
            parse_command(bad)


# --- the store -----------------------------------------------------------------------------------


@pytest.fixture(params=BACKENDS)
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Storage]:
    s = await Storage.open(database_url(request.param, tmp_path))
    yield s
    await s.close()


async def test_add_list_approve_remove(storage: Storage) -> None:
    store = PresetStore(storage.db)
    approved = await store.add(
        "get_current_time", "berlin", {"timezone": "Europe/Berlin"}, "IANA", created_by="root", approved=True
    )
    proposed = await store.add(
        "get_current_time", "tokyo", {"timezone": "Asia/Tokyo"}, None, created_by="bob", approved=False
    )
    assert approved.id.startswith("pre-") and approved.arguments == {"timezone": "Europe/Berlin"}
    assert [p.name for p in await store.approved_for("get_current_time")] == ["berlin"]
    assert [p.name for p in await store.list(tool="get_current_time")] == ["berlin", "tokyo"]
    with pytest.raises(PresetError, match="already has a preset named 'berlin'"):
        await store.add("get_current_time", "berlin", {}, None, created_by="root", approved=True)
    done = await store.approve(proposed.id)
    assert done is not None and done.approved
    assert len(await store.approved_for("get_current_time")) == 2
    assert await store.remove(approved.id) == approved
    assert await store.remove(approved.id) is None and await store.approve("pre-missing") is None
    assert [p.name for p in await store.list()] == ["tokyo"]


# --- what a failed call returns -----------------------------------------------------------------


async def _boom(_ctx: ToolContext, _args: dict[str, Any]) -> str:
    raise RuntimeError("the backend said: token=abc123")


BOOM = Tool(
    "lookup_ticket",
    "Find a ticket.",
    {"type": "object", "properties": {"id": {"type": "string"}, "verbose": {"type": "boolean"}}, "required": ["id"]},
    _boom,
)


async def test_a_raising_tool_returns_a_hint_and_only_the_approved_presets(
    storage: Storage, caplog: pytest.LogCaptureFixture
) -> None:
    store = PresetStore(storage.db)
    await store.add(
        "lookup_ticket", "by-id", {"id": "OPS-1"}, "ids look like OPS-123", created_by="root", approved=True
    )
    await store.add("lookup_ticket", "guess", {"id": "anything"}, "unreviewed", created_by="bob", approved=False)
    tools = ToolRegistry([CURRENT_TIME, BOOM], presets=store)
    with caplog.at_level(logging.INFO, logger="clawgate.tools"):
        out = json.loads(await tools.call(CTX, "lookup_ticket", '{"id": "7"}'))
    assert out["error"] == "lookup_ticket failed: RuntimeError"  # never the exception's text
    assert out["hint"] == RAISED_HINT
    assert out["presets"] == [{"name": "by-id", "arguments": {"id": "OPS-1"}, "note": "ids look like OPS-123"}]
    assert "tool_failed_hint tool=lookup_ticket kind=raised presets=1" in caplog.text
    assert "OPS-1" not in caplog.text  # no preset content in logs either
    assert len(await store.list()) == 2  # nothing stored from the failure


async def test_invalid_arguments_say_what_the_tool_takes(storage: Storage) -> None:
    tools = ToolRegistry([BOOM], presets=PresetStore(storage.db))
    out = json.loads(await tools.call(CTX, "lookup_ticket", '["OPS-1"]'))
    assert out["error"].startswith("invalid arguments")
    assert out["hint"] == "Send the arguments as one JSON object with id; its parameters are id, verbose."
    assert "presets" not in out  # none saved


async def test_an_unknown_tool_lists_the_available_ones_and_offers_no_presets(storage: Storage) -> None:
    store = PresetStore(storage.db)
    await store.add("lookup_ticket", "by-id", {"id": "OPS-1"}, None, created_by="root", approved=True)
    tools = ToolRegistry([CURRENT_TIME], presets=store)  # lookup_ticket is not offered here
    out = json.loads(await tools.call(CTX, "lookup_ticket", "{}"))
    assert out["error"] == "unknown tool 'lookup_ticket'" and out["available"] == ["get_current_time"]
    assert "hint" in out and "presets" not in out


async def test_a_tool_reporting_its_own_error_keeps_it_and_gets_the_presets(storage: Storage) -> None:
    store = PresetStore(storage.db)
    tools = ToolRegistry([CURRENT_TIME], presets=store)
    plain = await tools.call(CTX, "get_current_time", '{"timezone": "Mars/Olympus"}')
    assert json.loads(plain) == {"error": "unknown time zone 'Mars/Olympus'"}  # unchanged without presets
    await store.add("get_current_time", "berlin", {"timezone": "Europe/Berlin"}, None, created_by="cli", approved=True)
    out = json.loads(await tools.call(CTX, "get_current_time", '{"timezone": "Mars/Olympus"}'))
    assert out["error"] == "unknown time zone 'Mars/Olympus'" and out["presets"][0]["name"] == "berlin"
    assert "hint" in out
    ok = json.loads(await tools.call(CTX, "get_current_time", '{"timezone": "Europe/Berlin"}'))
    assert "presets" not in ok and ok["timezone"] == "Europe/Berlin"


class _Broken:
    async def approved_for(self, tool: str, limit: int = MAX_OFFERED) -> Sequence[Preset]:
        raise OSError("database unavailable")


async def test_presets_that_cannot_be_read_leave_the_hint_and_say_so(caplog: pytest.LogCaptureFixture) -> None:
    tools = ToolRegistry([BOOM], presets=_Broken())
    with caplog.at_level(logging.INFO, logger="clawgate.tools"):
        out = json.loads(await tools.call(CTX, "lookup_ticket", '{"id": "7"}'))
    assert out["hint"] == RAISED_HINT and "presets" not in out
    assert "tool_presets_unavailable tool=lookup_ticket error=OSError" in caplog.text
