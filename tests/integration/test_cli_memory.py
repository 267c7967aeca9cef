"""`clawgate memory import | export | search --user`, run as processes against a real database."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.cli import run_cli


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"data_dir": str(tmp_path / "data")},
                "users": {"alice": {"roles": ["user"]}, "bob": {"roles": ["user"]}},
            }
        )
    )
    return config


async def test_import_search_as_a_user_and_export(tmp_path: Path) -> None:
    config = _config(tmp_path)
    good = tmp_path / "alice.jsonl"
    good.write_text(
        "\n".join(
            [
                json.dumps({"content": "Alice's team deploys on Tuesdays"}),
                json.dumps({"content": "Alice reviews pull requests before noon", "memory_class": "evidence"}),
                "",
                json.dumps(
                    {
                        "content": "Alice's build runs on the arm64 runner",
                        "created_at": "2026-11-01T09:00:00",
                        "source": "wiki",
                    }
                ),
            ]
        )
    )
    rc, out, err = await run_cli("--config", str(config), "memory", "import", str(good), "--scope", "personal:alice")
    assert rc == 0, err
    assert "imported 3 memories into personal:alice" in out
    # As the gateway needs users to exist, run it once: the CLI reads users from the database.
    from memory.store.storage import Storage

    storage = await Storage.open(f"sqlite:///{tmp_path}/data/clawgate.db")
    try:
        await storage.identities.sync_declared([("alice", ["user"], []), ("bob", ["user"], [])])
    finally:
        await storage.close()

    rc, out, _ = await run_cli(
        "--config", str(config), "memory", "search", "--user", "alice", "--json", "deploys", "tuesdays"
    )
    assert rc == 0
    hits = json.loads(out)
    assert hits and hits[0]["content"] == "Alice's team deploys on Tuesdays"
    assert {"id", "content", "score", "scope", "memory_class", "provenance", "use_policy"} <= set(hits[0])
    assert hits[0]["provenance"] == "imported" and hits[0]["use_policy"]["can_use_as_instruction"] is True
    rc, out, _ = await run_cli("--config", str(config), "memory", "search", "--user", "bob", "deploys", "tuesdays")
    assert rc == 0 and "Tuesdays" not in out  # Bob cannot recall Alice's personal memory

    rc, out, err = await run_cli("--config", str(config), "memory", "export", "--scope", "personal:alice")
    assert rc == 0 and "exported 3 memories" in err
    lines = [json.loads(line) for line in out.splitlines()]
    assert {line["content"] for line in lines} >= {"Alice's build runs on the arm64 runner"}
    dated = next(line for line in lines if line["source"] == "wiki")
    assert dated["created_at"].startswith("2026-11-01T09:00:00")
    # What export writes, import takes back.
    again = tmp_path / "again.jsonl"
    again.write_text(out)
    rc, out, err = await run_cli("--config", str(config), "memory", "import", str(again), "--scope", "personal:bob")
    assert rc == 0, err


async def test_a_bad_line_imports_nothing(tmp_path: Path) -> None:
    config = _config(tmp_path)
    bad = tmp_path / "bad.jsonl"
    secret = "xoxb-" + "1" * 12 + "-" + "2" * 12 + "-" + "a" * 24
    bad.write_text(
        "\n".join(
            [
                json.dumps({"content": "fine line"}),
                "{not json",
                json.dumps({"content": f"the slack token is {secret}"}),
                json.dumps({"content": "x", "memory_class": "forever"}),
                json.dumps({"text": "no content"}),
            ]
        )
    )
    rc, out, err = await run_cli("--config", str(config), "memory", "import", str(bad), "--scope", "global")
    assert rc == 2 and "nothing was imported" in err
    for n in (2, 3, 4, 5):
        assert f"line {n}:" in err
    assert "line 1:" not in err and secret not in err
    rc, out, err = await run_cli("--config", str(config), "memory", "export")
    assert rc == 0 and out == "" and "exported 0 memories" in err
    rc, _, err = await run_cli("--config", str(config), "memory", "import", str(bad), "--scope", "nowhere:x")
    assert rc == 2 and "unknown scope" in err
