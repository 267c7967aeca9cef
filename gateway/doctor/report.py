"""What `clawgate doctor` prints: an aligned table, or one JSON object, and its exit code."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from gateway.doctor.checks import run_checks
from gateway.doctor.context import PROBE_TIMEOUT_S, STATUSES, Context, Result


def failed(results: Sequence[Result]) -> bool:
    return any(r.status == "fail" for r in results)


def summary(results: Sequence[Result]) -> str:
    counts = Counter(r.status for r in results)
    parts = [f"{counts[s]} {s}" for s in STATUSES if counts[s]]
    return ", ".join(parts) + (": something failed" if failed(results) else ": nothing failed")


def render_table(results: Sequence[Result]) -> str:
    """CHECK, STATUS and DETAIL columns; more lines and the hint indented under the detail ("fix:"
    for a warning or failure, "note:" for information)."""
    name_w = max([len("CHECK"), *(len(r.name) for r in results)])
    status_w = max([len("STATUS"), *(len(r.status) for r in results)])
    pad = " " * (name_w + status_w + 4)
    out = [f"{'CHECK':<{name_w}}  {'STATUS':<{status_w}}  DETAIL"]
    for r in results:
        out.append(f"{r.name:<{name_w}}  {r.status:<{status_w}}  {r.detail}")
        out += [f"{pad}- {line}" for line in r.lines]
        if r.hint and r.status != "ok":
            out.append(f"{pad}{'fix' if r.status in ('warn', 'fail') else 'note'}: {r.hint}")
    out.append("")
    out.append(summary(results))
    return "\n".join(out)


def render_json(results: Sequence[Result], config_path: Path) -> str:
    counts = Counter(r.status for r in results)
    return json.dumps(
        {
            "ok": not failed(results),
            "config": str(config_path),
            "counts": {s: counts[s] for s in STATUSES},
            "checks": [r.to_json() for r in results],
        },
        ensure_ascii=False,
        indent=2,
    )


def main(config_path: Path, *, as_json: bool = False, offline: bool = False, timeout: float = PROBE_TIMEOUT_S) -> int:
    async def run() -> list[Result]:
        ctx = Context(config_path, offline=offline, timeout=timeout)
        try:
            return await run_checks(ctx)
        finally:
            await ctx.close()

    results = asyncio.run(run())
    print(render_json(results, config_path) if as_json else render_table(results))
    return 1 if failed(results) else 0
