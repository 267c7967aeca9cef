"""`clawgate memory show ID` and `clawgate memory review [show|ACTION] …`: one memory in full, and the
review queue with its actions (DESIGN §6), in the chat command's words.

Everything goes through gateway.session.memory_service, as `/memory review` and the console do, so the shell
cannot bypass a rule: the write-back filter on edits, scopes that only narrow, a revision for every
change. Without `--user` the operator acts (memory.trust.policy.OPERATOR: every record, personal ones too,
since whoever runs this can read the database anyway); with `--user` exactly that person does."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.cli.common import emit, limit_type, record_json, with_storage
from gateway.cli.users import resolve_user, unknown_user
from gateway.config.model import Config

if TYPE_CHECKING:
    from gateway.session.memory_service import MemoryService
    from memory.store.storage import Storage
    from memory.trust.policy import Actor, Where

DEFAULT_LIMIT = 20  # as many as `/memory review` lists
MAX_LIMIT = 100
REVISIONS_SHOWN = 10


@dataclass(frozen=True, slots=True)
class Action:
    help: str
    said: str  # what happened, before the result's describe() line: {id}, {arg} and {scope} filled in
    arg: str | None = None  # the metavar of what follows the id, if anything
    many_words: bool = False  # the rest of the line is one text (edit, supersede)


# The chat command's vocabulary (gateway.turn.commands.memory.REVIEW_ACTIONS); a test keeps them equal.
ACTIONS: dict[str, Action] = {
    "confirm": Action("confirm it: usable as an instruction from now on", "confirmed"),
    "edit": Action("replace its text (your edit confirms it, unless the text is flagged)", "edited", "TEXT", True),
    "evidence": Action("keep it as evidence only, never followed as an instruction", "now evidence only"),
    "scope": Action(
        "restrict its scope, only ever narrower: global > project:<name> > channel:<conversation> > personal:<user>",
        "moved to {scope}",
        "SCOPE",
    ),
    "stale": Action("mark it stale: out of date, and labelled so when recalled", "marked stale"),
    "merge": Action(
        "append OTHER_ID's text to it; OTHER_ID is then superseded by it (same scope only)",
        "merged {arg} into it",
        "OTHER_ID",
    ),
    "reject": Action("reject it: never recalled again", "rejected"),
    "dispute": Action("mark it disputed: never put in a prompt on its own", "disputed"),
    "supersede": Action(
        "replace it with a new memory of TEXT in the same scope", "superseded {id}; the new memory", "TEXT", True
    ),
    "undo": Action("undo its newest change (brings a forgotten memory back too)", "undone"),
}


def add_parsers(mem_sub: Any) -> None:
    show = mem_sub.add_parser("show", help="one memory in full, with its latest revisions")
    show.add_argument("id", metavar="ID")
    _who(show)
    review = mem_sub.add_parser(
        "review",
        help="the review queue: list it, show one, confirm, edit, evidence, scope, stale, merge, reject, "
        "dispute, supersede, undo",
        description="Without ACTION: what waits for review, newest first. Without --user, the operator's queue "
        "(every pending memory of every scope); with --user, what that person sees in /memory review. Every "
        "action goes through the same rules as /memory in chat and the console, and can be undone.",
    )
    _who(review)
    review.add_argument(
        "--limit",
        type=limit_type(MAX_LIMIT),
        default=DEFAULT_LIMIT,
        help=f"list at most this many (1-{MAX_LIMIT}, default {DEFAULT_LIMIT})",
    )
    verbs = review.add_subparsers(dest="review_command", metavar="ACTION")
    one = verbs.add_parser("show", help="one memory in full, and whether it can be reviewed")
    one.add_argument("id", metavar="ID")
    _who(one, suppress=True)
    for name, action in ACTIONS.items():
        verb = verbs.add_parser(name, help=action.help)
        verb.add_argument("id", metavar="ID")
        if action.arg is not None:
            verb.add_argument("arg", metavar=action.arg, nargs="+" if action.many_words else None)
        _who(verb, suppress=True)


def _who(parser: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """--user and --json, accepted before and after the action: an action's own copy sets them only
    when given, so it never undoes what was given before it."""
    user: Any = argparse.SUPPRESS if suppress else None
    as_json: Any = argparse.SUPPRESS if suppress else False
    parser.add_argument(
        "--user",
        metavar="USER_ID",
        default=user,
        help="act as this user, with their roles (default: the operator, who may review every memory)",
    )
    parser.add_argument("--json", action="store_true", default=as_json, help="print the record(s) as JSON")


def run_show(args: argparse.Namespace, config: Config) -> int:
    return _run("clawgate memory show", args, config, functools.partial(_show, review=False))


def run_review(args: argparse.Namespace, config: Config) -> int:
    verb = args.review_command
    if verb is None:
        return _run("clawgate memory review", args, config, _list)
    if verb == "show":
        return _run("clawgate memory review show", args, config, functools.partial(_show, review=True))
    return _run(f"clawgate memory review {verb}", args, config, functools.partial(_act, verb))


@dataclass(frozen=True, slots=True)
class Session:
    """Who acts, from where, through which service; `label` names them in messages."""

    command: str
    service: MemoryService
    actor: Actor
    where: Where
    label: str | None  # the user id; None for the operator
    storage: Storage  # for the revisions `show` lists, which the service does not offer


Work = Callable[[Session, argparse.Namespace], Awaitable[int]]


def _run(command: str, args: argparse.Namespace, config: Config, work: Work) -> int:
    if not config.memory.enabled:
        print(f"{command}: memory is turned off (memory.enabled: false)", file=sys.stderr)
        return 2

    async def main(storage: Storage) -> int:
        session = await _session(command, config, storage, args.user)
        if session is None:
            return 2
        return await work(session, args)

    return with_storage(config, main)


async def _session(command: str, config: Config, storage: Storage, user_id: str | None) -> Session | None:
    from gateway.config.load import secret_values
    from gateway.session.memory_service import MemoryService
    from memory.trust import policy

    service = MemoryService(config, storage.records, secret_values(config))
    where = service.where("personal", None)
    if user_id is None:
        return Session(command, service, policy.OPERATOR, where, None, storage)
    user = await resolve_user(config, storage, user_id)
    if user is None:
        print(f"{command}: {unknown_user(config, user_id)}", file=sys.stderr)
        return None
    return Session(command, service, policy.Actor(user.id, frozenset(user.roles), "cli"), where, user.id, storage)


def _missing(session: Session, record_id: str) -> int:
    seen = "" if session.label is None else f" that {session.label} can see"
    print(f"{session.command}: No memory {record_id.strip()}{seen}.", file=sys.stderr)
    return 1


# -- reading --------------------------------------------------------------------------------------


async def _list(session: Session, args: argparse.Namespace) -> int:
    from gateway.session.memory_service import describe

    found = await session.service.pending(session.actor, session.where, limit=args.limit + 1)
    shown = found[: args.limit]
    if args.json:
        emit(json.dumps([record_json(r, full=True) for r in shown], ensure_ascii=False, indent=2))
    else:
        for record in shown:  # a proposed change as a diff against the memory it would change
            print(describe(record, target=await session.service.target_of(session.actor, session.where, record)))
    if len(found) > len(shown):
        print(f"more wait for review than these {len(shown)}: --limit N shows more", file=sys.stderr)
    if not shown:
        whose = "" if session.label is None else f" {session.label}'s"
        print(f"nothing waits for{whose} review", file=sys.stderr)
    return 0


async def _show(session: Session, args: argparse.Namespace, *, review: bool) -> int:
    from gateway.session.memory_service import describe
    from memory.records.model import RecordStatus
    from memory.trust import policy

    # openable: what `get` returns, or a forgotten memory this actor could bring back with undo.
    record = await session.service.openable(session.actor, session.where, args.id)
    if record is None:
        return _missing(session, args.id)
    revisions = await session.storage.revisions.list(record_id=record.id, limit=REVISIONS_SHOWN + 1)
    if args.json:
        out = record_json(record, full=True)
        out["revisions"] = [rev.to_json() for rev in revisions[:REVISIONS_SHOWN]]
        emit(json.dumps(out, ensure_ascii=False, indent=2))
        return 0
    print(describe(record, long=True, target=await session.service.target_of(session.actor, session.where, record)))
    if record.status == RecordStatus.DELETED:
        # Undo reverts the newest change: it brings the record back only when that was the forget.
        back = revisions and revisions[0].action == "forget"
        print(f"forgotten: `clawgate memory review undo {record.id}` brings it back" if back else "forgotten")
    if revisions:
        print("revisions, newest first (clawgate memory revisions show REVISION):")
        for rev in revisions[:REVISIONS_SHOWN]:
            batch = f", batch {rev.batch}" if rev.batch else ""
            when = f"{rev.at:%Y-%m-%d %H:%M}Z"
            print(f"  r{rev.revision:<3} {when}  {rev.action:<9} by {rev.actor}  (revision {rev.id}{batch})")
        if len(revisions) > REVISIONS_SHOWN:
            print(f"  … older ones: clawgate memory revisions list --record {record.id}")
    if review:
        allowed = policy.can_review(session.actor, record)
        if allowed:
            print(f"review: clawgate memory review {{{','.join(ACTIONS)}}} {record.id}")
        else:
            print(f"{session.label or 'the operator'} may not review it: {allowed.reason}")
    return 0


# -- acting ---------------------------------------------------------------------------------------


async def _act(verb: str, session: Session, args: argparse.Namespace) -> int:
    from gateway.session.memory_service import MemoryRefused, describe
    from memory.records.model import RecordStatus

    raw = getattr(args, "arg", None)
    arg = " ".join(raw) if isinstance(raw, list) else (raw or "")
    try:
        record = await session.service.review(session.actor, session.where, verb, args.id, arg)
    except MemoryRefused as exc:
        print(f"{session.command}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        emit(json.dumps(record_json(record, full=True), ensure_ascii=False, indent=2))
    else:
        said = ACTIONS[verb].said.format(id=args.id.strip(), arg=arg.strip(), scope=record.scope)
        if record.status == RecordStatus.DELETED:  # only an undone creation ends there
            said = "undid its creation, so it is forgotten"
        print(f"{said}: {describe(record)}")
    return 0
