"""`clawgate doctor [--json]`, run as a process against real config files and databases: a fresh data
dir, local and remote embeddings (never loaded), coverage as memories and vectors are written, a
model without a calibrated floor, a database behind or ahead of the code, a broken config."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from sqlalchemy import insert, text
from sqlalchemy.engine import Connection

from gateway import doctor
from gateway.doctor import Context
from tests.cli import REPO, run_cli

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def _head() -> str:
    """The newest migration: the schema a freshly opened database is at."""
    from alembic.script import ScriptDirectory

    from memory.db import _alembic_config

    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    assert head is not None
    return head


HEAD = _head()
# Runs the CLI in one process and reports which heavy modules it imported on the way.
PROBE = (
    "import sys; from gateway.cli import main; rc = main(sys.argv[1:]); "
    "heavy = sorted(m for m in ('torch', 'sentence_transformers', 'transformers', 'litellm') if m in sys.modules); "
    "print('imported:', ','.join(heavy) or 'nothing heavy', file=sys.stderr); sys.exit(rc)"
)


def _config(tmp_path: Path, **memory: Any) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump({"storage": {"data_dir": str(tmp_path / "data")}, "users": {"alice": {"roles": ["user"]}}})
        + (yaml.safe_dump({"memory": memory}) if memory else "")
    )
    return path


async def _doctor(config: Path, **env: str) -> tuple[int, dict[str, Any], str]:
    """(exit code, checks by name, stderr) of `doctor --json`, run through PROBE."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        PROBE,
        "--config",
        str(config),
        "doctor",
        "--json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"PYTHONPATH": str(REPO), "CLAWGATE_CACHE_DIR": str(config.parent / "cache"), **env},
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    report = json.loads(out)
    assert report["ok"] is (proc.returncode == 0)
    return proc.returncode, {c["name"]: c for c in report["checks"]}, err.decode()


def _row(table: str, name: str) -> str:
    return next(line for line in table.splitlines() if line.startswith(name + "  "))


async def _fill(tmp_path: Path) -> list[str]:
    """A database at the newest schema: 4 memories of Alice (and a trace, never searchable), one
    archived message and two daily chunks. The ids of the memories."""
    from memory.model import MemoryClass, Provenance, ReviewStatus, Scope, UsePolicy
    from memory.records import NewRecord
    from memory.schema import archived_messages, daily_chunks, sessions
    from memory.storage import Storage

    when = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

    def rows(conn: Connection) -> None:
        conn.execute(
            insert(sessions).values(
                id=1, key="web:1", agent="main", user_id="alice", created_at=when, message_count=0, token_count=0
            )
        )
        conn.execute(
            insert(archived_messages).values(
                {"id": 1, "session_id": 1, "role": "user", "content": "When does the plumber come?", "tokens": 6}
                | {"created_at": when, "archived_at": when, "reason": "trimmed"}
            )
        )
        conn.execute(
            insert(daily_chunks),
            [
                {"path": "users/alice/2026-11-29.md", "scope": "personal:alice", "day": "2026-11-29"}
                | {"chunk_no": n, "content": t, "file_mtime_ns": 1}
                for n, t in enumerate(["- booked the dentist", "- the plumber fixed the sink"])
            ],
        )

    item: dict[str, Any] = {
        "memory_class": MemoryClass.DURABLE_FACT,
        "provenance": Provenance.IMPORTED,
        "use_policy": UsePolicy(),
        "scope": Scope.personal("alice"),
        "author": "import",
        "review_status": ReviewStatus.NONE,
    }
    storage = await Storage.open(f"sqlite:///{tmp_path}/data/clawgate.db")
    try:
        ids = await storage.records.import_batch(
            [NewRecord(f"Alice likes {t}", **item) for t in ("tea", "jazz", "chess", "Lyon")]
            + [NewRecord("a passing trace", **(item | {"memory_class": MemoryClass.TRACE}))]
        )
        await storage.db.write(rows)
    finally:
        await storage.close()
    return ids[:4]


