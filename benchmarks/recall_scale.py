#!/usr/bin/env python3
"""Recall at scale: one turn's recall with 10,000 and 100,000 memories in scope, and the background
upkeep that embeds them (backfill speed, resumed after an interruption).

    .venv/bin/python benchmarks/recall_scale.py            # 10,000 and 100,000 memories
    .venv/bin/python benchmarks/recall_scale.py --quick    # 2,000 and 10,000
    .venv/bin/python benchmarks/recall_scale.py --fresh    # re-embed everything: measures the backfill
    .venv/bin/python benchmarks/recall_scale.py --json     # JSON instead of Markdown
    .venv/bin/python benchmarks/recall_scale.py --profile recall.pstats  # cProfile the largest run
    .venv/bin/python benchmarks/recall_scale.py --keep /tmp/rs        # keep each size's database,
    .venv/bin/python benchmarks/recall_scale.py --child /tmp/rs/size-10000.json  # and measure it again

Data: the dialog turns and questions of ../shared/bench/locomo10.json (LoCoMo, CC BY-NC 4.0; read
here, never copied into the repository). Its 5,882 turns become memory texts in 24 wordings (six
ways of dating and attributing a turn, times the turn alone, with its reply, with the turn before it,
or with a remark from elsewhere in the data), so that 100,000 texts stay distinct and read like
language. The asking user, alice, has N memories in scope: 60% personal, 20% global, 10% project
and 10% of her current conversation; 10% more are copies of hers in other users' personal scopes
and in a group she is not in, created a minute later so that they would win a tie if the policy
let them through. Besides the records: archived messages of her sessions and of others' (written
through the session store, as the gateway archives them) and daily-note chunks of her, of the
global notes and of another user (written and indexed as a session flush does). The people who
speak in the data are identities with their display names (the records attributed to them, the
archived messages authored by them), so a question naming one is searched without the name and
boosts what they said, as in a gateway.

Everything runs through the gateway's own recall, built as gateway/app.py builds it:
`TurnRecall(config, storage, MemoryService(...), DailyIndex(...), make_embedder("local", None, 1))`.

Backfill: `TurnRecall.start()` runs the upkeep that embeds every item without a vector. It is stopped
once a third of the items were handed to the model, and started again as a new TurnRecall (as after
a restart); the second run must embed exactly what the first had not stored. Then the store grows
to the larger size and a fresh upkeep embeds the rest. The rate is compared with the model's own
speed on a sample of the same texts, measured in the same run. Document vectors are cached under
~/.cache/clawgate-bench by model id and text hash, so a second run takes seconds for what the first
took minutes to embed (the upkeep then measures the database side alone); --fresh embeds every text
anew. Copies of a text (the other users' records) are embedded once a run either way, so the upkeep's
speed is compared with the model's as the time the model alone would take for the texts it embedded.

Latency: each size is measured in a fresh child process on the database (a gateway restarting on
it): the index is loaded by the upkeep, then 20 warm-up and 200 timed LoCoMo questions go through
`TurnRecall.for_turn` (the three full-text legs, the query embedding, the vector leg, fusion and
selection). The query embedding is timed inside the call; it runs beside the full-text legs, so "the
call minus it" is what waiting for it did not hide, not the legs' own time. The
same questions without an embedder (lexical recall only) are the baseline measured in the same
process. RSS is read in the child after the index is loaded.

Privacy: every record id recalled must be one alice may see, every archived message and daily chunk
one of hers or shared with her; any other is a failure (exit code 1).

The local model runs on one thread (numpy's BLAS, or torch's: set before either loads), as the
gateway's default `memory.search.threads: 1` runs it. Each table row says how much CPU other processes
used meanwhile: next to a busy test suite the numbers are not comparable.

A run takes about 8 minutes with the vectors cached, ~36 minutes the first time (or with --fresh),
about a minute with --quick (7 the first time).

Targets (issue): recall p95 ≤ 25 ms with 10,000 memories in scope and ≤ 60 ms with 100,000, query
embedding included; backfill at the model's batched speed, resumable.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import sqlite3  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from sqlalchemy import make_url  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gateway.config.load import parse_config  # noqa: E402
from gateway.config.model import Config  # noqa: E402
from gateway.recall.engine import TurnMemory, TurnRecall  # noqa: E402
from gateway.session.memory_service import MemoryService  # noqa: E402
from memory.archive.daily import DailyFiles  # noqa: E402
from memory.archive.daily_index import DailyIndex, write_owner_marker  # noqa: E402
from memory.embed.embeddings import Embedder, LocalEmbedder, make_embedder  # noqa: E402
from memory.embed.index import VectorIndex  # noqa: E402
from memory.embed.vectors import VectorStore  # noqa: E402
from memory.records.fields import NewRecord  # noqa: E402
from memory.records.model import MemoryClass, Provenance, ReviewStatus, UsePolicy  # noqa: E402
from memory.store.schema import daily_chunks  # noqa: E402
from memory.store.sessions import Message  # noqa: E402
from memory.store.storage import Storage  # noqa: E402
from memory.trust.policy import Actor, Where  # noqa: E402

SCRIPT = Path(__file__).resolve()
DATA = ROOT.parent / "shared" / "bench" / "locomo10.json"
CACHE = Path.home() / ".cache" / "clawgate-bench"
SIZES = (10_000, 100_000)
QUICK_SIZES = (2_000, 10_000)
TARGET_P95_MS = {10_000: 25.0, 100_000: 60.0}
TARGET_BACKFILL_SHARE = 0.9  # of the model's own speed on the same texts
QUERIES, WARMUP = 200, 20
RESUME_AT = 1 / 3  # of the first backfill, handed to the model before the upkeep is stopped
IMPORT_BATCH = 1_000
BASELINE_SAMPLE = 1_024

USER, CONVERSATION = "alice", "web:alice"
OTHERS = ("bob", "carol", "dave")
GROUP = "telegram:group:-100"  # a group alice is not in
PROJECT = "project:garden"
# alice's own sessions (all hers: she sees their archive from anywhere) and other people's.
MY_SESSIONS = ((CONVERSATION, "personal"), ("telegram:dm:1001", "personal"), ("slack:dm:U1001", "personal"))
THEIR_SESSIONS = (("web:bob", "bob", "personal"), ("telegram:dm:2002", "carol", "personal"), (GROUP, None, "team"))


# --- the data -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Turn:
    conv: int
    session: int
    speaker: str
    other: str  # the other person in the conversation
    first: bool  # spoken by the conversation's first speaker
    text: str
    at: datetime


def load_locomo(path: Path) -> tuple[list[Turn], list[str]]:
    """Every dialog turn, and the questions of categories 1-4 taken from each conversation in turn."""
    data = json.loads(path.read_text(encoding="utf-8"))
    turns: list[Turn] = []
    per_conv: list[list[str]] = []
    for n, sample in enumerate(data):
        conv = sample["conversation"]
        a, b = conv["speaker_a"], conv["speaker_b"]
        k = 1
        while f"session_{k}" in conv:
            at = datetime.strptime(conv[f"session_{k}_date_time"], "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
            for t in conv[f"session_{k}"]:
                first = t["speaker"] == a
                turns.append(Turn(n, k, t["speaker"], b if first else a, first, t["text"], at))
            k += 1
        per_conv.append([qa["question"] for qa in sample["qa"] if qa["category"] in (1, 2, 3, 4)])
    questions = [q for row in zip(*per_conv, strict=False) for q in row]  # round-robin over conversations
    return turns, questions


PREFIXES = (
    "[{day} {month} {year}] {speaker}: ",
    "On {day} {month} {year}, {speaker} said: ",
    "{speaker} ({day} {mon} {year}): ",
    "{speaker} told {other} on {iso}: ",
    "From a chat in {month} {year}, {speaker}: ",
    "Note from {weekday} {day} {month}: {speaker} said ",
)


_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _gist(text: str, words: int = 12) -> str:
    """The first sentence of `text`, at most `words` words: a memory keeps the point, not the talk."""
    first = _SENTENCE.split(text.strip(), maxsplit=1)[0].split()
    return " ".join(first[:words]) + ("…" if len(first) > words else "")


def _body(turns: Sequence[Turn], i: int, style: int, family: int) -> str | None:
    """The turn's words alone, with the gist of its reply, after the gist of the turn before it, or
    with a remark from elsewhere in the data; None when the turn has no such neighbour."""
    t = turns[i]
    if style == 0:
        return t.text
    if style == 1:
        nxt = turns[i + 1] if i + 1 < len(turns) else None
        if nxt is None or (nxt.conv, nxt.session) != (t.conv, t.session):
            return None
        return f"{t.text} {nxt.speaker} answered: {_gist(nxt.text)}"
    if style == 2:
        prev = turns[i - 1] if i > 0 else None
        if prev is None or (prev.conv, prev.session) != (t.conv, t.session):
            return None
        return f"{t.text} (after {prev.speaker} said: {_gist(prev.text)})"
    far = turns[(i * 7919 + 104_729 * family) % len(turns)]
    return f"{t.text} Related: {far.speaker} once said {_gist(far.text)}"


def introduced(prefix: str, t: Turn) -> str:
    """One of PREFIXES filled in for turn `t` (its date in one of several forms, who spoke to whom)."""
    at = t.at
    return prefix.format(
        day=at.day,
        month=f"{at:%B}",
        mon=f"{at:%b}",
        year=at.year,
        iso=f"{at:%Y-%m-%d}",
        weekday=f"{at:%A}",
        speaker=t.speaker,
        other=t.other,
    )


def memory_texts(turns: Sequence[Turn], count: int) -> list[tuple[str, str]]:
    """`count` distinct (text, speaker) pairs, the same every run: each wording over every turn
    before the next wording, so that even the smaller sizes span all ten conversations."""
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for family, (style, prefix) in enumerate((s, p) for s in range(4) for p in PREFIXES):
        for i, t in enumerate(turns):
            body = _body(turns, i, style, family)
            if body is None:
                continue
            text = introduced(prefix, t) + body
            if text not in seen:
                seen.add(text)
                out.append((text, t.speaker))
                if len(out) == count:
                    return out
    raise SystemExit(f"the LoCoMo turns give only {len(out):,} distinct memory texts, {count:,} asked")


# --- vectors cached between runs, and the embedders recall is given -----------------------------


class VectorCache:
    """Document vectors on disk by model id and text hash: one consolidated file, plus parts written
    every minute of a long backfill, so that an interrupted run keeps what it embedded."""

    def __init__(self, model_id: str) -> None:
        slug = re.sub(r"[^A-Za-z0-9.-]+", "_", model_id)
        self.path = CACHE / f"recall-scale-{slug}.npz"
        self.vectors: dict[str, np.ndarray] = {}
        self.fresh: list[str] = []  # keys added since the last checkpoint
        self.changed = False  # since the last save
        for path in [self.path, *self._parts()]:
            if path.exists():
                with np.load(path) as data:
                    self.vectors.update(zip(data["keys"].tolist(), data["vectors"], strict=True))

    def _parts(self) -> list[Path]:
        return sorted(CACHE.glob(self.path.stem + ".part-*.npz"))

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]

    def put(self, key: str, vector: np.ndarray) -> None:
        self.vectors[key] = vector
        self.fresh.append(key)
        self.changed = True

    def _write(self, path: Path, keys: Sequence[str]) -> None:
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.stem + ".tmp.npz")
        np.savez(tmp, keys=np.array(keys), vectors=np.stack([self.vectors[k] for k in keys]))
        tmp.replace(path)

    def checkpoint(self) -> None:
        if self.fresh:
            self._write(CACHE / f"{self.path.stem}.part-{time.time_ns()}.npz", self.fresh)
            self.fresh = []

    def save(self) -> None:
        if not self.changed:
            return
        self._write(self.path, list(self.vectors))
        for part in self._parts():
            part.unlink()
        self.fresh, self.changed = [], False


class BenchEmbedder:
    """The real embedder as recall sees it: documents counted, looked up in the cache first (unless
    `reuse` is off: --fresh) and stored there; each query embedding timed (the split of a turn's recall)."""

    def __init__(self, inner: LocalEmbedder, cache: VectorCache | None = None, *, reuse: bool = True) -> None:
        self.inner = inner
        self.cache = cache
        self.reuse = reuse
        self.embedded: set[str] = set()  # keys the model embedded in this run
        self.model_id = inner.model_id
        self.query_prefix = inner.query_prefix
        self.document_prefix = inner.document_prefix
        self.asked = 0  # texts handed to embed_documents
        self.by_model = 0  # of them, embedded by the model (the rest came from the cache)
        self.model_seconds = 0.0
        self.query_ms: list[float] = []

    @property
    def dim(self) -> int:
        return self.inner.dim

    async def load(self) -> None:
        await self.inner.load()

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.asked += len(texts)
        if self.cache is None:
            self.by_model += len(texts)
            return await self.inner.embed_documents(texts)
        keys = [self.cache.key(t) for t in texts]
        known = self.cache.vectors if self.reuse else self.embedded
        todo = {k: t for k, t in zip(keys, texts, strict=True) if k not in known}
        if todo:
            t0 = time.perf_counter()
            vecs = await self.inner.embed_documents(list(todo.values()))
            self.model_seconds += time.perf_counter() - t0
            self.by_model += len(todo)
            for k, vec in zip(todo, vecs, strict=True):
                self.cache.put(k, vec.copy())
                self.embedded.add(k)
        return np.stack([self.cache.vectors[k] for k in keys])

    async def embed_query(self, text: str) -> np.ndarray:
        t0 = time.perf_counter()
        try:
            return await self.inner.embed_query(text)
        finally:
            self.query_ms.append((time.perf_counter() - t0) * 1000)


def local_embedder() -> LocalEmbedder:
    embedder = make_embedder("local", None, threads=1)
    assert isinstance(embedder, LocalEmbedder)
    return embedder


# --- the world alice lives in -------------------------------------------------------------------


def bench_config(data_dir: Path) -> Config:
    return parse_config(
        {
            "storage": {"data_dir": str(data_dir)},
            "memory": {"search": {"provider": "local", "threads": 1}},
            "logging": {"level": "INFO"},
        },
        "benchmark",
        env={},
    )


def build_recall(config: Config, storage: Storage, embedder: Embedder | None) -> TurnRecall:
    """As gateway/app.py builds it."""
    daily = DailyIndex(storage.db, DailyFiles(config.storage.data_dir / "memory"))
    return TurnRecall(config, storage, MemoryService(config, storage.records, []), daily, embedder)


@dataclass(slots=True)
class World:
    """What was written, to check every recalled item against."""

    mine: set[str] = field(default_factory=set)  # record ids alice may see
    theirs: set[str] = field(default_factory=set)  # record ids of other users and of a group
    twinned: set[str] = field(default_factory=set)  # texts that exist both in alice's scope and another's
    text_of: dict[str, str] = field(default_factory=dict)  # record id → text
    archive_mine: set[str] = field(default_factory=set)
    archive_theirs: set[str] = field(default_factory=set)
    chunk_scope: dict[str, str] = field(default_factory=dict)
    archived: int = 0
    chunks: int = 0


def _scope_of(i: int) -> str:
    slot = i % 20
    if slot < 12:
        return f"personal:{USER}"
    if slot < 16:
        return "global"
    if slot < 18:
        return PROJECT
    return f"channel:{CONVERSATION}"


def _created(i: int, anchor: datetime) -> tuple[MemoryClass, datetime]:
    if i % 7 == 0:  # evidence lives 30 days
        return MemoryClass.EVIDENCE, anchor - timedelta(days=i % 25, hours=i % 24)
    return MemoryClass.DURABLE_FACT, anchor - timedelta(days=(i * 7919) % 730, hours=i % 24)


def _imported(text: str, memory_class: MemoryClass, scope: str, author: str, speaker: str, at: datetime) -> NewRecord:
    return NewRecord(
        text,
        memory_class,
        Provenance.IMPORTED,
        UsePolicy(),
        scope,
        author,
        ReviewStatus.NONE,
        attribution=speaker,
        created_at=at,
    )


async def add_records(
    storage: Storage, texts: Sequence[tuple[str, str]], start: int, stop: int, anchor: datetime, world: World
) -> float:
    """Records [start, stop) of alice's, and a copy of every tenth in someone else's scope; seconds taken."""
    elapsed = 0.0
    for at in range(start, stop, IMPORT_BATCH):
        items: list[NewRecord] = []
        theirs: list[bool] = []
        for i in range(at, min(stop, at + IMPORT_BATCH)):
            text, speaker = texts[i]
            memory_class, created = _created(i, anchor)
            scope = _scope_of(i)
            author = "root" if scope in ("global", PROJECT) else USER
            items.append(_imported(text, memory_class, scope, author, speaker, created))
            theirs.append(False)
            if i % 10 == 3:
                other = OTHERS[(i // 10) % len(OTHERS)]
                decoy = f"channel:{GROUP}" if (i // 10) % 5 == 4 else f"personal:{other}"
                items.append(_imported(text, memory_class, decoy, other, speaker, created + timedelta(minutes=1)))
                theirs.append(True)
                world.twinned.add(text)
        t0 = time.perf_counter()
        ids = await storage.records.import_batch(items, now=anchor)
        elapsed += time.perf_counter() - t0
        for record_id, item, other_user in zip(ids, items, theirs, strict=True):
            (world.theirs if other_user else world.mine).add(record_id)
            world.text_of[record_id] = item.content
    return elapsed


def identity_of(speaker: str) -> str:
    return f"telegram:{speaker.lower()}"


async def add_people(storage: Storage, turns: Sequence[Turn]) -> None:
    """The people who speak in the data are identities with their display names, as the people
    quoted in a gateway's memories are: a question naming one is searched without the name."""
    for speaker in sorted({t.speaker for t in turns}):
        await storage.identities.resolve(identity_of(speaker), speaker)


async def add_archive(config: Config, storage: Storage, turns: Sequence[Turn], per_user: int, world: World) -> None:
    """Archived messages as the session store archives them: alice's sessions hold turns of the
    first seven conversations, other people's sessions turns of the last three."""
    agent = config.agent(None)
    assert agent is not None
    mine = [t for t in turns if t.conv < 7][:per_user]
    theirs = [t for t in turns if t.conv >= 7][: per_user // 2]
    plan: list[tuple[str, str | None, str, list[Turn]]] = [
        (key, USER, audience, mine[j :: len(MY_SESSIONS)]) for j, (key, audience) in enumerate(MY_SESSIONS)
    ]
    plan += [(key, owner, aud, theirs[j :: len(THEIR_SESSIONS)]) for j, (key, owner, aud) in enumerate(THEIR_SESSIONS)]
    for key, owner, audience, said in plan:
        state = await storage.sessions.active(key, agent.name, owner, audience)
        messages = [
            Message("user" if t.first else "assistant", t.text, author=identity_of(t.speaker) if t.first else None)
            for t in said
        ]
        await storage.sessions.append(state, messages)
        last = messages[-1].id
        assert last is not None
        await storage.sessions.archive(state, last, "benchmark")
        (world.archive_mine if owner == USER else world.archive_theirs).update(t.text for t in said)
        world.archived += len(said)


async def add_daily(
    config: Config, storage: Storage, turns: Sequence[Turn], files: int, anchor: datetime, world: World
) -> None:
    """Daily notes as a session flush writes and indexes them: alice's, the global ones, bob's."""
    daily = DailyFiles(config.storage.data_dir / "memory")
    index = DailyIndex(storage.db, daily)
    owners: list[tuple[str, str | None, str, list[Turn]]] = [
        ("user", USER, f"personal:{USER}", [t for t in turns if t.conv < 5]),
        ("global", None, "global", [t for t in turns if t.conv in (5, 6)]),
        ("user", OTHERS[0], f"personal:{OTHERS[0]}", [t for t in turns if t.conv >= 8]),
    ]
    for n, (kind, owner, scope, pool) in enumerate(owners):
        count = files if n == 0 else max(1, files // 3)
        for d in range(count):
            day = (anchor - timedelta(days=d + 1)).date()
            path = daily.path(kind, owner, day)  # type: ignore[arg-type]
            for part in range(2):
                at = (d * 2 + part) * 12
                bullets = [f"{t.speaker}: {t.text}" for t in pool[at : at + 12]]
                if bullets:
                    await asyncio.to_thread(daily.append, path, f"1{part}:00 · web", bullets)
            if owner is not None:
                write_owner_marker(path.parent, owner)
            world.chunks += await index.index_file(path, scope)

    def chunks(conn: Any) -> list[tuple[str, str]]:
        return [(r.content, r.scope) for r in conn.execute(daily_chunks.select()).all()]

    world.chunk_scope = dict(await storage.db.read(chunks))


# --- the upkeep, stopped and resumed --------------------------------------------------------------


async def until_asked(embedder: BenchEmbedder, target: int, label: str) -> None:
    """Wait until the upkeep has handed `target` texts to the embedder (polling the counter, not the
    database: caught_up() scans for missing vectors ten times a second, which slows the upkeep)."""
    started = time.perf_counter()
    last = started
    deadline = started + max(600.0, target / 10)
    while embedder.asked < target:
        await asyncio.sleep(0.25)
        now = time.perf_counter()
        if now > deadline:
            raise RuntimeError(
                f"{label}: the upkeep asked for {embedder.asked:,} of {target:,} texts in {now - started:.0f} s"
            )
        if now - last >= 60:
            last = now
            if embedder.cache is not None:
                embedder.cache.checkpoint()
            done = f"{embedder.asked:,}/{target:,} texts ({embedder.by_model:,} by the model)"
            print(f"  {label}: {done}", file=sys.stderr)


async def covered(vectors: VectorStore, model_id: str) -> tuple[int, int]:
    cov = await vectors.coverage(model_id)
    return sum(c for c, _ in cov.values()), sum(t for _, t in cov.values())


async def backfill_resumed(config: Config, storage: Storage, embedder: BenchEmbedder, timeout: float) -> dict[str, Any]:
    """Embed everything missing through TurnRecall's upkeep, stopped after a third and started anew."""
    vectors = VectorStore(storage.db)
    stored0, total = await covered(vectors, embedder.model_id)
    todo = total - stored0
    asked0, model0, seconds0 = embedder.asked, embedder.by_model, embedder.model_seconds

    others = OtherLoad()
    first = build_recall(config, storage, embedder)
    t0 = time.perf_counter()
    first.start()
    await until_asked(embedder, asked0 + max(1, int(todo * RESUME_AT)), "backfill, first run")
    await first.stop()
    first_s = time.perf_counter() - t0
    asked_first = embedder.asked - asked0
    stored_first, _ = await covered(vectors, embedder.model_id)

    second = build_recall(config, storage, embedder)
    t0 = time.perf_counter()
    second.start()
    await until_asked(embedder, asked0 + asked_first + (total - stored_first), "backfill, after the restart")
    await second.caught_up(timeout=timeout)
    second_s = time.perf_counter() - t0
    await second.stop()
    asked_second = embedder.asked - asked0 - asked_first
    stored_end, total_end = await covered(vectors, embedder.model_id)
    return {
        "items": todo,
        "seconds": first_s + second_s,
        "per_s": todo / (first_s + second_s),
        "by_model": embedder.by_model - model0,
        "model_seconds": embedder.model_seconds - seconds0,
        "stored_at_stop": stored_first - stored0,
        "asked_before_stop": asked_first,
        "asked_after_restart": asked_second,
        "missing_at_restart": total - stored_first,
        "redone": asked_first + asked_second - todo,  # the batch in flight when the upkeep stopped
        "complete": stored_end == total_end,
        # Resumed: the second run embedded what was missing, nothing already stored.
        "resumed": asked_second <= total - stored_first and stored_end == total_end and stored_first > stored0,
        "other_load_cores": others.cores(),
    }


async def upkeep_once(config: Config, storage: Storage, embedder: BenchEmbedder, timeout: float) -> dict[str, Any]:
    """A new TurnRecall's upkeep on a store that grew: load the index, embed what is new."""
    vectors = VectorStore(storage.db)
    stored0, total = await covered(vectors, embedder.model_id)
    asked0, model0, seconds0 = embedder.asked, embedder.by_model, embedder.model_seconds
    others = OtherLoad()
    recall = build_recall(config, storage, embedder)
    t0 = time.perf_counter()
    recall.start()
    await until_asked(embedder, asked0 + total - stored0, "upkeep")
    await recall.caught_up(timeout=timeout)
    seconds = time.perf_counter() - t0
    await recall.stop()
    stored, total_end = await covered(vectors, embedder.model_id)
    return {
        "items": total - stored0,
        "seconds": seconds,
        "per_s": (total - stored0) / seconds,
        "by_model": embedder.by_model - model0,
        "model_seconds": embedder.model_seconds - seconds0,
        "complete": stored == total_end,
        "other_load_cores": others.cores(),
    }


# --- a turn's recall, measured in a fresh process ---------------------------------------------------


def recalled_items(turn: TurnMemory) -> list[tuple[str, str]]:
    """(kind, record id or exact text) of what a turn put into its prompt: the items its selection
    placed (TurnMemory.placed), read from the recall itself, not parsed back out of the prompt's text."""
    return [
        (s.candidate.kind, s.candidate.id if s.candidate.kind == "record" else s.candidate.text)
        for s, _title, _line in turn.placed
    ]


@dataclass(slots=True)
class Asked:
    """Each question's recall time, its query embedding's (0 when none was made), what it recalled."""

    ms: list[float] = field(default_factory=list)
    embed_ms: list[float] = field(default_factory=list)
    recalled: list[list[tuple[str, str]]] = field(default_factory=list)


async def ask(
    recall: TurnRecall, actor: Actor, where: Where, queries: Sequence[str], embedder: BenchEmbedder | None = None
) -> Asked:
    """Every question through `recall.for_turn` (what `sections` returns, with what was chosen), one
    after another, timed (pg_recall.py too)."""
    out = Asked()
    for query in queries:
        asked = len(embedder.query_ms) if embedder is not None else 0
        t0 = time.perf_counter()
        turn = await recall.for_turn(actor, where, query)
        out.ms.append((time.perf_counter() - t0) * 1000)
        out.recalled.append(recalled_items(turn))
        if embedder is not None:
            out.embed_ms.append(embedder.query_ms[asked] if len(embedder.query_ms) > asked else 0.0)
    return out


class RetrievalLog(logging.Handler):
    """Counts turns whose vector leg was degraded or had candidates without a vector."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.degraded = 0
        self.gaps = 0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("memory_retrieval_final "):
            self.degraded += " vector_degraded=True" in message
            self.gaps += " coverage_gap=0" not in message


CLK_TCK = os.sysconf("SC_CLK_TCK")


def machine_busy_s() -> float:
    """CPU seconds every process used so far (user+nice+system+irq+softirq+steal, all cores)."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in f.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


class OtherLoad:
    """The CPU other processes used meanwhile, in cores: a run next to a busy test suite is not comparable."""

    def __init__(self) -> None:
        self.busy, self.own, self.wall = machine_busy_s(), time.process_time(), time.perf_counter()

    def cores(self) -> float:
        others = machine_busy_s() - self.busy - (time.process_time() - self.own)
        return max(0.0, others) / max(1e-9, time.perf_counter() - self.wall)


def rss() -> dict[str, float]:
    """VmRSS, RssAnon and VmHWM of this process, MiB."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon", "VmHWM"):
            out[name] = int(value.split()[0]) / 1024
    return out


async def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """The child: a gateway's recall starting on the database, then the questions."""
    import cProfile

    config = bench_config(Path(spec["data_dir"]))
    log = RetrievalLog()
    for name in ("clawgate.recall", "memory.recall"):
        logging.getLogger(name).setLevel(logging.INFO)
        logging.getLogger(name).addHandler(log)
    storage = await Storage.open(spec["db"])
    try:
        embedder = BenchEmbedder(local_embedder())
        t0 = time.perf_counter()
        await embedder.load()
        model_s = time.perf_counter() - t0
        rss_model = rss()
        recall = build_recall(config, storage, embedder)
        t0 = time.perf_counter()
        recall.start()
        while recall.index is None:  # noqa: ASYNC110 (the attribute is the only public sign of a loaded index)
            await asyncio.sleep(0.01)
        load_s = time.perf_counter() - t0
        await recall.caught_up(timeout=60)
        rss_loaded = rss()
        # The in-memory index counts its rows; on PostgreSQL (DatabaseIndex) the database holds them.
        index = recall.index
        index_rows = (
            len(index) if isinstance(index, VectorIndex) else (await index.store.models()).get(index.model_id, 0)
        )
        actor = Actor(USER, frozenset({"user"}), "chat")
        where = recall.memory.where("personal", CONVERSATION)
        queries: list[str] = spec["queries"]
        warmup: int = spec["warmup"]

        warm = await ask(recall, actor, where, queries[:warmup], embedder)
        others = OtherLoad()
        timed = await ask(recall, actor, where, queries[warmup:], embedder)
        others_cores = others.cores()
        total, embed, recalled = timed.ms, timed.embed_ms, warm.recalled + timed.recalled
        if spec["profile"]:  # a second pass over the timed questions: the timings above stay unprofiled
            profiler, db_profiler = cProfile.Profile(), cProfile.Profile()
            db_thread = getattr(storage.db, "_executor", None)  # cProfile follows one thread: the database's apart
            if db_thread is not None:
                db_thread.submit(db_profiler.enable).result()
            profiler.enable()
            for query in queries[warmup:]:
                await recall.sections(actor, where, query)
            profiler.disable()
            profiler.dump_stats(spec["profile"])
            if db_thread is not None:
                db_thread.submit(db_profiler.disable).result()
                db_profiler.dump_stats(spec["profile"] + ".db")
        degraded, gaps = log.degraded, log.gaps
        await recall.stop()

        lexical_only = await ask(build_recall(config, storage, None), actor, where, queries)
        for i, items in enumerate(lexical_only.recalled):
            recalled[i] += items
        lexical = lexical_only.ms[warmup:]
        return {
            "model_load_s": model_s,
            "index_load_s": load_s,
            "index_rows": index_rows,
            "rss_model_mib": rss_model,
            "rss_loaded_mib": rss_loaded,
            "rss_end_mib": rss(),
            "total_ms": total,
            "embed_ms": embed,
            "lexical_ms": lexical,
            "other_load_cores": others_cores,
            "degraded_turns": degraded,
            "coverage_gap_turns": gaps,
            "recalled": recalled,
        }
    finally:
        await storage.close()


def _vacuum_into(database: Path, copy: Path) -> None:
    with contextlib.closing(sqlite3.connect(database)) as conn:
        conn.execute("VACUUM INTO ?", (str(copy),))


async def run_child(spec: dict[str, Any], tmp: Path) -> dict[str, Any]:
    spec_path = tmp / "child-spec.json"
    await asyncio.to_thread(spec_path.write_text, json.dumps(spec), encoding="utf-8")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(SCRIPT), "--child", str(spec_path), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"the measuring process failed (exit code {proc.returncode})")
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


def check_privacy(recalled: Sequence[Sequence[Sequence[str]]], world: World) -> dict[str, Any]:
    """Every recalled item against what was written: anything not alice's or shared with her leaks."""
    mine_scopes = {f"personal:{USER}", "global", f"channel:{CONVERSATION}"}
    leaks: list[str] = []
    counts = {"record": 0, "archive": 0, "daily": 0}
    twinned = unknown = 0
    for turn in recalled:
        for kind, value in turn:
            counts[kind] += 1
            if kind == "record":
                if value in world.theirs:
                    leaks.append(f"record {value} of another user")
                elif value not in world.mine:
                    unknown += 1
                elif world.text_of[value] in world.twinned:
                    twinned += 1
            elif kind == "archive":
                if value in world.archive_theirs and value not in world.archive_mine:
                    leaks.append(f"archived message of another user: {value[:60]!r}")
                elif value not in world.archive_mine:
                    unknown += 1
            else:
                scope = world.chunk_scope.get(value)
                if scope is None:
                    unknown += 1
                elif scope not in mine_scopes:
                    leaks.append(f"daily chunk of {scope}")
    return {"items": counts, "leaks": leaks, "unknown": unknown, "with_twin_elsewhere": twinned}


# --- the run ------------------------------------------------------------------------------------


def percentiles(samples: Sequence[float]) -> dict[str, float]:
    q = statistics.quantiles(samples, n=100, method="inclusive")
    return {"p50": statistics.median(samples), "p95": q[94], "p99": q[98], "max": max(samples)}


async def model_rate(embedder: LocalEmbedder, texts: Sequence[str], size: int, into: dict[str, Any]) -> None:
    """The model's own speed (texts/s) on an even sample of `texts`, in one embed_documents call."""
    sample = list(texts[:: max(1, len(texts) // size)])[:size]
    others = OtherLoad()
    t0 = time.perf_counter()
    await embedder.embed_documents(sample)
    into["model_per_s"] = len(sample) / (time.perf_counter() - t0)
    into["model_other_load_cores"] = others.cores()


async def scale(
    size: int, storage: Storage, tmp: Path, queries: Sequence[str], world: World, profile: str | None, keep: bool
) -> dict[str, Any]:
    print(f"recall with {size:,} memories in scope: measuring in a fresh process …", file=sys.stderr)
    spec = {
        "db": str(storage.db.url),
        "data_dir": str(tmp),
        "queries": list(queries),
        "warmup": WARMUP,
        "profile": profile,
    }
    if keep:  # a copy of this size's database, and how to measure on it again: --child DIR/size-N.json
        copy = tmp / f"size-{size}.db"
        await asyncio.to_thread(_vacuum_into, Path(make_url(storage.db.url).database or ""), copy)
        kept = {**spec, "db": f"sqlite:///{copy}", "profile": None}
        (tmp / f"size-{size}.json").write_text(json.dumps(kept), encoding="utf-8")
    child = await run_child(spec, tmp)
    privacy = check_privacy(child.pop("recalled"), world)
    rest = [t - e for t, e in zip(child["total_ms"], child["embed_ms"], strict=True)]
    return {
        "memories_in_scope": size,
        "records_total": len(world.mine) + len(world.theirs),
        "records_of_others": len(world.theirs),
        "archived_messages": world.archived,
        "daily_chunks": world.chunks,
        "recall_ms": percentiles(child["total_ms"]),
        "query_embedding_ms": percentiles(child["embed_ms"]),
        "rest_ms": percentiles(rest),
        "lexical_only_ms": percentiles(child["lexical_ms"]),
        "index_rows": child["index_rows"],
        "index_load_s": child["index_load_s"],
        "model_load_s": child["model_load_s"],
        "rss_model_mib": child["rss_model_mib"],
        "rss_loaded_mib": child["rss_loaded_mib"],
        "rss_end_mib": child["rss_end_mib"],
        "other_load_cores": child["other_load_cores"],
        "degraded_turns": child["degraded_turns"],
        "coverage_gap_turns": child["coverage_gap_turns"],
        "privacy": privacy,
        "target_p95_ms": TARGET_P95_MS.get(size),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = QUICK_SIZES if args.quick else SIZES
    turns, questions = load_locomo(Path(args.data))
    queries = questions[: WARMUP + QUERIES]
    texts = memory_texts(turns, sizes[-1])
    inner = local_embedder()
    cache = VectorCache(inner.model_id)
    embedder = BenchEmbedder(inner, cache, reuse=not args.fresh)
    anchor = datetime.now(UTC)
    world = World()
    archive_per_user, daily_files = (600, 12) if args.quick else (2_000, 40)
    timeout = 4 * 3600.0
    started = time.perf_counter()
    kept = Path(args.keep) if args.keep else None
    if kept is not None:
        kept.mkdir(parents=True, exist_ok=False)  # never over an earlier run's files
    workdir = tempfile.TemporaryDirectory(prefix="clawgate-recall-scale-") if kept is None else None
    with contextlib.nullcontext(str(kept)) if workdir is None else workdir as tmp_name:
        tmp = Path(tmp_name)
        config = bench_config(tmp)
        storage = await Storage.open(config.storage.resolved_database_url)
        try:
            await embedder.load()
            print(f"writing {sizes[0]:,} memories, archived messages and daily notes …", file=sys.stderr)
            await add_people(storage, turns)
            import_s = await add_records(storage, texts, 0, sizes[0], anchor, world)
            await add_archive(config, storage, turns, archive_per_user, world)
            await add_daily(config, storage, turns, daily_files, anchor, world)
            first_mix = [*world.text_of.values(), *world.archive_mine, *world.archive_theirs, *world.chunk_scope]
            print("backfill through TurnRecall's upkeep, stopped after a third and resumed …", file=sys.stderr)
            backfill = await backfill_resumed(config, storage, embedder, timeout)
            cache.save()
            results = [await scale(sizes[0], storage, tmp, queries, world, None, kept is not None)]

            print(f"writing {sizes[1] - sizes[0]:,} more memories, then the upkeep …", file=sys.stderr)
            before = len(world.text_of)
            import_s += await add_records(storage, texts, sizes[0], sizes[1], anchor, world)
            later = list(world.text_of.values())[before:]
            upkeep = await upkeep_once(config, storage, embedder, timeout)
            cache.save()
            vectors = VectorStore(storage.db)
            sweeps = []
            for _ in range(5):  # everything has a vector: what one upkeep batch's scan costs at this size
                t0 = time.perf_counter()
                await vectors.missing("record", inner.model_id, 64)
                sweeps.append((time.perf_counter() - t0) * 1000)
            results.append(await scale(sizes[1], storage, tmp, queries, world, args.profile, kept is not None))

            sample = 512 if args.quick else BASELINE_SAMPLE
            if backfill["by_model"] >= backfill["items"] // 2:
                await model_rate(inner, first_mix, sample, backfill)
            if upkeep["by_model"] >= upkeep["items"] // 2:
                await model_rate(inner, later, sample, upkeep)
        finally:
            await storage.close()
            inner.close()
    leaks = [leak for r in results for leak in r["privacy"]["leaks"]]
    return {
        "python": sys.version.split()[0],
        "machine": f"{os.cpu_count()} cores, {platform.machine()}",
        "model": inner.model_id,
        "runtime": getattr(inner, "runtime", "sentence-transformers"),  # the local model's runtime, once loaded
        "sizes": list(sizes),
        "queries": QUERIES,
        "warmup": WARMUP,
        "fresh": bool(args.fresh),
        "import_per_s": len(world.text_of) / import_s,
        "backfill": backfill,
        "upkeep": upkeep,
        "missing_scan_ms": statistics.median(sweeps),
        "scales": results,
        "privacy_leaks": leaks,
        "seconds": time.perf_counter() - started,
        "targets": {
            "p95_ms": {str(k): v for k, v in TARGET_P95_MS.items()},
            "backfill_share_of_model": TARGET_BACKFILL_SHARE,
        },
    }


# --- output -------------------------------------------------------------------------------------


def _verdict(ok: bool | None) -> str:
    return "" if ok is None else ("met" if ok else "**not met**")


def _p(d: dict[str, float]) -> str:
    return f"{d['p50']:.1f} / {d['p95']:.1f} / {d['p99']:.1f}"


def _rate(r: dict[str, Any]) -> tuple[str, str, bool | None]:
    """(result, model's own speed, target met) of one upkeep run."""
    done = (
        f"{r['items']:,} items in {r['seconds']:.1f} s: {r['per_s']:,.1f}/s, others {r['other_load_cores']:.1f} cores"
    )
    if "model_per_s" not in r:
        if not r["by_model"]:
            return f"{done} (vectors from the cache: the upkeep's own cost)", "--fresh to measure", None
        share = r["by_model"] / r["items"] if r["items"] else 0.0
        return f"{done} ({share:.0%} by the model, the rest from the cache)", "--fresh to measure", None
    ratio = r["by_model"] / r["model_per_s"] / r["seconds"]  # the model alone's time for the same texts
    model = f"{r['model_per_s']:,.1f}/s, others {r['model_other_load_cores']:.1f} cores"
    return f"{done} (the model alone: {ratio:.0%} of that time)", model, ratio >= TARGET_BACKFILL_SHARE


def markdown(res: dict[str, Any]) -> str:
    small, large = res["scales"]
    head = f"| measure | {small['memories_in_scope']:,} in scope | {large['memories_in_scope']:,} in scope |"
    out = [
        f"## Recall at scale (Python {res['python']}, {res['model']} on {res.get('runtime', 'torch')}, "
        f"one thread, {res['machine']})\n",
        head,
        "|---|---:|---:|",
    ]

    def row(label: str, fmt: Any) -> None:
        out.append(f"| {label} | {fmt(small)} | {fmt(large)} |")

    row("records (of other users and a group)", lambda r: f"{r['records_total']:,} ({r['records_of_others']:,})")
    row("archived messages / daily chunks", lambda r: f"{r['archived_messages']:,} / {r['daily_chunks']:,}")
    row("vectors in the index", lambda r: f"{r['index_rows']:,}")
    row("**recall per turn, p50 / p95 / p99 ms**", lambda r: _p(r["recall_ms"]))
    row("query embedding alone, p50 / p95 / p99 ms", lambda r: _p(r["query_embedding_ms"]))
    row(
        "the call minus the query embedding (which overlaps the FTS5 legs), p50 / p95 / p99 ms",
        lambda r: _p(r["rest_ms"]),
    )
    row("lexical recall only (no embedder), p50 / p95 / p99 ms", lambda r: _p(r["lexical_only_ms"]))
    row(
        "p95 target",
        lambda r: (
            f"≤ {r['target_p95_ms']:g} ms: {_verdict(r['recall_ms']['p95'] <= r['target_p95_ms'])}"
            if r["target_p95_ms"]
            else "-"
        ),
    )
    row(
        "turns with the vector leg degraded / a coverage gap",
        lambda r: f"{r['degraded_turns']} / {r['coverage_gap_turns']}",
    )
    row("other processes' load during the questions", lambda r: f"{r['other_load_cores']:.2f} cores")
    row("index load at start (model loaded)", lambda r: f"{r['index_load_s']:.2f} s")
    row(
        "RSS (anonymous): model loaded → index loaded → after the questions",
        lambda r: (
            " → ".join(
                f"{r[k]['VmRSS']:.0f} ({r[k]['RssAnon']:.0f})"
                for k in ("rss_model_mib", "rss_loaded_mib", "rss_end_mib")
            )
            + " MiB"
        ),
    )
    row(
        "items recalled (records / archived / daily)",
        lambda r: " / ".join(f"{r['privacy']['items'][k]:,}" for k in ("record", "archive", "daily")),
    )
    row(
        "privacy: items of others recalled",
        lambda r: (
            f"{len(r['privacy']['leaks'])} {_verdict(not r['privacy']['leaks'])}"
            + (f" ({r['privacy']['unknown']} unrecognised)" if r["privacy"]["unknown"] else "")
            if any(r["privacy"]["items"].values())
            else "**nothing recalled: the check saw nothing**"
        ),
    )

    b, u = res["backfill"], res["upkeep"]
    b_done, b_model, b_ok = _rate(b)
    u_done, u_model, u_ok = _rate(u)
    resumed = (
        f"stopped with {b['stored_at_stop']:,} stored; after the restart {b['asked_after_restart']:,} embedded "
        f"for {b['missing_at_restart']:,} missing; {b['redone']:,} redone (the batch in flight)"
    )
    out += [
        "",
        "| upkeep (TurnRecall.start, background) | result | model alone | |",
        "|---|---|---:|---|",
        f"| backfill to {small['memories_in_scope']:,} in scope (records, archive, daily) | {b_done} | {b_model} "
        f"| {_verdict(b_ok)} |",
        f"| resumed after a stop at a third | {resumed} | | {_verdict(b['resumed'])} |",
        f"| upkeep after {large['memories_in_scope'] - small['memories_in_scope']:,} more memories were imported "
        f"| {u_done} | {u_model} | {_verdict(u_ok)} |",
        f"| one scan for missing vectors (`VectorStore.missing`, 64 records) with all "
        f"{large['records_total']:,} embedded | {res['missing_scan_ms']:.0f} ms | | |",
        "",
        f"{res['queries']} LoCoMo questions per size after {res['warmup']} warm-up ones, each through "
        "`TurnRecall.for_turn` in a fresh process on the database, query embedding included. Records imported at "
        f"{res['import_per_s']:,.0f}/s. Whole run {res['seconds'] / 60:.1f} min"
        + (" (vectors re-embedded: --fresh)." if res["fresh"] else "."),
    ]
    if res["privacy_leaks"]:
        out += ["", "**Privacy failures:**", *(f"- {leak}" for leak in res["privacy_leaks"][:20])]
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="2,000 and 10,000 memories instead of 10,000 and 100,000")
    p.add_argument("--fresh", action="store_true", help="read no vector from the cache: measure the backfill")
    p.add_argument("--json", action="store_true", help="JSON instead of Markdown")
    p.add_argument("--profile", metavar="PATH", help="cProfile the larger size's questions (PATH, PATH.db)")
    p.add_argument("--data", default=str(DATA), help="the locomo10.json file")
    p.add_argument(
        "--keep",
        metavar="DIR",
        help="work in DIR (new) and keep a copy of each size's database there (SQLite): "
        "measure one again with --child DIR/size-N.json",
    )
    p.add_argument("--child", metavar="SPEC", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        spec = json.loads(Path(args.child).read_text(encoding="utf-8"))
        print(json.dumps(asyncio.run(measure(spec))))
        return 0
    if not Path(args.data).is_file():
        print(
            f"recall_scale: no LoCoMo data at {args.data} (the benchmark reads its dialog turns; see "
            "../shared/bench/README.md, or give --data PATH)",
            file=sys.stderr,
        )
        return 2
    if args.profile:
        args.profile = str(Path(args.profile).resolve())
    res = asyncio.run(run(args))
    print(json.dumps(res, indent=2) if args.json else markdown(res))
    # A check that saw nothing proves nothing: recall must have put something into the prompts.
    vacuous = any(not any(r["privacy"]["items"].values()) for r in res["scales"])
    return 1 if res["privacy_leaks"] or vacuous else 0


if __name__ == "__main__":
    raise SystemExit(main())
