"""`clawgate status` (what the gateway's database says now: background jobs, dead letters, flushes,
memory, scheduled runs whose last run failed) and `clawgate jobs list|retry` (the job queue, and a way
out of its dead-letter state)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gateway.cli.common import emit, json_stdout, load_or_report, with_storage
from gateway.config.model import Config
from memory.records.model import ReviewStatus
from memory.store.jobs import DEAD, STATUSES, Job

DEAD_SHOWN = 10


def add_parsers(sub: Any) -> None:
    status = sub.add_parser("status", help="background jobs (and dead letters), flushes and memory, from the database")
    status.add_argument("--json", action="store_true", help="one JSON object instead of text")
    jobs = sub.add_parser("jobs", help="the background job queue")
    jobs_sub = jobs.add_subparsers(dest="jobs_command", metavar="SUBCOMMAND")
    listing = jobs_sub.add_parser("list", help="recent jobs, newest first")
    listing.add_argument("--status", choices=STATUSES, help="only jobs in this state (dead: the dead letters)")
    listing.add_argument("--kind", help="only jobs of this kind")
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    retry = jobs_sub.add_parser("retry", help="queue a dead job again, with fresh attempts")
    retry.add_argument("id", type=int)


def _line(job: Job) -> str:
    when = f"{job.created_at:%Y-%m-%d %H:%M}Z"
    error = f"  {job.last_error}" if job.last_error else ""
    return f"{job.id:>6}  {job.status:<7}  {job.kind:<12}  {job.key}  {job.attempts}/{job.max_attempts}  {when}{error}"


def run(args: argparse.Namespace, config_path: Path) -> int:
    config = load_or_report(config_path)
    if config is None:
        return 2
    with json_stdout(getattr(args, "json", False)):
        return _run(args, config)


def _run(args: argparse.Namespace, config: Config) -> int:
    if args.command == "status":

        async def status(storage: Any) -> int:
            counts = await storage.jobs.counts()
            dead = await storage.jobs.list(DEAD, limit=DEAD_SHOWN)
            flushes = await storage.flushes.counts()
            records = await storage.records.count()
            pending_review = await storage.records.count(review_status=ReviewStatus.PENDING)
            runs = await storage.schedules.list(kind="schedule")
            failed = [s for s in runs if s.last_outcome == "dead"]
            out: dict[str, Any] = {
                "jobs": counts,
                "dead_letters": [j.to_json() for j in dead],
                "flushes": flushes,
                "memory_records": {"active": records, "pending_review": pending_review},
                "schedules": {
                    "configured": len(runs),
                    "last_run_failed": [{"name": s.name, "error": s.last_error} for s in failed],
                },
            }
            if args.json:
                emit(json.dumps(out))
                return 0
            print("jobs: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
            if dead:
                print(f"dead letters (newest {len(dead)}; `clawgate jobs retry ID` queues one again):")
                for job in dead:
                    print("  " + _line(job))
            print("flushes: " + (", ".join(f"{n} {s}" for s, n in sorted(flushes.items())) or "none"))
            print(f"memory records: {records} active, {pending_review} waiting for review")
            print(f"scheduled runs: {len(runs)} (clawgate schedules list)")
            for s in failed:
                print(f"  {s.name}: its last run failed: {s.last_error}")
            return 0

        return with_storage(config, status)
    if args.command == "jobs" and args.jobs_command == "list":

        async def listing(storage: Any) -> int:
            found = await storage.jobs.list(args.status, args.kind, args.limit)
            for job in found:
                if args.json:
                    emit(json.dumps(job.to_json()))
                else:
                    print(_line(job))
            if not found and not args.json:
                print("no jobs")
            return 0

        return with_storage(config, listing)
    if args.command == "jobs" and args.jobs_command == "retry":

        async def retry(storage: Any) -> int:
            if await storage.jobs.retry(args.id):
                print(f"job {args.id} queued again; the gateway runs it next")
                return 0
            job = await storage.jobs.get(args.id)
            why = "there is no such job" if job is None else f"it is {job.status}, not dead"
            print(f"job {args.id} not retried: {why}", file=sys.stderr)
            return 1

        return with_storage(config, retry)
    print("usage: clawgate jobs list|retry", file=sys.stderr)
    return 2
