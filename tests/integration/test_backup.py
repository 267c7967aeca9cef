"""`clawgate backup` / `restore`: a running gateway's database and memory files into one archive and
back, nothing lost on either side, and archives that are not ours refused before anything changes."""

from __future__ import annotations

import io
import json
import sqlite3
import tarfile
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.app import Gateway
from gateway.cli import backup
from tests.cli import run_cli
from tests.conftest import ALICE_TOKEN, auth, make_config, say
from tests.fakes.llm import FakeLLM, Reply
from tests.memories import memory_id


async def _fill(gw: Gateway, http: aiohttp.ClientSession) -> str:
    """A memory, a personal Memory.md and a daily note; the memory's id."""
    record_id = memory_id(await say(http, gw, "/remember my locker is 42"))
    core = await (await http.get(gw.url + "/api/v1/core/personal", headers=auth())).json()
    r = await http.put(
        gw.url + "/api/v1/core/personal", json={"text": "Call me Ali.", "etag": core["etag"]}, headers=auth()
    )
    assert r.status == 200
    daily = gw.config.storage.data_dir / "memory" / "2026-11-30.md"
    daily.write_text("# 2026-11-30\n- the team met\n", encoding="utf-8")
    return record_id


def _tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


async def test_a_backup_of_a_running_gateway_restores_whole(
    gateway_factory: Any, fake_llm: FakeLLM, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    gw = await gateway_factory(fake_llm)
    record_id = await _fill(gw, http)
    made = backup.backup(gw.config, tmp_path / "b.tar.gz")  # while the gateway runs
    assert made.memory_files == 2 and made.schema_revision is not None

    other = make_config(tmp_path / "elsewhere", fake_llm)
    done, aside = backup.restore(other, made.path)
    assert aside is None and done.memory_files == 2
    assert (other.storage.data_dir / "memory" / "2026-11-30.md").read_text(encoding="utf-8").endswith("the team met\n")

    restored = Gateway(other)
    await restored.start()
    try:
        assert restored.storage is not None
        kept = await restored.storage.records.get(record_id)
        assert kept is not None and kept.content == "my locker is 42"
        fake_llm.script(Reply("ok"))
        await http.post(restored.url + "/api/v1/messages", json={"text": "hi"}, headers=auth(ALICE_TOKEN))
        assert "Call me Ali." in fake_llm.requests[-1]["messages"][0]["content"]
    finally:
        await restored.stop()


async def test_restore_keeps_what_was_there(
    gateway_factory: Any, fake_llm: FakeLLM, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    gw = await gateway_factory(fake_llm)
    await _fill(gw, http)
    made = backup.backup(gw.config, tmp_path / "b.tar.gz")
    other = make_config(tmp_path / "elsewhere", fake_llm)
    backup.restore(other, made.path)
    note = other.storage.data_dir / "memory" / "mine.md"
    note.write_text("written after the backup\n", encoding="utf-8")

    with pytest.raises(backup.BackupError, match="--force"):
        backup.restore(other, made.path)
    assert note.exists()  # refused: nothing moved
    _, aside = backup.restore(other, made.path, force=True)
    assert (
        aside is not None and (aside / "memory" / "mine.md").read_text(encoding="utf-8") == "written after the backup\n"
    )
    assert (aside / "clawgate.db").exists() and not note.exists()


@pytest.mark.parametrize(
    ("members", "why"),
    [
        ({"../evil": b"x"}, "unsafe path"),
        ({"/etc/evil": b"x"}, "unsafe path"),
        ({"manifest.json": b"{}", "database.sqlite": b"", "other/file": b"x"}, "unexpected file"),
        ({"database.sqlite": b""}, "no valid manifest.json"),
        ({"manifest.json": b'{"format": 99}', "database.sqlite": b""}, "another format"),
        ({"manifest.json": b'{"format": 1}'}, "holds no database"),
        ({"manifest.json": b'{"format": 1}', "database.sqlite": b"not a database" * 100}, "damaged|not a readable"),
    ],
)
def test_archives_that_are_not_ours_are_refused_before_anything_changes(
    tmp_path: Path, members: dict[str, bytes], why: str
) -> None:
    config = make_config(tmp_path, None)
    archive = _tar(tmp_path / "x.tar.gz", members)
    with pytest.raises(backup.BackupError, match=why):
        backup.restore(config, archive)
    assert not config.storage.data_dir.joinpath("clawgate.db").exists()
    assert not (tmp_path / "evil").exists()
    assert [p.name for p in config.storage.data_dir.iterdir()] == []  # the staging folder is gone too


def test_a_backup_from_a_newer_clawgate_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE alembic_version (version_num TEXT)")
        conn.execute("INSERT INTO alembic_version VALUES ('9999')")
    manifest = json.dumps({"format": 1, "memory_files": 0}).encode()
    archive = _tar(tmp_path / "x.tar.gz", {"manifest.json": manifest, "database.sqlite": db.read_bytes()})
    with pytest.raises(backup.BackupError, match="schema 9999"):
        backup.restore(make_config(tmp_path / "t", None), archive)


def test_not_a_gzip_and_postgres_get_clear_errors(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"hello")
    with pytest.raises(backup.BackupError, match="not a readable backup"):
        backup.restore(make_config(tmp_path, None), junk)
    pg = make_config(tmp_path, None, storage__database_url="postgresql+asyncpg://u:secret@db/clawgate")
    with pytest.raises(backup.BackupError, match="pg_dump") as refused:
        backup.backup(pg)
    assert "secret" not in str(refused.value)
    with pytest.raises(backup.BackupError, match="no database"):
        backup.backup(make_config(tmp_path / "empty", None))


async def test_the_cli_backs_up_and_restores(tmp_path: Path) -> None:
    data = tmp_path / "data"
    config = tmp_path / "config.yaml"
    config.write_text(f"storage:\n  data_dir: {data}\n", encoding="utf-8")
    rc, _, err = await run_cli("--config", str(config), "backup", "--output", str(tmp_path / "b.tar.gz"))
    assert rc == 1 and "no database" in err
    rc, _, _ = await run_cli("--config", str(config), "status")  # opens (and creates) the database
    assert rc == 0
    (data / "memory").mkdir()
    (data / "memory" / "Memory.md").write_text("core\n", encoding="utf-8")
    rc, out, err = await run_cli("--config", str(config), "backup", "--output", str(tmp_path / "b.tar.gz"))
    assert rc == 0, err
    assert "1 memory files" in out
    rc, _, err = await run_cli("--config", str(config), "restore", str(tmp_path / "b.tar.gz"))
    assert rc == 1 and "--force" in err
    rc, out, err = await run_cli("--config", str(config), "restore", "--force", str(tmp_path / "b.tar.gz"))
    assert rc == 0, err
    assert "before-restore-" in out
    assert (data / "memory" / "Memory.md").read_text(encoding="utf-8") == "core\n"
