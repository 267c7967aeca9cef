"""Hot reload of config.yaml (on a file change, SIGHUP, or SIGUSR1 to force it), what a reload
refuses (a file that takes every user, token or the model away), files being written, and graceful
shutdown (SIGTERM lets turns in flight finish within shutdown.timeout_seconds), against a real
gateway and the fake LLM."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import os
import signal
import threading
import time
import types
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from gateway.app import Gateway
from gateway.config.load import load_config, parse_config
from gateway.config.model import Config
from gateway.core.logs import redactor
from gateway.reload import plan_reload
from gateway.reload_files import PID_FILE, STATUS_FILE
from memory.store.presets import PresetError, PresetStore
from memory.store.storage import Storage
from tests.conftest import ALICE_TOKEN, BOB_TOKEN, ROOT_TOKEN, auth, config_data, say
from tests.fakes.llm import FakeLLM, Gate, Hang, Reply, ToolCall
from tests.waits import until

TELEGRAM_TOKEN = "123456:AAbbCCddEEffGGhhIIjjKKllMMnnOOppQQ"


def write(path: Path, data: dict[str, Any] | str, *, rename: bool = False) -> None:
    """Write config.yaml in place, or (`rename`) as editors do: a new file renamed over the old."""
    text = data if isinstance(data, str) else yaml.safe_dump(data)
    if rename:
        tmp = path.with_suffix(".swp")
        tmp.write_text(text)
        os.replace(tmp, path)
    else:
        path.write_text(text)


class World:
    def __init__(self, tmp_path: Path, fake: FakeLLM) -> None:
        self.path = tmp_path / "config.yaml"
        self.data = config_data(tmp_path, fake)
        self.fake = fake
        self.gw: Gateway | None = None
        self.stop_at_end = True  # false: run_until_signal stops it

    def edit(self, change: Callable[[dict[str, Any]], None], *, rename: bool = False) -> None:
        data = copy.deepcopy(self.data)
        change(data)
        write(self.path, data, rename=rename)

    def gateway(self, poll_seconds: float = 0.05) -> Gateway:
        write(self.path, self.data)
        self.gw = Gateway(load_config(self.path, env={}), config_path=self.path)
        assert self.gw.reloader is not None
        self.gw.reloader.poll_seconds = poll_seconds
        self.gw.reloader.debounce_seconds = 0.02
        return self.gw

    async def start(self, poll_seconds: float = 0.05) -> Gateway:
        gw = self.gateway(poll_seconds)
        await gw.start()
        await gw.llm.ready()
        return gw

    async def reloaded(self, attempts: int) -> None:
        assert self.gw is not None and self.gw.reloader is not None
        reloader = self.gw.reloader
        await until(lambda: reloader.attempts >= attempts)


@pytest.fixture
async def world(tmp_path: Path, fake_llm: FakeLLM) -> AsyncIterator[World]:
    w = World(tmp_path, fake_llm)
    yield w
    if w.gw is not None and w.stop_at_end:
        await w.gw.stop(deadline=1)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
        yield session


def system_prompt(request: dict[str, Any]) -> str:
    return str(request["messages"][0]["content"])


def new_model_and_prompt(data: dict[str, Any]) -> None:
    data["ai"]["model"] = "openai/fake-model-2"
    data["agents"] = {"list": [{"name": "default", "instructions": "You are Reload Bot."}]}


# -- a file change ---------------------------------------------------------------------------------


async def test_a_changed_file_gives_the_next_turn_the_new_model_and_prompt(
    world: World, fake_llm: FakeLLM, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    gw = await world.start()
    await say(http, gw, "before")
    assert fake_llm.requests[-1]["model"] == "fake-model"
    assert "Reload Bot" not in system_prompt(fake_llm.requests[-1])

    world.edit(new_model_and_prompt, rename=True)  # as vim and most editors save
    await world.reloaded(1)
    await say(http, gw, "after")
    assert fake_llm.requests[-1]["model"] == "fake-model-2"
    assert system_prompt(fake_llm.requests[-1]).startswith("You are Reload Bot.")
    assert "config_reloaded trigger=file changed=agents,ai" in caplog.text
    assert gw.reloader is not None and gw.reloader.last is not None
    assert gw.reloader.last.result == "applied" and gw.reloader.needs_restart == ()


async def test_an_invalid_file_keeps_the_last_good_config_and_lists_the_problems(
    world: World, fake_llm: FakeLLM, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    gw = await world.start()

    def broken(data: dict[str, Any]) -> None:
        new_model_and_prompt(data)
        data["ai"]["retries"] = "lots"
        data["ai"]["colour"] = "blue"
        data["users"]["bob"]["tokens"] = ["short-secret"]

    world.edit(broken)
    await world.reloaded(1)
    failed = next(r.getMessage() for r in caplog.records if "config_reload_failed" in r.getMessage())
    for path in ("ai.retries", "ai.colour: unknown key", "users.bob.tokens[0]"):
        assert path in failed
    assert "problems=3" in failed and "short-secret" not in caplog.text

    assert await say(http, gw, "still there?") == "echo: still there?"
    assert fake_llm.requests[-1]["model"] == "fake-model"  # the last good config
    assert await say(http, gw, "bob too", token=BOB_TOKEN) == "echo: bob too"
    status = await (await http.get(gw.url + "/api/v1/status", headers=auth(ROOT_TOKEN))).json()
    assert status["config"]["last_reload"]["result"] == "failed"
    assert any(e.startswith("ai.retries:") for e in status["config"]["last_reload"]["errors"])

    write(world.path, "ai: [unclosed\n")  # not even YAML
    await world.reloaded(2)
    failures = [r.getMessage() for r in caplog.records if "config_reload_failed" in r.getMessage()]
    assert len(failures) == 2 and 'errors="line ' in failures[1] and "invalid YAML" in failures[1]

    world.edit(new_model_and_prompt)  # fixed: it applies
    await world.reloaded(3)
    await say(http, gw, "fixed")
    assert fake_llm.requests[-1]["model"] == "fake-model-2"


async def test_changes_that_need_a_restart_are_logged_and_left_as_they_run(
    world: World, http: aiohttp.ClientSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gw = await world.start()
    assert gw.reloader is not None

    def wired(data: dict[str, Any]) -> None:
        data["storage"]["data_dir"] = str(tmp_path / "elsewhere")
        data["channels"]["web"]["port"] = 18080
        data["channels"]["telegram"] = {"token": TELEGRAM_TOKEN}
        data["logging"] = {"level": "DEBUG"}  # this one applies now

    world.edit(wired)
    await world.reloaded(1)
    line = next(r.getMessage() for r in caplog.records if "config_reload_needs_restart" in r.getMessage())
    paths = set(line.split("paths=")[1].split(","))
    assert paths == {"storage.data_dir", "channels.web.port", "channels.telegram"}
    assert TELEGRAM_TOKEN not in caplog.text
    assert gw.config.storage.data_dir == tmp_path / "data"
    assert set(gw.config.channels) == {"web"} and set(gw.adapters) == {"web"}
    assert gw.config.channels["web"].port == 0
    assert gw.config.logging.level == "DEBUG" and logging.getLogger().level == logging.DEBUG
    assert "config_reloaded trigger=file changed=logging" in caplog.text
    assert set(gw.reloader.needs_restart) == paths
    assert await say(http, gw, "same server") == "echo: same server"

    world.edit(lambda data: None)  # back as it runs: nothing waits for a restart any more
    await world.reloaded(2)
    assert gw.reloader.needs_restart == ()


async def test_a_token_removed_from_config_stops_working_for_rest_console_and_open_sockets(
    world: World, http: aiohttp.ClientSession
) -> None:
    gw = await world.start()
    r = await http.post(gw.url + "/api/v1/session", json={"token": BOB_TOKEN})  # a console session
    assert r.status == 200
    assert (await http.get(gw.url + "/api/v1/session")).status == 200
    assert await say(http, gw, "hi", token=BOB_TOKEN) == "echo: hi"
    ws = await http.ws_connect(gw.url + "/ws")  # a chat window left open
    await ws.send_json({"type": "hello", "token": BOB_TOKEN, "conversation": "main"})
    assert (await ws.receive_json(timeout=5))["type"] == "ready"

    carol_token = "carol-token-0123456789"

    def rotate(data: dict[str, Any]) -> None:
        data["users"]["bob"]["tokens"] = []
        data["users"]["carol"] = {"tokens": [carol_token]}

    world.edit(rotate)
    await world.reloaded(1)
    r = await http.post(gw.url + "/api/v1/messages", json={"text": "hi"}, headers=auth(BOB_TOKEN))
    assert r.status == 401
    assert (await http.get(gw.url + "/api/v1/session")).status == 401  # the cookie's token is gone
    assert (await http.get(gw.url + "/v1/models", headers=auth(BOB_TOKEN))).status == 401
    assert (await http.get(gw.url + "/api/v1/session", headers=auth(BOB_TOKEN))).status == 401
    assert await say(http, gw, "new here", token=carol_token) == "echo: new here"
    await ws.send_json({"type": "message", "text": "still there?"})
    refused = await ws.receive_json(timeout=5)
    assert refused["fatal"] and "no longer valid" in refused["error"]
    assert (await ws.receive(timeout=5)).type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
    assert not any("still there?" in str(r["messages"]) for r in world.fake.requests)  # never answered
    # The new token is a secret like the others: redacted from logs, refused by memory and jobs.
    assert redactor().redact(f"token {carol_token}") == "token [redacted]"
    assert gw.jobs is not None and gw.session_memory is not None
    assert carol_token in gw.jobs.secrets and carol_token in gw.session_memory.daily.secrets
    assert gw.router is not None
    presets = gw.router.engine.tools.presets
    assert isinstance(presets, PresetStore)
    with pytest.raises(PresetError):  # a tool preset may not carry it either
        await presets.add("search", "leak", {"query": carol_token}, None, created_by="alice", approved=True)
    assert await say(http, gw, "still me") == "echo: still me"


async def test_an_admin_taken_out_of_the_config_is_a_plain_user_at_once(world: World) -> None:
    world.data["users"]["dana"] = {"roles": ["admin"], "identities": ["telegram:77"]}
    gw = await world.start()
    assert gw.storage is not None
    ids = gw.storage.identities
    assert (await ids.resolve("telegram:77")).roles == ("admin",)

    world.edit(lambda data: data["users"].pop("dana"))
    await world.reloaded(1)
    dana = await ids.get_user("dana")
    assert dana is not None and dana.roles == ("user",)
    stranger = await ids.resolve("telegram:77")  # the account is no longer dana's
    assert stranger.id != "dana" and stranger.roles == ("user",)


async def test_a_turn_under_way_finishes_with_the_config_it_started_with(
    world: World, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    gw = await world.start()
    assert gw.reloader is not None
    gw.reloader.poll_seconds = 3600  # this test reloads by hand
    fake_llm.script(Gate(then=ToolCall("get_current_time")))  # type: ignore[arg-type]
    turn = asyncio.create_task(say(http, gw, "what time is it?"))
    await fake_llm.wait_requests(1)
    world.edit(new_model_and_prompt)
    outcome = await gw.reloader.reload("test")
    assert outcome.result == "applied"
    fake_llm.release()
    await turn
    assert [r["model"] for r in fake_llm.requests] == ["fake-model", "fake-model"]  # the tool round too
    await say(http, gw, "and now?")
    assert fake_llm.requests[-1]["model"] == "fake-model-2"


async def test_every_part_that_keeps_the_config_gets_the_new_one(world: World) -> None:
    gw = await world.start()
    assert gw.reloader is not None
    old = gw.config
    world.edit(new_model_and_prompt)
    assert (await gw.reloader.reload("test")).result == "applied"
    holders = config_holders(gw)
    assert len(holders) >= 10  # router, engine, prompt context, memory, recall, console, ...
    stale = [where for where, value in holders if value is not gw.config]
    assert stale == [], f"still on the old config: {stale}"
    assert old is not gw.config


def config_holders(root: object) -> list[tuple[str, Config]]:
    """Every attribute, anywhere in the gateway's own objects, that holds a Config."""
    found: list[tuple[str, Config]] = []
    seen: set[int] = set()
    stack: list[tuple[str, object]] = [("gateway", root)]
    while stack:
        where, obj = stack.pop()
        if isinstance(obj, Config):
            found.append((where, obj))
            continue
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        children: list[tuple[str, object]] = []
        if isinstance(obj, types.MethodType):
            children = [(f"{where}.__self__", obj.__self__)]
        elif isinstance(obj, (list, tuple, set, frozenset)):
            children = [(f"{where}[{i}]", v) for i, v in enumerate(obj)]
        elif isinstance(obj, dict):
            children = [(f"{where}[{k!r}]", v) for k, v in obj.items()]
        elif type(obj).__module__.split(".")[0] in ("gateway", "memory", "channels"):
            attrs = dict(vars(obj)) if hasattr(obj, "__dict__") else {}
            for slot in getattr(type(obj), "__slots__", ()):
                if hasattr(obj, slot):
                    attrs[slot] = getattr(obj, slot)
            children = [(f"{where}.{name}", v) for name, v in attrs.items()]
        stack += children
    return found


