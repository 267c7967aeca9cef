#!/usr/bin/env python3
"""Time in questions, measured on our own assistant-memory set: how much a window the question names
should weigh in recall (docs/recall.md, "Time in questions"; memory/when.py).

    .venv/bin/python benchmarks/time_in_questions.py --split tune                  # the settings as shipped
    .venv/bin/python benchmarks/time_in_questions.py --split tune --set time_boost=0.5 --set time_pool=0
    .venv/bin/python benchmarks/time_in_questions.py --split test --json

The set has few questions whose answer lies in a window they name (five that look back), too few to
choose a weight on, so this derives its own from the split's answerable questions (one answer, not
cross-lingual): each is asked four ways, as written, with the month its answer was written in
("…, in March 2026?": the right window), with a month four months away in which the asker wrote
other things (the wrong window, as when a question names the time of an event and not of its note),
and with "recently" (reported apart for answers of the last RECENT_DAYS days and older ones). A
weight is worth what it gains on the right window against what it costs on the wrong one.

Everything else is as benchmarks/assistant_memory.py runs it (the same records, policy, clock at
2026-11-30 12:00 UTC and local embedder); reported per way of asking: hit@1, hit@5 and the mean
reciprocal rank of the answer.
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
import sys  # noqa: E402
import tempfile  # noqa: E402
from collections import defaultdict  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from dataclasses import fields, replace  # noqa: E402
from datetime import datetime, timedelta  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402
from unittest import mock  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.assistant_memory import (  # noqa: E402
    DATA,
    NOW,
    Memory,
    Question,
    bench_config,
    frozen_clock,
    load_data,
    load_projects,
    local_cache,
    new_record,
    override,
    place,
)
from gateway.recall.engine import TurnRecall, embedder_from_config  # noqa: E402
from gateway.session.memory_service import MemoryService  # noqa: E402
from memory.recall import RecallSettings  # noqa: E402
from memory.store.storage import Storage  # noqa: E402
from memory.trust.policy import Actor  # noqa: E402
from memory.when_rules import RECENT_DAYS  # noqa: E402

MONTHS = "January February March April May June July August September October November December".split()
SHIFT = 4  # months between an answer's month and the wrong window
WAYS = ("as written", "right window", "wrong window", "recently, answer recent", "recently, answer older")


def _in_month(query: str, when: datetime) -> str:
    return f"{query.rstrip(' ?.')}, in {MONTHS[when.month - 1]} {when.year}?"


def _shifted(when: datetime, months: int) -> datetime:
    y, m = divmod(when.year * 12 + when.month - 1 + months, 12)
    return when.replace(year=y, month=m + 1, day=1)


def derive(memories: Sequence[Memory], questions: Sequence[Question], split: str) -> list[tuple[str, Question]]:
    """(way, question) for every answerable single-answer question of the split, three ways each."""
    by_id = {m.id: m for m in memories}
    written: dict[str, set[tuple[int, int]]] = defaultdict(set)  # user -> months they wrote in
    for m in memories:
        if m.user is not None:
            written[m.user].add((m.created_at.year, m.created_at.month))
    out: list[tuple[str, Question]] = []
    for q in questions:
        if q.split != split or len(q.answers) != 1 or q.kind in ("crosslingual", "multi", "none", "privacy"):
            continue
        made = by_id[q.answers[0]].created_at
        wrong = next(
            (
                w
                for k in (SHIFT, -SHIFT, SHIFT + 1, -SHIFT - 1)
                if (w := _shifted(made, k)) <= NOW and (w.year, w.month) in written[q.user]
            ),
            None,
        )
        if wrong is None:
            continue
        out.append(("as written", q))
        out.append(("right window", replace(q, query=_in_month(q.query, made))))
        out.append(("wrong window", replace(q, query=_in_month(q.query, wrong))))
        lately = "recently, answer recent" if NOW - made <= timedelta(days=RECENT_DAYS) else "recently, answer older"
        out.append((lately, replace(q, query=f"{q.query.rstrip(' ?.')}, recently?")))
    return out


async def run(split: str, assignments: Sequence[str], data: Path) -> dict[str, Any]:
    memories, questions = load_data(data)
    asked = derive(memories, questions, split)
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="clawgate-time-")))
        stack.enter_context(frozen_clock(NOW))
        stack.enter_context(mock.patch.dict(os.environ, {"CLAWGATE_CACHE_DIR": str(tmp / "cache")}))
        config = bench_config(tmp / "data", False, load_projects(data))
        embedder = embedder_from_config(config)
        local_cache(embedder, tmp)
        storage = await Storage.open(f"sqlite:///{tmp}/bench.db")
        recall: TurnRecall | None = None
        try:
            record_ids = await storage.records.import_batch([new_record(m) for m in memories], now=NOW)
            data_id = dict(zip(record_ids, (m.id for m in memories), strict=True))
            service = MemoryService(config, storage.records, [])
            recall = TurnRecall(config, storage, service, None, embedder)
            recall.start()
            await recall.caught_up(timeout=600)
            settings = override(recall.settings, assignments)
            ranks: dict[str, list[int | None]] = defaultdict(list)
            for way, q in asked:
                actor = Actor(q.user, frozenset({"user"}), "chat")
                result, _ = await recall.rank(actor, place(service, q), q.query, kinds=("record",), settings=settings)
                ids = [data_id.get(s.candidate.id, s.candidate.id) for s in result.ranked]
                ranks[way].append(ids.index(q.answers[0]) + 1 if q.answers[0] in ids else None)
        finally:
            if recall is not None:
                await recall.stop()
            await storage.close()
    defaults = RecallSettings()
    changed = {f.name: getattr(settings, f.name) for f in fields(settings) if f.name.startswith("time_")}
    return {
        "split": split,
        "questions": sum(way == "as written" for way, _ in asked),
        "time_settings": changed,
        "overrides": list(assignments),
        "shipped": {f.name: getattr(defaults, f.name) for f in fields(defaults) if f.name.startswith("time_")},
        "ways": {way: _score(ranks[way]) for way in WAYS},
    }


def _score(ranks: Sequence[int | None]) -> dict[str, float]:
    n = len(ranks) or 1
    return {
        "n": len(ranks),
        "hit@1": round(sum(r == 1 for r in ranks) / n, 3),
        "hit@5": round(sum(r is not None and r <= 5 for r in ranks) / n, 3),
        "mrr": round(sum(1 / r for r in ranks if r is not None) / n, 3),
    }


def markdown(res: dict[str, Any]) -> str:
    over = f" ({', '.join(res['overrides'])})" if res["overrides"] else ""
    out = [
        f"## Time in questions: {res['split']} split{over}\n",
        f"{res['questions']} questions, each asked four ways; settings {res['time_settings']}.\n",
        "| asked | n | hit@1 | hit@5 | MRR |",
        "|---|---:|---:|---:|---:|",
    ]
    for way, s in res["ways"].items():
        out.append(f"| {way} | {s['n']} | {s['hit@1']:.3f} | {s['hit@5']:.3f} | {s['mrr']:.3f} |")
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--split", choices=("tune", "test"), default="test")
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help="override a RecallSettings field (repeatable)")
    p.add_argument("--json", action="store_true", help="JSON instead of Markdown")
    p.add_argument("--data", default=str(DATA), help="the data directory")
    args = p.parse_args()
    res = asyncio.run(run(args.split, args.set or [], Path(args.data)))
    print(json.dumps(res, indent=2) if args.json else markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
