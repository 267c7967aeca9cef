"""`clawgate memory consolidate` (old memories and daily notes into Memory.md: gateway/jobs/consolidation.py)
and `clawgate memory revisions list|show|undo` (every change of a memory record, undone by id; a merge
is undone as a whole: memory/records/revisions.py)."""

from __future__ import annotations

import argparse
import functools
import json
import secrets
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gateway.cli.common import emit, with_storage
from gateway.config.load import secret_values
from gateway.config.model import Config

if TYPE_CHECKING:
    from memory.records.rows import Revision
    from memory.store.storage import Storage

CLI_ACTOR = "cli"
# Bookkeeping every revision changes: shown in the header, not in the diff.
_BOOKKEEPING = frozenset({"revision", "updated_at"})


def add_parsers(mem_sub: Any) -> None:
    cons = mem_sub.add_parser(
        "consolidate", help="move old global and personal memories and daily notes into Memory.md, with the model"
    )
    cons.add_argument("--dry-run", action="store_true", help="only report what would move; change nothing")
    cons.add_argument(
        "--lookback-days",
        type=int,
        metavar="N",
        help="take what is older than N days (default: memory.consolidate_after_days)",
    )
    cons.add_argument("--json", action="store_true", help="the report as one JSON object")
    revs = mem_sub.add_parser("revisions", help="changes of memory records: list, show, undo")
    revs_sub = revs.add_subparsers(dest="revisions_command", metavar="SUBCOMMAND")
    listing = revs_sub.add_parser("list", help="recent revisions, newest first")
    listing.add_argument("--record", metavar="ID", help="only this record's (mem-…)")
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    show = revs_sub.add_parser("show", help="one revision: what it changed, as a diff")
    show.add_argument("id", type=int)
    show.add_argument("--json", action="store_true")
    undo = revs_sub.add_parser("undo", help="undo a revision (a merge: the whole merge)")
    undo.add_argument("id", type=int)


# -- consolidate ----------------------------------------------------------------------------------


def run_consolidate(args: argparse.Namespace, config: Config) -> int:
    if args.lookback_days is not None and args.lookback_days < 0:
        print("clawgate memory consolidate: --lookback-days must be 0 or more", file=sys.stderr)
        return 2
    if not config.memory.enabled:
        print("clawgate memory consolidate: memory is turned off (memory.enabled: false)", file=sys.stderr)
        return 2
    return with_storage(config, functools.partial(_consolidate, args, config))


async def _consolidate(args: argparse.Namespace, config: Config, storage: Storage) -> int:
    from gateway.jobs.consolidation import ConsolidationError, Consolidator
    from gateway.llm.client import LLMClient
    from gateway.session.budget import SessionMemory
    from memory.archive.daily import DailyFiles
    from memory.archive.daily_index import DailyIndex

    hidden = secret_values(config)
    ai = config.ai
    llm = LLMClient(
        timeout=ai.timeout_seconds,
        retries=ai.retries,
        backoff=ai.retry_backoff_seconds,
        max_concurrent=ai.max_concurrent_calls,
        temperature=ai.temperature,
        transport=ai.transport,
    )
    daily = DailyFiles(config.storage.data_dir / "memory", hidden)
    index = DailyIndex(storage.db, daily)
    # The background model chain of the default agent, exactly as the gateway's summaries use it.
    background = SessionMemory(config, storage, llm, daily, list(hidden), index)
    chain = functools.partial(background.background_chain, config.agents.list[0])
    consolidator = Consolidator(config, storage, llm, daily, index, list(hidden), chain)
    try:
        plan = await consolidator.plan(lookback_days=args.lookback_days)
        if args.dry_run:
            report = consolidator.report(plan, dry_run=True)
        else:
            if plan.targets:
                print(f"consolidating into {len(plan.targets)} Memory.md file(s) …", file=sys.stderr, flush=True)
            run_id = "cli-" + secrets.token_hex(6)
            report = await consolidator.run(plan, run_id=run_id, progress=_progress)
    except ConsolidationError as exc:
        print(f"clawgate memory consolidate: {exc}", file=sys.stderr)
        return 1
    finally:
        await llm.aclose()
    if args.json:
        emit(json.dumps(report, ensure_ascii=False))
    else:
        _print_report(report)
    left = sum(len(t.get("not_moved", [])) for t in report["targets"])
    return 1 if left else 0


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _print_report(report: Mapping[str, Any]) -> None:
    dry = report["dry_run"]
    verb = "would move" if dry else "moved"
    print(
        f"records changed before {report['records_changed_before']}, daily files dated before "
        f"{report['files_dated_before']} ({report['lookback_days']} days)"
    )
    if not report["targets"]:
        print("nothing to consolidate")
    for target in report["targets"]:
        records, moved = target["records"], target["files"]
        head = f"{target['memory_md']} ({target['scope']}): {verb} {len(records)} record(s), {len(moved)} daily file(s)"
        if not dry:
            head += f"; {target['entries_added']} entr{'y' if target['entries_added'] == 1 else 'ies'} added"
        print(head)
        for record_id in records:
            print(f"  record  {record_id}")
        for item in moved:
            print(f"  file    {item['from']} -> {item['to']}")
        for left in target.get("not_moved", []):
            print(f"  left    {left} (changed or gone meanwhile, or Memory.md was edited: run again)")
    skipped = report["skipped_records"]
    if skipped:
        print("records left out: " + ", ".join(f"{n} {why}" for why, n in skipped.items()))
    if report["skipped_files"]:
        print("daily files left out: " + ", ".join(f"{n} {why}" for why, n in report["skipped_files"].items()))
    if report["channel_files_left"]:
        print(f"channel daily files left alone (there is no channel Memory.md): {report['channel_files_left']}")
    if report["more_remaining"]:
        print("more remains than one run takes: run it again")
    if dry:
        print("dry run: nothing was changed")


