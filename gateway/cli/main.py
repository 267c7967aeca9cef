"""`clawgate` command line: run the gateway and ask it to reload its config, check the config,
diagnose a deployment (doctor), approve pairings, and the memory tools (gateway/cli/memory.py)."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gateway import __version__
from gateway.cli import memory as cli_memory
from gateway.cli import migrate as cli_migrate
from gateway.cli import schedules as cli_schedules
from gateway.cli import status as cli_status
from gateway.cli.common import data_dir_of, load_or_report, report
from gateway.config.load import default_config_path

RELOAD_WAIT_SECONDS = 10.0  # how long `clawgate reload` waits for the gateway's outcome
# An outcome of the gateway's own file watch this recent counts as the answer to `clawgate reload`
# (an operator saves, then asks; the watch may have been quicker).
NOTICED_SECONDS = 30.0

Outcome = dict[str, Any]  # a reload's outcome as the gateway wrote it (gateway/reload.py, Outcome.to_json)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="clawgate", description="Self-hosted AI chat gateway with trustworthy memory.")
    p.add_argument("--version", action="version", version=f"clawgate {__version__}")
    p.add_argument(
        "--config", type=Path, default=None, help="path to config.yaml (default: $CLAWGATE_CONFIG or ./config.yaml)"
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("run", help="start the gateway")
    reload = sub.add_parser(
        "reload",
        help="ask the running gateway to reload config.yaml and say what happened (exit 1: refused or failed)",
        description="Sends SIGHUP to the gateway running on this config (found by clawgate.pid in its "
        "storage.data_dir) and waits for the outcome: applied, unchanged, waiting for a restart, refused or "
        "failed. A file that takes every user, every token or the model away is refused. Exit 0 when the "
        "file is in force, 1 when it was refused or failed, 2 when no gateway runs or the config cannot be read.",
    )
    reload.add_argument(
        "--force",
        action="store_true",
        help="apply the file even when it takes every user, token or the model away (SIGUSR1); "
        "a file with errors is never applied",
    )
    cfg = sub.add_parser("config", help="configuration tools")
    cfg_sub = cfg.add_subparsers(dest="config_command", metavar="SUBCOMMAND")
    cfg_sub.add_parser("check", help="validate config.yaml and list every problem")
    doctor = sub.add_parser(
        "doctor",
        help="check config, database, disk, recall, channels and models; a fix for each problem (exit 1: one failed)",
        description="Named checks, each ok, info, warn, fail or skip (what it needs is broken), with a fix "
        "for each problem. Reads only: it neither migrates the database nor loads the embedding model; it asks "
        "each channel's platform and each model once (one output token), unless --offline.",
    )
    doctor.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    doctor.add_argument("--offline", action="store_true", help="ask no chat platform and no model (local checks only)")
    doctor.add_argument(
        "--timeout", type=float, default=5.0, metavar="SECONDS", help="for each platform and model asked (default: 5)"
    )
    pairing = sub.add_parser("pairing", help="people waiting to talk to the assistant (dm_policy: pairing)")
    pairing_sub = pairing.add_subparsers(dest="pairing_command", metavar="SUBCOMMAND")
    pairing_sub.add_parser("list", help="list pending pairing requests")
    approve = pairing_sub.add_parser("approve", help="approve a pairing code")
    approve.add_argument("code")
    backup = sub.add_parser(
        "backup",
        help="write the database and the memory files to one archive (the gateway may keep running)",
    )
    backup.add_argument(
        "--output", type=Path, default=None, help="the archive (default: ./clawgate-backup-<time>.tar.gz)"
    )
    restore = sub.add_parser(
        "restore",
        help="put a backup in place (stop the gateway first); existing data is moved aside, never deleted",
    )
    restore.add_argument("archive", type=Path)
    restore.add_argument(
        "--force", action="store_true", help="replace existing data (it is kept in before-restore-<time>/)"
    )
    # Its flags are read by gateway/cli/onboard.py, imported only when it runs (`onboard --help` lists them).
    sub.add_parser(
        "onboard", add_help=False, help="write a first config.yaml and .env, then run the doctor (--help: flags)"
    )
    cli_migrate.add_parser(sub)
    cli_memory.add_parsers(sub)
    cli_status.add_parsers(sub)
    cli_schedules.add_parsers(sub)
    _global_options_everywhere(p, ["--config"])
    return p


def _global_options_everywhere(parser: argparse.ArgumentParser, names: list[str]) -> None:
    """Let each global option (`--config`) also follow any subcommand: `clawgate run --config my.yaml`
    as well as `clawgate --config my.yaml run`. A subcommand's copy has no default, so it sets the
    value only when given there (and, given in both places, the later one wins)."""
    shared = [a for a in parser._actions if set(a.option_strings) & set(names)]
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for sub in action.choices.values():
            for option in shared:
                if not any(set(a.option_strings) & set(option.option_strings) for a in sub._actions):
                    sub.add_argument(
                        *option.option_strings, type=option.type, default=argparse.SUPPRESS, help=option.help
                    )
            _global_options_everywhere(sub, names)


def _config_path(args: argparse.Namespace) -> Path:
    return args.config if args.config is not None else default_config_path()


def cmd_config_check(args: argparse.Namespace) -> int:
    path = _config_path(args)
    config = load_or_report(path)
    if config is None:
        return 2
    from gateway.doctor.checks import config_summary

    print(f"{path}: OK ({config_summary(config)})")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from gateway.doctor import report as doctor

    if not 0 < args.timeout <= 300:
        print("clawgate doctor: --timeout must be more than 0 and at most 300 seconds", file=sys.stderr)
        return 2
    return doctor.main(_config_path(args), as_json=args.json, offline=args.offline, timeout=args.timeout)


def cmd_pairing(args: argparse.Namespace) -> int:
    from memory.store.storage import Storage

    config = load_or_report(_config_path(args))
    if config is None:
        return 2

    async def run() -> int:
        storage = await Storage.open(config.storage.resolved_database_url)
        try:
            if args.pairing_command == "approve":
                req = await storage.pairing.approve(args.code, "cli")
                if req is None:
                    print(f"no pairing request has the code {args.code}", file=sys.stderr)
                    return 1
                print(f"approved {req.identity} ({req.display_name or 'no name'}) on {req.channel}")
                return 0
            pending = await storage.pairing.pending()
            for p in pending:
                print(f"{p.code}  {p.identity}  {p.display_name or '-'}  {p.channel}  {p.created_at:%Y-%m-%d %H:%M}Z")
            if not pending:
                print("no pending pairing requests")
            return 0
        finally:
            await storage.close()

    return asyncio.run(run())


def cmd_backup(args: argparse.Namespace) -> int:
    from gateway.cli import backup

    config = load_or_report(_config_path(args))
    if config is None:
        return 2
    try:
        if args.command == "backup":
            made = backup.backup(config, args.output)
            print(
                f"wrote {made.path}: the database (schema {made.schema_revision or 'unknown'}, "
                f"{made.database_bytes:,} bytes) and {made.memory_files} memory files"
            )
            return 0
        done, aside = backup.restore(config, args.archive, force=args.force)
    except backup.BackupError as exc:
        print(f"clawgate {args.command}: {exc}", file=sys.stderr)
        return 1
    schema = done.schema_revision or "unknown"
    print(f"restored {done.path}: the database (schema {schema}) and {done.memory_files} memory files")
    if aside is not None:
        print(f"what was there before is in {aside}")
    print("start the gateway: it brings an older schema up to date by itself")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from gateway import preflight
    from gateway.app import Gateway

    path = _config_path(args)
    config = load_or_report(path)
    if config is None:
        print("The gateway did not start. Fix the problems above (clawgate config check).", file=sys.stderr)
        return 2
    problems = preflight.storage_problems(config)
    if problems:
        report(str(path), problems)
        print("The gateway did not start. Fix the problems above, then start it again.", file=sys.stderr)
        return 2
    gateway = Gateway(config, config_path=path, own_process=True)  # reloaded on SIGHUP or when the file changes
    try:
        asyncio.run(gateway.run_until_signal())
    except KeyboardInterrupt:
        pass
    except Exception as exc:
        # What the checks above cannot see: a database server that refuses, a database that
        # turned read-only meanwhile. Said in one line with its fix, never as a traceback.
        problem = preflight.storage_failure(exc, config, opening=gateway.storage is None)
        if problem is not None:
            report(str(path), [problem])
            print("The gateway did not start. Fix the problem above, then start it again.", file=sys.stderr)
            return 2
        if isinstance(exc, OSError):
            print(f"clawgate: cannot start: {exc}", file=sys.stderr)
            return 1
        raise
    return 0


def cmd_reload(args: argparse.Namespace) -> int:
    from gateway.reload_files import running_gateway

    path = _config_path(args)
    found = data_dir_of(path)
    if found is None:
        return 2
    data_dir, loaded = found
    running = running_gateway(data_dir)
    pid = running.pid
    if pid is None:
        return _no_gateway(path, running.why_not, None if loaded else data_dir)
    sig, trigger = (signal.SIGUSR1, "sigusr1") if args.force else (signal.SIGHUP, "sighup")
    asked = datetime.now(UTC)
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return _no_gateway(path, f"process {pid} ended just now", None if loaded else data_dir)
    except PermissionError:
        print(
            f"clawgate reload: the gateway (process {pid}) runs as another user: run clawgate reload as that user",
            file=sys.stderr,
        )
        return 2
    found_outcome = _wait_for_outcome(data_dir, trigger, asked)
    if found_outcome is None:
        print(
            f"clawgate reload: the gateway (process {pid}) reported no outcome within {RELOAD_WAIT_SECONDS:g} s; "
            "its log says what happened (the config_reload_* lines)",
            file=sys.stderr,
        )
        return 1
    outcome, before = found_outcome
    if before is not None and outcome.get("result") == "unchanged" and _same_file(before, outcome, asked):
        outcome = before  # the gateway noticed the edit by itself a moment before it was asked
    code, lines = describe_outcome(outcome, path)
    print("\n".join(lines), file=sys.stdout if code == 0 else sys.stderr)
    return code


def _no_gateway(path: Path, why: str, guessed: Path | None) -> int:
    print(f"clawgate reload: no gateway is running for {path}: {why}", file=sys.stderr)
    if guessed is not None:
        print(
            f"note: {path} does not load (clawgate config check says why), so its storage.data_dir may not be "
            f"the running gateway's: looked in {guessed}",
            file=sys.stderr,
        )
    print(f"start one with: clawgate --config {path} run", file=sys.stderr)
    return 2


def _wait_for_outcome(data_dir: Path, trigger: str, asked: datetime) -> tuple[Outcome, Outcome | None] | None:
    """The first outcome of a reload by `trigger` that finished after `asked`, and the outcome
    of the reload before it, once the gateway has written them; None after RELOAD_WAIT_SECONDS."""
    from gateway.reload_files import read_outcomes

    give_up = time.monotonic() + RELOAD_WAIT_SECONDS
    while True:
        outcomes = read_outcomes(data_dir)
        for i, outcome in enumerate(outcomes):
            if outcome.get("trigger") == trigger and _after(outcome.get("at"), asked):
                return outcome, outcomes[i - 1] if i else None
        if time.monotonic() >= give_up:
            return None
        time.sleep(0.1)


def _same_file(before: Outcome, outcome: Outcome, asked: datetime) -> bool:
    """Did the reload `before`, just before `asked`, apply the very file that `outcome` then found
    unchanged?"""
    return (
        before.get("result") in ("applied", "waiting_for_restart")
        and outcome.get("file_sha256") is not None
        and before.get("file_sha256") == outcome.get("file_sha256")
        and _after(before.get("at"), asked - timedelta(seconds=NOTICED_SECONDS))
    )


def _after(at: object, asked: datetime) -> bool:
    try:
        return isinstance(at, str) and datetime.fromisoformat(at) > asked
    except ValueError:
        return False


def describe_outcome(outcome: Outcome, path: Path) -> tuple[int, list[str]]:
    """A reload's outcome in plain words, and the exit code it means."""
    result = outcome.get("result")
    changed = ", ".join(outcome.get("changed") or [])
    restart = ", ".join(outcome.get("restart") or [])
    forced = " (forced)" if outcome.get("forced") else ""
    if result == "applied":
        lines = [f"applied{forced}: {path} is in force (changed: {changed})"]
        if restart:
            lines.append(f"waiting for a restart: {restart} (until then the gateway runs as before)")
        return 0, lines
    if result == "waiting_for_restart":
        return 0, [f"waiting for a restart: {restart} (until then the gateway runs as before; nothing else changed)"]
    if result == "unchanged":
        return 0, [f"unchanged: the gateway already runs on what {path} says"]
    if result == "refused":
        reason = outcome.get("reason") or "no reason given"
        return 1, [
            f"refused: {reason}",
            "the gateway keeps its last good config; run `clawgate reload --force` to apply it anyway",
        ]
    if result == "failed":
        errors = [str(e) for e in outcome.get("errors") or []]
        lines = [f"failed: {path} was not applied, {len(errors)} problem(s):", *(f"  - {e}" for e in errors)]
        return 1, [*lines, "the gateway keeps its last good config"]
    return 1, [f"the gateway answered {result!r}, which this clawgate does not know"]


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    parser = _parser()
    args, rest = parser.parse_known_args(argv)  # the rest: onboard's own flags
    if rest and args.command != "onboard":
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "run":
        return cmd_run(args)
    if args.command == "reload":
        return cmd_reload(args)
    if args.command == "config" and args.config_command == "check":
        return cmd_config_check(args)
    if args.command == "doctor":
        return cmd_doctor(args)
    if args.command == "pairing" and args.pairing_command in ("list", "approve"):
        return cmd_pairing(args)
    if args.command in ("backup", "restore"):
        return cmd_backup(args)
    if args.command == "onboard":
        from gateway.cli import onboard

        return onboard.main(rest, _config_path(args))
    if args.command == "migrate-storage":
        return cli_migrate.run(args, _config_path(args))
    if args.command == "memory":
        return cli_memory.run(args, _config_path(args))
    if args.command in ("status", "jobs"):
        return cli_status.run(args, _config_path(args))
    if args.command == "schedules":
        return cli_schedules.run(args, _config_path(args))
    parser.print_help()
    return 0 if args.command is None else 2