# -- what a reload refuses -------------------------------------------------------------------------


async def config_status(http: aiohttp.ClientSession, gw: Gateway) -> dict[str, Any]:
    """The console's view of the config (GET /api/v1/status, as an administrator)."""
    status = await (await http.get(gw.url + "/api/v1/status", headers=auth(ROOT_TOKEN))).json()
    return dict(status["config"])


def refused_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("config_reload_refused")]


@pytest.mark.parametrize(
    "text",
    ["", "\n\n", "# emptied by a script\n# and nothing else\n", "{}\n", "null\n"],
    ids=["empty", "blank", "comments", "braces", "null"],
)
async def test_an_emptied_file_is_refused_and_everyone_keeps_working(
    world: World, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture, text: str
) -> None:
    gw = await world.start()
    write(world.path, text)
    await world.reloaded(1)
    assert await say(http, gw, "still here?") == "echo: still here?"  # alice's token still works
    assert await say(http, gw, "me too", token=BOB_TOKEN) == "echo: me too"
    assert refused_lines(caplog) == [
        f'config_reload_refused reason=empty_document trigger=file file={world.path} kept="the last good config" '
        'force="clawgate reload --force"'
    ]
    last = (await config_status(http, gw))["last_reload"]
    assert last["result"] == "refused" and last["trigger"] == "file"
    assert last["reason"] == f"{world.path} was not applied: the file is empty (nothing but comments, {{}} or null)"
    assert gw.reloader is not None and gw.reloader.last is not None and gw.reloader.last.result == "refused"


