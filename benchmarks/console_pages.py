#!/usr/bin/env python3
"""How fast the web console answers with a realistic amount of memory behind it.

    .venv/bin/python benchmarks/console_pages.py            # 10,000 records, 100 requests a page
    .venv/bin/python benchmarks/console_pages.py --quick    # 2,000 records, 30 requests a page
    .venv/bin/python benchmarks/console_pages.py --json     # JSON instead of Markdown

A gateway starts in this process on a temporary SQLite database with keyword recall (no embedding
model: the search's vector leg is measured by benchmarks/recall_scale.py). Records are imported in
batches: personal ones of 50 people (alice among them), global, project and channel ones, a tenth
pending review. Every page and its JSON twin is then fetched over loopback one request at a time,
signed in as the administrator (root) or as alice, and timed from the request to the last byte:
the figure is what a person clicking around waits, server-side rendering and the database included.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import aiohttp  # noqa: E402

from gateway.app import Gateway  # noqa: E402
from gateway.config.load import parse_config  # noqa: E402
from gateway.session.memory_service import EVIDENCE_ONLY, INSTRUCTION  # noqa: E402
from memory.records.fields import NewRecord  # noqa: E402
from memory.records.model import MemoryClass, Provenance, ReviewStatus, Scope  # noqa: E402

ALICE, ROOT_TOKEN = "alice-token-0123456789", "root-token-0123456789"
WORDS = (
    "deploy release staging server tuesday friday coffee train meeting wiki notes budget design review "
    "cello garden holiday invoice backup database cluster dashboard alert pager rotation customer "
    "kitchen bicycle dentist birthday project atlas falcon seven migration schema index query"
).split()


def config(data_dir: Path) -> Any:
    return parse_config(
        {
            "ai": {"model": "openai/bench", "api_base": "http://127.0.0.1:9/v1", "api_key": "sk-bench-0000000000000"},
            "storage": {"data_dir": str(data_dir)},
            "channels": {"web": {"host": "127.0.0.1", "port": 0}},
            "users": {
                "alice": {"roles": ["user"], "tokens": [ALICE]},
                "root": {"roles": ["admin"], "tokens": [ROOT_TOKEN]},
            },
            "memory": {"merge": {"enabled": False}, "search": {"provider": None}},
        },
        "bench",
        env={},
    )


def records(n: int, rng: random.Random) -> list[NewRecord]:
    scopes = (
        [Scope.personal("alice")] * 5
        + [Scope.personal(f"user{i}") for i in range(49)]
        + [Scope.parse("global")] * 5
        + [Scope.parse(f"project:p{i}") for i in range(5)]
        + [Scope.channel(f"telegram:group:{i}") for i in range(20)]
    )
    out = []
    for i in range(n):
        pending = i % 10 == 0
        out.append(
            NewRecord(
                " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))),
                MemoryClass.EVIDENCE if pending else MemoryClass.DURABLE_FACT,
                Provenance.INFERRED if pending else Provenance.USER_CONFIRMED,
                EVIDENCE_ONLY if pending else INSTRUCTION,
                rng.choice(scopes),
                "bench",
                ReviewStatus.PENDING if pending else ReviewStatus.NONE,
            )
        )
    return out


async def timed(session: aiohttp.ClientSession, url: str, n: int, token: str) -> dict[str, float]:
    headers = {"Authorization": f"Bearer {token}"}
    times = []
    for _ in range(n):
        started = time.perf_counter()
        async with session.get(url, headers=headers) as r:
            await r.read()
            if r.status != 200:
                raise SystemExit(f"{url}: HTTP {r.status}")
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return {"p50_ms": statistics.median(times), "p95_ms": times[int(len(times) * 0.95) - 1]}


async def run(n_records: int, n_requests: int) -> dict[str, Any]:
    rng = random.Random(8)
    with tempfile.TemporaryDirectory() as tmp:
        gw = Gateway(config(Path(tmp) / "data"))
        await gw.start()
        try:
            assert gw.storage is not None
            items = records(n_records, rng)
            for i in range(0, len(items), 1000):
                await gw.storage.records.import_batch(items[i : i + 1000])
            mine = await gw.storage.records.list(scopes=[Scope.personal("alice")], limit=1)
            some = mine[0].id
            await gw.storage.records.update(some, actor="alice", action="edit", content="an edited memory for the diff")
            pages = [
                ("overview (admin)", "/console", ROOT_TOKEN),
                ("overview (user)", "/console", ALICE),
                ("review queue (admin)", "/console/review", ROOT_TOKEN),
                ("memory browser, newest", "/console/memory", ALICE),
                ("memory browser, filtered", "/console/memory?scope=global&review_status=pending", ROOT_TOKEN),
                ("memory browser, search", "/console/memory?q=staging+server+deploy", ALICE),
                ("memory record with revisions", f"/console/memory/{some}", ALICE),
                ("traces", "/console/traces", ALICE),
                ("Memory.md", "/console/core", ALICE),
                ("users (admin)", "/console/users", ROOT_TOKEN),
                ("jobs (admin)", "/console/jobs", ROOT_TOKEN),
                ("API: memory list", "/api/v1/memory", ALICE),
                ("API: search", "/api/v1/memory?q=staging+server+deploy", ALICE),
                ("API: status", "/api/v1/status", ROOT_TOKEN),
            ]
            out: dict[str, Any] = {"records": n_records, "requests_per_page": n_requests, "pages": {}}
            async with aiohttp.ClientSession() as session:
                for name, path, token in pages:
                    await timed(session, gw.url + path, 3, token)  # warm: templates compiled, caches filled
                    out["pages"][name] = await timed(session, gw.url + path, n_requests, token)
            return out
        finally:
            await gw.stop()


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Console pages with {result['records']:,} memories, {result['requests_per_page']} requests each:",
        "",
        "| page | p50 ms | p95 ms |",
        "|---|---|---|",
    ]
    for name, t in result["pages"].items():
        lines.append(f"| {name} | {t['p50_ms']:.1f} | {t['p95_ms']:.1f} |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="2,000 records, 30 requests a page")
    p.add_argument("--json", action="store_true", help="print JSON")
    args = p.parse_args()
    import logging

    logging.disable(logging.INFO)
    result = asyncio.run(run(2_000 if args.quick else 10_000, 30 if args.quick else 100))
    print(json.dumps(result, indent=2) if args.json else markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
