#!/usr/bin/env python3
"""Recall on our own assistant-memory set: does the gateway's recall find what a person told it,
and nothing of anyone else's?

    .venv/bin/python benchmarks/assistant_memory.py                  # the test half, hybrid recall
    .venv/bin/python benchmarks/assistant_memory.py --split tune     # the half parameters are chosen on
    .venv/bin/python benchmarks/assistant_memory.py --lexical        # keyword recall only, no embeddings
    .venv/bin/python benchmarks/assistant_memory.py --set vector_weight=0.6 --set lexical_pool=30
    .venv/bin/python benchmarks/assistant_memory.py --dump ranked.json   # every ranking, for offline calibration
    .venv/bin/python benchmarks/assistant_memory.py --json           # JSON instead of Markdown
    .venv/bin/python benchmarks/assistant_memory.py --split tune --calibrate   # a model's floors, for its manifest
    .venv/bin/python benchmarks/assistant_memory.py --provider local --model /models/multilingual-e5-small
    .venv/bin/python benchmarks/assistant_memory.py --provider openai --model multilingual-e5-small-q4 \
        --api-base http://127.0.0.1:8000/v1 --api-key none          # any memory.search provider and model

Data: benchmarks/data/assistant_memory/ (written for this project, see its README.md): six users'
personal memories, shared memory (global, project and channel scopes) and 244 questions, each in
the tuning or the test half. Choose parameters on `--split tune`; report `--split test`.

Every memory becomes a record in a fresh SQLite database in a temporary directory, imported with
`RecordStore.import_batch`, dated by its `created_at`: a durable fact with provenance
`user_confirmed` by its owner (a person: instruction-grade), an evidence item `inferred` by the
assistant, each with the use policy and review status `memory.trust.policy.trust_defaults` gives. The
gateway's own recall (`gateway.recall.engine.TurnRecall`, built as gateway/app.py builds it, the embedder
from `memory.search.provider: local`: the bundled all-MiniLM-L6-v2 on one thread) embeds them in
its background upkeep; each question is then ranked by `TurnRecall.rank` as its user, from a DM
(`Where("personal", "web:dm:<user>")`) or from the group it names (`Where("team", <key>)`), long-term
records only. That is the real policy: another user's personal memory, a group's memory outside
that group, personal memory inside a group, a project's memory outside the conversations the config
binds to it (`projects:`, from projects.json) are never candidates; any other user's personal record
that came back would be a privacy violation, any other misplaced one is counted too. The onnx graph
the local model builds is cached in the temporary directory too: nothing is written outside it.

The clock is frozen at 2026-11-30 12:00 UTC for the whole run (gateway.recall.engine's `utcnow`): the set's
"now", so that recency weights, and expiry (evidence lives 30 days), are the same whenever it runs.

What is counted, over the questions of the split:
- hit@5, hit@10: a question with answers is a hit when one of them is in the top k (for `multi`, also
  whether all of them are in the top 5); for `superseded` the answer is the newer memory, and it is
  counted how often the stale one ranks above it (or is ranked without it);
- privacy: any `forbidden` id, or any other user's personal record, anywhere in a ranked list (all
  questions, not only the privacy probes); must be 0;
- for `none` and `privacy` questions (nothing of theirs answers) the top fused score, beside the
  best-ranked answer's score on the answerable ones: where a relevance threshold could go.

`--calibrate` measures the two floors a model's manifest entry (memory/embed/embedding_models.json)
needs, on the split asked (choose them on `tune`, then check them with `--set min_cosine=…
--set evidence_min_score=…` on `test`): `min_cosine`, the cosine between each answerable question
and its answers that keeps CALIBRATE_KEEP of them (rounded down to 0.01; the share of the other
memories each asker may see that it drops is reported beside it), then the questions are ranked
with that floor and `evidence_min_score` is the evidence floor that run calibrates (below).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter, defaultdict  # noqa: E402
from collections.abc import Iterator, Mapping, Sequence  # noqa: E402
from dataclasses import dataclass, field, fields, replace  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402
from unittest import mock  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import gateway.recall.engine as gateway_recall  # noqa: E402
from gateway.config.load import parse_config  # noqa: E402
from gateway.config.model import Config  # noqa: E402
from gateway.recall.engine import TurnRecall, embedder_from_config  # noqa: E402
from gateway.session.memory_service import MemoryService  # noqa: E402
from memory.embed.embeddings import Embedder, model_info  # noqa: E402
from memory.recall import DEFAULT_PRIORS, EVIDENCE_FLOOR_LEXICAL, RecallSettings, Scored  # noqa: E402
from memory.records.fields import NewRecord  # noqa: E402
from memory.records.model import MemoryClass, Provenance, Scope  # noqa: E402
from memory.store.storage import Storage  # noqa: E402
from memory.trust.policy import Actor, Where, trust_defaults  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "assistant_memory"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
KINDS = ("paraphrase", "keyword", "multi", "temporal", "shared", "superseded", "crosslingual", "privacy", "none")
UNANSWERABLE = ("privacy", "none")
KS = (1, 5, 10)
SHARED_AUTHOR = "admin"  # a person who may write global, project and channel memory
ASSISTANT = "assistant"  # who writes inferred evidence
TARGET_HIT5 = 0.90  # over the non-cross-lingual answerable questions of the test half (issue)


# --- the data ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Memory:
    id: str
    user: str | None
    scope: str
    text: str
    created_at: datetime
    memory_class: str
    supersedes: str | None = None


@dataclass(frozen=True, slots=True)
class Question:
    id: str
    split: str
    kind: str
    user: str
    where: str  # "dm" or a conversation key
    query: str
    answers: tuple[str, ...]
    stale: str | None = None
    forbidden: tuple[str, ...] = ()


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def load_projects(root: Path = DATA) -> dict[str, Any]:
    """`projects:` for the config: which group conversation each project's memory belongs to."""
    bindings: dict[str, Any] = json.loads((root / "projects.json").read_text(encoding="utf-8"))
    return bindings


