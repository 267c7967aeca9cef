"""`clawgate` command line: run the gateway, check the config, diagnose a deployment (doctor),
approve pairings, and the memory tools (gateway/cli_memory.py)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gateway import __version__, cli_memory, cli_migrate, cli_status
from gateway.cli_common import load_or_report
from gateway.config_load import default_config_path

if TYPE_CHECKING:
    pass


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="clawgate", description="Self-hosted AI chat gateway with trustworthy memory.")
    p.add_argument("--version", action="version", version=f"clawgate {__version__}")
    p.add_argument(
        "--config", type=Path, default=None, help="path to config.yaml (default: $CLAWGATE_CONFIG or ./config.yaml)"
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("run", help="start the gateway")
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
    cli_migrate.add_parser(sub)
    cli_memory.add_parsers(sub)
    cli_status.add_parsers(sub)
    return p


def _config_path(args: argparse.Namespace) -> Path:
    return args.config if args.config is not None else default_config_path()


def cmd_config_check(args: argparse.Namespace) -> int:
    path = _config_path(args)
    config = load_or_report(path)
    if config is None:
        return 2
    from gateway.doctor import config_summary

    print(f"{path}: OK ({config_summary(config)})")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from gateway import doctor

    if not 0 < args.timeout <= 300:
        print("clawgate doctor: --timeout must be more than 0 and at most 300 seconds", file=sys.stderr)
        return 2
    return doctor.main(_config_path(args), as_json=args.json, offline=args.offline, timeout=args.timeout)


def cmd_pairing(args: argparse.Namespace) -> int:
    from memory.storage import Storage

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
    from gateway import backup

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
    from gateway.app import Gateway

    path = _config_path(args)
    config = load_or_report(path)
    if config is None:
        print("The gateway did not start. Fix the problems above (clawgate config check).", file=sys.stderr)
        return 2
    gateway = Gateway(config, config_path=path)  # reloaded on SIGHUP or when the file changes
    try:
        asyncio.run(gateway.run_until_signal())
    except OSError as exc:
        print(f"clawgate: cannot start: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "run":
        return cmd_run(args)
    if args.command == "config" and args.config_command == "check":
        return cmd_config_check(args)
    if args.command == "doctor":
        return cmd_doctor(args)
    if args.command == "pairing" and args.pairing_command in ("list", "approve"):
        return cmd_pairing(args)
    if args.command in ("backup", "restore"):
        return cmd_backup(args)
    if args.command == "migrate-storage":
        return cli_migrate.run(args, _config_path(args))
    if args.command == "memory":
        return cli_memory.run(args, _config_path(args))
    if args.command in ("status", "jobs"):
        return cli_status.run(args, _config_path(args))
    parser.print_help()
    return 0 if args.command is None else 2
