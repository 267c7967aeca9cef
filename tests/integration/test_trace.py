"""Recall traces and tool presets end to end: turns over REST and Telegram with the scripted fake
LLM, `/memory trace` and `/memory preset` in chat, and `clawgate memory trace|preset` as processes."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from gateway.app import Gateway
from memory.store.storage import Storage
from memory.store.traces import BEYOND_LIMIT, CONTEXT_BUDGET, INJECTED, NEAR_REPEAT, TraceItem, TraceStore
from tests.cli import run_cli
from tests.conftest import BOB_TOKEN, ROOT_TOKEN, make_config, say
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.fakes.telegram import FakeTelegram
from tests.memories import memory_id
from tests.prompts import recall_of
from tests.waits import until

SECRET = "sk-proj-" + "Q9w8E7r6" * 6


async def traces_of(gw: Gateway, user: str) -> list[Any]:
    assert gw.traces is not None
    await gw.traces.settle()
    return await gw.traces.store.recent(user_id=user, limit=50)


async def test_a_memory_backed_turn_writes_one_trace_with_used_and_ignored_reasons(
    gateway_factory: Any, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    # Two records with the same words: /remember would not store the second (memory.dedupe), recall must cope.
    gw: Gateway = await gateway_factory(fake_llm, memory__recall__limit=2, memory__dedupe__enabled=False)
    first = memory_id(await say(http, gw, "/remember my favourite editor is Helix"))
    second = memory_id(await say(http, gw, "/remember Helix is my favourite editor"))  # the same words
    other = memory_id(await say(http, gw, "/remember my editor config uses a dark theme"))
    last = memory_id(await say(http, gw, "/remember the office editor meeting about the new printers is on Fridays"))
    await say(http, gw, "which favourite editor is mine?")
    (view,) = await traces_of(gw, "alice")
    trace = view.trace
    assert trace.query == "which favourite editor is mine?" and trace.user_id == "alice"
    reasons = {i.id: i.reason for i in trace.items}
    assert sorted(reasons.values()) == sorted([INJECTED, INJECTED, NEAR_REPEAT, BEYOND_LIMIT])
    assert {reasons[first], reasons[second]} == {INJECTED, NEAR_REPEAT}
    assert reasons[last] == BEYOND_LIMIT and reasons[other] == INJECTED
    assert all(i.used == (i.reason == INJECTED) for i in trace.items)
    recalled = recall_of(fake_llm.requests[-1])
    assert all((i.id in recalled) == i.used for i in trace.items)  # the trace says what the prompt carried

    await say(http, gw, "tell me a joke about ducks")  # nothing recalled, nothing written: no trace
    assert len(await traces_of(gw, "alice")) == 1
    shown = await say(http, gw, "/memory trace")
    assert shown.startswith("Your recall traces") and "which favourite editor is mine?" in shown
    assert "near repeat" in shown and "beyond the limit" in shown
    assert "favourite editor is Helix" not in shown  # ids and reasons, never what a memory says


async def test_written_records_context_budget_and_a_later_confirm_show_in_the_trace(
    gateway_factory: Any, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    # Room for one framed item (~115 characters): the confirmed section fits, the evidence does not.
    gw: Gateway = await gateway_factory(fake_llm, memory__context_budget_chars=150)
    fake_llm.script(ToolCall("store_memory", {"content": "Alice's cat is called Miso"}), Reply("Noted."))
    await say(http, gw, "please remember my cat's name is Miso")
    (view,) = await traces_of(gw, "alice")  # nothing recalled, but a memory was written: traced
    (written,) = view.trace.written
    assert written.action == "stored" and view.trace.items == ()
    stored = written.id

    confirmed = memory_id(await say(http, gw, "/remember my cat Miso eats salmon at noon"))
    await say(http, gw, "what does my cat Miso eat?")
    view = (await traces_of(gw, "alice"))[0]
    items = {i.id: i for i in view.trace.items}
    assert items[confirmed].used and items[confirmed].reason == INJECTED
    assert not items[stored].used and items[stored].reason == CONTEXT_BUDGET
    assert items[stored].needs_confirmation and not items[confirmed].needs_confirmation

    assert "Done" in await say(http, gw, f"/memory confirm {stored}")
    shown = await say(http, gw, "/memory trace 1")
    assert f"{stored} confirmed" in shown and "dropped by the context budget" in shown
    assert "needs confirmation" in shown
    for bad in ("/memory trace 0", "/memory trace 11", "/memory trace many"):
        assert (await say(http, gw, bad)).startswith("Usage: /memory trace")


async def test_memory_trace_shows_the_callers_own_turns_only(
    gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    await say(http, gateway, "/remember my favourite tea is sencha")
    await say(http, gateway, "which tea do I like?")
    assert "No recall traces" in await say(http, gateway, "/memory trace", BOB_TOKEN)
    await say(http, gateway, "/remember my favourite tea is rooibos", BOB_TOKEN)
    await say(http, gateway, "which tea do I like?", BOB_TOKEN)
    mine, bobs = await say(http, gateway, "/memory trace 10"), await say(http, gateway, "/memory trace 10", BOB_TOKEN)
    assert mine.count("which tea do I like?") == 1 and bobs.count("which tea do I like?") == 1
    (alice_view,) = await traces_of(gateway, "alice")
    (bob_view,) = await traces_of(gateway, "bob")
    assert alice_view.trace.items[0].id != bob_view.trace.items[0].id
    assert alice_view.trace.items[0].id not in bobs and bob_view.trace.items[0].id not in mine


# --- groups and public audiences, over Telegram ----------------------------------------------------

PUBLIC_GROUP = -1_001_111_111_111
TEAM_GROUP = -1_002_222_222_222


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegram]:
    tg = await FakeTelegram().start()
    yield tg
    await tg.stop()


async def test_groups_show_only_the_callers_turns_there_and_public_audiences_leave_no_trace(
    gateway_factory: Any, fake_llm: FakeLLM, telegram: FakeTelegram, http: aiohttp.ClientSession
) -> None:
    gw: Gateway = await gateway_factory(
        fake_llm,
        channels__telegram={
            "token": telegram.token,
            "api_base_url": telegram.api_base_url,
            "poll_timeout": 1,
            "request_timeout": 2,
            "dm_policy": "open",
            "require_mention": False,
            "audience": {str(PUBLIC_GROUP): "public"},
        },
    )

    async def in_group(chat: int, text: str, sender: int) -> str:
        """A command's one-message answer (turns are waited for to the end, edits included)."""
        before = len(telegram.sent)
        await telegram.group(text, sender=sender, chat_id=chat)
        await until(lambda: any(not s.edit for s in telegram.sent[before:]))
        return next(s for s in telegram.sent[before:] if not s.edit).text

    async def turn(chat: int, text: str, sender: int) -> None:
        await telegram.group(text, sender=sender, chat_id=chat)
        await until(lambda: any(s.text == f"echo: {text}" for s in telegram.sent))

    assert "Remembered" in await in_group(TEAM_GROUP, "/remember --channel the team deploys on Tuesdays", 1)
    await say(http, gw, "/remember my own deploy checklist has five steps")  # alice's DM memory
    await say(http, gw, "what is in my deploy checklist?")  # a DM trace: never shown in the group
    await turn(TEAM_GROUP, "when does the team deploy?", 1)  # alice (telegram:1)
    await turn(TEAM_GROUP, "when do we deploy again?", 2)  # someone else in the group
    await turn(PUBLIC_GROUP, "when does the team deploy, publicly?", 1)  # public: no recall, no trace

    # Personal: not answered in a Telegram group (docs/channels.md, "Commands in groups"); Slack and
    # Discord answer it privately, with the caller's turns there only (tests/integration/test_groups_replies.py).
    shown = await in_group(TEAM_GROUP, "/memory trace 10", 1)
    assert "ask me in a direct message" in shown and "deploy" not in shown
    assert gw.traces is not None
    await gw.traces.settle()
    sessions = {v.trace.session_key for v in await traces_of(gw, "alice")}
    assert sessions == {"web:dm:alice", f"telegram:group:{TEAM_GROUP}"}  # none in the public group
    in_dm = await say(http, gw, "/memory trace 10")  # all of alice's own, the group's included
    assert "checklist" in in_dm and "when does the team deploy?" in in_dm