def load_data(root: Path = DATA) -> tuple[list[Memory], list[Question]]:
    memories = [
        Memory(
            m["id"],
            m["user"],
            m["scope"],
            m["text"],
            datetime.fromisoformat(m["created_at"].replace("Z", "+00:00")),
            m["class"],
            m.get("supersedes"),
        )
        for name in ("personal.jsonl", "shared.jsonl")
        for m in _jsonl(root / name)
    ]
    questions = [
        Question(
            q["id"],
            q["split"],
            q["kind"],
            q["user"],
            q["where"],
            q["query"],
            tuple(q["answers"]),
            q.get("stale"),
            tuple(q.get("forbidden", ())),
        )
        for q in _jsonl(root / "questions.jsonl")
    ]
    return memories, questions


def new_record(m: Memory) -> NewRecord:
    """A memory as the gateway would hold it: stated by its owner (durable fact, user_confirmed) or
    inferred by the assistant (evidence), with the policy trust_defaults gives that claim."""
    durable = m.memory_class == MemoryClass.DURABLE_FACT.value
    provenance = Provenance.USER_CONFIRMED if durable else Provenance.INFERRED
    author = (m.user or SHARED_AUTHOR) if durable else ASSISTANT
    use_policy, review, memory_class = trust_defaults(provenance, durable, Scope.parse(m.scope), False)
    if memory_class.value != m.memory_class:
        raise ValueError(f"{m.id}: trust_defaults makes it {memory_class.value}, the data says {m.memory_class}")
    return NewRecord(
        m.text,
        memory_class,
        provenance,
        use_policy,
        m.scope,
        author,
        review,
        source=f"benchmark:assistant_memory:{m.id}",
        origin_audience="team" if m.scope.startswith("channel:") else "personal",
        created_at=m.created_at,
    )


def place(memory: MemoryService, q: Question) -> Where:
    """Where the question is asked, as the gateway describes it (the projects bound there included)."""
    audience, conversation = ("personal", f"web:dm:{q.user}") if q.where == "dm" else ("team", q.where)
    where = getattr(memory, "where", None)
    return where(audience, conversation) if where is not None else Where(audience, conversation)  # type: ignore[arg-type]


# --- settings from the command line -----------------------------------------------------------------


