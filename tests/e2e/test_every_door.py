"""Every door, tried against a real gateway process as an attacker or a fault would try it: DNS
rebinding, configs that empty themselves, deeply nested JSON, turn order at start-up, token
guessing, a full disk, an unwritable data dir, Slack's double delivery, the chat page's script
policy, /metrics, and the doctor's warning when no public_url is set (docs/security.md)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import sqlite3
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.cli import run_cli
from tests.conftest import ALICE_TOKEN, auth, config_data
from tests.fakes.llm import FakeLLM
from tests.fakes.slack import SIGNING_SECRET, FakeSlack
from tests.process import GatewayProcess, write_config

EVIL = "evil.example"
METRICS_TOKEN = "metrics-token-0123456789"


def config(tmp: Path, fake: FakeLLM, **web: Any) -> dict[str, Any]:
    """The tests' config, with the local visitor an administrator as in the shipped config.yaml."""
    data = config_data(tmp, fake)
    data["channels"]["web"].update(web)
    data["users"]["local"] = {"roles": ["admin"], "identities": ["web:local"]}
    return data


@contextlib.asynccontextmanager
async def running(tmp: Path, data: dict[str, Any], **kwargs: Any) -> AsyncIterator[GatewayProcess]:
    gateway = await GatewayProcess.start(write_config(tmp / "config.yaml", data), **kwargs)
    try:
        yield gateway
    finally:
        # Killed, not stopped: nothing here is about shutting down, and a gateway stopped seconds
        # after its start waits for LiteLLM's import to finish first.
        await gateway.stop(signal.SIGKILL)


@pytest.fixture
async def gateway(tmp_path: Path, fake_llm: FakeLLM) -> AsyncIterator[GatewayProcess]:
    async with running(tmp_path, config(tmp_path, fake_llm, metrics={"token": METRICS_TOKEN})) as gw:
        yield gw


def host(gw: GatewayProcess, name: str) -> dict[str, str]:
    return {"Host": f"{name}:{gw.port}"}


# -- 1. DNS rebinding ---------------------------------------------------------------------------


async def test_a_rebinding_page_gets_nothing_from_any_route(
    gateway: GatewayProcess, http: aiohttp.ClientSession
) -> None:
    evil = host(gateway, EVIL)
    routes = ["/", "/chat.js", "/healthz", "/readyz", "/metrics", "/console", "/console/login", "/v1/models"]
    for path in routes:
        r = await http.get(gateway.url + path, headers={**evil, **auth()})
        assert r.status == 421, path
        assert "does not answer to the host" in (await r.json())["error"]
    r = await http.post(gateway.url + "/api/v1/messages", json={"text": "hi"}, headers={**evil, **auth()})
    assert r.status == 421
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await http.ws_connect(gateway.url + "/ws", headers=evil, origin=f"http://{EVIL}:{gateway.port}")
    assert refused.value.status == 421


async def test_only_a_loopback_name_makes_a_visitor_local(tmp_path: Path, fake_llm: FakeLLM) -> None:
    data = config(tmp_path, fake_llm, public_url="https://chat.example.com")
    async with running(tmp_path, data) as gw, aiohttp.ClientSession() as http:
        for name in ("127.0.0.1", "localhost"):
            async with http.ws_connect(gw.url + "/ws", headers=host(gw, name), origin=f"http://{name}:{gw.port}") as ws:
                await ws.send_json({"type": "hello"})
                ready = await ws.receive_json(timeout=10)
                assert ready["max_upload_bytes"] > 0  # the chat page's attach button knows the server's cap
                assert ready | {"history": [], "max_upload_bytes": 0} == {
                    "type": "ready",
                    "user": "local",
                    "conversation": None,
                    "history": [],
                    "max_upload_bytes": 0,
                    "running": False,
                    "conversations": [],
                }
        # A proxy on this machine forwards people at the public name: a loopback peer, not a local visitor.
        public = {"Host": "chat.example.com"}
        async with http.ws_connect(gw.url + "/ws", headers=public, origin="https://chat.example.com") as ws:
            await ws.send_json({"type": "hello"})
            frame = await ws.receive_json(timeout=10)
            assert frame["type"] == "error" and frame["fatal"] and "unauthorized" in frame["error"]


