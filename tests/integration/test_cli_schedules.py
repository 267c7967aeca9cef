"""`clawgate schedules list|run|pause|resume`: the config's scheduled runs as an operator sees them,
and what the CLI queues for a running gateway (docs/schedules.md)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from memory.store.storage import Storage
from tests.cli import run_cli

SCHEDULE = {
    "cron": "0 8 * * 1-5",
    "prompt": "Post the standup reminder.",
    "target": {"channel": "web", "conversation": "team-room", "kind": "group"},
}


def _config(tmp_path: Path, **schedules: object) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"storage": {"data_dir": str(tmp_path / "data")}, "schedules": schedules}))
    return path


async def test_list_pause_resume_and_run_now(tmp_path: Path) -> None:
    config = _config(tmp_path, standup=SCHEDULE)
    rc, out, err = await run_cli("--config", str(config), "schedules", "list")
    assert rc == 0, err
    assert out.startswith("standup") and "active" in out and "0 8 * * 1-5" in out and "last never" in out
    rc, out, _ = await run_cli("--config", str(config), "schedules", "pause", "standup")
    assert rc == 0 and "paused" in out
    rc, out, _ = await run_cli("--config", str(config), "schedules", "list", "--json")
    (row,) = [json.loads(line) for line in out.splitlines()]
    assert (row["name"], row["status"], row["rule"]) == ("standup", "paused", "0 8 * * 1-5")
    rc, _, err = await run_cli("--config", str(config), "schedules", "pause", "standup")
    assert rc == 1 and "nothing to pause" in err
    rc, out, _ = await run_cli("--config", str(config), "schedules", "resume", "standup")
    assert rc == 0 and "resumed, next run" in out
    rc, out, _ = await run_cli("--config", str(config), "schedules", "run", "standup")
    assert rc == 0 and "queued as job" in out
    storage = await Storage.open(f"sqlite:///{tmp_path}/data/clawgate.db")
    try:
        queued = await storage.jobs.list(kind="schedule_run")
        assert any(job.payload.get("manual") for job in queued)  # a running gateway's worker runs it
    finally:
        await storage.close()


async def test_an_unknown_schedule_names_the_configured_ones(tmp_path: Path) -> None:
    config = _config(tmp_path, standup=SCHEDULE)
    rc, _, err = await run_cli("--config", str(config), "schedules", "run", "nightly")
    assert rc == 1 and "no schedule named 'nightly' (configured: standup)" in err