def override(settings: RecallSettings, assignments: Sequence[str]) -> RecallSettings:
    """`settings` with NAME=VALUE assignments (JSON values: 0.6, 30, true, null, {"evidence": 1.0})."""
    known = {f.name: f for f in fields(RecallSettings)}
    changes: dict[str, Any] = {}
    for item in assignments:
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or name not in known:
            raise SystemExit(f"--set {item!r}: use NAME=VALUE with NAME one of {', '.join(known)}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            raise SystemExit(
                f"--set {item!r}: the value must be JSON (a number, true/false, null, an object)"
            ) from None
        current = getattr(settings, name)
        if isinstance(current, bool) != isinstance(value, bool) and current is not None:
            raise SystemExit(f"--set {item!r}: {name} is {type(current).__name__}")
        if isinstance(current, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if type(current) is int and type(value) is not int:
            raise SystemExit(f"--set {item!r}: {name} is a whole number")
        changes[name] = value
    return replace(settings, **changes)


def settings_dict(settings: RecallSettings) -> dict[str, Any]:
    return {f.name: dict(v) if isinstance(v := getattr(settings, f.name), Mapping) else v for f in fields(settings)}


# --- a run ----------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Ranked:
    question: Question
    ids: list[str]  # data ids, best first
    scored: list[Scored]
    scope_of: dict[str, str]  # data id -> scope
    class_of: dict[str, str]
    ms: float
    projects: tuple[str, ...] = ()  # the projects bound where it was asked


def _class(s: Scored) -> str:
    c = s.candidate.memory_class
    return c.value if c is not None else s.candidate.kind


@contextlib.contextmanager
def frozen_clock(now: datetime) -> Iterator[None]:
    """gateway.recall.engine reads the time through `utcnow` (recency, expiry): pinned to the set's "now"."""
    if not hasattr(gateway_recall, "utcnow"):
        print(
            "warning: gateway.recall.engine has no utcnow to pin; recency and expiry follow the wall clock",
            file=sys.stderr,
        )
        yield
        return
    with mock.patch.object(gateway_recall, "utcnow", lambda: now):
        yield


def bench_config(
    data_dir: Path, lexical: bool, projects: Mapping[str, Any], search_keys: Mapping[str, Any] | None = None
) -> Config:
    """The run's config: `search_keys` are memory.search's (provider local, the bundled model, by default)."""
    search: dict[str, Any] = {"threads": 1}
    if not lexical:
        search["provider"] = "local"
        search.update({k: v for k, v in (search_keys or {}).items() if v is not None})
    return parse_config(
        {
            "storage": {"data_dir": str(data_dir)},
            "memory": {"search": search},
            "projects": dict(projects),
            "logging": {"level": "WARNING"},
        },
        "benchmark",
        env={},
    )


def local_cache(embedder: Embedder | None, tmp: Path) -> None:
    """Where the local model keeps the onnx graph it builds: the temporary directory."""
    if embedder is not None and hasattr(embedder, "cache_dir"):
        embedder.cache_dir = tmp / "onnx"


async def run(args: argparse.Namespace) -> tuple[dict[str, Any], list[Ranked]]:
    started = time.perf_counter()
    memories, questions = load_data(Path(args.data))
    asked = [q for q in questions if args.split == "all" or q.split == args.split]
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="clawgate-assistant-memory-")))
        stack.enter_context(frozen_clock(NOW))
        # Anything else the local model would cache goes to the temporary directory too.
        stack.enter_context(mock.patch.dict(os.environ, {"CLAWGATE_CACHE_DIR": str(tmp / "cache")}))
        config = bench_config(tmp / "data", args.lexical, load_projects(Path(args.data)), search_keys(args))
        embedder = embedder_from_config(config)
        local_cache(embedder, tmp)
        storage = await Storage.open(f"sqlite:///{tmp}/bench.db")
        recall: TurnRecall | None = None
        try:
            record_ids = await storage.records.import_batch([new_record(m) for m in memories], now=NOW)
            data_id = dict(zip(record_ids, (m.id for m in memories), strict=True))
            service = MemoryService(config, storage.records, [])
            recall = TurnRecall(config, storage, service, None, embedder)
            t0 = time.perf_counter()
            recall.start()
            await recall.caught_up(timeout=600)
            embed_s = time.perf_counter() - t0
            settings = override(recall.settings, args.set or [])
            calibration: dict[str, Any] | None = None
            if args.calibrate and embedder is not None:
                calibration = await cosine_floor(embedder, memories, asked)
                settings = replace(settings, min_cosine=calibration["min_cosine"])
            if embedder is not None:
                await embedder.embed_query("warm up")  # the model's first query: not a question's cost
            ranked: list[Ranked] = []
            projects_of = getattr(config, "projects_of", lambda conversation: ())
            floor: tuple[float | None, str] = (None, "none")
            for q in asked:
                actor = Actor(q.user, frozenset({"user"}), "chat")
                t1 = time.perf_counter()
                where = place(service, q)
                result, _records = await recall.rank(actor, where, q.query, kinds=("record",), settings=settings)
                ms = (time.perf_counter() - t1) * 1000
                floor = (result.floor, result.floor_source)
                scored = [s for s in result.ranked if s.candidate.kind == "record"]
                ids = [data_id.get(s.candidate.id, s.candidate.id) for s in scored]
                ranked.append(
                    Ranked(
                        q,
                        ids,
                        scored,
                        {i: s.candidate.scope for i, s in zip(ids, scored, strict=True)},
                        {i: _class(s) for i, s in zip(ids, scored, strict=True)},
                        ms,
                        tuple(projects_of(where.conversation)),
                    )
                )
        finally:
            if recall is not None:
                await recall.stop()
            await storage.close()
    res = summarise(ranked)
    res["evidence_floor"] = evidence_floor(ranked, args.lexical)
    # The floor the gateway uses (chosen on the tune half), as this split sees it.
    calibrated = model_info(embedder.model_id).evidence_min_score if embedder is not None else None
    res["gateway_evidence_floor"] = evidence_floor(
        ranked, args.lexical, at=EVIDENCE_FLOOR_LEXICAL if args.lexical or calibrated is None else calibrated
    )
    if calibration is not None:
        calibration["evidence_min_score"] = res["evidence_floor"].get("floor")
        res["calibration"] = calibration
    per_user = Counter(m.user for m in memories if m.user)
    res.update(
        {
            "split": args.split,
            "legs": "lexical" if args.lexical else "lexical+vector",
            "model": embedder.model_id if embedder is not None else None,
            "runtime": getattr(embedder, "runtime", None),
            "floor": floor[0],
            "floor_source": floor[1],
            "calibrated_floor": model_info(embedder.model_id).min_cosine if embedder is not None else None,
            "settings": settings_dict(settings),
            "overrides": list(args.set or []),
            "now": NOW.isoformat(),
            "memories": {"personal": dict(sorted(per_user.items())), "shared": sum(1 for m in memories if not m.user)},
            "embed_seconds": round(embed_s, 2),
            "seconds": round(time.perf_counter() - started, 2),
        }
    )
    return res, ranked