# -- revisions ------------------------------------------------------------------------------------


def run_revisions(args: argparse.Namespace, config: Config) -> int:
    command = getattr(args, "revisions_command", None)
    if command == "list":
        if args.limit < 1:
            print("clawgate memory revisions list: --limit must be at least 1", file=sys.stderr)
            return 2
        return with_storage(config, functools.partial(_list, args))
    if command == "show":
        return with_storage(config, functools.partial(_show, args))
    if command == "undo":
        return with_storage(config, functools.partial(_undo, args))
    print("usage: clawgate memory revisions {list,show,undo} … (clawgate memory revisions --help)", file=sys.stderr)
    return 2


def revision_json(rev: Revision, *, full: bool = False) -> dict[str, Any]:
    out = rev.to_json()
    if full:
        out |= {"before": rev.before, "after": rev.after}
    return out


def _line(rev: Revision) -> str:
    batch = f"  batch {rev.batch}" if rev.batch else ""
    note = f"  {rev.note}" if rev.note else ""
    return (
        f"{rev.id:>7}  {rev.at:%Y-%m-%d %H:%M}Z  {rev.record_id}  r{rev.revision:<3} {rev.action:<9} {rev.actor}"
        f"{batch}{note}"
    )


def diff(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> list[str]:
    """The fields a revision changed, `- name: old` then `+ name: new` (JSON values); a creation
    shows every field as added."""
    lines = []
    for name in sorted(set(before or {}) | set(after)):
        if name in _BOOKKEEPING:
            continue
        old = None if before is None else before.get(name)
        new = after.get(name)
        if before is not None and old == new:
            continue
        if before is not None:
            lines.append(f"- {name}: {json.dumps(old, ensure_ascii=False)}")
        lines.append(f"+ {name}: {json.dumps(new, ensure_ascii=False)}")
    return lines


async def _list(args: argparse.Namespace, storage: Storage) -> int:

    found = await storage.revisions.list(record_id=args.record, limit=args.limit)
    for rev in found:
        if args.json:
            emit(json.dumps(revision_json(rev), ensure_ascii=False))
        else:
            print(_line(rev))
    if not found and not args.json:
        print("no revisions" + (f" of {args.record}" if args.record else ""))
    return 0


async def _show(args: argparse.Namespace, storage: Storage) -> int:

    rev = await storage.revisions.get(args.id)
    if rev is None:
        print(f"clawgate memory revisions show: no revision {args.id}", file=sys.stderr)
        return 1
    if args.json:
        emit(json.dumps(revision_json(rev, full=True), ensure_ascii=False))
        return 0
    when = f"{rev.at:%Y-%m-%d %H:%M:%S}Z"
    print(f"revision {rev.id}: {rev.record_id} r{rev.revision}, {rev.action} by {rev.actor} at {when}")
    if rev.batch:
        print(f"batch {rev.batch} (undoing any revision of it undoes the whole batch)")
    if rev.note:
        print(f"note: {rev.note}")
    print("--- before" if rev.before is not None else "--- (none: created here)")
    print("+++ after")
    for line in diff(rev.before, rev.after) or ["(no field changed)"]:
        print(line)
    return 0


async def _undo(args: argparse.Namespace, storage: Storage) -> int:
    from memory.records.store import RecordError

    try:
        undone = await storage.revisions.undo(args.id, CLI_ACTOR)
    except RecordError as exc:
        print(f"clawgate memory revisions undo: {exc}", file=sys.stderr)
        return 1
    restored = ", ".join(f"{r.id} (now r{r.revision}, {r.status.value})" for r in undone.records)
    if undone.batch is not None:
        print(f"undid batch {undone.batch} ({len(undone.records)} records): {restored}")
    else:
        print(f"undid revision {args.id}: {restored}")
    return 0
