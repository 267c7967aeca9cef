#!/usr/bin/env python3
"""How fast, and how well, time expressions are read out of questions: memory.when (ours) beside the
libraries that could have done it, when they are installed (`pip install dateparser parsedatetime
ctparse datefinder timefhuman`; none is a dependency of the gateway).

    .venv/bin/python benchmarks/time_expressions.py            # Markdown
    .venv/bin/python benchmarks/time_expressions.py --json

Recall reads every question of every turn, so the cost that matters most is a question that names no
time: the 244 questions of benchmarks/data/assistant_memory (most name none) are timed as a person
types them, beside the full-text leg's own tokenizing of the same question (memory.archive.fulltext
.query_terms), a baseline measured in the same run. Then what each finds: of EXPRESSIONS (questions
that name a time), how many it finds anything in; of NOT_TIMES (words that only look like times),
how many it wrongly takes for one. A library that finds a date finds a point in time: none of them
gives "March" as a month or "last week" as a week, which recall needs, so finding is counted, not
windows (tests/unit/test_when.py checks ours, window by window).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from memory.archive.fulltext import query_terms  # noqa: E402
from memory.when import find  # noqa: E402

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
QUESTIONS = ROOT / "benchmarks" / "data" / "assistant_memory" / "questions.jsonl"
EXPRESSIONS = [
    "what did I decide yesterday",
    "what happened last week",
    "what did I note in March",
    "what did I say two days ago",
    "what did I eat this morning",
    "what did I do in 2025",
    "what did I do on Monday",
    "what changed since September",
    "what did I read between May and July",
    "what did I do over the summer",
    "what did I mention recently",
    "what did I write the day before yesterday",
    "what did I do last night",
    "what happened earlier this week",
    "what did I do a few days ago",
    "what did I say in the last three days",
    "anything from last weekend?",
    "what did I do the week before last",
    "what happened in early 2025",
    "what did I note on 7 December 2025",
    "what did we migrate last June?",
    "what is happening at work in the second half of January?",
    "which big event do I have at the start of December?",
    "where will I be over the new year?",
    "what changes after the review on the 9th?",
]
NOT_TIMES = [
    "May I ask you something",
    "a second opinion",
    "march on",
    "last resort",
    "I will be there in 5",
    "what did Jan say about the deploy",
    "April said she likes tea",
    "set the timeout in 2000 ms",
    "what's my Tuesday routine?",
    "the office is on the 2nd floor",
    "since you asked, what is it?",
    "the last time I checked",
]


def _ours() -> Callable[[str], Any]:
    return lambda q: find(q, NOW, "UTC")


def _dateparser() -> Callable[[str], Any] | None:
    try:
        from dateparser.search import search_dates
    except ImportError:
        return None
    naive = NOW.replace(tzinfo=None)
    opts = {"RELATIVE_BASE": naive, "PREFER_DATES_FROM": "past"}
    return lambda q: search_dates(q, languages=["en"], settings=opts)  # type: ignore[arg-type]


def _parsedatetime() -> Callable[[str], Any] | None:
    try:
        import parsedatetime
    except ImportError:
        return None
    calendar = parsedatetime.Calendar(version=parsedatetime.VERSION_CONTEXT_STYLE)
    naive = NOW.replace(tzinfo=None)
    return lambda q: calendar.nlp(q, sourceTime=naive)


def _ctparse() -> Callable[[str], Any] | None:
    try:
        import ctparse
    except ImportError:
        return None
    logging.getLogger("ctparse").setLevel(logging.CRITICAL)  # "Failed to produce result" for every miss
    naive = NOW.replace(tzinfo=None)
    return lambda q: ctparse.ctparse(q, ts=naive, timeout=1.0)


def _datefinder() -> Callable[[str], Any] | None:
    try:
        import datefinder
    except ImportError:
        return None
    naive = NOW.replace(tzinfo=None)
    return lambda q: list(datefinder.find_dates(q, base_date=naive))


def _timefhuman() -> Callable[[str], Any] | None:
    try:
        from timefhuman import tfhConfig, timefhuman
    except ImportError:
        return None
    config = tfhConfig(now=NOW.replace(tzinfo=None))

    def parse(q: str) -> Any:
        try:
            return timefhuman(q, config=config)
        except Exception:  # it raises on some inputs: counted as nothing found
            return None

    return parse


def timed(fn: Callable[[str], Any], questions: Sequence[str], rounds: int) -> dict[str, float]:
    """Microseconds per question: the median round's mean, and the slowest question's median."""
    for q in questions:
        fn(q)  # warm: compiled patterns, caches, lazy imports
    per_round = []
    slowest: dict[str, list[float]] = {q: [] for q in questions}
    for _ in range(rounds):
        t0 = time.perf_counter()
        for q in questions:
            t1 = time.perf_counter()
            fn(q)
            slowest[q].append(time.perf_counter() - t1)
        per_round.append((time.perf_counter() - t0) / len(questions))
    worst = max(statistics.median(v) for v in slowest.values())
    return {"mean_us": round(statistics.median(per_round) * 1e6, 1), "max_us": round(worst * 1e6, 1)}


def run(rounds: int) -> dict[str, Any]:
    questions = [json.loads(line)["query"] for line in QUESTIONS.read_text(encoding="utf-8").splitlines() if line]
    without = [q for q in questions if find(q, NOW) is None]
    parsers = {
        "memory.when": _ours(),
        "dateparser": _dateparser(),
        "parsedatetime": _parsedatetime(),
        "ctparse": _ctparse(),
        "datefinder": _datefinder(),
        "timefhuman": _timefhuman(),
    }
    baseline = timed(query_terms, without, rounds)
    out: dict[str, Any] = {
        "questions_without_time": len(without),
        "baseline_query_terms": baseline,
        "parsers": {},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # dateparser warns about its own pytz use
        for name, fn in parsers.items():
            if fn is None:
                out["parsers"][name] = None
                continue
            plain = timed(fn, without, rounds)
            out["parsers"][name] = {
                "no_time": plain,
                "no_time_vs_baseline": round(plain["mean_us"] / baseline["mean_us"], 2),
                "with_time": timed(fn, EXPRESSIONS, rounds),
                "found": sum(bool(fn(q)) for q in EXPRESSIONS),
                "false_times": sum(bool(fn(q)) for q in NOT_TIMES),
            }
    return out


def markdown(res: dict[str, Any]) -> str:
    b = res["baseline_query_terms"]
    out = [
        "## Reading time out of questions\n",
        f"{res['questions_without_time']} questions that name no time (benchmarks/data/assistant_memory); the "
        f"full-text leg's tokenizing of the same takes {b['mean_us']} µs a question (baseline).\n",
        f"| parser | no time: µs a question (times the baseline) | slowest | with a time: µs "
        f"| found (of {len(EXPRESSIONS)}) | false times (of {len(NOT_TIMES)}) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, p in res["parsers"].items():
        if p is None:
            out.append(f"| {name} | not installed | | | | |")
            continue
        out.append(
            f"| {name} | {p['no_time']['mean_us']} ({p['no_time_vs_baseline']}x) | {p['no_time']['max_us']} "
            f"| {p['with_time']['mean_us']} | {p['found']} | {p['false_times']} |"
        )
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    res = run(args.rounds)
    print(json.dumps(res, indent=2) if args.json else markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