# --- calibration ------------------------------------------------------------------------------------------

CALIBRATE_KEEP = 0.95  # the cosine floor keeps this share of the answers (as MiniLM's, on LoCoMo)


def search_keys(args: argparse.Namespace) -> dict[str, Any]:
    return {"provider": args.provider, "model": args.model, "api_base": args.api_base, "api_key": args.api_key}


def visible_to(m: Memory, q: Question) -> bool:
    """Roughly what the asker could be shown: their own memories and the shared ones."""
    return m.user in (None, q.user) and m.id not in q.forbidden


def keep_floor(values: Sequence[float], keep: float) -> float:
    """The largest 0.01 step at or under the value that keeps `keep` of `values`. Pure."""
    ordered = sorted(values)
    return math.floor(ordered[int((1 - keep) * len(ordered))] * 100) / 100


async def cosine_floor(embedder: Embedder, memories: Sequence[Memory], asked: Sequence[Question]) -> dict[str, Any]:
    """The cosine floor that keeps CALIBRATE_KEEP of the answers of the answerable questions in
    `asked`, with what it keeps of them (per kind) and drops of the other memories each asker may see."""
    import numpy as np

    vectors = await embedder.embed_documents([m.text for m in memories])
    row = {m.id: n for n, m in enumerate(memories)}
    answers: list[float] = []
    by_kind: dict[str, list[float]] = defaultdict(list)
    others: list[float] = []
    for q in asked:
        if q.kind in UNANSWERABLE:
            continue
        cosines = vectors @ np.asarray(await embedder.embed_query(q.query))
        for a in q.answers:
            answers.append(float(cosines[row[a]]))
            by_kind[q.kind].append(float(cosines[row[a]]))
        others += [float(cosines[row[m.id]]) for m in memories if m.id not in q.answers and visible_to(m, q)]
    if not answers:
        raise SystemExit("--calibrate: no answerable question in this split")
    floor = keep_floor(answers, CALIBRATE_KEEP)
    return {
        "min_cosine": floor,
        "keep": CALIBRATE_KEEP,
        "answers": len(answers),
        "answers_kept": round(sum(v >= floor for v in answers) / len(answers), 3),
        "kept_by_kind": {k: round(sum(v >= floor for v in vs) / len(vs), 3) for k, vs in sorted(by_kind.items())},
        "others_dropped": round(sum(v < floor for v in others) / len(others), 3) if others else None,
        "answer_cosine": distribution(answers),
        "other_cosine": distribution(others),
    }


