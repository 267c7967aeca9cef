"""`clawgate status` and `clawgate jobs`: the queue and its dead letters as an operator sees them."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import yaml

from memory.store.storage import Storage
from tests.cli import run_cli


async def _setup(tmp_path: Path) -> tuple[Path, int]:
    """A config, one job done, one pending and one dead (its error kept); the dead job's id."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"storage": {"data_dir": str(tmp_path / "data")}}))
    storage = await Storage.open(f"sqlite:///{tmp_path}/data/clawgate.db")
    try:
        jobs = storage.jobs
        await jobs.enqueue("formation", "web:alice", {"n": 1})
        done = await jobs.claim("w", lease=timedelta(minutes=1))
        assert done is not None and await jobs.done(done)
        dead_id = await jobs.enqueue("merge", "sys:merge", max_attempts=1)
        await jobs.enqueue("formation", "web:bob")
        dead = await jobs.claim("w", lease=timedelta(minutes=1), kinds=["merge"])
        assert dead is not None and dead_id is not None
        await jobs.failed(dead, "TimeoutError: model did not answer")
    finally:
        await storage.close()
    return config, dead_id


async def test_status_shows_counts_and_dead_letters(tmp_path: Path) -> None:
    config, dead_id = await _setup(tmp_path)
    rc, out, err = await run_cli("--config", str(config), "status")
    assert rc == 0, err
    assert "jobs: 1 pending, 0 running, 1 done, 1 dead" in out
    assert f"{dead_id}" in out and "TimeoutError: model did not answer" in out and "clawgate jobs retry" in out
    rc, out, _ = await run_cli("--config", str(config), "status", "--json")
    status = json.loads(out)
    assert status["jobs"] == {"pending": 1, "running": 0, "done": 1, "dead": 1}
    assert [j["id"] for j in status["dead_letters"]] == [dead_id]


async def test_jobs_list_and_retry(tmp_path: Path) -> None:
    config, dead_id = await _setup(tmp_path)
    rc, out, _ = await run_cli("--config", str(config), "jobs", "list", "--status", "dead", "--json")
    assert rc == 0 and [json.loads(line)["id"] for line in out.splitlines()] == [dead_id]
    rc, out, _ = await run_cli("--config", str(config), "jobs", "retry", str(dead_id))
    assert rc == 0 and "queued again" in out
    rc, _, err = await run_cli("--config", str(config), "jobs", "retry", str(dead_id))
    assert rc == 1 and "it is pending, not dead" in err
    rc, _, err = await run_cli("--config", str(config), "jobs", "retry", "9999")
    assert rc == 1 and "there is no such job" in err
    rc, out, _ = await run_cli("--config", str(config), "jobs", "list", "--kind", "merge")
    assert rc == 0 and "pending" in out and "merge" in out