async def _store_vectors(tmp_path: Path, model: str, dim: int, kind: str, count: int) -> None:
    from memory.storage import Storage
    from memory.vectors import VectorStore, text_hash

    storage = await Storage.open(f"sqlite:///{tmp_path}/data/clawgate.db")
    try:
        vectors = VectorStore(storage.db)
        todo = await vectors.missing(kind, model, count)
        rng = np.random.default_rng(0)
        await vectors.upsert(kind, [(i, text_hash(t), rng.standard_normal(dim)) for i, t in todo], model)
    finally:
        await storage.close()


async def _set_revision(tmp_path: Path, revision: str) -> None:
    from memory.db import Database

    db = Database(f"sqlite:///{tmp_path}/data/clawgate.db")
    try:
        await db.write(lambda conn: conn.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": revision}))
    finally:
        await db.close()


async def test_a_fresh_data_dir_with_keyword_search_only(tmp_path: Path) -> None:
    config = _config(tmp_path)
    rc, table, err = await run_cli("--config", str(config), "doctor")
    assert rc == 0, err
    lines = table.splitlines()
    assert lines[0].split() == ["CHECK", "STATUS", "DETAIL"]
    names = ["config", "database", "disk", "embeddings", "recall floor", "vector coverage", "other models"]
    rows = [_row(table, name) for name in names]
    status_at, detail_at = lines[0].index("STATUS"), lines[0].index("DETAIL")
    for row in rows:  # aligned columns
        assert row[status_at - 2 : status_at] == "  " and row[status_at] != " "
        assert row[detail_at - 2 : detail_at] == "  " and row[detail_at] != " "
    assert _row(table, "config")[status_at:].startswith("ok")
    assert "agents: default" in _row(table, "config")
    assert "no database yet" in _row(table, "database") and " warn " in _row(table, "database")
    assert " " * detail_at + "fix: start the gateway once (clawgate run)" in table
    assert "keyword search only (memory.search.provider is empty)" in _row(table, "embeddings")
    assert " info " in _row(table, "embeddings")
    for name in ("recall floor", "vector coverage", "other models"):
        assert "skipped: keyword search only" in _row(table, name)
    assert lines[-1].endswith("nothing failed")

    rc, checks, err = await _doctor(config)
    assert rc == 0 and "imported: nothing heavy" in err
    assert {n: c["status"] for n, c in checks.items()} == {
        "config": "ok",
        "database": "warn",
        "disk": checks["disk"]["status"],  # whatever this machine has, checked below
        "embeddings": "info",
        "recall floor": "skip",
        "vector coverage": "skip",
        "other models": "skip",
    }
    disk = checks["disk"]
    assert disk["data"]["free_bytes"] > 0 and disk["status"] == (
        "ok" if disk["data"]["free_bytes"] >= 1 << 30 else "warn" if disk["data"]["free_bytes"] >= 100 << 20 else "fail"
    )
    assert "does not exist yet" in disk["detail"]
    assert "hint" not in checks["config"] and checks["database"]["hint"].startswith("start the gateway once")
    assert not (tmp_path / "data").exists()  # doctor only reads: it created nothing


async def test_local_embeddings_coverage_and_other_models_without_loading_the_model(tmp_path: Path) -> None:
    config = _config(tmp_path, search={"provider": "local", "threads": 1})
    rc, checks, err = await _doctor(config)
    assert rc == 0, err
    assert "imported: nothing heavy" in err  # the model is described, not loaded
    emb = checks["embeddings"]
    assert emb["status"] == "ok"
    first_start = "runtime onnx (its graph is built at the first start, in about 2 s)"
    assert emb["detail"] == f"local: {MODEL}, query prefix '', dimension 384, {first_start}"
    assert emb["data"] == {
        "provider": "local",
        "model": MODEL,
        "query_prefix": "",
        "document_prefix": "",
        "dim": 384,
        "runtime": "onnx",
    }
    floor = checks["recall floor"]
    assert floor["status"] == "ok" and floor["data"] == {"floor": 0.22, "source": "manifest"}
    assert checks["vector coverage"] == {
        "name": "vector coverage",
        "status": "skip",
        "detail": "skipped: there is no database yet",
    }

    await _fill(tmp_path)
    rc, checks, err = await _doctor(config)
    assert rc == 0, err
    assert (
        checks["database"]["status"] == "ok"
        and f"schema at revision {HEAD} (the newest)" in checks["database"]["detail"]
    )
    cov = checks["vector coverage"]
    assert cov["status"] == "warn"
    assert cov["detail"] == "embedded: record 0/4, archive 0/1, daily 0/2; 7 ranked by words alone until then"
    assert cov["hint"].startswith("clawgate memory backfill-embeddings")
    assert cov["data"] == {
        "record": {"embedded": 0, "total": 4},
        "archive": {"embedded": 0, "total": 1},
        "daily": {"embedded": 0, "total": 2},
    }
    assert checks["other models"]["status"] == "ok"

    await _store_vectors(tmp_path, MODEL, 384, "record", 3)
    await _store_vectors(tmp_path, "old/model", 8, "record", 2)
    rc, table, err = await run_cli("--config", str(config), "doctor")
    assert rc == 0, err
    assert "embedded: record 3/4, archive 0/1, daily 0/2; 4 ranked by words alone" in _row(table, "vector coverage")
    other = _row(table, "other models")
    assert " info " in other and "stale vectors of old/model (2)" in other

    for kind, count in (("record", 4), ("archive", 1), ("daily", 2)):
        await _store_vectors(tmp_path, MODEL, 384, kind, count)
    rc, checks, err = await _doctor(config)
    assert rc == 0, err
    assert checks["vector coverage"]["status"] == "ok" and "hint" not in checks["vector coverage"]
    assert checks["vector coverage"]["detail"] == "embedded: record 4/4, archive 1/1, daily 2/2"
    assert checks["other models"]["data"] == {"models": {"old/model": 2}}


async def test_a_model_without_a_calibrated_floor_warns_until_one_is_set(tmp_path: Path) -> None:
    search = {"provider": "openai", "model": "my-embedder", "api_base": "http://127.0.0.1:9/v1", "api_key": "sk-x"}
    rc, checks, err = await _doctor(_config(tmp_path, search=search))
    assert rc == 0, err
    assert "imported: nothing heavy" in err  # LiteLLM is not even imported
    assert checks["embeddings"]["detail"] == (
        "openai: openai/my-embedder, query prefix '', dimension unknown until first use"
    )
    floor = checks["recall floor"]
    assert floor["status"] == "warn" and floor["data"] == {"floor": None, "source": "missing_calibration"}
    assert "openai/my-embedder has no calibrated cosine floor (missing_calibration)" in floor["detail"]
    assert floor["hint"].startswith("set memory.recall.min_cosine_similarity")

    config = _config(tmp_path, search=search, recall={"min_cosine_similarity": 0.3})
    rc, table, err = await run_cli("--config", str(config), "doctor")
    assert rc == 0, err
    assert "cosine floor 0.3 (config: memory.recall.min_cosine_similarity)" in _row(table, "recall floor")
    assert "sk-x" not in table


async def test_a_database_behind_or_ahead_of_the_code(tmp_path: Path) -> None:
    config = _config(tmp_path, search={"provider": "local"})
    await _fill(tmp_path)
    await _set_revision(tmp_path, "0004")
    rc, checks, err = await _doctor(config)
    assert rc == 0, err
    db = checks["database"]
    assert db["status"] == "warn" and db["detail"].endswith(f"schema at revision 0004, the newest is {HEAD}")
    assert db["hint"].startswith("start the gateway once (clawgate run)")
    assert db["data"]["revision"] == "0004" and db["data"]["head"] == HEAD
    assert checks["vector coverage"]["detail"] == "skipped: the database schema is behind"

    await _set_revision(tmp_path, "9999")
    rc, checks, err = await _doctor(config)
    assert rc == 1
    assert checks["database"]["status"] == "fail" and "revision 9999 is unknown" in checks["database"]["detail"]
    assert "a newer clawgate wrote this database" in checks["database"]["hint"]


async def test_a_database_url_that_does_not_open_is_shown_without_its_password(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {
                    "data_dir": str(tmp_path / "data"),
                    "database_url": "postgresql+asyncpg://app:s3cret@127.0.0.1:1/x",
                },
                "memory": {"search": {"provider": "local"}},
            }
        )
    )
    rc, out, err = await run_cli("--config", str(config), "doctor")
    assert rc == 1, err
    row = _row(out, "database")
    assert " fail " in row and "postgresql+asyncpg://app:***@127.0.0.1:1/x" in row
    assert "s3cret" not in out and "s3cret" not in err
    assert "skipped: the database did not answer" in _row(out, "vector coverage")