# -- 2. A config that empties itself -------------------------------------------------------------


async def test_an_emptied_config_is_refused_and_everyone_keeps_working(
    gateway: GatewayProcess, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    config_file = tmp_path / "config.yaml"
    good = config_file.read_text()
    for broken, trigger in (("", "file"), ("ai:\n  model: openai/x\n", "sighup")):
        seen = len(gateway.lines)
        config_file.write_text(broken)
        if trigger == "sighup":
            gateway.send(signal.SIGHUP)
        line = await gateway.wait_log("config_reload_refused", timeout=30, after=seen)
        assert f"trigger={trigger}" in line
        r = await http.post(gateway.url + "/api/v1/messages", json={"text": "still me?"}, headers=auth())
        assert r.status == 200
    config_file.write_text(good)


# -- 3. Deeply nested JSON -----------------------------------------------------------------------


async def test_deeply_nested_json_is_a_400_with_its_reason(
    gateway: GatewayProcess, http: aiohttp.ClientSession
) -> None:
    deep = b"[" * 20_000  # 20 KB: Python's own decoder gives up (RecursionError) at about 1,000
    json_type = {"Content-Type": "application/json"}
    for path, headers in (
        ("/api/v1/messages", auth()),
        ("/v1/chat/completions", auth()),
        ("/api/v1/session", {}),  # the console's sign-in
        ("/api/v1/memory/mem-x/review", auth()),
    ):
        r = await http.post(gateway.url + path, data=deep, headers={**json_type, **headers})
        assert r.status == 400, path
        body = await r.json()
        reason = body["error"]["message"] if isinstance(body["error"], dict) else body["error"]
        assert "levels deep" in reason, path
    async with http.ws_connect(gateway.url + "/ws", origin=gateway.url) as ws:
        await ws.send_str("[" * 50_000)
        frame = await ws.receive_json(timeout=10)
        assert frame["type"] == "error" and "levels deep" in frame["error"]
    assert (await http.get(gateway.url + "/healthz")).status == 200
    assert not any("Traceback" in line or "RecursionError" in line for line in gateway.lines)


# -- 4. Turn order while the model client loads ----------------------------------------------------


async def test_turns_right_after_start_run_in_the_order_they_arrived(
    tmp_path: Path, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    """50 conversations send 4 messages each the moment the gateway is ready (the model client is
    still loading then): every conversation's turns run in the order the journal saw them arrive."""
    async with running(tmp_path, config(tmp_path, fake_llm)) as gw:

        async def send(conv: str, n: int) -> None:
            body = {"text": f"{conv} message {n}", "conversation": conv}
            r = await http.post(gw.url + "/api/v1/messages", json=body, headers=auth())
            assert r.status == 200, await r.text()

        sends = []
        for n in range(4):
            for c in range(50):
                sends.append(asyncio.create_task(send(f"c{c}", n)))
                await asyncio.sleep(0)
        await asyncio.gather(*sends)
    database = sqlite3.connect(tmp_path / "data" / "clawgate.db")
    try:
        for c in range(50):
            key = f"web:dm:alice:c{c}"
            arrived = [
                row[0]
                for row in database.execute(
                    "SELECT payload FROM inbound_events WHERE session_key = ? ORDER BY received_at, event_id", (key,)
                )
            ]
            arrived_texts = [json.loads(p)["text"] for p in arrived]
            answered = [
                row[0]
                for row in database.execute(
                    "SELECT m.content FROM messages m JOIN sessions s ON s.id = m.session_id "
                    "WHERE s.key = ? AND m.role = 'user' ORDER BY m.id",
                    (key,),
                )
            ]
            assert answered == arrived_texts, key
            asked = [r["messages"][-1]["content"] for r in fake_llm.requests]
            assert [text for text in asked if text.startswith(f"c{c} ")] == arrived_texts, key
    finally:
        database.close()


# -- 5. Token guessing ----------------------------------------------------------------------------


async def test_guessing_is_throttled_and_never_locks_out_a_right_token(
    gateway: GatewayProcess, http: aiohttp.ClientSession
) -> None:
    tries: list[tuple[str, Callable[[str], Any]]] = [
        ("rest", lambda t: http.get(gateway.url + "/api/v1/messages", headers=auth(t))),
        ("openai", lambda t: http.get(gateway.url + "/v1/models", headers=auth(t))),
        ("console", lambda t: http.post(gateway.url + "/api/v1/session", json={"token": t})),
    ]
    for name, attempt in tries:
        statuses = []
        for i in range(8):
            r = await attempt(f"{name}-guess-{i:02d}-padding")
            statuses.append(r.status)
        if name == "rest":  # five free failures from this address, then it waits, doubling
            assert statuses[:6] == [401] * 6 and set(statuses[6:]) == {429}, statuses
        else:  # the same address, on another door: it is still waiting
            assert set(statuses) == {429}, (name, statuses)
        assert int(r.headers["Retry-After"]) >= 1
        r = await attempt(ALICE_TOKEN)  # the same address: a proxy everyone shares
        assert r.status == 200, name


# -- 6. A full disk --------------------------------------------------------------------------------


def _can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0


def fill(path: Path) -> None:
    """Write zeros to `path` until the file system is full."""
    with open(path, "wb") as out, contextlib.suppress(OSError):
        while True:
            out.write(b"\0" * (1 << 20))
            out.flush()


@pytest.mark.skipif(not _can_unshare(), reason="needs unshare (util-linux) and user namespaces for a small tmpfs")
async def test_a_full_disk_is_503_not_ready_and_recovers(
    tmp_path: Path, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    """The data dir is a 24 MiB tmpfs of the gateway's own (a mount namespace); the test fills it."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    mount = f'mount -t tmpfs -o size=24m tmpfs {data_dir} && exec "$@"'
    async with running(tmp_path, config(tmp_path, fake_llm), prefix=["unshare", "-rm", "sh", "-c", mount, "sh"]) as gw:
        seen_dir = Path(f"/proc/{gw.proc.pid}/root") / data_dir.relative_to("/")
        assert (await http.get(gw.url + "/readyz")).status == 200
        filler = seen_dir / "filler"
        await asyncio.to_thread(fill, filler)
        async with asyncio.timeout(10):  # as a load balancer polls it (readiness is checked every 2 s)
            while (r := await http.get(gw.url + "/readyz")).status == 200:  # noqa: ASYNC110
                await asyncio.sleep(0.2)
        body = await r.json()
        assert r.status == 503 and body["writable"] is False and "disk is full" in body["problem"]
        outcomes = []
        for i in range(40):  # big messages, until the database runs out of room too
            r = await http.post(gw.url + "/api/v1/messages", json={"text": f"{i} " + "x" * 60_000}, headers=auth())
            assert r.status in (200, 503), await r.text()  # never a 500
            outcomes.append((i, r.status, (await r.json()).get("error", "")))
            if r.status == 503:
                assert "disk is full" in outcomes[-1][2] and r.headers["Retry-After"]
                break
        assert outcomes[-1][1] == 503, "the database never ran out of room"
        filler.unlink()
        async with asyncio.timeout(30):
            while (await http.get(gw.url + "/readyz")).status != 200:  # noqa: ASYNC110  # as a load balancer polls
                await asyncio.sleep(0.2)
        r = await http.post(gw.url + "/api/v1/messages", json={"text": "room again"}, headers=auth())
        assert r.status == 200
        assert not any("Traceback" in line for line in gw.lines)


# -- 7. A data dir that cannot be written ------------------------------------------------------------


async def test_an_unwritable_data_dir_is_explained_without_a_traceback(tmp_path: Path, fake_llm: FakeLLM) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the data dir's parent should be")
    data = config(tmp_path, fake_llm)
    data["storage"]["data_dir"] = str(blocker / "data")
    code, _out, err = await run_cli("--config", str(write_config(tmp_path / "config.yaml", data)), "run")
    assert code == 2
    assert "Traceback" not in err and "storage.data_dir" in err


# -- 8. Slack's message + app_mention pair --------------------------------------------------------------


async def test_slack_s_two_events_for_one_message_are_answered_once(
    tmp_path: Path, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    slack = await FakeSlack().start()
    try:
        data = config(tmp_path, fake_llm)
        data["channels"]["slack"] = {
            "bot_token": slack.bot_token,
            "signing_secret": SIGNING_SECRET,
            "mode": "http",
            "api_base_url": slack.api_base,
            "group_policy": "open",
        }
        async with running(tmp_path, data) as gw:
            message = slack.message("C0TEAM", f"<@{slack.bot_user_id}> when is the deploy?")
            for event in (message, slack.app_mention(message)):  # two envelopes, two event ids, one ts
                body, headers = slack.signed_request(slack.event_body(event))
                r = await http.post(gw.url + "/slack/events", data=body, headers=headers)
                assert r.status == 200
            await slack.wait_for(lambda _: any(not p.edit for p in slack.posted), timeout=20)
            await gw.wait_log("inbound_duplicate")
            assert len([p for p in slack.posted if not p.edit]) == 1
            assert len(fake_llm.requests) == 1
    finally:
        await slack.stop()


# -- 9. The chat page runs no inline script ----------------------------------------------------------------


async def test_the_chat_page_runs_only_its_own_script_files(
    gateway: GatewayProcess, http: aiohttp.ClientSession
) -> None:
    r = await http.get(gateway.url + "/")
    policy = r.headers["Content-Security-Policy"]
    assert "unsafe-inline" not in policy and "script-src" not in policy and "default-src 'self'" in policy
    page = await r.text()
    assert '<script src="/chat.js"' in page and "<script>" not in page and "<style>" not in page
    script = await http.get(gateway.url + "/chat.js")
    assert script.status == 200 and "javascript" in script.headers["Content-Type"]
    assert script.headers["Content-Security-Policy"] == policy


# -- 10. /metrics --------------------------------------------------------------------------------------------


async def test_metrics_are_for_this_machine_or_the_metrics_token(tmp_path: Path, fake_llm: FakeLLM) -> None:
    data = config(tmp_path, fake_llm, public_url="https://chat.example.com", metrics={"token": METRICS_TOKEN})
    async with running(tmp_path, data) as gw, aiohttp.ClientSession() as http:
        local = await http.get(gw.url + "/metrics")
        assert local.status == 200 and "clawgate_turns" in await local.text()
        proxied = {"Host": "chat.example.com"}  # what a proxy in front forwards from anyone
        r = await http.get(gw.url + "/metrics", headers=proxied)
        assert r.status == 401 and "metrics token" in (await r.json())["error"]
        r = await http.get(gw.url + "/metrics", headers={**proxied, **auth(ALICE_TOKEN)})
        assert r.status == 401  # a user's token is not the metrics token
        r = await http.get(gw.url + "/metrics", headers={**proxied, **auth(METRICS_TOKEN)})
        assert r.status == 200


# -- 11. No public_url beyond loopback ------------------------------------------------------------------------


async def test_the_doctor_warns_when_the_web_channel_is_published_without_public_url(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    data = config(tmp_path, fake_llm)
    data["channels"]["web"] = {"host": "0.0.0.0", "port": 0}
    path = write_config(tmp_path / "config.yaml", data)
    code, out, _err = await run_cli("--config", str(path), "doctor", "--offline", "--json")
    assert code == 0
    finding = next(f for f in json.loads(out)["checks"] if f["name"] == "channel web")
    assert finding["status"] == "warn" and "public_url" in finding["hint"]
    data["channels"]["web"]["public_url"] = "https://chat.example.com"
    write_config(path, data)
    code, out, _err = await run_cli("--config", str(path), "doctor", "--offline", "--json")
    finding = next(f for f in json.loads(out)["checks"] if f["name"] == "channel web")
    assert finding["status"] == "ok"


@pytest.fixture(autouse=True)
def _quiet_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The shipped config reads these; a developer's shell must not change what the process sees.
    for name in ("CLAWGATE_TOKEN", "CLAWGATE_CONFIG", "CLAWGATE_HOST", "CLAWGATE_PORT"):
        monkeypatch.delenv(name, raising=False)
