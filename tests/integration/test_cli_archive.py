"""`clawgate memory search --archive`, run as a process against a config file and a real database."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import insert
from sqlalchemy.engine import Connection

from memory.store.schema import archived_messages, sessions
from memory.store.storage import Storage
from tests.cli import run_cli

WHEN = datetime(2026, 11, 30, 14, 5, tzinfo=UTC)


def _fill(conn: Connection) -> None:
    # One executemany compiles the keys of its first row: every row names every column.
    def session(
        sid: int, key: str, user_id: str | None, audience: str = "personal", excluded: bool = False
    ) -> dict[str, Any]:
        return {
            "id": sid,
            "key": key,
            "agent": "main",
            "user_id": user_id,
            "created_at": WHEN,
            "message_count": 0,
            "token_count": 0,
            "audience": audience,
            "memory_excluded": excluded,
        }

    conn.execute(
        insert(sessions),
        [
            session(1, "telegram:dm:1", "alice"),
            session(2, "telegram:dm:2", "bob"),
            session(3, "discord:lobby", None, audience="public"),
            session(4, "telegram:dm:1", "alice", excluded=True),
        ],
    )

    def message(mid: int, sid: int, content: str, role: str = "user", author: str | None = None) -> dict[str, Any]:
        return {
            "id": mid,
            "session_id": sid,
            "role": role,
            "content": content,
            "author": author,
            "tokens": 5,
            "created_at": WHEN,
            "archived_at": WHEN,
            "reason": "trimmed",
        }

    conn.execute(
        insert(archived_messages),
        [
            message(10, 1, "Alice keeps the spare key under the marmalade jar", author="Alice"),
            message(11, 1, "Noted: the marmalade jar.", role="assistant"),
            message(20, 2, "Bob's marmalade recipe uses bitter oranges", author="Bob"),
            message(30, 3, "public marmalade chatter"),
            message(40, 4, "excluded marmalade talk"),
        ],
    )


async def _setup(tmp_path: Path) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"storage": {"data_dir": str(tmp_path / "data")}}))
    storage = await Storage.open(f"sqlite:///{tmp_path}/data/clawgate.db")
    try:
        await storage.db.write(_fill)
    finally:
        await storage.close()
    return config


async def test_search_the_archive_from_the_cli(tmp_path: Path) -> None:
    config = await _setup(tmp_path)

    rc, out, _ = await run_cli(
        "--config", str(config), "memory", "search", "--archive", "where", "is", "the", "marmalade?"
    )
    assert rc == 0
    assert "[telegram:dm:1] 2026-11-30 14:05Z user (Alice): Alice keeps the spare key under the marmalade jar" in out
    assert "[telegram:dm:1] 2026-11-30 14:05Z assistant: Noted: the marmalade jar." in out
    assert "[telegram:dm:2]" in out and "id 20" in out
    assert "public" not in out and "excluded" not in out

    rc, out, _ = await run_cli(
        "--config", str(config), "memory", "search", "--archive", "--user", "bob", "--json", "marmalade"
    )
    assert rc == 0
    hits = json.loads(out)
    assert [(h["id"], h["session_key"], h["user_id"]) for h in hits] == [(20, "telegram:dm:2", "bob")]
    assert hits[0]["created_at"] == "2026-11-30T14:05:00+00:00" and hits[0]["score"] > 0
    assert hits[0]["content"] == "Bob's marmalade recipe uses bitter oranges"

    rc, out, _ = await run_cli("--config", str(config), "memory", "search", "--archive", "--limit", "1", "marmalade")
    assert rc == 0 and out.count("  id ") == 1


async def test_no_hits_is_not_an_error(tmp_path: Path) -> None:
    config = await _setup(tmp_path)
    rc, out, _ = await run_cli("--config", str(config), "memory", "search", "--archive", "zeppelin")
    assert (rc, out.strip()) == (0, "no archived messages match")
    rc, out, _ = await run_cli("--config", str(config), "memory", "search", "--archive", "--json", '"*(')
    assert (rc, json.loads(out)) == (0, [])


async def test_memory_search_needs_a_user_and_config_errors_exit_2(tmp_path: Path) -> None:
    config = await _setup(tmp_path)
    rc, out, err = await run_cli("--config", str(config), "memory", "search", "marmalade")
    assert rc == 2 and out == "" and "--user USER_ID is required" in err

    broken = tmp_path / "broken.yaml"
    broken.write_text("storage: [not, a, mapping]\n")
    rc, _, err = await run_cli("--config", str(broken), "memory", "search", "--archive", "marmalade")
    assert rc == 2 and err.strip()