async def test_a_broken_config_lists_every_problem_and_skips_the_rest(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"data_dir": str(tmp_path / "data"), "bogus": 1},
                "memory": {"recall": {"vector_weight": 3}, "search": {"provider": "cohere"}},
                "timezone": "Mars/Olympus",
            }
        )
    )
    rc, out, err = await run_cli("--config", str(config), "doctor")
    assert rc == 1, err
    assert f"{config}: 4 problem(s)" in _row(out, "config") and " fail " in _row(out, "config")
    for problem in ("storage.bogus: unknown key", "memory.recall.vector_weight", "memory.search.provider", "timezone"):
        assert any(line.strip().startswith(f"- {problem}") for line in out.splitlines()), problem
    for name in ("database", "disk", "embeddings", "recall floor", "vector coverage", "other models"):
        assert f"skipped: {config} did not load" in _row(out, name)
    assert out.splitlines()[-1] == "1 fail, 6 skip: something failed"

    rc, checks, _ = await _doctor(config)
    assert rc == 1
    assert checks["config"]["status"] == "fail" and len(checks["config"]["lines"]) == 4
    assert {c["status"] for n, c in checks.items() if n != "config"} == {"skip"}

    rc, checks, _ = await _doctor(tmp_path / "missing.yaml")
    assert rc == 1 and checks["config"]["hint"].startswith("create it")