# --- presets offered to the model -------------------------------------------------------------------


async def test_a_failing_tool_gets_the_hint_and_the_approved_preset_only(
    gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    saved = await say(
        http,
        gateway,
        '/memory preset add get_current_time berlin {"timezone": "Europe/Berlin"} IANA zones only',
        ROOT_TOKEN,
    )
    assert saved.startswith("Saved pre-")
    proposed = await say(http, gateway, '/memory preset add get_current_time mars {"timezone": "Mars/Base"}', BOB_TOKEN)
    assert proposed.startswith("Proposed pre-") and "not offered until an admin approves" in proposed
    fake_llm.script(ToolCall("get_current_time", {"timezone": "Berlin"}), Reply("It is noon in Berlin."))
    assert await say(http, gateway, "what time is it in Berlin?") == "It is noon in Berlin."
    tool_msg = next(m for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool")
    result = json.loads(tool_msg["content"])
    assert result["error"] == "unknown time zone 'Berlin'" and result["hint"]
    assert result["presets"] == [
        {"name": "berlin", "arguments": {"timezone": "Europe/Berlin"}, "note": "IANA zones only"}
    ]

    listed = await say(http, gateway, "/memory preset list", "alice-token-0123456789")
    assert "berlin" in listed and "mars" not in listed  # someone else's proposal is not listed
    assert "mars" in await say(http, gateway, "/memory preset list", BOB_TOKEN)
    assert "Only an admin" in await say(http, gateway, f"/memory preset approve {preset_id_of(proposed)}", BOB_TOKEN)


def preset_id_of(reply: str) -> str:
    m = re.search(r"pre-[a-z0-9]+", reply)
    assert m, reply
    return m.group(0)


async def test_bad_preset_input_is_refused_with_a_clear_message(gateway: Gateway, http: aiohttp.ClientSession) -> None:
    for command, says in [
        ("/memory preset add get_current_time", "use: TOOL NAME"),
        ("/memory preset add get-time! x {}", "tool name"),
        ("/memory preset add get_current_time berlin Europe/Berlin", "JSON object"),
        ('/memory preset add get_current_time berlin {"timezone": }', "not valid JSON"),
        (f'/memory preset add find_memories keys {{"query": "{SECRET}"}}', "looks like a secret"),
    ]:
        reply = await say(http, gateway, command, ROOT_TOKEN)
        assert reply.startswith("Preset not saved:") and says in reply, (command, reply)
        assert SECRET not in reply
    assert "No tool presets" in await say(http, gateway, "/memory preset list", ROOT_TOKEN)


# --- the operator's CLI -------------------------------------------------------------------------------


def _config_file(tmp_path: Path) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"storage": {"data_dir": str(tmp_path / "data")}}))
    return config


