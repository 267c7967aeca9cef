#!/usr/bin/env python3
"""Which near-duplicates a new memory is compared with (docs/recall.md, "Duplicates and supersession"):
the nomination thresholds of `memory.dedupe`, measured on our own assistant-memory set.

    .venv/bin/python benchmarks/nomination.py               # MiniLM: thresholds and the gateway's nomination
    .venv/bin/python benchmarks/nomination.py --lexical     # without embeddings (word overlap)
    .venv/bin/python benchmarks/nomination.py --scale 10000 # what a nomination costs in a scope that large

Data: benchmarks/data/assistant_memory (its README): 309 memories, 20 of them replacing an older one of
the same scope ("supersedes"). A threshold is good when it nominates the replaced memory for its
replacement and few unrelated memories besides: a nomination costs one background model call, never
a decision.

1. Pairs: the cosine (all-MiniLM-L6-v2, both texts embedded as documents) and the word overlap
   (memory/records/duplicates.py `overlap`) of the 20 superseded pairs and of every other pair of
   memories of one scope (6,176), at several thresholds.
2. Replay: every memory written in date order, each nominated by the gateway's own code
   (gateway/session/adjudicate.py `Duplicates.nominees`: full-text and vector candidates of its scope,
   the configured thresholds, the closest three) against the memories of its scope written before it:
   how many replaced memories are nominated, and how many writes meet a nomination at all (each one
   a model call), with the time a nomination takes.
3. `--scale N`: N memories in one person's scope (the set's texts, numbered), the 20 replacements
   nominated against them: the time of a nomination by words, and with vectors unless --lexical.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import itertools  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402
from unittest import mock  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent
if str(ROOT.parent) not in sys.path:
    sys.path.insert(0, str(ROOT.parent))
sys.path.insert(0, str(ROOT))

from assistant_memory import NOW, Memory, bench_config, load_data, load_projects, local_cache, new_record  # noqa: E402

import gateway.session.adjudicate as adjudicate  # noqa: E402
from gateway.llm.client import LLMClient  # noqa: E402
from gateway.recall.engine import TurnRecall, embedder_from_config  # noqa: E402
from gateway.session.adjudicate import Duplicates  # noqa: E402
from gateway.session.memory_service import MemoryService  # noqa: E402
from memory.embed.embeddings import Embedder  # noqa: E402
from memory.records.duplicates import MIN_COSINE, MIN_OVERLAP, overlap  # noqa: E402
from memory.records.fields import NewRecord  # noqa: E402
from memory.store.storage import Storage  # noqa: E402

COSINES = (0.30, 0.35, 0.40, 0.45, 0.50)
OVERLAPS = (0.20, 0.25, 0.30, 0.34, 0.40)


def pairs(memories: Sequence[Memory]) -> tuple[list[tuple[Memory, Memory]], list[tuple[Memory, Memory]]]:
    """(superseded pairs as (newer, older), every other pair of one scope)."""
    by_id = {m.id: m for m in memories}
    replaced = [(m, by_id[m.supersedes]) for m in memories if m.supersedes]
    known = {(a.id, b.id) for a, b in replaced} | {(b.id, a.id) for a, b in replaced}
    by_scope: dict[str, list[Memory]] = {}
    for m in memories:
        by_scope.setdefault(m.scope, []).append(m)
    others = [(a, b) for ms in by_scope.values() for a, b in itertools.combinations(ms, 2) if (a.id, b.id) not in known]
    return replaced, others


def rates(pos: Sequence[float], neg: Sequence[float], thresholds: Sequence[float]) -> list[dict[str, Any]]:
    p, n = np.asarray(pos), np.asarray(neg)
    return [
        {
            "threshold": t,
            "replaced_nominated": f"{int((p >= t).sum())}/{len(p)}",
            "unrelated_nominated": f"{(n >= t).mean():.2%} ({int((n >= t).sum())}/{len(n)})",
        }
        for t in thresholds
    ]


async def pair_scores(memories: Sequence[Memory], embedder: Embedder | None) -> dict[str, Any]:
    replaced, others = pairs(memories)
    out: dict[str, Any] = {
        "words": rates(
            [overlap(a.text, b.text) for a, b in replaced], [overlap(a.text, b.text) for a, b in others], OVERLAPS
        )
    }
    if embedder is not None:
        index = {m.id: i for i, m in enumerate(memories)}
        vectors = await embedder.embed_documents([m.text for m in memories])

        def cos(a: Memory, b: Memory) -> float:
            return float(vectors[index[a.id]] @ vectors[index[b.id]])

        out["cosine"] = rates([cos(a, b) for a, b in replaced], [cos(a, b) for a, b in others], COSINES)
        # Where the replaced memory ranks among its scope's others, by cosine to its replacement.
        ranks = []
        for new, old in replaced:
            mates = [m for m in memories if m.scope == new.scope and m.id != new.id]
            ranks.append(1 + sum(cos(new, m) > cos(new, old) for m in mates))
        out["replaced_rank_by_cosine"] = sorted(ranks)
    return out


def duplicates(config: Any, storage: Storage, recall: TurnRecall | None) -> Duplicates:
    service = MemoryService(config, storage.records, [])
    found = Duplicates(service, storage.records, storage.revisions, LLMClient(), list, [])
    found.recall = recall
    return found


async def replay(memories: Sequence[Memory], ids: dict[str, str], dups: Duplicates, storage: Storage) -> dict[str, Any]:
    """Each memory nominated against the earlier ones of its scope (the later ones set apart)."""
    order = sorted(memories, key=lambda m: (m.created_at, m.id))
    nominated = replaced = 0
    times: list[float] = []
    position = {m.id: i for i, m in enumerate(order)}
    for m in order:
        record = await storage.records.get(ids[m.id])
        assert record is not None
        after = [ids[o.id] for o in order if o.scope == m.scope and position[o.id] > position[m.id]]
        t0 = time.perf_counter()
        found = await dups.nominees(record, exclude=after)
        times.append((time.perf_counter() - t0) * 1000)
        nominated += bool(found)
        if m.supersedes and ids[m.supersedes] in {n.record.id for n in found}:
            replaced += 1
    writes = len(order)
    return {
        "replaced_nominated": f"{replaced}/{sum(1 for m in memories if m.supersedes)}",
        "writes_with_a_nomination": f"{nominated}/{writes} ({nominated / writes:.0%})",
        "nomination_ms_p50": round(statistics.median(times), 2),
        "nomination_ms_p95": round(float(np.percentile(times, 95)), 2),
    }


async def scale(n: int, memories: Sequence[Memory], dups: Duplicates, storage: Storage, recall: Any) -> dict[str, Any]:
    """N numbered copies of the set's texts in one scope; the 20 replacements nominated there."""
    base = [m for m in memories if not m.supersedes]
    items: list[NewRecord] = []
    for i in range(n):
        m = base[i % len(base)]
        item = new_record(Memory(m.id, "alice", "personal:alice", m.text, m.created_at, m.memory_class))
        items.append(replace(item, content=f"{m.text} (note {i})"))
    await storage.records.import_batch(items, now=NOW)
    if recall is not None:
        recall.wake()
        await recall.caught_up(timeout=3600)
    news = [m for m in memories if m.supersedes]
    made = await storage.records.import_batch(
        [new_record(Memory(m.id, "alice", "personal:alice", m.text, m.created_at, m.memory_class)) for m in news],
        now=NOW,
    )
    times = []
    for rid in made:
        record = await storage.records.get(rid)
        assert record is not None
        t0 = time.perf_counter()
        await dups.nominees(record, exclude=made)
        times.append((time.perf_counter() - t0) * 1000)
    return {
        "memories": n,
        "nomination_ms_p50": round(statistics.median(times), 2),
        "nomination_ms_p95": round(float(np.percentile(times, 95)), 2),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    memories, _questions = load_data()
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="clawgate-nomination-")))
        stack.enter_context(mock.patch.object(adjudicate, "utcnow", lambda: NOW))
        stack.enter_context(mock.patch.dict(os.environ, {"CLAWGATE_CACHE_DIR": str(tmp / "cache")}))
        config = bench_config(tmp / "data", args.lexical, load_projects())
        embedder = embedder_from_config(config)
        local_cache(embedder, tmp)
        storage = await Storage.open(f"sqlite:///{tmp}/bench.db")
        recall: TurnRecall | None = None
        try:
            result: dict[str, Any] = {
                "embeddings": embedder.model_id if embedder is not None else "off (words)",
                "thresholds": {"min_cosine": MIN_COSINE, "min_overlap": MIN_OVERLAP},
            }
            if args.scale:
                if embedder is not None:
                    recall = TurnRecall(config, storage, MemoryService(config, storage.records, []), None, embedder)
                    recall.start()
                    await recall.caught_up(timeout=600)
                result["scale"] = await scale(
                    args.scale, memories, duplicates(config, storage, recall), storage, recall
                )
                return result
            result["pairs"] = await pair_scores(memories, embedder)
            made = await storage.records.import_batch([new_record(m) for m in memories], now=NOW)
            ids = dict(zip((m.id for m in memories), made, strict=True))
            if embedder is not None:
                recall = TurnRecall(config, storage, MemoryService(config, storage.records, []), None, embedder)
                recall.start()
                await recall.caught_up(timeout=600)
            result["replay"] = await replay(memories, ids, duplicates(config, storage, recall), storage)
            return result
        finally:
            if recall is not None:
                await recall.stop()
            await storage.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lexical", action="store_true", help="no embeddings: nomination by words")
    p.add_argument("--scale", type=int, default=0, help="time a nomination in a scope of this many memories")
    args = p.parse_args()
    result = asyncio.run(run(args))
    import json

    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