async def test_the_local_runtime_is_reported_without_building_or_importing_it(tmp_path: Path) -> None:
    from memory.embeddings import local_model_path
    from memory.onnx_bert import cached_model

    config = _config(tmp_path, search={"provider": "local"})
    graph, _ = cached_model(local_model_path(), tmp_path / "cache" / "onnx")  # what a first start does
    rc, checks, err = await _doctor(config)
    assert rc == 0 and "imported: nothing heavy" in err, err
    assert checks["embeddings"]["detail"].endswith(f"runtime onnx (graph cached in {graph.parent})")
    assert checks["embeddings"]["data"]["runtime"] == "onnx"

    config = _config(tmp_path, search={"provider": "local", "runtime": "numpy"})
    rc, checks, err = await _doctor(config)
    assert rc == 0 and checks["embeddings"]["detail"].endswith("runtime numpy (memory.search.runtime)")


@pytest.mark.parametrize(
    ("runtime", "status", "ends"), [("auto", "ok", "runtime numpy"), ("onnx", "fail", "runtime onnx")]
)
async def test_without_onnxruntime_auto_says_numpy_and_onnx_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runtime: str, status: str, ends: str
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime" else real(name, *a))
    config = _config(tmp_path, search={"provider": "local", "runtime": runtime})
    by_name = {r.name: r for r in await doctor.run_checks(Context(config))}
    assert by_name["embeddings"].status == status
    assert by_name["embeddings"].detail.endswith(f"{ends} (onnxruntime is not installed)")
