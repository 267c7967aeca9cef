#!/usr/bin/env python3
"""Recall on LoCoMo: does the project's recall find the dialog turns that answer a question?

    .venv/bin/python benchmarks/locomo.py            # all 10 conversations (a few minutes; longer on the first run)
    .venv/bin/python benchmarks/locomo.py --quick    # the first 3 conversations
    .venv/bin/python benchmarks/locomo.py --json     # JSON instead of Markdown

Data: ../shared/bench/locomo10.json (LoCoMo, Maharana et al., ACL 2024, CC BY-NC 4.0; never shipped).
Every dialog turn becomes a memory record of its conversation (scope `channel:locomo-<n>`), its
session date prefixed to its text ("[8 May 2023] Caroline: …"), created at that date, attributed to
its speaker, imported with `RecordStore.import_batch` into a temporary SQLite database: the lexical
leg is the store's own FTS5 search (`RecordStore.search`). Turns are embedded through
memory/embed/embeddings.py (the bundled all-MiniLM-L6-v2, on one thread) into a
`memory.embed.index.VectorIndex`; the vector leg searches it with the conversation's items as the allowed
set, as a scope filter would.

Each question of categories 1-4 (multi-hop, temporal, open-domain, single-hop; 5, adversarial, has
no evidence to find) is ranked by the project's recall (`memory.recall.Retriever`) and by baselines
measured in the same run: BM25 alone (the store's FTS5), cosine alone, and the plain 0.7 / 0.3
hybrid (min-max lexical, no neighbours, no speaker, no recency). Evidence recall@k: the fraction of a
question's evidence turns in the top k, averaged over questions. Latency is per question, from the
question's text to the ranking, the query embedding included.

Turn vectors (both the turn alone and the turn with the turn before it, see NEIGHBOUR CONTEXT below)
are cached under ~/.cache/clawgate-bench, keyed by model id and a hash of the exact text embedded;
queries are embedded afresh every time, inside the timed section.

Neighbour context, which the store does not do yet: (1) the vector of a turn is the normalized mean
of the turn's own embedding and that of the turn with the one before it, so a reply like "Yes, last
Sunday" carries what it answers; (2) `Retriever` is told which turns are adjacent in a session.
Both need the store to know a record's neighbours (docs/benchmarks.md, "Recall at scale").
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from memory.embed.embeddings import Embedder, make_embedder, model_info, normalize  # noqa: E402
from memory.embed.index import VectorIndex  # noqa: E402
from memory.recall import Candidate, Key, RecallSettings, Retriever, Vector, walk  # noqa: E402
from memory.records.fields import NewRecord  # noqa: E402
from memory.records.model import MemoryClass, Provenance, ReviewStatus, UsePolicy  # noqa: E402
from memory.records.store import RecordStore  # noqa: E402
from memory.store.storage import Storage  # noqa: E402

DATA = ROOT.parent / "shared" / "bench" / "locomo10.json"
CACHE = Path.home() / ".cache" / "clawgate-bench"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KS = (5, 10)
TARGET_ALL, TARGET_MULTI_HOP = 0.75, 0.45
QUICK_CONVERSATIONS = 3
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")


@dataclass(frozen=True, slots=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    session: int
    at: datetime

    @property
    def content(self) -> str:
        return f"[{self.at.day} {self.at:%B %Y}] {self.speaker}: {self.text}"


@dataclass(slots=True)
class Conversation:
    n: int
    turns: list[Turn]
    questions: list[tuple[str, int, list[str]]]  # (question, category, evidence dia_ids)
    ids: dict[str, str] = field(default_factory=dict)  # dia_id → record id

    @property
    def scope(self) -> str:
        return f"channel:locomo-{self.n}"

    @property
    def speakers(self) -> set[str]:
        return {t.speaker for t in self.turns}

    @property
    def now(self) -> datetime:  # questions are asked the day after the last session
        return self.turns[-1].at + timedelta(days=1)


@dataclass(slots=True)
class Quirks:
    questions: int = 0  # of categories 1-4
    no_evidence: int = 0  # skipped: nothing to find
    normalised: int = 0  # evidence entries rewritten ("D:11:26", "D8:6; D9:17", "D30:05")
    malformed: int = 0  # evidence entries that name no turn at all ("D"), dropped
    nowhere: int = 0  # evidence ids of turns that do not exist, dropped
    skipped: int = 0  # questions left without any evidence after that


def normalise_evidence(raw: str) -> list[str]:
    """`D<session>:<turn>` ids in `raw`: several may share one string, some have a stray colon or a
    leading zero."""
    return [f"D{int(s)}:{int(t)}" for s, t in _EVIDENCE.findall(raw)]


def load(path: Path, limit: int | None) -> tuple[list[Conversation], Quirks]:
    quirks = Quirks()
    out = []
    for n, sample in enumerate(json.loads(path.read_text(encoding="utf-8"))[:limit]):
        conv = sample["conversation"]
        turns = []
        k = 1
        while f"session_{k}" in conv:
            at = datetime.strptime(conv[f"session_{k}_date_time"], "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
            turns += [Turn(t["dia_id"], t["speaker"], t["text"], k, at) for t in conv[f"session_{k}"]]
            k += 1
        known = {t.dia_id for t in turns}
        questions = []
        for qa in sample["qa"]:
            if qa["category"] not in CATEGORIES:
                continue
            quirks.questions += 1
            if not qa["evidence"]:
                quirks.no_evidence += 1
                continue
            evidence: list[str] = []
            for raw in qa["evidence"]:
                ids = normalise_evidence(raw)
                quirks.malformed += not ids
                quirks.normalised += bool(ids) and ids != [raw]
                quirks.nowhere += sum(i not in known for i in ids)
                evidence += [i for i in ids if i in known and i not in evidence]
            if evidence:
                questions.append((qa["question"], qa["category"], evidence))
            else:
                quirks.skipped += 1
        out.append(Conversation(n, turns, questions))
    return out, quirks


def with_previous(turns: Sequence[Turn], i: int) -> str:
    """The turn with the one before it in its session, for a context embedding."""
    turn = turns[i]
    before = turns[i - 1] if i > 0 and turns[i - 1].session == turn.session else None
    said = f"{before.speaker}: {before.text} " if before else ""
    return f"[{turn.at.day} {turn.at:%B %Y}] {said}{turn.speaker}: {turn.text}"


class VectorCache:
    """Document vectors on disk by model id and text hash, so a re-run embeds nothing it has seen."""

    def __init__(self, model_id: str) -> None:
        slug = re.sub(r"[^A-Za-z0-9.-]+", "_", model_id)
        self.path = CACHE / f"locomo-{slug}.npz"
        self.vectors: dict[str, np.ndarray] = {}
        if self.path.exists():
            with np.load(self.path) as data:
                self.vectors = dict(zip(data["keys"].tolist(), data["vectors"], strict=True))

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]

    async def embed(self, embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if self.key(t) not in self.vectors))
        if missing:
            t0 = time.perf_counter()
            for start in range(0, len(missing), 512):
                batch = missing[start : start + 512]
                for text, vec in zip(batch, await embedder.embed_documents(batch), strict=True):
                    self.vectors[self.key(text)] = vec
            rate = len(missing) / (time.perf_counter() - t0)
            print(f"embedded {len(missing)} texts at {rate:.0f}/s", file=sys.stderr)
            CACHE.mkdir(parents=True, exist_ok=True)
            keys = np.array(list(self.vectors))
            np.savez(self.path, keys=keys, vectors=np.stack([self.vectors[k] for k in keys]))
        return np.stack([self.vectors[self.key(t)] for t in texts])


class Bench:
    """The store, the two vector indexes (turn alone; turn mixed with its context) and the legs."""

    def __init__(self, store: RecordStore, embedder: Embedder) -> None:
        self.store = store
        self.embedder = embedder
        self.plain = VectorIndex(embedder.model_id)
        self.mixed = VectorIndex(embedder.model_id)
        self.adjacent: dict[Key, list[Key]] = {}
        self.scopes: dict[str, set[Key]] = {}

    async def add(self, conv: Conversation, cache: VectorCache) -> None:
        items = [
            NewRecord(
                t.content,
                MemoryClass.DURABLE_FACT,
                Provenance.IMPORTED,
                UsePolicy(),
                conv.scope,
                "import:locomo",
                ReviewStatus.NONE,
                attribution=t.speaker,
                created_at=t.at,
            )
            for t in conv.turns
        ]
        ids = await self.store.import_batch(items, now=conv.now)
        conv.ids = {t.dia_id: i for t, i in zip(conv.turns, ids, strict=True)}
        own = await cache.embed(self.embedder, [t.content for t in conv.turns])
        context = await cache.embed(self.embedder, [with_previous(conv.turns, i) for i in range(len(conv.turns))])
        mixed = normalize(own + context)
        keys = [("record", i) for i in ids]
        for j, key in enumerate(keys):
            self.plain.add(*key, own[j])
            self.mixed.add(*key, mixed[j])
            near = [
                keys[m] for m in (j - 1, j + 1) if 0 <= m < len(keys) and conv.turns[m].session == conv.turns[j].session
            ]
            self.adjacent[key] = near
        self.scopes[conv.scope] = set(keys)

    def retriever(self, settings: RecallSettings, conv: Conversation, *, mixed: bool, neighbours: bool) -> Retriever:
        index = self.mixed if mixed else self.plain
        allowed = self.scopes[conv.scope]

        async def lexical(query: str, limit: int) -> list[tuple[Candidate, float]]:
            hits = await self.store.search(query, scopes=[conv.scope], limit=limit, now=conv.now)
            return [(Candidate.of_record(r), score) for r, score in hits]

        async def vector(q: Vector, limit: int, only: Collection[Key] | None) -> list[tuple[Key, float]]:
            return [((kind, i), cos) for kind, i, cos in index.search(q, limit, allowed if only is None else only)]

        async def load(keys: Sequence[Key]) -> dict[Key, Candidate]:
            return {("record", r.id): Candidate.of_record(r) for r in await self.store.get_many([i for _, i in keys])}

        async def adjacent(keys: Sequence[Key], reach: int) -> dict[Key, list[Key]]:
            return walk(lambda ks: {k: self.adjacent.get(k, []) for k in ks}, keys, reach)

        return Retriever(
            settings,
            lexical,
            load,
            vector=vector,
            embed_query=self.embedder.embed_query,
            neighbours=adjacent if neighbours else None,
            calibrated_floor=model_info(self.embedder.model_id).min_cosine,
            names=conv.speakers,
        )


# The project's recall as configured by default, and the plain hybrid it is measured against.
RECALL = RecallSettings()
PLAIN_HYBRID = RecallSettings(
    neighbour_weight=0.0,
    speaker_boost=0.0,
    search_without_names=False,
    recency_half_life_days=0.0,
    lexical_pool=50,
    min_cosine=-1.0,
)
# What each piece of the recall is worth: the recall with one piece taken out (no latency measured).
ABLATIONS: dict[str, tuple[RecallSettings, bool, bool]] = {  # label: (settings, mixed vectors, neighbours)
    "recall without neighbour lift": (replace(RECALL, neighbour_weight=0.0), True, False),
    "recall without context vectors": (RECALL, False, True),
    "recall without speaker boost": (replace(RECALL, speaker_boost=0.0), True, True),
    "recall with names left in the search text": (replace(RECALL, search_without_names=False), True, True),
    "recall without recency": (replace(RECALL, recency_half_life_days=0.0), True, True),
    "recall without cosine floor": (replace(RECALL, min_cosine=-1.0), True, True),
}


@dataclass(slots=True)
class Tally:
    hits: dict[tuple[int, int | str], list[float]] = field(default_factory=lambda: defaultdict(list))
    ms: list[float] = field(default_factory=list)

    def add(self, ranked: Sequence[str], evidence: Sequence[str], category: int, ms: float | None) -> None:
        for k in KS:
            top = set(ranked[:k])
            found = sum(e in top for e in evidence) / len(evidence)
            self.hits[(k, category)].append(found)
            self.hits[(k, "all")].append(found)
        if ms is not None:
            self.ms.append(ms)

    def summary(self) -> dict[str, Any]:
        groups: tuple[int | str, ...] = (*CATEGORIES, "all")
        out: dict[str, Any] = {
            f"recall@{k}": {str(c): round(statistics.fmean(self.hits[(k, c)]), 4) for c in groups if self.hits[(k, c)]}
            for k in KS
        }
        if self.ms:
            q = statistics.quantiles(self.ms, n=100)
            out["p50_ms"], out["p95_ms"] = round(statistics.median(self.ms), 2), round(q[94], 2)
        return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    conversations, quirks = load(Path(args.data), QUICK_CONVERSATIONS if args.quick else None)
    embedder = make_embedder("local", None, threads=1)
    assert embedder is not None
    cache = VectorCache(embedder.model_id)
    tallies: dict[str, Tally] = defaultdict(Tally)
    with tempfile.TemporaryDirectory(prefix="clawgate-locomo-") as tmp:
        storage = await Storage.open(f"sqlite:///{tmp}/bench.db")
        try:
            bench = Bench(storage.records, embedder)
            for conv in conversations:
                await bench.add(conv, cache)
            await embedder.embed_query("warm up")  # the model's first call loads it: not a question's cost
            for conv in conversations:
                by_record = {i: d for d, i in conv.ids.items()}
                allowed = bench.scopes[conv.scope]

                def dia(keys: Sequence[Key], by_record: dict[str, str] = by_record) -> list[str]:
                    return [by_record[i] for _, i in keys]

                recall = bench.retriever(RECALL, conv, mixed=True, neighbours=True)
                plain = bench.retriever(PLAIN_HYBRID, conv, mixed=False, neighbours=False)
                ablations = {
                    label: bench.retriever(s, conv, mixed=m, neighbours=nb) for label, (s, m, nb) in ABLATIONS.items()
                }
                for question, category, evidence in conv.questions:
                    t0 = time.perf_counter()
                    hits = await storage.records.search(question, scopes=[conv.scope], limit=10, now=conv.now)
                    tallies["BM25 only (store FTS5)"].add(
                        [by_record[r.id] for r, _ in hits], evidence, category, (time.perf_counter() - t0) * 1000
                    )
                    t0 = time.perf_counter()
                    q = await embedder.embed_query(question)
                    top = bench.plain.search(q, 10, allowed)
                    ms = (time.perf_counter() - t0) * 1000
                    tallies["cosine only (MiniLM)"].add(dia([(k, i) for k, i, _ in top]), evidence, category, ms)
                    for label, retriever in (("plain 0.7/0.3 hybrid", plain), ("**project recall**", recall)):
                        t0 = time.perf_counter()
                        result = await retriever.recall(question, conv.now)
                        ms = (time.perf_counter() - t0) * 1000
                        tallies[label].add(dia([s.candidate.key for s in result.ranked]), evidence, category, ms)
                    if not args.no_ablations:
                        for label, retriever in ablations.items():
                            result = await retriever.recall(question, conv.now)
                            tallies[label].add(dia([s.candidate.key for s in result.ranked]), evidence, category, None)
        finally:
            await storage.close()
    return {
        "python": sys.version.split()[0],
        "model": embedder.model_id,
        "runtime": getattr(embedder, "runtime", "remote"),
        "min_cosine": model_info(embedder.model_id).min_cosine,
        "conversations": len(conversations),
        "memories": sum(len(c.turns) for c in conversations),
        "questions": sum(len(c.questions) for c in conversations),
        "quirks": asdict(quirks),
        "settings": {k: v for k, v in vars_of(RECALL).items() if k != "class_priors"},
        "results": {label: t.summary() for label, t in tallies.items()},
        "targets": {"recall@10": TARGET_ALL, "multi-hop recall@10": TARGET_MULTI_HOP},
    }


def vars_of(settings: RecallSettings) -> dict[str, Any]:
    return {f.name: getattr(settings, f.name) for f in fields(settings)}


def markdown(res: dict[str, Any]) -> str:
    quirks = res["quirks"]
    out = [
        f"## LoCoMo evidence recall (Python {res['python']}, {res['model']} on {res['runtime']}, 1 thread)\n",
        f"{res['conversations']} conversations, {res['memories']:,} turns stored as memories, "
        f"{res['questions']:,} questions of categories 1-4 (of {quirks['questions']:,}: {quirks['no_evidence']} "
        f"without evidence and {quirks['skipped']} left without any after cleaning skipped; "
        f"{quirks['normalised']} evidence entries normalised, {quirks['malformed']} malformed and "
        f"{quirks['nowhere']} pointing nowhere dropped). Cosine floor {res['min_cosine']} (manifest).\n",
        "| ranking | recall@5 | recall@10 | multi-hop @10 | temporal @10 | open-domain @10 | single-hop @10 "
        "| p50 ms | p95 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, r in res["results"].items():
        at10 = r["recall@10"]
        cells = [f"{r['recall@5']['all']:.3f}", f"{at10['all']:.3f}"]
        cells += [f"{at10[str(c)]:.3f}" if str(c) in at10 else "-" for c in CATEGORIES]
        cells += [f"{r['p50_ms']:.1f}", f"{r['p95_ms']:.1f}"] if "p50_ms" in r else ["-", "-"]
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    best = res["results"]["**project recall**"]["recall@10"]
    met_all = best["all"] >= TARGET_ALL
    met_multi = best.get("1", 0.0) >= TARGET_MULTI_HOP
    out += [
        "",
        "Latency: from the question's text to the ranking, query embedding included; each conversation "
        "is its own pool of ~600 memories.",
        "",
        f"Targets: recall@10 ≥ {TARGET_ALL} over categories 1-4 — {'met' if met_all else '**not met**'} "
        f"({best['all']:.3f}); multi-hop ≥ {TARGET_MULTI_HOP} — {'met' if met_multi else '**not met**'} "
        f"({best.get('1', 0.0):.3f}).",
    ]
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help=f"the first {QUICK_CONVERSATIONS} conversations only")
    p.add_argument("--json", action="store_true", help="JSON instead of Markdown")
    p.add_argument("--no-ablations", action="store_true", help="skip the rows that take one piece out")
    p.add_argument("--data", default=str(DATA), help="the locomo10.json file")
    args = p.parse_args()
    res = asyncio.run(run(args))
    print(json.dumps(res, indent=2) if args.json else markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
