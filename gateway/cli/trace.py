"""`clawgate memory trace SESSION` and `clawgate memory preset add|list|approve|remove`: the recall
traces of a session's turns, and the tool presets a failed tool call offers the model.

The operator at the shell sees every trace of a session (with the user and event of each turn) and
manages presets as an administrator would: a preset added here is approved at once."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from gateway.cli.common import emit, with_storage
from gateway.config.load import secret_values
from gateway.config.model import Config

if TYPE_CHECKING:
    from memory.store.storage import Storage

DEFAULT_LIMIT = 10
CLI_AUTHOR = "cli"


def add_parsers(mem_sub: Any) -> None:
    from memory.store.traces import MAX_LIMIT

    trace = mem_sub.add_parser("trace", help="the recall traces of a session's turns, newest first")
    trace.add_argument(
        "session",
        metavar="SESSION",
        help="the session key, as logs name it (session=…), e.g. web:dm:alice or telegram:group:-100123",
    )
    trace.add_argument("--json", action="store_true", help="print the traces as JSON")
    trace.add_argument(
        "--limit", type=int, default=DEFAULT_LIMIT, help=f"at most this many (default {DEFAULT_LIMIT}, max {MAX_LIMIT})"
    )
    preset = mem_sub.add_parser("preset", help="tool presets offered to the model when a tool call fails")
    verbs = preset.add_subparsers(dest="preset_command", metavar="ACTION")
    add = verbs.add_parser("add", help="save an approved preset")
    add.add_argument("tool", metavar="TOOL", help="the tool's name, as the model calls it")
    add.add_argument("name", metavar="NAME", help="a short name for the preset (one word)")
    add.add_argument("arguments", metavar="JSON", help='the arguments, one JSON object, e.g. \'{"query": "deploy"}\'')
    add.add_argument("--note", help="when to use it (one line)")
    listing = verbs.add_parser("list", help="list presets (approved and proposed)")
    listing.add_argument("--tool", help="only this tool's")
    listing.add_argument("--json", action="store_true", help="print the presets as JSON")
    approve = verbs.add_parser("approve", help="approve a proposed preset")
    approve.add_argument("id", metavar="ID")
    remove = verbs.add_parser("remove", help="remove a preset")
    remove.add_argument("id", metavar="ID")


def run_trace(args: argparse.Namespace, config: Config) -> int:
    from gateway.recall.trace import render, trace_json
    from memory.store.traces import MAX_LIMIT, TraceStore

    if not 1 <= args.limit <= MAX_LIMIT:
        print(f"clawgate memory trace: --limit must be from 1 to {MAX_LIMIT}", file=sys.stderr)
        return 2
    session = args.session.strip()
    if not session:
        print("clawgate memory trace: SESSION must not be empty", file=sys.stderr)
        return 2

    async def work(storage: Storage) -> int:
        views = await TraceStore(storage.db).recent(session_key=session, limit=args.limit)
        if args.json:
            emit(json.dumps([trace_json(v) for v in views], ensure_ascii=False, indent=2))
        elif views:
            print(render(views, operator=True))
        else:
            print(f"no recall traces for session {session!r} (kept 30 days; only memory-backed turns)", file=sys.stderr)
        return 0

    return with_storage(config, work)


def run_preset(args: argparse.Namespace, config: Config) -> int:
    from memory.store.presets import PresetError, PresetStore

    verb = args.preset_command
    if verb is None:
        print(
            "usage: clawgate memory preset {add,list,approve,remove} … (clawgate memory preset --help)", file=sys.stderr
        )
        return 2
    arguments: Any = None
    if verb == "add":
        try:
            arguments = json.loads(args.arguments)
        except json.JSONDecodeError as exc:
            print(
                f"clawgate memory preset add: JSON is not valid JSON: {exc.msg} at character {exc.pos + 1}",
                file=sys.stderr,
            )
            return 2

    async def work(storage: Storage) -> int:
        store = PresetStore(storage.db, secret_values(config))
        if verb == "add":
            try:
                saved = await store.add(
                    args.tool, args.name, arguments, args.note, created_by=CLI_AUTHOR, approved=True
                )
            except PresetError as exc:
                print(f"clawgate memory preset add: {exc}", file=sys.stderr)
                return 2
            print(f"saved {saved.id} ({saved.tool}/{saved.name}), approved")
            return 0
        if verb == "list":
            found = await store.list(tool=args.tool, limit=500)
            if args.json:
                emit(json.dumps([p.to_json() for p in found], ensure_ascii=False, indent=2))
                return 0
            for p in found:
                state = "approved" if p.approved else f"proposed by {p.created_by}"
                note = f"  # {p.note}" if p.note else ""
                print(
                    f"{p.id}  {p.tool}/{p.name}  {json.dumps(dict(p.arguments), ensure_ascii=False)}  [{state}]{note}"
                )
            if not found:
                print("no tool presets", file=sys.stderr)
            return 0
        done = await (store.approve(args.id) if verb == "approve" else store.remove(args.id))
        if done is None:
            print(f"clawgate memory preset {verb}: no preset {args.id!r}", file=sys.stderr)
            return 1
        print(f"{'approved' if verb == 'approve' else 'removed'} {done.id} ({done.tool}/{done.name})")
        return 0

    return with_storage(config, work)