async def test_a_truncated_file_that_lost_its_users_is_refused(
    world: World, fake_llm: FakeLLM, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    gw = await world.start()
    new_model_and_prompt(world.data)  # what the cut file still says would apply, were it whole
    text = yaml.safe_dump(world.data)
    write(world.path, text[: text.index("users:")])  # cut where a crash or a full disk stopped the write
    await world.reloaded(1)
    (line,) = refused_lines(caplog)
    assert line.startswith("config_reload_refused reason=no_users,no_tokens trigger=file")
    for secret in (ALICE_TOKEN, BOB_TOKEN, ROOT_TOKEN):
        assert secret not in caplog.text
    assert await say(http, gw, "who am I?") == "echo: who am I?"
    assert fake_llm.requests[-1]["model"] == "fake-model"  # nothing of the cut file applied
    last = (await config_status(http, gw))["last_reload"]
    assert last["reason"] == (
        f"{world.path} was not applied: it declares no users (the running config has 3); "
        "no user has a token any more (the running config has 3)"
    )


async def test_a_file_without_the_model_is_refused(
    world: World, fake_llm: FakeLLM, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    gw = await world.start()
    world.edit(lambda data: data["ai"].pop("model"))
    await world.reloaded(1)
    assert refused_lines(caplog)[0].startswith("config_reload_refused reason=no_model trigger=file")
    assert gw.reloader is not None and gw.reloader.last is not None
    assert gw.reloader.last.reason.endswith("was not applied: ai.model is gone; agent default would have no model")
    assert await say(http, gw, "still answered?") == "echo: still answered?"
    assert fake_llm.requests[-1]["model"] == "fake-model"


async def test_a_forced_reload_applies_a_valid_file_that_takes_every_user_away(
    world: World, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    gw = await world.start(poll_seconds=3600)  # this test reloads by hand
    assert gw.reloader is not None

    def broken(data: dict[str, Any]) -> None:
        data.pop("users")
        data["ai"]["retries"] = "lots"

    world.edit(broken)  # forced or not, a file that does not validate never applies
    failed = await gw.reloader.reload("test", force=True)
    assert failed.result == "failed" and failed.errors[0].startswith("ai.retries:")
    assert await say(http, gw, "still in") == "echo: still in"

    world.edit(lambda data: data.pop("users"))
    assert (await gw.reloader.reload("test")).result == "refused"
    outcome = await gw.reloader.reload("test", force=True)
    assert (outcome.result, outcome.changed, outcome.forced) == ("applied", ["users"], True)
    assert "config_reload_forced trigger=test reason=no_users,no_tokens" in caplog.text
    r = await http.post(gw.url + "/api/v1/messages", json={"text": "hi"}, headers=auth(ALICE_TOKEN))
    assert r.status == 401


async def test_the_outcomes_are_written_for_clawgate_reload(
    world: World, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    gw = await world.start(poll_seconds=3600)
    assert gw.reloader is not None
    status_file = gw.config.storage.data_dir / STATUS_FILE
    world.edit(new_model_and_prompt)
    await gw.reloader.reload("test")
    write(world.path, "")
    await gw.reloader.reload("test")
    written = json.loads(status_file.read_text())
    assert written["pid"] == os.getpid()
    assert [(o["result"], o["changed"]) for o in written["recent"]] == [("applied", ["agents", "ai"]), ("refused", [])]
    assert written["last_reload"] == written["recent"][-1] and written["file"] == str(world.path)
    assert gw.reloader.last is not None and gw.reloader.last.file_sha256 is not None
    assert written["recent"][1]["file_sha256"] == gw.reloader.last.file_sha256 != written["recent"][0]["file_sha256"]

    status_file.unlink()
    status_file.mkdir()  # cannot be written now: the reload happens all the same, and says so
    world.edit(lambda data: None)
    assert (await gw.reloader.reload("test")).result == "applied"
    assert f"reload_status_not_written file={status_file}" in caplog.text


# -- a file being written ---------------------------------------------------------------------------


def append_slowly(path: Path, text: str, pieces: int = 60, pause: float = 0.003) -> threading.Thread:
    """Write `text` to `path` a piece at a time, as a slow `cat new.yaml > config.yaml` does; the
    file is emptied first, here."""
    path.write_text("")
    size = len(text) // pieces + 1

    def run() -> None:
        for i in range(0, len(text), size):
            with path.open("a") as f:
                f.write(text[i : i + size])
            time.sleep(pause)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


async def test_a_reload_reads_a_file_being_written_once_it_holds_still(
    world: World, fake_llm: FakeLLM, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    gw = await world.start(poll_seconds=3600)
    assert gw.reloader is not None
    gw.reloader.debounce_seconds = 0.5  # far longer than the writer's pauses
    data = copy.deepcopy(world.data)
    new_model_and_prompt(data)
    writer = append_slowly(world.path, yaml.safe_dump(data))
    outcome = await gw.reloader.reload("sighup")  # as a signal would, while the file is written
    await asyncio.to_thread(writer.join, 10)
    assert (outcome.result, outcome.changed) == ("applied", ["agents", "ai"])
    assert "config_reload_refused" not in caplog.text and "config_reload_failed" not in caplog.text
    await say(http, gw, "whole?")
    assert fake_llm.requests[-1]["model"] == "fake-model-2"


async def test_a_file_that_never_holds_still_is_not_read(
    world: World, fake_llm: FakeLLM, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    gw = await world.start(poll_seconds=3600)
    reloader = gw.reloader
    assert reloader is not None
    reloader.debounce_seconds = 0.05
    reloader.settle_seconds = 0.5
    data = copy.deepcopy(world.data)
    new_model_and_prompt(data)
    text = yaml.safe_dump(data)
    stop = threading.Event()

    def churn() -> None:  # valid every time it is whole, but never the same for long
        i = 0
        while not stop.is_set():
            world.path.write_text(f"{text}# {i}\n")
            i += 1
            time.sleep(0.002)

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        outcome = await reloader.reload("sighup")
    finally:
        stop.set()
        await asyncio.to_thread(thread.join, 10)
    assert (outcome.result, outcome.errors) == (
        "failed",
        ["(file): still being written after 0.5 s (it kept changing), so it was not read"],
    )
    assert "config_reload_skipped reason=file_still_changing trigger=sighup" in caplog.text
    await say(http, gw, "as before?")
    assert fake_llm.requests[-1]["model"] == "fake-model"


# -- signals ---------------------------------------------------------------------------------------


def up(gw: Gateway) -> bool:
    return gw._ready  # started: its web server listens and the signal handlers are in place


def handled(sig: signal.Signals) -> bool:
    """Is a handler installed (by the gateway under test)? Never send a signal that would kill pytest."""
    return signal.getsignal(sig) not in (signal.SIG_DFL, signal.SIG_IGN, None)


@pytest.fixture
async def running(world: World) -> AsyncIterator[tuple[Gateway, asyncio.Task[None]]]:
    """A gateway in `run_until_signal`, as `clawgate run` runs it, in this test's loop."""
    gw = world.gateway(poll_seconds=3600)  # only signals reload here
    world.stop_at_end = False
    task = asyncio.create_task(gw.run_until_signal())
    await until(lambda: up(gw))
    await gw.llm.ready()
    yield gw, task
    if not task.done():
        gw._stopping.set()
        await asyncio.wait_for(task, 15)
    for sig in (signal.SIGHUP, signal.SIGUSR1, signal.SIGTERM):
        assert not handled(sig)  # put back as they were


async def test_sighup_reloads_the_config(
    running: tuple[Gateway, asyncio.Task[None]], world: World, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    gw, _ = running
    world.edit(new_model_and_prompt)
    assert handled(signal.SIGHUP)
    os.kill(os.getpid(), signal.SIGHUP)
    await world.reloaded(1)
    assert gw.reloader is not None and gw.reloader.last is not None
    assert gw.reloader.last.trigger == "sighup" and gw.reloader.last.result == "applied"
    await say(http, gw, "after the signal")
    assert fake_llm.requests[-1]["model"] == "fake-model-2"


async def test_sighup_refuses_an_emptied_file_and_sigusr1_forces_it(
    running: tuple[Gateway, asyncio.Task[None]], world: World, http: aiohttp.ClientSession
) -> None:
    gw, _ = running
    assert gw.reloader is not None
    data = copy.deepcopy(world.data)
    data.pop("users")
    write(world.path, data)
    assert handled(signal.SIGHUP) and handled(signal.SIGUSR1)
    os.kill(os.getpid(), signal.SIGHUP)
    await world.reloaded(1)
    assert gw.reloader.last is not None
    assert (gw.reloader.last.trigger, gw.reloader.last.result) == ("sighup", "refused")
    assert await say(http, gw, "after the signal") == "echo: after the signal"

    os.kill(os.getpid(), signal.SIGUSR1)
    await world.reloaded(2)
    last = gw.reloader.last
    assert (last.trigger, last.result, last.forced, last.changed) == ("sigusr1", "applied", True, ["users"])
    r = await http.post(gw.url + "/api/v1/messages", json={"text": "hi"}, headers=auth(ALICE_TOKEN))
    assert r.status == 401


async def test_the_pid_file_names_the_running_gateway_until_it_stops(
    running: tuple[Gateway, asyncio.Task[None]], world: World
) -> None:
    gw, task = running
    pid_file = gw.config.storage.data_dir / PID_FILE
    await until(pid_file.exists)  # written once start() has returned
    assert pid_file.read_text() == f"{os.getpid()}\n"
    gw._stopping.set()
    await asyncio.wait_for(task, 15)
    assert not pid_file.exists()


async def test_a_pid_file_that_cannot_be_written_is_a_warning_not_a_failure(
    world: World, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    gw = world.gateway(poll_seconds=3600)
    world.stop_at_end = False
    (gw.config.storage.data_dir / PID_FILE).mkdir(parents=True)  # a folder where the file belongs
    task = asyncio.create_task(gw.run_until_signal())
    await until(lambda: up(gw))
    try:
        assert await say(http, gw, "running anyway") == "echo: running anyway"
        await until(lambda: "pid_file_not_written" in caplog.text)
        line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("pid_file_not_written"))
        assert f'hint="clawgate reload cannot find this gateway; kill -HUP {os.getpid()} reloads"' in line
    finally:
        gw._stopping.set()
        await asyncio.wait_for(task, 15)
    assert (gw.config.storage.data_dir / PID_FILE).is_dir()  # not ours to remove


async def test_sigterm_lets_a_turn_in_flight_finish(
    running: tuple[Gateway, asyncio.Task[None]],
    fake_llm: FakeLLM,
    http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    gw, task = running
    fake_llm.script(Gate(Reply("finished after the signal")))
    pending = asyncio.create_task(say(http, gw, "a slow question"))
    await fake_llm.wait_requests(1)
    assert handled(signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGTERM)
    await until(lambda: gw._stopping.is_set())
    assert not task.done()  # waiting for the turn, within shutdown.timeout_seconds (8 s by default)
    fake_llm.release()
    assert await pending == "finished after the signal"
    await asyncio.wait_for(task, 15)
    assert "gateway_stopped" in caplog.text and "turns_cancelled_at_shutdown" not in caplog.text


async def test_turns_past_the_shutdown_deadline_are_cancelled_and_kept_for_the_next_start(
    tmp_path: Path, world: World, fake_llm: FakeLLM, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    world.data["shutdown"] = {"timeout_seconds": 0.2}
    gw = world.gateway(poll_seconds=3600)
    world.stop_at_end = False
    task = asyncio.create_task(gw.run_until_signal())
    await until(lambda: up(gw))
    fake_llm.script(Hang())
    pending = asyncio.create_task(say(http, gw, "this one hangs"))
    await fake_llm.wait_requests(1)
    assert handled(signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGTERM)
    await asyncio.wait_for(task, 10)
    assert "gateway_stopping deadline_seconds=0.2" in caplog.text
    assert "turns_cancelled_at_shutdown count=1" in caplog.text
    with pytest.raises((aiohttp.ClientError, AssertionError)):
        await pending
    storage = await Storage.open(gw.config.storage.resolved_database_url)
    try:
        assert len(await storage.journal.unfinished()) == 1  # answered at the next start
    finally:
        await storage.close()


# -- what applies now and what waits (pure) --------------------------------------------------------


def config(**changes: Any) -> Config:
    data: dict[str, Any] = {
        "ai": {"model": "openai/a", "api_key": "sk-test-000000000000000000"},
        "channels": {
            "web": {"host": "0.0.0.0", "port": 8080},
            "telegram": {"token": TELEGRAM_TOKEN, "dm_policy": "pairing"},
        },
        "users": {"alice": {"tokens": [ALICE_TOKEN]}},
    }
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return parse_config(data, "test", env={})


@pytest.mark.parametrize(
    ("changes", "live", "restart"),
    [
        ({}, (), ()),
        ({"ai__model": "openai/b", "ai__temperature": 0.2}, ("ai.model", "ai.temperature"), ()),
        ({"channels__telegram__dm_policy": "open"}, ("channels.telegram.dm_policy",), ()),
        ({"channels__telegram__allow_from": ["telegram:9"]}, ("channels.telegram.allow_from",), ()),
        ({"channels__telegram__token": "654321:ZZbbCCddEEffGGhhIIjjKKllMMnnOOppQQ"}, (), ("channels.telegram.token",)),
        ({"channels__telegram__mode": "webhook", "channels__telegram__webhook_secret": "s" * 16}, (), None),
        ({"channels__web__port": 9090}, (), ("channels.web.port",)),
        ({"channels__slack": {"bot_token": "xoxb-1", "app_token": "xapp-1"}}, (), ("channels.slack",)),
        ({"storage__database_url": "postgresql+asyncpg://u:p@db/x"}, (), ("storage.database_url",)),
        ({"memory__search__provider": "local", "memory__recall__limit": 3}, ("memory.recall.limit",), None),
        ({"users__bob": {"tokens": [BOB_TOKEN]}, "logging__level": "DEBUG"}, ("users.bob", "logging.level"), ()),
        ({"timezone": "Europe/Berlin", "shutdown__timeout_seconds": 2}, ("shutdown.timeout_seconds",), ("timezone",)),
    ],
)
def test_plan_splits_live_changes_from_restart_ones(
    changes: dict[str, Any], live: tuple[str, ...], restart: tuple[str, ...] | None
) -> None:
    running = config()
    plan = plan_reload(running, config(**changes))
    assert plan.problems == ()
    assert set(plan.live) == set(live)
    if restart is not None:
        assert set(plan.restart) == set(restart)
    # What waits for a restart stays as it runs; everything else is the new file.
    assert plan_reload(running, plan.config).restart == ()
    assert plan.config.storage == running.storage and plan.config.timezone == running.timezone
    assert set(plan.config.channels) == set(running.channels)
    assert TELEGRAM_TOKEN not in repr(plan) and ALICE_TOKEN not in repr(plan)


def test_a_new_file_that_only_fits_after_a_restart_is_refused() -> None:
    running = config()  # binds 0.0.0.0 with alice's token
    new = config(channels__web__host="127.0.0.1", users={})  # fine on loopback, without tokens
    plan = plan_reload(running, new)
    assert [p.path for p in plan.problems] == ["channels.web.host"]
    assert "wait for a restart" in plan.problems[0].reason