def calibration_lines(res: Mapping[str, Any]) -> list[str]:
    c = res["calibration"]
    kinds = ", ".join(f"{k} {v:.0%}" for k, v in c["kept_by_kind"].items())
    entry = {
        "min_cosine": c["min_cosine"],
        "evidence_min_score": c["evidence_min_score"],
        "calibrated_on": f"benchmarks/data/assistant_memory, {res['split']} half: cosine floor keeping "
        f"{c['keep']:.0%} of {c['answers']} answers ({c['answers_kept']:.1%} kept, {c['others_dropped']:.1%} of the "
        f"other visible memories dropped); evidence floor keeping {EVIDENCE_KEEP:.0%} of the ranked answers",
    }
    return [
        "",
        f"### Calibration of {res['model']} ({res['split']} split)",
        "",
        f"- cosine, question to answer: {_dist(c['answer_cosine'])}",
        f"- cosine, question to the other memories its asker may see: {_dist(c['other_cosine'])}",
        f"- min_cosine {c['min_cosine']:.2f} keeps {c['answers_kept']:.1%} of the {c['answers']} answers ({kinds}) "
        f"and drops {c['others_dropped']:.1%} of the others",
        f"- evidence_min_score {c['evidence_min_score']:.3f}, ranked with that floor (the evidence floor line above)",
        "- for memory/embed/embedding_models.json (or memory.recall.min_cosine_similarity / .evidence_min_score):",
        "",
        "```json",
        json.dumps({res["model"]: entry}, indent=2, ensure_ascii=False),
        "```",
    ]


# --- scoring ----------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Tally:
    n: int = 0
    hits: dict[int, int] = field(default_factory=lambda: dict.fromkeys(KS, 0))

    def add(self, found: Mapping[int, bool]) -> None:
        self.n += 1
        for k in KS:
            self.hits[k] += found[k]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"n": self.n}
        for k in KS:
            out[f"hit@{k}"] = self.hits[k]
            out[f"hit@{k}_rate"] = round(self.hits[k] / self.n, 4) if self.n else None
        return out


