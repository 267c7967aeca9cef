"""Can the gateway write where it keeps its data (gateway/preflight.py)? Real folders and files,
and real errors from SQLite and a refused connection. As root, permissions do not stop a write:
these tests make places unwritable by putting a file where a folder belongs (read-only mounts are
in tests/integration/test_preflight_run.py)."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path
from typing import Any

import pytest

from gateway.config.load import parse_config
from gateway.config.model import Config
from gateway.preflight import nearest_existing, sqlite_file, storage_failure, storage_problems
from memory.store.storage import Storage


def config(**storage: Any) -> Config:
    return parse_config({"storage": {k: str(v) for k, v in storage.items()}}, "test", env={})


def lines(cfg: Config, *, create: bool = True) -> list[str]:
    return [p.render() for p in storage_problems(cfg, create=create)]


def test_a_fresh_data_dir_is_created_with_its_memory_folder(tmp_path: Path) -> None:
    data = tmp_path / "a" / "data"
    assert lines(config(data_dir=data)) == []
    assert data.is_dir() and (data / "memory").is_dir()
    assert sorted(p.name for p in data.iterdir()) == ["memory"]  # the write checks left nothing


def test_without_create_nothing_is_made(tmp_path: Path) -> None:
    data = tmp_path / "a" / "data"
    assert lines(config(data_dir=data), create=False) == []
    assert list(tmp_path.iterdir()) == []
    assert nearest_existing(data) == tmp_path


def test_a_data_dir_that_is_a_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.write_text("")
    assert lines(config(data_dir=data)) == [
        f"storage.data_dir: {data} is a file, not a folder; move that file away, or set storage.data_dir to a folder"
    ]


@pytest.mark.parametrize("create", [True, False])
def test_a_data_dir_under_a_file(tmp_path: Path, create: bool) -> None:
    (tmp_path / "file").write_text("")
    data = tmp_path / "file" / "data"
    assert lines(config(data_dir=data), create=create) == [
        f"storage.data_dir: {data} cannot be created: {tmp_path / 'file'} is a file, not a folder; "
        "move that file away, or set storage.data_dir to a folder"
    ]


def test_a_memory_folder_that_is_a_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "memory").write_text("")
    assert lines(config(data_dir=data)) == [
        f"storage.data_dir: the memory folder {data / 'memory'} is a file, not a folder; "
        "move that file away, or set storage.data_dir to a folder"
    ]


def test_a_database_file_that_is_a_folder_and_its_log(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "clawgate.db").mkdir(parents=True)
    (data / "clawgate.db-wal").mkdir()
    assert lines(config(data_dir=data)) == [
        f"storage.data_dir: the database file {data / 'clawgate.db'} is a folder, not a file; "
        "move that folder away, or set storage.data_dir to another place",
        f"storage.data_dir: the database file {data / 'clawgate.db-wal'} is a folder, not a file; "
        "move that folder away, or set storage.data_dir to another place",
    ]


def test_a_database_url_elsewhere_is_checked_under_its_own_key(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    url = f"sqlite:///{tmp_path}/file/db/clawgate.db"
    assert lines(config(data_dir=tmp_path / "data", database_url=url)) == [
        f"storage.database_url: the database's folder {tmp_path / 'file' / 'db'} cannot be created: "
        f"{tmp_path / 'file'} is a file, not a folder; move that file away, or set storage.database_url to a folder"
    ]


def test_a_postgresql_database_is_not_a_file_to_check(tmp_path: Path) -> None:
    url = "postgresql+asyncpg://u:pw@127.0.0.1:1/x"
    assert lines(config(data_dir=tmp_path / "data", database_url=url)) == []
    assert sqlite_file(url) is None and sqlite_file("sqlite:///:memory:") is None
    assert sqlite_file("sqlite:///data/clawgate.db") == Path("data/clawgate.db")


async def test_a_read_only_database_is_one_line_with_its_fix(tmp_path: Path) -> None:
    """SQLite's own refusal, through the storage the gateway opens."""
    url = f"sqlite:///file:{tmp_path}/ro.db?mode=ro&uri=true"
    (tmp_path / "ro.db").write_bytes(b"")
    with pytest.raises(Exception) as raised:
        await Storage.open(url)
    problem = storage_failure(raised.value, config(data_dir=tmp_path, database_url=url), opening=True)
    assert problem is not None
    assert problem.render().startswith(
        f"storage.database_url: the database at {url} cannot be written (the database is read-only); make the "
        "database writable for the user the gateway runs as ("
    )


async def test_a_database_server_that_refuses_the_connection(tmp_path: Path) -> None:
    url = "postgresql+asyncpg://clawgate:s3cret-pw@127.0.0.1:1/clawgate"
    with pytest.raises(OSError) as raised:
        await asyncio.wait_for(Storage.open(url), 30)
    cfg = config(data_dir=tmp_path, database_url=url)
    problem = storage_failure(raised.value, cfg, opening=True)
    assert problem is not None and problem.render() == (
        "storage.database_url: the database at postgresql+asyncpg://clawgate:***@127.0.0.1:1/clawgate cannot be "
        "reached (the connection was refused); start its server, or fix the host and port in storage.database_url"
    )
    # Once the database is open, an OS error is something else (a web port in use): not for us to word.
    assert storage_failure(raised.value, cfg, opening=False) is None


def test_other_failures_are_not_storage_failures(tmp_path: Path) -> None:
    cfg = config(data_dir=tmp_path)
    assert storage_failure(ValueError("a bug"), cfg, opening=True) is None
    assert storage_failure(OSError(errno.EADDRINUSE, "address in use"), cfg, opening=False) is None
