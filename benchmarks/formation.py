#!/usr/bin/env python3
"""Does background memory formation slow replies down? Reply latency with formation on and off.

    .venv/bin/python benchmarks/formation.py            # 4 rounds of 8 conversations x 40 turns (~3 min)
    .venv/bin/python benchmarks/formation.py --quick    # 2 rounds of 4 x 20 (~1 min)
    .venv/bin/python benchmarks/formation.py --json     # JSON instead of Markdown

The gateway runs in a child process with SQLite in a temporary directory, against a fake
OpenAI-compatible model (benchmarks/turn_overhead.py's, in another child) that answers after
`--model-ms` (default 300 ms, a fast model: the gateway waits on it as on a real one). Sessions
are summarized every 8 messages; each summary archives older messages and, with formation on,
queues a `formation` job: the background model call (the fake answers with three memory candidates
citing the lines it was given) and the write of the admitted candidates as pending evidence. The
gateway starts with SEEDED memories of its user in both settings (recall searches a store either
way). The load generator (this process) keeps N conversations busy through the REST API, one turn at a time
each, and times every reply.

Rounds alternate formation off and on (off, on, off, on, …), each on a fresh gateway and database,
so that drift on a shared machine falls on both; each waits until the model client is loaded and
answers one untimed turn per conversation first. Reported: reply latency p50/p90/p99 pooled over
the rounds of each setting, the ratio of the p99s (target: under 1.1), how many formation jobs ran
and how many records they formed (a round with formation on must have formed some, else the
benchmark fails), and the CPU other processes used meanwhile.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import asyncio
import json
import random
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "benchmarks"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import turn_overhead as base  # noqa: E402  (the fake model, the gateway's config, process stats)

TARGET_RATIO = 1.1
SUMMARY_EVERY = 8  # messages a session holds before it is summarized (and formation queued)
SEEDED = 300  # memories the benchmark user has before each round (see seed())
WORDS = (
    "harbour lantern copper meadow violin pepper glacier orchard canyon ribbon falcon cedar marble "
    "saddle thunder walnut biscuit compass velvet anchor prairie quartz willow ember tundra mosaic "
    "pebble lagoon sparrow juniper kettle mango nectar oyster pigeon quiver raven saffron tulip "
    "umbrella vessel wombat yarrow zephyr basil cobalt dune fjord garnet hazel indigo jasmine"
).split()
_LINE = re.compile(r"^\[(\d+)\] [^:\n]*: (.*)$", re.MULTILINE)


def formation_answer(body: dict[str, Any]) -> str:
    """The fake model's answer: three candidates for a formation request (each in its cited line's
    own words, as formation's grounding check requires), a summary for a summary request, the
    benchmark reply otherwise."""
    system = str(body["messages"][0].get("content", "")) if body.get("messages") else ""
    if "memory candidates" in system:
        said = {int(n): text for n, text in _LINE.findall(str(body["messages"][-1].get("content", "")))}
        picked = [
            {"type": "preference", "text": said[n][:200], "sources": [n]}
            for n in random.sample(sorted(said), min(3, len(said)))
        ]
        return json.dumps({"candidates": picked})
    if "summary" in system.lower():
        return "The person sent numbered benchmark messages and the assistant answered each."
    return base.REPLY


async def fake_main(model_ms: float) -> None:
    base.answer = formation_answer  # turn_overhead's fake looks its answer and delay up per request
    base.MODEL_DELAY_S = model_ms / 1000
    await base.fake_main()


def gateway_config(api_base: str, data_dir: str, formation: bool) -> dict[str, Any]:
    data = base.gateway_config_data(api_base, data_dir)
    data["memory"]["session_memory"] = {"max_tokens": 0, "messages": SUMMARY_EVERY}
    data["memory"]["formation"] = {"enabled": formation}
    data["memory"]["merge"] = {"enabled": False}
    return data


async def gateway_main(api_base: str, data_dir: str, formation: bool) -> None:
    from gateway.app import Gateway
    from gateway.config.load import parse_config

    gw = Gateway(parse_config(gateway_config(api_base, data_dir, formation), "benchmark", env={}))
    await gw.start()
    print(json.dumps({"url": gw.url}), flush=True)
    await base._until_stdin_closes()
    await gw.stop()


class Child(base.Child):
    """A role of this script in a subprocess (turn_overhead's Child, pointed at this file)."""

    def __init__(self, role: str, *args: str, log: Path) -> None:
        super().__init__(role, *args, log=log)
        self.argv = [sys.executable, str(Path(__file__).resolve()), "--role", role, *args]


async def seed(data_dir: Path) -> None:
    """SEEDED memories of the benchmark user, written before the gateway starts, in both settings:
    recall then searches a store of memories either way, and what differs is the background work
    (not whether recall has anything to search)."""
    from memory.records.fields import NewRecord
    from memory.records.model import MemoryClass, Provenance, ReviewStatus, UsePolicy
    from memory.store.storage import Storage

    data_dir.mkdir(parents=True)  # noqa: ASYNC240 (before the gateway starts: nothing else waits)
    storage = await Storage.open(f"sqlite:///{data_dir}/clawgate.db")
    rng = random.Random(7)
    try:
        await storage.records.import_batch(
            [
                NewRecord(
                    "The person likes " + " ".join(rng.sample(WORDS, 7)),
                    MemoryClass.DURABLE_FACT,
                    Provenance.USER_CONFIRMED,
                    UsePolicy(),
                    "personal:bench",
                    "bench",
                    ReviewStatus.NONE,
                )
                for _ in range(SEEDED)
            ]
        )
    finally:
        await storage.close()


async def outcome(data_dir: Path) -> dict[str, int]:
    """What formation did in a round, read from its database after the gateway stopped."""
    from memory.store.storage import Storage

    storage = await Storage.open(f"sqlite:///{data_dir}/clawgate.db")
    try:
        jobs = await storage.jobs.list(kind="formation", limit=100_000)
        formed = await storage.records.count() - SEEDED
    finally:
        await storage.close()
    return {
        "formation_jobs": len(jobs),
        "formation_done": sum(j.status == "done" for j in jobs),
        "records_formed": formed,
    }


async def one_round(
    http: aiohttp.ClientSession, api_base: str, formation: bool, sessions: int, turns: int, tmp: Path, n: int
) -> dict[str, Any]:
    data_dir = tmp / f"round-{n}"
    await seed(data_dir)
    gateway = Child(
        "gateway",
        "--api-base",
        api_base,
        "--data-dir",
        str(data_dir),
        *(["--formation"] if formation else []),
        log=tmp / "gateway.log",
    )
    url = (await gateway.start())["url"]
    await base.wait_ready(http, url, gateway, model=True)  # LiteLLM loaded: no first turn waits for it
    convs = [f"round{n}-conv{c}" for c in range(sessions)]
    await asyncio.gather(*(base.must_turn(http, url, conv, -1) for conv in convs))  # not timed
    lat: list[float] = []
    errors: list[str] = []
    busy0, cpu0, t0 = base.machine_busy_s(), base.proc_cpu_s(gateway.pid), time.perf_counter()

    async def conversation(conv: str) -> None:
        for i in range(turns):
            started = time.perf_counter()
            err = await base.post_turn(http, url, conv, i)
            if err is None:
                lat.append(time.perf_counter() - started)
            else:
                errors.append(err)

    try:
        await asyncio.gather(*(conversation(conv) for conv in convs))
    finally:
        wall = time.perf_counter() - t0
        gateway_cpu = base.proc_cpu_s(gateway.pid) - cpu0
        others = max(0.0, base.machine_busy_s() - busy0 - gateway_cpu) / wall
        await gateway.stop()
    if errors:
        raise RuntimeError(f"{len(errors)} turns failed, first: {errors[0]}")
    done = await outcome(data_dir)
    if formation and done["records_formed"] == 0:
        raise RuntimeError("formation was on but formed nothing: the benchmark measured no background work")
    label = "on" if formation else "off"
    base._progress(f"round {n} formation {label}: p99 {base._latency(lat)['p99_ms']:.1f} ms, {done}")
    return {
        "formation": formation,
        "samples": lat,
        "seconds": wall,
        "gateway_cpu_s": gateway_cpu,
        "other_cores": others,
        **done,
    }


async def orchestrate(args: argparse.Namespace) -> dict[str, Any]:
    rounds, sessions, turns = (2, 4, 20) if args.quick else (4, 8, 40)
    with tempfile.TemporaryDirectory(prefix="clawgate-formation-") as tmp_name:
        tmp = Path(tmp_name)
        fake = Child("fake", "--model-ms", str(args.model_ms), log=tmp / "fake.log")
        api_base = f"http://127.0.0.1:{(await fake.start())['port']}/v1"
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
                results = [
                    await one_round(http, api_base, n % 2 == 1, sessions, turns, tmp, n) for n in range(2 * rounds)
                ]
        finally:
            await fake.stop()
    pooled = {
        label: base._latency([x for r in results if r["formation"] == on for x in r["samples"]])
        for label, on in (("off", False), ("on", True))
    }
    return {
        "python": sys.version.split()[0],
        "rounds": rounds,
        "conversations": sessions,
        "turns_per_conversation": turns,
        "model_ms": args.model_ms,
        "summary_every": SUMMARY_EVERY,
        "latency": pooled,
        "p99_ratio": pooled["on"]["p99_ms"] / pooled["off"]["p99_ms"],
        "rounds_detail": [
            {k: v for k, v in r.items() if k != "samples"} | base._latency(r["samples"]) for r in results
        ],
        "target_ratio": TARGET_RATIO,
    }


def markdown(res: dict[str, Any]) -> str:
    out = [
        f"## Reply latency with background formation on and off (Python {res['python']})\n",
        f"{res['rounds']} rounds per setting, alternating; {res['conversations']} conversations x "
        f"{res['turns_per_conversation']} turns each; fake model answers after {res['model_ms']:.0f} ms; "
        f"sessions summarized every {res['summary_every']} messages.\n",
        "| formation | p50 ms | p90 ms | p99 ms | max ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for label in ("off", "on"):
        lat = res["latency"][label]
        out.append(
            f"| {label} | {lat['p50_ms']:.1f} | {lat['p90_ms']:.1f} | {lat['p99_ms']:.1f} | {lat['max_ms']:.1f} |"
        )
    out += ["", "| round | formation | p99 ms | jobs (done) | records formed | gateway CPU s | other procs (cores) |"]
    out.append("|---:|---|---:|---:|---:|---:|---:|")
    for n, r in enumerate(res["rounds_detail"]):
        out.append(
            f"| {n} | {'on' if r['formation'] else 'off'} | {r['p99_ms']:.1f} | {r['formation_jobs']} "
            f"({r['formation_done']}) | {r['records_formed']} | {r['gateway_cpu_s']:.1f} | {r['other_cores']:.2f} |"
        )
    met = res["p99_ratio"] < res["target_ratio"]
    out += [
        "",
        f"p99 ratio on/off: **{res['p99_ratio']:.3f}** (target < {res['target_ratio']}: {'met' if met else 'not met'})",
    ]
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", action="store_true")
    p.add_argument("--model-ms", type=float, default=300.0, help="the fake model's latency per call")
    p.add_argument("--role", choices=("fake", "gateway"), help=argparse.SUPPRESS)
    p.add_argument("--api-base", help=argparse.SUPPRESS)
    p.add_argument("--data-dir", help=argparse.SUPPRESS)
    p.add_argument("--formation", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.role == "fake":
        asyncio.run(fake_main(args.model_ms))
        return 0
    if args.role == "gateway":
        asyncio.run(gateway_main(args.api_base, args.data_dir, args.formation))
        return 0
    res = asyncio.run(orchestrate(args))
    print(json.dumps(res, indent=2) if args.json else markdown(res))
    return 0 if res["p99_ratio"] < TARGET_RATIO else 1


if __name__ == "__main__":
    raise SystemExit(main())
