"""`clawgate reload [--force]` against a real gateway process (`clawgate run`), as an operator uses
them: what it prints for each outcome, its exit codes, and what a person chatting notices."""

from __future__ import annotations

import signal
from pathlib import Path

import aiohttp

from gateway.reload_files import PID_FILE
from tests.cli import run_cli
from tests.conftest import ALICE_TOKEN, auth, config_data
from tests.fakes.llm import FakeLLM
from tests.process import GatewayProcess, write_config


async def status_of(http: aiohttp.ClientSession, url: str, text: str) -> int:
    """The HTTP status of one chat message as alice."""
    r = await http.post(url + "/api/v1/messages", json={"text": text}, headers=auth(ALICE_TOKEN))
    await r.read()
    return r.status


async def reload(path: Path, *more: str) -> tuple[int, str, str]:
    return await run_cli("--config", str(path), "reload", *more)


async def test_reload_says_what_came_of_each_kind_of_file(
    tmp_path: Path, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    path = tmp_path / "config.yaml"
    data = config_data(tmp_path, fake_llm)
    write_config(path, data)
    data_dir = tmp_path / "data"
    gateway = await GatewayProcess.start(path, ready="clawgate is running")  # once its pid file is written
    try:
        assert (data_dir / PID_FILE).read_text() == f"{gateway.proc.pid}\n"
        assert await reload(path) == (0, f"unchanged: the gateway already runs on what {path} says\n", "")

        data["ai"]["model"] = "openai/fake-model-2"
        write_config(path, data)
        assert await reload(path) == (0, f"applied: {path} is in force (changed: ai)\n", "")
        assert await status_of(http, gateway.url, "which model?") == 200
        assert fake_llm.requests[-1]["model"] == "fake-model-2"

        data["storage"]["instance_name"] = "gateway-2"
        write_config(path, data)
        waiting = "waiting for a restart: storage.instance_name (until then the gateway runs as before"
        assert await reload(path) == (0, f"{waiting}; nothing else changed)\n", "")

        data["ai"]["retries"] = "lots"
        write_config(path, data)
        assert await reload(path) == (
            1,
            "",
            f"failed: {path} was not applied, 1 problem(s):\n"
            "  - ai.retries: must be a whole number\n"
            "the gateway keeps its last good config\n",
        )

        data["ai"]["retries"] = 1
        data.pop("users")  # as a bad edit or a truncated write leaves it
        write_config(path, data)
        assert await reload(path) == (
            1,
            "",
            f"refused: {path} was not applied: it declares no users (the running config has 3); "
            "no user has a token any more (the running config has 3)\n"
            "the gateway keeps its last good config; run `clawgate reload --force` to apply it anyway\n",
        )
        assert await status_of(http, gateway.url, "still let in?") == 200

        assert await reload(path, "--force") == (
            0,
            f"applied (forced): {path} is in force (changed: users)\n{waiting})\n",
            "",
        )
        assert await status_of(http, gateway.url, "and now?") == 401
    finally:
        assert await gateway.stop() == 0
    assert "Traceback" not in gateway.text
    assert not (data_dir / PID_FILE).exists()  # removed when it stopped
    assert await reload(path) == (
        2,
        "",
        f"clawgate reload: no gateway is running for {path}: there is no {data_dir / PID_FILE}\n"
        f"start one with: clawgate --config {path} run\n",
    )


async def test_a_killed_gateway_and_a_missing_config_are_said_plainly(tmp_path: Path, fake_llm: FakeLLM) -> None:
    path = tmp_path / "config.yaml"
    write_config(path, config_data(tmp_path, fake_llm))
    gateway = await GatewayProcess.start(path, ready="clawgate is running")  # once its pid file is written
    assert await gateway.stop(signal.SIGKILL) == -signal.SIGKILL
    pid_file = tmp_path / "data" / PID_FILE
    assert pid_file.read_text() == f"{gateway.proc.pid}\n"  # left behind
    for flag in ((), ("--force",)):
        assert await reload(path, *flag) == (
            2,
            "",
            f"clawgate reload: no gateway is running for {path}: {pid_file} names process {gateway.proc.pid}, "
            "which is not running (a gateway that was killed left it)\n"
            f"start one with: clawgate --config {path} run\n",
        )

    missing = tmp_path / "elsewhere.yaml"
    rc, out, err = await reload(missing)
    assert (rc, out, err.splitlines()[0]) == (2, "", f"{missing}: 1 problem(s):")
    assert err.splitlines()[1].startswith("  - (file): file not found (got ")
