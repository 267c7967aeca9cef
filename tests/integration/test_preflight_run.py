"""`clawgate run` with a data folder it cannot write says what is wrong and what to do, with exit
code 2 and one line per problem, as an operator sees it (a separate process). Running as root,
permissions do not stop a write: a read-only mount does, made inside `unshare -rm` (a user and
mount namespace of the test's own; the tests that need one are skipped where it is not allowed)."""

from __future__ import annotations

import asyncio
import functools
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from memory.store.storage import Storage
from tests.cli import REPO, run_cli
from tests.conftest import ALICE_TOKEN

FOOTER = "The gateway did not start. Fix the problems above, then start it again."


def write_config(tmp_path: Path, data_dir: Path, database_url: str | None = None) -> Path:
    storage = {"data_dir": str(data_dir)} | ({"database_url": database_url} if database_url else {})
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "ai": {
                    "model": "openai/fake",
                    "api_base": "http://127.0.0.1:9/v1",
                    "api_key": "sk-test-0000000000000000",
                },
                "storage": storage,
                "channels": {"web": {"host": "127.0.0.1", "port": 0}},
                "users": {"alice": {"tokens": [ALICE_TOKEN]}},
            }
        )
    )
    return path


@functools.cache
def namespaces() -> bool:
    try:
        done = subprocess.run(["unshare", "-rm", "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


async def run_read_only(mounts: str, config: Path) -> tuple[int, str, str]:
    """`clawgate --config CONFIG run` in a mount namespace where the shell commands `mounts` ran."""
    if not namespaces():
        pytest.skip("unshare -rm (a user and mount namespace) is not allowed here")
    script = f'{mounts} && exec "$0" -m gateway --config "$1" run'
    proc = await asyncio.create_subprocess_exec(
        "unshare",
        "-rm",
        "sh",
        "-c",
        script,
        sys.executable,
        str(config),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"PYTHONPATH": str(REPO)},
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def read_only_bind(path: Path) -> str:
    return f"mount --bind '{path}' '{path}' && mount -o remount,ro,bind '{path}'"


async def test_a_data_dir_whose_parent_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    data = tmp_path / "file" / "data"
    config = write_config(tmp_path, data)
    rc, out, err = await run_cli("--config", str(config), "run")
    assert (rc, out) == (2, "")
    assert err.splitlines() == [
        f"{config}: 1 problem(s):",
        f"  - storage.data_dir: {data} cannot be created: {tmp_path / 'file'} is a file, not a folder; "
        "move that file away, or set storage.data_dir to a folder",
        FOOTER,
    ]


async def test_a_data_dir_that_is_a_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.write_text("")
    config = write_config(tmp_path, data)
    rc, _, err = await run_cli("--config", str(config), "run")
    assert rc == 2 and err.splitlines()[1] == (
        f"  - storage.data_dir: {data} is a file, not a folder; "
        "move that file away, or set storage.data_dir to a folder"
    )


async def test_a_data_dir_on_a_read_only_disk(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    config = write_config(tmp_path, disk / "data")
    rc, out, err = await run_read_only(f"mount -t tmpfs -o ro,size=1m tmpfs '{disk}'", config)
    assert (rc, out) == (2, ""), err
    assert err.splitlines() == [
        f"{config}: 1 problem(s):",
        f"  - storage.data_dir: {disk / 'data'} cannot be created (the file system is read-only); "
        "mount it read-write, or set storage.data_dir to a folder on a writable disk",
        FOOTER,
    ]


async def _data_dir_with_a_database(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    (data / "memory").mkdir(parents=True)
    storage = await Storage.open(f"sqlite:///{data}/clawgate.db")
    await storage.close()
    return data


async def test_an_existing_data_dir_mounted_read_only(tmp_path: Path) -> None:
    data = await _data_dir_with_a_database(tmp_path)
    config = write_config(tmp_path, data)
    rc, out, err = await run_read_only(read_only_bind(data), config)
    assert (rc, out) == (2, ""), err
    assert err.splitlines() == [
        f"{config}: 1 problem(s):",
        f"  - storage.data_dir: {data} cannot be written (the file system is read-only); "
        "mount it read-write, or set storage.data_dir to a folder on a writable disk",
        FOOTER,
    ]


async def test_a_read_only_database_file_and_memory_folder(tmp_path: Path) -> None:
    """Without the preflight, SQLite itself fails on the first write with a raw traceback."""
    data = await _data_dir_with_a_database(tmp_path)
    config = write_config(tmp_path, data)
    mounts = f"{read_only_bind(data / 'clawgate.db')} && {read_only_bind(data / 'memory')}"
    rc, out, err = await run_read_only(mounts, config)
    assert (rc, out) == (2, ""), err
    fix = "mount it read-write, or set storage.data_dir to a folder on a writable disk"
    assert err.splitlines() == [
        f"{config}: 2 problem(s):",
        f"  - storage.data_dir: the memory folder {data / 'memory'} cannot be written "
        f"(the file system is read-only); {fix}",
        f"  - storage.data_dir: the database file {data / 'clawgate.db'} cannot be written "
        f"(the file system is read-only); {fix}",
        FOOTER,
    ]


async def test_a_database_server_that_refuses_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """What the preflight cannot see, caught when the storage opens: nothing listens on port 1."""
    url = "postgresql+asyncpg://clawgate:s3cret-pw@127.0.0.1:1/clawgate"
    config = write_config(tmp_path, tmp_path / "data", url)
    rc, out, err = await run_cli("--config", str(config), "run")
    assert (rc, out) == (2, "")
    assert err.splitlines() == [
        f"{config}: 1 problem(s):",
        "  - storage.database_url: the database at postgresql+asyncpg://clawgate:***@127.0.0.1:1/clawgate cannot be "
        "reached (the connection was refused); start its server, or fix the host and port in storage.database_url",
        "The gateway did not start. Fix the problem above, then start it again.",
    ]
    assert "s3cret-pw" not in err
