#!/usr/bin/env python3
"""Per-turn cost of the session budget's bookkeeping as a session grows to 10,000 messages.

    .venv/bin/python benchmarks/session_budget.py            # full run (about 30 s)
    .venv/bin/python benchmarks/session_budget.py --quick    # a short run
    .venv/bin/python benchmarks/session_budget.py --json     # JSON instead of Markdown

One session is grown turn by turn (a user message and a reply, ~25 tokens each) with a budget too
large to trigger a summary, so every turn pays only the bookkeeping: estimating the new messages'
tokens, the before-turn check (would the request pass auto_flush_tokens?), the running totals and
the after-turn check (is the session past its limit?). Each is O(1) by design: totals are kept,
never recounted. Timed per turn and reported as the median over the 50 turns from 10, 100, 1,000
and 10,000 messages on, twice: the bookkeeping alone, and with the turn's real SQLite write
(`SessionStore.append`) included. The target is a ratio under 1.5x between 10,000 and 10 messages.

For scale, the occasional work that is O(n) is timed too: planning a trim (`plan_trim`, run once
each time a session passes its limit) and planning a flush, at 10,000 messages.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gateway.config.model import Config  # noqa: E402
from gateway.llm.client import LLMClient  # noqa: E402
from gateway.session.budget import SessionMemory  # noqa: E402
from gateway.turn.engine import system_prompt  # noqa: E402
from memory.archive.daily import DailyFiles  # noqa: E402
from memory.budget import Budget, plan_flush, plan_trim  # noqa: E402
from memory.store.sessions import Message  # noqa: E402
from memory.store.storage import Storage  # noqa: E402

SIZES = (10, 100, 1_000, 10_000)
WINDOW = 50  # turns timed from each size on
TARGET_RATIO = 1.5
USER = "Could you look at the deployment notes from yesterday and tell me what changed? "
REPLY = "Yesterday's notes add a canary stage and move the database migration before the rollout. "


def _config(data_dir: str) -> Config:
    # A budget no session here reaches: every turn is bookkeeping only.
    return Config.model_validate(
        {
            "ai": {"model": "openai/unused"},
            "storage": {"data_dir": data_dir},
            "memory": {"auto_flush_tokens": 10**9, "session_memory": {"max_tokens": 10**8}},
        }
    )


async def grow(max_messages: int, with_storage: bool) -> dict[int, float]:
    """Median µs per turn around each size."""
    with tempfile.TemporaryDirectory(prefix="clawgate-budget-") as tmp:
        config = _config(tmp)
        storage = await Storage.open(f"sqlite:///{tmp}/bench.db")
        try:
            memory = SessionMemory(config, storage, LLMClient(), DailyFiles(Path(tmp) / "memory"), [])
            agent = config.agents.list[0]
            system = system_prompt(agent)
            warm = await storage.sessions.active("bench:dm:warm-up", agent.name, "u1")
            for i in range(100):  # caches and lazy imports settle in another session first
                pair = [Message("user", f"{USER}{i}"), Message("assistant", f"{REPLY}{i}")]
                await memory.before_turn(system, warm, pair[:1], None)
                await storage.sessions.append(warm, pair)
                memory.after_turn(agent, warm)
            state = await storage.sessions.active("bench:dm:1", agent.name, "u1")
            marks = {size: [] for size in SIZES if size <= max_messages}
            turn = 0
            while state.message_count < max_messages + 2 * WINDOW:
                turn += 1
                t0 = time.perf_counter()
                user = Message("user", f"{USER}{turn}", author="bench:1")
                await memory.before_turn(system, state, [user], None)
                reply = Message("assistant", f"{REPLY}{turn}")
                if with_storage:
                    await storage.sessions.append(state, [user, reply])
                else:  # what append does in memory, without the write
                    state.recent.extend((user, reply))
                    state.message_count += 2
                    state.token_count += user.tokens + reply.tokens
                memory.after_turn(agent, state)
                elapsed = time.perf_counter() - t0
                for size, samples in marks.items():
                    if size <= state.message_count < size + 2 * WINDOW:
                        samples.append(elapsed)
            return {size: statistics.median(s) * 1e6 for size, s in marks.items() if s}
        finally:
            await storage.close()


def occasional(n: int) -> dict[str, float]:
    """µs of the O(n) plans at n messages (each runs once per trim or flush, not per turn)."""
    roles = ["user", "assistant"] * (n // 2)
    tokens = [25] * len(roles)
    budget = Budget(max_tokens=n * 25 // 2, flush_tokens=n * 25)  # a session twice its limit
    out = {}
    for name, fn in (
        ("plan_trim", lambda: plan_trim(roles, tokens, budget)),
        ("plan_flush", lambda: plan_flush(roles, tokens, 100, budget)),
    ):
        runs = 20
        t0 = time.perf_counter()
        for _ in range(runs):
            fn()
        out[name] = (time.perf_counter() - t0) / runs * 1e6
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    top = 1_000 if args.quick else 10_000
    alone = await grow(top, with_storage=False)
    stored = await grow(top, with_storage=True)
    first, last = min(alone), max(alone)
    return {
        "python": sys.version.split()[0],
        "sizes": sorted(alone),
        "bookkeeping_us": alone,
        "with_sqlite_write_us": stored,
        "ratio_bookkeeping": alone[last] / alone[first],
        "ratio_with_write": stored[last] / stored[first],
        "occasional_us_at_max": occasional(top),
        "max_messages": top,
        "target_ratio": TARGET_RATIO,
    }


def markdown(res: dict[str, Any]) -> str:
    sizes = res["sizes"]
    out = [
        f"## Session budget bookkeeping per turn (Python {res['python']})\n",
        "| messages in the session | " + " | ".join(f"{s:,}" for s in sizes) + " | ratio last/first |",
        "|---|" + "---:|" * (len(sizes) + 1),
        "| bookkeeping alone (µs) | "
        + " | ".join(f"{res['bookkeeping_us'][s]:.1f}" for s in sizes)
        + f" | {res['ratio_bookkeeping']:.2f}x |",
        "| with the SQLite write (µs) | "
        + " | ".join(f"{res['with_sqlite_write_us'][s]:.1f}" for s in sizes)
        + f" | {res['ratio_with_write']:.2f}x |",
        "",
        f"Occasional O(n) work at {res['max_messages']:,} messages (once per trim or flush): "
        + ", ".join(f"`{k}` {v:.0f} µs" for k, v in res["occasional_us_at_max"].items())
        + ".",
        "",
        f"Target: ratio under {res['target_ratio']}x — "
        + ("met" if max(res["ratio_bookkeeping"], res["ratio_with_write"]) < res["target_ratio"] else "**not met**")
        + ".",
    ]
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="grow to 1,000 messages instead of 10,000")
    p.add_argument("--json", action="store_true", help="JSON instead of Markdown")
    args = p.parse_args()
    res = asyncio.run(run(args))
    print(json.dumps(res, indent=2) if args.json else markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
