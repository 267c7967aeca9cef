#!/usr/bin/env python3
"""Long-term memory store at 100,000 records: policy-checked writes, lookups and searches on SQLite.

    .venv/bin/python benchmarks/memory_store.py            # 100,000 records (about a minute)
    .venv/bin/python benchmarks/memory_store.py --quick    # 10,000 records
    .venv/bin/python benchmarks/memory_store.py --json     # JSON instead of Markdown

Writes: records are imported in batches of 1,000 through `RecordStore.import_batch`, each one first
passing `memory.trust.policy.can_write` for the person (or administrator) writing it; the time counts the
checks and the transactions, not the making up of the text. Records are 6-14 words drawn from a
5,000-word vocabulary with a Zipf-like spread, so that search meets common words with long posting
lists as well as rare ones, across 100 personal scopes, 20 group conversations, 5 projects and global.

Lookups: 2,000 random ids, each `RecordStore.get` followed by `memory.trust.policy.can_read(by_id=True)` for
the record's owner, timed one by one (the bare `get` alone too, for comparison). Searches: 200
queries of 1-4 words, each `visible_scopes` + `RecordStore.search` + `can_read` on every hit; the
queries skip the 50 most frequent words, which play the part of the stop words that search drops
(in a 10-word record the most frequent word turns up two times in three).

Targets (docs/benchmarks.md, "Memory store"): 2,000+ policy-checked writes/s and a policy-filtered lookup
by id under 2 ms at p99.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from memory.records.fields import NewRecord  # noqa: E402
from memory.records.model import MemoryClass, Provenance, ReviewStatus, Scope, ScopeKind, UsePolicy  # noqa: E402
from memory.records.store import RecordStore  # noqa: E402
from memory.store.storage import Storage  # noqa: E402
from memory.trust.policy import Actor, Where, WriteAccess, can_read, can_write, visible_scopes  # noqa: E402

BATCH = 1_000
LOOKUPS = 2_000
SEARCHES = 200
TARGET_WRITES_PER_S = 2_000
TARGET_LOOKUP_P99_MS = 2.0
USERS, GROUPS, PROJECTS = 100, 20, 5
ACCESS = WriteAccess()
STOP = 50
SYLLABLES = "ka lo mi ne su ta ri po an el or us in at ve do gu ba fe zi".split()


def vocabulary(rng: random.Random, size: int = 5_000) -> list[str]:
    words: dict[str, None] = {}
    while len(words) < size:
        words["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))] = None
    return list(words)


class Corpus:
    """Made-up records and who writes (and reads) each one."""

    def __init__(self, seed: int = 5) -> None:
        self.rng = random.Random(seed)
        self.words = vocabulary(self.rng)
        self.weights = [1 / (rank + 1) for rank in range(len(self.words))]  # Zipf, s = 1

    def text(self, low: int, high: int) -> str:
        return " ".join(self.rng.choices(self.words, self.weights, k=self.rng.randint(low, high)))

    def query(self) -> str:
        """1-4 words, never the STOP most frequent: those stand for the stop words search drops."""
        words, weights = self.words[STOP:], self.weights[STOP:]
        return " ".join(self.rng.choices(words, weights, k=self.rng.randint(1, 4)))

    def writer(self, i: int) -> tuple[Scope, Actor, Where]:
        kind = i % 10
        user = f"u{self.rng.randrange(USERS)}"
        if kind < 6:
            return Scope.personal(user), Actor(user, frozenset({"user"})), Where("personal", f"web:{user}")
        if kind < 9:
            group = f"telegram:group:-{100 + self.rng.randrange(GROUPS)}"
            return Scope.channel(group), Actor(user, frozenset({"user"})), Where("team", group)
        admin = Actor("root", frozenset({"admin"}), "cli")
        if self.rng.random() < 0.8:
            return Scope(ScopeKind.PROJECT, f"p{self.rng.randrange(PROJECTS)}"), admin, Where("personal")
        return Scope(ScopeKind.GLOBAL), admin, Where("personal")

    def item(self, scope: Scope, author: str) -> NewRecord:
        memory_class = self.rng.choice((MemoryClass.DURABLE_FACT, MemoryClass.EVIDENCE, MemoryClass.EVIDENCE))
        return NewRecord(
            content=self.text(6, 14),
            memory_class=memory_class,
            provenance=Provenance.IMPORTED,
            use_policy=UsePolicy(),
            scope=scope,
            author=author,
            review_status=ReviewStatus.NONE,
        )


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": statistics.median(ordered) * 1e3,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e3,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    total = 10_000 if args.quick else 100_000
    corpus = Corpus()
    with tempfile.TemporaryDirectory(prefix="clawgate-records-") as tmp:
        storage = await Storage.open(f"sqlite:///{tmp}/bench.db")
        store = RecordStore(storage.db)
        try:
            readers: dict[str, tuple[Actor, Where]] = {}
            write_seconds = 0.0
            refused = 0
            for start in range(0, total, BATCH):
                planned = [corpus.writer(i) for i in range(start, min(total, start + BATCH))]
                items = [corpus.item(scope, actor.user_id or "root") for scope, actor, _ in planned]
                t0 = time.perf_counter()
                allowed = [bool(can_write(actor, scope, where, ACCESS)) for scope, actor, where in planned]
                ids = await store.import_batch([item for item, ok in zip(items, allowed, strict=True) if ok])
                write_seconds += time.perf_counter() - t0
                refused += allowed.count(False)
                who = [(actor, where) for (_, actor, where), ok in zip(planned, allowed, strict=True) if ok]
                readers.update(zip(ids, who, strict=True))
            written = len(readers)

            ids = list(readers)
            now = datetime.now(UTC)
            for record_id in ids[:100]:  # warm the page cache and the statement cache
                await store.get(record_id)
            checked: list[float] = []
            bare: list[float] = []
            denied = 0
            for record_id in corpus.rng.sample(ids, LOOKUPS):
                actor, where = readers[record_id]
                t0 = time.perf_counter()
                record = await store.get(record_id)
                visible = record is not None and bool(can_read(actor, record, where, now, by_id=True))
                checked.append(time.perf_counter() - t0)
                denied += not visible
                t0 = time.perf_counter()
                await store.get(record_id)
                bare.append(time.perf_counter() - t0)

            searched: list[float] = []
            hits = 0
            for _ in range(SEARCHES):
                actor, where = readers[corpus.rng.choice(ids)]
                query = corpus.query()
                t0 = time.perf_counter()
                scopes, projects = visible_scopes(actor, where)
                found = await store.search(query, scopes=scopes, include_projects=projects, now=now)
                shown = [r for r, _ in found if can_read(actor, r, where, now)]
                searched.append(time.perf_counter() - t0)
                hits += len(shown)
        finally:
            await storage.close()
    lookup = percentiles(checked)
    return {
        "python": sys.version.split()[0],
        "records": written,
        "refused_by_policy": refused,
        "writes_per_s": written / write_seconds,
        "lookup": lookup,
        "lookup_bare": percentiles(bare),
        "lookups_denied": denied,
        "search": percentiles(searched),
        "search_hits_mean": hits / SEARCHES,
        "targets": {"writes_per_s": TARGET_WRITES_PER_S, "lookup_p99_ms": TARGET_LOOKUP_P99_MS},
        "met": {
            "writes": written / write_seconds >= TARGET_WRITES_PER_S,
            "lookup": lookup["p99_ms"] < TARGET_LOOKUP_P99_MS,
        },
    }


def markdown(res: dict[str, Any]) -> str:
    def verdict(ok: bool) -> str:
        return "met" if ok else "**not met**"

    look, bare, search = res["lookup"], res["lookup_bare"], res["search"]
    return "\n".join(
        [
            f"## Memory store at {res['records']:,} records, SQLite (Python {res['python']})\n",
            "| measure | result | target | |",
            "|---|---:|---:|---|",
            f"| policy-checked writes (`can_write` + `import_batch`, batches of {BATCH:,}) "
            f"| {res['writes_per_s']:,.0f} records/s | {res['targets']['writes_per_s']:,}+ records/s "
            f"| {verdict(res['met']['writes'])} |",
            f"| lookup by id + `can_read`, p50 / p99 | {look['p50_ms']:.2f} / {look['p99_ms']:.2f} ms "
            f"| p99 < {res['targets']['lookup_p99_ms']:g} ms | {verdict(res['met']['lookup'])} |",
            f"| lookup by id alone, p50 / p99 | {bare['p50_ms']:.2f} / {bare['p99_ms']:.2f} ms | | |",
            f"| search ({SEARCHES} queries, 1-4 words, policy-filtered), p50 / p99 "
            f"| {search['p50_ms']:.2f} / {search['p99_ms']:.2f} ms | | |",
            "",
            f"{LOOKUPS:,} lookups ({res['lookups_denied']} denied), {res['search_hits_mean']:.1f} hits per search "
            f"on average; {res['refused_by_policy']} writes refused by policy.",
        ]
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="10,000 records instead of 100,000")
    p.add_argument("--json", action="store_true", help="JSON instead of Markdown")
    args = p.parse_args()
    res = asyncio.run(run(args))
    print(json.dumps(res, indent=2) if args.json else markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
