"""`clawgate memory search --batch FILE.jsonl [--json]`, run as a process against a real database:
the same result objects as a single search, privacy between users, bad lines reported in place,
standard input, and, with embeddings, the vector leg behind the same policy."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from tests.cli import run_cli
from tests.unit.test_embeddings import FakeEmbeddings

ALICE = ["Alice's team deploys on Tuesdays", "Alice drinks oolong tea every morning"]
GLOBAL = ["The office deploy freeze starts on Fridays"]
BOB = ["Bob keeps the spare keys of the office"]


def _config(tmp_path: Path, search: dict[str, Any] | None = None, recall: dict[str, Any] | None = None) -> Path:
    path = tmp_path / "config.yaml"
    data: dict[str, Any] = {
        "storage": {"data_dir": str(tmp_path / "data")},
        "users": {"alice": {"roles": ["user"]}, "bob": {"roles": ["user"]}},
    }
    if search:
        data["memory"] = {"search": search}
    if recall:
        data.setdefault("memory", {})["recall"] = recall
    path.write_text(yaml.safe_dump(data))
    return path


async def _fill(tmp_path: Path) -> dict[str, str]:
    """Alice's and Bob's personal memories and a global one; content → id."""
    from memory.records.fields import NewRecord
    from memory.records.model import MemoryClass, Provenance, ReviewStatus, Scope, UsePolicy
    from memory.store.storage import Storage

    item: dict[str, Any] = {
        "memory_class": MemoryClass.DURABLE_FACT,
        "provenance": Provenance.IMPORTED,
        "use_policy": UsePolicy(),
        "author": "import",
        "review_status": ReviewStatus.NONE,
    }
    owned = (
        [(t, Scope.personal("alice")) for t in ALICE]
        + [(t, Scope.personal("bob")) for t in BOB]
        + [(t, Scope.parse("global")) for t in GLOBAL]
    )
    storage = await Storage.open(f"sqlite:///{tmp_path}/data/clawgate.db")
    try:
        await storage.identities.sync_declared([("alice", ["user"], []), ("bob", ["user"], [])])
        ids = await storage.records.import_batch([NewRecord(t, scope=s, **item) for t, s in owned])
    finally:
        await storage.close()
    return {t: i for (t, _), i in zip(owned, ids, strict=True)}


def _lines(*items: Any) -> bytes:
    return b"".join((i if isinstance(i, bytes) else json.dumps(i).encode()) + b"\n" for i in items)


def _without_score(hits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in h.items() if k != "score"} for h in hits]


async def test_batch_json_three_queries_two_users_and_bad_lines(tmp_path: Path) -> None:
    config = _config(tmp_path)
    await _fill(tmp_path)
    batch = tmp_path / "queries.jsonl"
    batch.write_bytes(
        _lines(
            {"user": "alice", "query": "when does the team deploy", "limit": 5},
            {"user": "bob", "query": "when does the team deploy"},
            b"",
            b"{not json",
            {"user": "alice", "query": "oolong tea", "limit": 1},
            {"user": "bob", "query": "tea", "limit": 0},
            {"user": "carol", "query": "tea"},
            {"query": "who has no user"},
        )
    )
    rc, out, err = await run_cli("--config", str(config), "memory", "search", "--batch", str(batch), "--json")
    assert rc == 1, err  # some lines failed; the others were answered
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line["line"] for line in lines] == [1, 2, 4, 5, 6, 7, 8]  # the blank line 3 is skipped

    alice, bob, bad_json, tea, bad_limit, nobody, no_user = lines
    assert alice["user"] == "alice" and alice["query"] == "when does the team deploy"
    assert [h["content"] for h in alice["results"]] == [ALICE[0], GLOBAL[0]]
    assert {h["content"] for h in bob["results"]} == {GLOBAL[0]}  # never Alice's personal memory
    assert all(h["scope"] != "personal:alice" for h in bob["results"])
    assert [h["content"] for h in tea["results"]] == [ALICE[1]]  # limit 1
    assert bad_json == {"line": 4, "error": "not JSON (Expecting property name enclosed in double quotes)"}
    assert bad_limit == {"line": 6, "error": "`limit` must be a whole number from 1 to 50 (got 0)"}
    assert nobody == {"line": 7, "error": "no user 'carol'"}
    assert no_user["line"] == 8 and "`user`" in no_user["error"]

    # The same result objects as the single search.
    rc, single, err = await run_cli(
        "--config", str(config), "memory", "search", "--user", "alice", "--limit", "5", "--json", "when", "does",
        "the", "team", "deploy",
    )  # fmt: skip
    assert rc == 0, err
    single_hits = json.loads(single)
    assert _without_score(single_hits) == _without_score(alice["results"])
    assert [h["score"] for h in single_hits] == pytest.approx([h["score"] for h in alice["results"]], rel=1e-4)
    assert set(single_hits[0]) == {
        "id", "content", "scope", "memory_class", "provenance", "use_policy", "review_status", "created_at",
        "source", "score",
    }  # fmt: skip


async def test_batch_from_standard_input_in_both_forms(tmp_path: Path) -> None:
    config = _config(tmp_path)
    await _fill(tmp_path)
    queries = _lines(
        {"user": "bob", "query": "spare keys"},
        {"user": "alice", "query": "spare keys"},
        {"user": "alice", "query": "deploy", "limit": 1},
    )
    rc, out, err = await run_cli("--config", str(config), "memory", "search", "--batch", "-", "--json", stdin=queries)
    assert rc == 0, err
    bob, alice, deploy = (json.loads(line) for line in out.splitlines())
    assert [h["content"] for h in bob["results"]] == BOB
    assert alice["results"] == []  # Bob's keys are Bob's
    assert len(deploy["results"]) == 1

    # Without --json: a short block per query; a bad line goes to standard error.
    rc, out, err = await run_cli(
        "--config", str(config), "memory", "search", "--batch", "-", stdin=queries + b'{"user": "bob"}\n'
    )
    assert rc == 1
    assert "line 1 · bob · spare keys" in out and BOB[0] in out
    assert "line 2 · alice · spare keys\n  nothing alice could recall matches" in out
    assert "line 4: `query` (a non-empty string) is required" in err

    # Mistakes in the command itself are refused before anything runs.
    rc, _, err = await run_cli("--config", str(config), "memory", "search", "--batch", "-", "--user", "bob")
    assert rc == 2 and "--user does not go with --batch" in err
    rc, _, err = await run_cli("--config", str(config), "memory", "search", "--batch", str(tmp_path / "missing"))
    assert rc == 2 and "cannot read" in err
    rc, _, err = await run_cli("--config", str(config), "memory", "search", "--user", "bob")
    assert rc == 2 and "a QUERY is required (or --batch FILE.jsonl)" in err
    rc, _, err = await run_cli("--config", str(config), "memory", "search", "--user", "bob", "--limit", "0", "x")
    assert rc == 2 and "must be from 1 to 50" in err


@pytest.fixture
async def fake_embeddings() -> AsyncIterator[FakeEmbeddings]:
    fake = await FakeEmbeddings().start()
    yield fake
    await fake.stop()


async def test_batch_with_embeddings_embeds_only_the_queries_and_keeps_privacy(
    tmp_path: Path, fake_embeddings: FakeEmbeddings
) -> None:
    from memory.embed.embeddings import normalize
    from memory.embed.vectors import VectorStore, text_hash
    from memory.store.storage import Storage

    model = "openai/fake-embedder"
    search = {"provider": "openai", "model": "fake-embedder", "api_base": f"{fake_embeddings.url}/v1"}
    # The fake model has no calibrated floor: without one configured, recall would stay lexical.
    config = _config(tmp_path, search | {"api_key": "sk-test-000"}, {"min_cosine_similarity": 0.1})
    ids = await _fill(tmp_path)
    # Every memory embedded as the fake server would embed it ([len, 0, 4]): all point the same way,
    # so the vector leg finds everyone's memories and only the policy keeps them apart.
    storage = await Storage.open(f"sqlite:///{tmp_path}/data/clawgate.db")
    try:
        rows = [(i, text_hash(t), normalize(np.array([[len(t), 0.0, 4.0]]))[0]) for t, i in ids.items()]
        assert await VectorStore(storage.db).upsert("record", rows, model) == len(rows)
    finally:
        await storage.close()

    queries = _lines(
        {"user": "alice", "query": "zzzz"},  # no word of any memory: only the vector leg answers
        {"user": "bob", "query": "zzzz"},
        b"[]",
        {"user": "bob", "query": "deploy", "limit": 1},
    )
    rc, out, err = await run_cli(
        "--config", str(config), "memory", "search", "--batch", "-", "--json", stdin=queries, timeout=90
    )
    assert rc == 1, err
    assert err.count(f"loading {model}") == 1
    assert "memory_recall_vector_degraded" not in err  # the configured floor serves the uncalibrated model
    alice, bob, bad, deploy = (json.loads(line) for line in out.splitlines())
    assert {h["content"] for h in alice["results"]} == {*ALICE, *GLOBAL}
    assert {h["content"] for h in bob["results"]} == {*BOB, *GLOBAL}
    assert bad == {"line": 3, "error": 'expected a JSON object: {"user": ID, "query": TEXT, "limit": N}'}
    assert [h["content"] for h in deploy["results"]] == GLOBAL
    # Only the three queries were embedded, each once: no memory is embedded by a search.
    assert [r["body"]["input"] for r in fake_embeddings.requests] == [["zzzz"], ["zzzz"], ["deploy"]]