async def test_cli_prints_a_sessions_traces_and_manages_presets(tmp_path: Path) -> None:
    config = _config_file(tmp_path)
    storage = await Storage.open(make_config(tmp_path, None).storage.resolved_database_url)
    try:
        store = TraceStore(storage.db)
        for n in range(3):
            item = TraceItem("record", f"mem-{n}", 0.5, n != 1, INJECTED if n != 1 else NEAR_REPEAT)
            await store.add("telegram:group:-5", "alice", f"ev-{n}", f"question {n}", [item])
        await store.add("web:bob", "bob", "ev-b", "bob's question", [item])
    finally:
        await storage.close()

    rc, out, err = await run_cli("--config", str(config), "memory", "trace", "telegram:group:-5", "--limit", "2")
    assert rc == 0, err
    assert "question 2" in out and "question 1" in out and "question 0" not in out and "bob" not in out
    assert "user alice" in out and "event ev-2" in out and "near repeat" in out
    rc, out, err = await run_cli("--config", str(config), "memory", "trace", "telegram:group:-5", "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert [t["query"] for t in data] == ["question 2", "question 1", "question 0"]
    assert data[1]["items"][0]["reason"] == NEAR_REPEAT and data[0]["session"] == "telegram:group:-5"
    rc, _, err = await run_cli("--config", str(config), "memory", "trace", "web:bob", "--limit", "0")
    assert rc == 2 and "--limit" in err

    rc, out, err = await run_cli(
        "--config",
        str(config),
        "memory",
        "preset",
        "add",
        "find_memories",
        "deploys",
        '{"query": "deploy"}',
        "--note",
        "deploy days",
    )
    assert rc == 0 and "approved" in out, err
    pid = preset_id_of(out)
    rc, _, err = await run_cli(
        "--config", str(config), "memory", "preset", "add", "find_memories", "keys", json.dumps({"query": SECRET})
    )
    assert rc == 2 and "looks like a secret" in err and SECRET not in err
    rc, _, err = await run_cli("--config", str(config), "memory", "preset", "add", "find_memories", "x", "[1, 2]")
    assert rc == 2 and "one JSON object" in err
    rc, out, err = await run_cli("--config", str(config), "memory", "preset", "list", "--json")
    assert rc == 0, err
    assert [(p["name"], p["approved"], p["created_by"]) for p in json.loads(out)] == [("deploys", True, "cli")]
    rc, out, err = await run_cli("--config", str(config), "memory", "preset", "remove", pid)
    assert rc == 0 and f"removed {pid}" in out, err
    rc, _, err = await run_cli("--config", str(config), "memory", "preset", "remove", pid)
    assert rc == 1 and "no preset" in err
