"""`clawgate schedules list|run|pause|resume` (docs/schedules.md): the config's scheduled runs and the
reminders people set, from the database. The CLI only queues: a running gateway's job workers run
what is due (with several instances, whichever claims it first)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from gateway.cli.common import emit, json_stdout, load_or_report, with_storage
from gateway.config.model import Config

if TYPE_CHECKING:  # the scheduler and the database load when a subcommand runs, not for --help
    from memory.store.schedules import Schedule
    from memory.store.storage import Storage


def add_parsers(sub: Any) -> None:
    schedules = sub.add_parser("schedules", help="scheduled runs (schedules: in the config) and reminders")
    s_sub = schedules.add_subparsers(dest="schedules_command", metavar="SUBCOMMAND")
    listing = s_sub.add_parser("list", help="each schedule with its last and next run")
    listing.add_argument("--reminders", action="store_true", help="people's reminders too")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    for verb, what in (
        ("run", "run a schedule once now (its next due time stays as it is)"),
        ("pause", "stop a schedule until `resume` (kept across restarts)"),
        ("resume", "start a paused schedule again, from its next due time after now"),
    ):
        one = s_sub.add_parser(verb, help=what)
        one.add_argument("name", help="the schedule's name in the config")


def _line(s: Schedule) -> str:
    from gateway.schedules.reminders import describe
    from memory.store.schedules import ACTIVE, REMINDER

    if s.kind == REMINDER:
        return f"reminder  {s.owner}  {describe(s)}"
    rule = s.cron or f"every {s.every_seconds}s"
    nxt = f"{s.next_due:%Y-%m-%d %H:%M}Z" if s.next_due is not None and s.status == ACTIVE else "-"
    last = f"{s.last_run_at:%Y-%m-%d %H:%M}Z {s.last_outcome}" if s.last_run_at is not None else "never"
    error = f"  ({s.last_error})" if s.last_error and s.last_outcome == "dead" else ""
    where = f"{s.channel}:{s.chat_id or 'dm of ' + (s.owner or '?')}"
    return f"{s.name:<20} {s.status:<8} {rule:<16} next {nxt:<18} last {last}{error}  -> {where}"


def run(args: argparse.Namespace, config_path: Any) -> int:
    config = load_or_report(config_path)
    if config is None:
        return 2
    with json_stdout(getattr(args, "json", False)):
        return with_storage(config, lambda storage: _run(args, config, storage))


async def _run(args: argparse.Namespace, config: Config, storage: Storage) -> int:
    from gateway.core.events import utcnow
    from gateway.schedules.scheduler import DISABLED, Scheduler, when_of
    from memory.store.jobs import JobStore
    from memory.store.schedules import ACTIVE, PAUSED

    jobs = JobStore(storage.db)
    scheduler = Scheduler(config, storage, jobs.enqueue)
    await scheduler.sync_config()  # what the config says now, as a starting gateway would see it
    command = args.schedules_command
    if command == "list" or command is None:
        kinds = None if args.reminders else "schedule"
        found = await storage.schedules.list(kind=kinds, statuses=(ACTIVE, PAUSED, DISABLED))
        for s in found:
            if getattr(args, "json", False):
                emit(json.dumps(s.to_json()))
            else:
                print(_line(s))
        if not found and not getattr(args, "json", False):
            print("no schedules (add them under schedules: in the config; people set reminders with /remind)")
        return 0
    one = await storage.schedules.named(args.name)
    if one is None:
        known = ", ".join(sorted(config.schedules)) or "none"
        print(f"no schedule named {args.name!r} (configured: {known})", file=sys.stderr)
        return 1
    now = utcnow()
    if command == "run":
        job = await scheduler.queue(one, due=now, manual=True)
        print(f"{one.name}: queued as job {job}; a running gateway runs it within a few seconds")
        return 0
    if command == "pause":
        if one.status != ACTIVE or not await storage.schedules.set_status(one.id, PAUSED):
            print(f"{one.name} is {one.status}: nothing to pause", file=sys.stderr)
            return 1
        print(f"{one.name}: paused (clawgate schedules resume {one.name} starts it again)")
        return 0
    nxt = when_of(one).next_after(now)
    if one.status != PAUSED or nxt is None or not await storage.schedules.set_status(one.id, ACTIVE, next_due=nxt):
        print(f"{one.name} is {one.status}, not paused: nothing to resume", file=sys.stderr)
        return 1
    resumed = await storage.schedules.get(one.id)
    if resumed is not None:
        await scheduler.queue(resumed)
    print(f"{one.name}: resumed, next run {nxt:%Y-%m-%d %H:%M}Z")
    return 0