def distribution(values: Sequence[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    v = sorted(values)
    q = statistics.quantiles(v, n=4, method="inclusive") if len(v) > 1 else [v[0]] * 3
    return {
        "n": len(v),
        "min": round(v[0], 4),
        "p25": round(q[0], 4),
        "median": round(q[1], 4),
        "p75": round(q[2], 4),
        "max": round(v[-1], 4),
    }


def in_place(scope: str, own: str, here: str | None, projects: Sequence[str]) -> bool:
    """Whether a record of `scope` may be recalled by the owner of `own` from the group `here` (None:
    their DM) bound to `projects`: personal memory only in the DM, a channel's only in it, a project's
    only where it is bound, global everywhere. Another user's personal memory is a privacy violation,
    counted apart."""
    if scope.startswith("personal:"):
        return here is None or scope != own
    if scope.startswith("channel:"):
        return scope == here
    if scope.startswith("project:"):
        return scope.removeprefix("project:") in projects
    return True


EVIDENCE_KEEP = 0.9  # the evidence floor keeps this share of the answers a ranking holds (chosen on the tune half)
EVIDENCE_TOP = 8  # what a turn could inject: memory.recall.limit's default


def _strength(s: Scored, top_lexical: float, lexical: bool) -> float:
    """What the gateway compares with the evidence floor (gateway/recall/select.py): with vectors the
    fused score, as an evidence record's (its class prior swapped for evidence's); without, the
    full-text score relative to the turn's best."""
    if lexical:
        return (s.candidate.lexical or 0.0) / top_lexical if top_lexical > 0 else 0.0
    prior = s.parts.get("prior", 1.0) or 1.0
    return s.score / prior * DEFAULT_PRIORS[MemoryClass.EVIDENCE.value]


def evidence_floor(ranked: Sequence[Ranked], lexical: bool, at: float | None = None) -> dict[str, Any]:
    """The evidence floor this split calibrates: the strength that keeps EVIDENCE_KEEP of the
    answers recall ranked (each answer as if it were evidence), or the floor `at` when given (the
    gateway's, chosen on the tune half, measured on another split); and what it keeps out: the
    share of other items in each answerable question's top EVIDENCE_TOP, and of everything in the
    top EVIDENCE_TOP of the questions nothing answers (none, privacy)."""
    answers: list[float] = []
    others: list[float] = []
    unanswerable: list[float] = []
    for r in ranked:
        top = max((s.candidate.lexical or 0.0 for s in r.scored), default=0.0)
        values = [_strength(s, top, lexical) for s in r.scored]
        if r.question.kind in UNANSWERABLE:
            unanswerable += values[:EVIDENCE_TOP]
            continue
        for i, (data_id, value) in enumerate(zip(r.ids, values, strict=True)):
            if data_id in r.question.answers:
                answers.append(value)
            elif i < EVIDENCE_TOP:
                others.append(value)
    if not answers:
        return {"n": 0}
    answers.sort()
    floor = answers[int((1 - EVIDENCE_KEEP) * len(answers))] if at is None else at
    return {
        "keep": EVIDENCE_KEEP if at is None else None,
        "floor": round(floor, 3),
        "answers": len(answers),
        "answers_kept": round(sum(v >= floor for v in answers) / len(answers), 3),
        "other_top_dropped": round(sum(v < floor for v in others) / len(others), 3) if others else None,
        "unanswerable_top_dropped": round(sum(v < floor for v in unanswerable) / len(unanswerable), 3)
        if unanswerable
        else None,
    }


def summarise(ranked: Sequence[Ranked]) -> dict[str, Any]:
    overall, latin = Tally(), Tally()
    kinds: dict[str, Tally] = defaultdict(Tally)
    multi_all5 = multi_any5 = 0
    stale_above = stale_ranked = 0
    stale_examples: list[str] = []
    violations: list[dict[str, Any]] = []
    out_of_place: list[dict[str, Any]] = []
    top_unanswerable: dict[str, list[float]] = defaultdict(list)
    empty_unanswerable: Counter[str] = Counter()
    top_answerable: list[float] = []
    best_answer: list[float] = []
    misses: dict[str, list[str]] = defaultdict(list)
    for r in ranked:
        q = r.question
        own = f"personal:{q.user}"
        here = f"channel:{q.where}" if q.where != "dm" else None
        leaked = [
            i for i in r.ids if i in q.forbidden or (r.scope_of[i].startswith("personal:") and r.scope_of[i] != own)
        ]
        if leaked:
            violations.append({"question": q.id, "leaked": leaked})
        misplaced = [i for i in r.ids if not in_place(r.scope_of[i], own, here, r.projects)]
        if misplaced:
            out_of_place.append({"question": q.id, "items": misplaced})
        scores = [s.score for s in r.scored]
        if q.kind in UNANSWERABLE:
            if scores:
                top_unanswerable[q.kind].append(scores[0])
            else:
                empty_unanswerable[q.kind] += 1
            continue
        found = {k: any(a in r.ids[:k] for a in q.answers) for k in KS}
        overall.add(found)
        kinds[q.kind].add(found)
        if q.kind != "crosslingual":
            latin.add(found)
        if not found[5]:
            misses[q.kind].append(q.id)
        if scores:
            top_answerable.append(scores[0])
        positions = [r.ids.index(a) for a in q.answers if a in r.ids]
        if positions:
            best_answer.append(scores[min(positions)])
        if q.kind == "multi":
            multi_all5 += all(a in r.ids[:5] for a in q.answers)
            multi_any5 += found[5]
        if q.kind == "superseded" and q.stale is not None:
            newer = r.ids.index(q.answers[0]) if q.answers[0] in r.ids else None
            older = r.ids.index(q.stale) if q.stale in r.ids else None
            stale_ranked += older is not None
            if older is not None and (newer is None or older < newer):
                stale_above += 1
                stale_examples.append(q.id)
    ms = [r.ms for r in ranked]
    counted = Counter(r.question.kind for r in ranked)
    return {
        "questions": len(ranked),
        "by_kind_count": {k: counted[k] for k in KINDS if counted[k]},
        "answerable": overall.to_json(),
        "answerable_non_crosslingual": latin.to_json(),
        "kinds": {k: kinds[k].to_json() for k in KINDS if k in kinds},
        "multi": {"n": kinds["multi"].n, "all_in_top5": multi_all5, "any_in_top5": multi_any5},
        "superseded": {
            "n": kinds["superseded"].n,
            "stale_ranked": stale_ranked,
            "stale_above_replacement": stale_above,
            "questions": stale_examples,
        },
        "privacy": {
            "violations": len(violations),
            "leaked_items": sum(len(v["leaked"]) for v in violations),
            "details": violations,
            "out_of_place": len(out_of_place),
            "out_of_place_details": out_of_place,
        },
        "top_score": {
            **{k: distribution(top_unanswerable[k]) for k in UNANSWERABLE},
            **{f"{k}_empty": empty_unanswerable[k] for k in UNANSWERABLE},
            "answerable_top": distribution(top_answerable),
            "answerable_best_answer": distribution(best_answer),
        },
        "misses_at_5": dict(misses),
        "ms": {"p50": round(statistics.median(ms), 2), "p95": round(statistics.quantiles(ms, n=20)[18], 2)}
        if len(ms) > 1
        else {},
    }


def dump(path: Path, ranked: Sequence[Ranked], res: Mapping[str, Any]) -> None:
    out = {
        "split": res["split"],
        "legs": res["legs"],
        "model": res["model"],
        "floor": res["floor"],
        "settings": res["settings"],
        "questions": [
            {
                "id": r.question.id,
                "split": r.question.split,
                "kind": r.question.kind,
                "user": r.question.user,
                "where": r.question.where,
                "query": r.question.query,
                "answers": list(r.question.answers),
                "stale": r.question.stale,
                "forbidden": list(r.question.forbidden),
                "ranked": [
                    {
                        "id": i,
                        "score": round(s.score, 6),
                        "parts": {k: round(v, 6) for k, v in s.parts.items()},
                        "class": r.class_of[i],
                        "scope": r.scope_of[i],
                    }
                    for i, s in zip(r.ids, r.scored, strict=True)
                ],
            }
            for r in ranked
        ],
    }
    path.write_text(json.dumps(out, indent=1, ensure_ascii=False), encoding="utf-8")


# --- output ----------------------------------------------------------------------------------------------


def _cell(t: Mapping[str, Any], k: int) -> str:
    return f"{t[f'hit@{k}']}/{t['n']} ({t[f'hit@{k}_rate']:.3f})" if t["n"] else "-"


def _dist(d: Mapping[str, Any]) -> str:
    if not d.get("n"):
        return "-"
    return f"{d['min']:.3f} / {d['p25']:.3f} / {d['median']:.3f} / {d['p75']:.3f} / {d['max']:.3f} (n={d['n']})"


def markdown(res: Mapping[str, Any]) -> str:
    legs = res["legs"] + (f", {res['model']} on {res['runtime']}, floor {res['floor']}" if res["model"] else "")
    over = f"; overrides {', '.join(res['overrides'])}" if res["overrides"] else ""
    mem = res["memories"]
    out = [
        f"## Assistant-memory recall: {res['split']} split ({legs}{over})\n",
        f"{sum(mem['personal'].values())} personal memories of {len(mem['personal'])} users, {mem['shared']} shared; "
        f"{res['questions']} questions; clock at {res['now']}.\n",
        "| questions | n | hit@1 | hit@5 | hit@10 |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, key in (("answerable", "answerable"), ("answerable, not cross-lingual", "answerable_non_crosslingual")):
        t = res[key]
        out.append(f"| **{label}** | {t['n']} | {_cell(t, 1)} | {_cell(t, 5)} | {_cell(t, 10)} |")
    for kind, t in res["kinds"].items():
        out.append(f"| {kind} | {t['n']} | {_cell(t, 1)} | {_cell(t, 5)} | {_cell(t, 10)} |")
    m, s, p, ts = res["multi"], res["superseded"], res["privacy"], res["top_score"]
    stale_ids = ": " + ", ".join(s["questions"]) if s["questions"] else ""
    missed = "; ".join(f"{kind} {' '.join(ids)}" for kind, ids in res["misses_at_5"].items())
    out += [
        "",
        f"- multi: all answers in the top 5 {m['all_in_top5']}/{m['n']}, any {m['any_in_top5']}/{m['n']}",
        f"- superseded: stale memory ranked above its replacement {s['stale_above_replacement']}/{s['n']}"
        f" (stale ranked at all {s['stale_ranked']}/{s['n']}){stale_ids}",
        f"- privacy violations: {p['violations']} questions, {p['leaked_items']} items"
        f"; shared or personal memory out of place (another group's, an unbound project's, personal in a group):"
        f" {p['out_of_place']} questions",
        "- top fused score, min / p25 / median / p75 / max:",
        f"  - none: {_dist(ts['none'])}; empty rankings {ts['none_empty']}",
        f"  - privacy: {_dist(ts['privacy'])}; empty rankings {ts['privacy_empty']}",
        f"  - answerable, top of the ranking: {_dist(ts['answerable_top'])}",
        f"  - answerable, best-ranked answer: {_dist(ts['answerable_best_answer'])}",
        f"- missed at 5: {missed or 'none'}",
        _floor_line(res["evidence_floor"], res["legs"]),
        _floor_line(res["gateway_evidence_floor"], res["legs"]),
        f"- rank p50 {res['ms'].get('p50', 0):.1f} ms, p95 {res['ms'].get('p95', 0):.1f} ms; embedding the "
        f"memories {res['embed_seconds']:.1f} s; whole run {res['seconds']:.1f} s",
    ]
    hit5 = res["answerable_non_crosslingual"]["hit@5_rate"] or 0.0
    out.append(
        f"\nTargets (issue; they are judged on the test split, this is the {res['split']} split): hit@5 ≥ "
        f"{TARGET_HIT5} over the non-cross-lingual answerable questions — "
        f"{'met' if hit5 >= TARGET_HIT5 else '**not met**'} ({hit5:.3f}); privacy violations 0 — "
        f"{'met' if p['violations'] == 0 else '**not met**'}; stale never above its replacement — "
        f"{'met' if s['stale_above_replacement'] == 0 else '**not met**'}."
    )
    if res.get("calibration"):
        out += calibration_lines(res)
    return "\n".join(out)


def _floor_line(e: Mapping[str, Any], legs: str) -> str:
    if not e.get("answers"):
        return "- evidence floor: no answers ranked"
    what = "relative full-text score" if legs == "lexical" else "fused score, as evidence"
    head = (
        f"evidence floor ({what}) keeping {e['keep']:.0%} of the {e['answers']} ranked answers: {e['floor']:.3f}"
        if e["keep"] is not None
        else f"the gateway's evidence floor ({what}) {e['floor']:.3f}: keeps {e['answers_kept']:.0%} of the "
        f"{e['answers']} ranked answers"
    )
    return (
        f"- {head}; it keeps out {e['other_top_dropped']:.0%} of the other items of a top {EVIDENCE_TOP}, and "
        f"{e['unanswerable_top_dropped']:.0%} of the top {EVIDENCE_TOP} where nothing answers"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--split", choices=("tune", "test", "all"), default="test")
    p.add_argument("--lexical", action="store_true", help="no embeddings: keyword recall only")
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help="override a RecallSettings field (repeatable)")
    p.add_argument("--dump", metavar="FILE.json", help="write every question's ranked list (ids, scores, parts)")
    p.add_argument("--json", action="store_true", help="JSON instead of Markdown")
    p.add_argument("--data", default=str(DATA), help="the data directory")
    p.add_argument("--provider", help="memory.search.provider (default local)")
    p.add_argument("--model", help="memory.search.model: a model id, a local directory, or provider/model")
    p.add_argument("--api-base", help="memory.search.api_base")
    p.add_argument("--api-key", help="memory.search.api_key (any value for a local server that needs none)")
    p.add_argument(
        "--calibrate", action="store_true", help="measure the model's cosine and evidence floors (on --split tune)"
    )
    args = p.parse_args()
    if args.calibrate and args.lexical:
        p.error("--calibrate measures an embedding model: not with --lexical")
    res, ranked = asyncio.run(run(args))
    if args.dump:
        dump(Path(args.dump), ranked, res)
    print(json.dumps(res, indent=2, ensure_ascii=False) if args.json else markdown(res))
    return 1 if res["privacy"]["violations"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
