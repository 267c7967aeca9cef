"""`clawgate` command line: run the gateway, check the config, approve pairings, search the archive."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway import __version__
from gateway.config_load import ConfigError, default_config_path, load_config

if TYPE_CHECKING:
    from memory.archive import ArchiveHit


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
    pairing = sub.add_parser("pairing", help="people waiting to talk to the assistant (dm_policy: pairing)")
    pairing_sub = pairing.add_subparsers(dest="pairing_command", metavar="SUBCOMMAND")
    pairing_sub.add_parser("list", help="list pending pairing requests")
    approve = pairing_sub.add_parser("approve", help="approve a pairing code")
    approve.add_argument("code")
    mem = sub.add_parser("memory", help="what the assistant remembers")
    mem_sub = mem.add_subparsers(dest="memory_command", metavar="SUBCOMMAND")
    search = mem_sub.add_parser("search", help="search archived conversation messages")
    search.add_argument("--archive", action="store_true", help="search the session archive (required for now)")
    search.add_argument("--user", metavar="USER_ID", help="only what this user may see (default: every session)")
    search.add_argument("--limit", type=int, default=10, help="at most this many hits (1-50, default 10)")
    search.add_argument("--json", action="store_true", help="print the hits as JSON")
    search.add_argument("query", nargs="+", metavar="QUERY")
    return p


def _config_path(args: argparse.Namespace) -> Path:
    return args.config if args.config is not None else default_config_path()


def cmd_config_check(args: argparse.Namespace) -> int:
    path = _config_path(args)
    try:
        config = load_config(path)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    agents = ", ".join(a.name for a in config.agents.list)
    model = config.agents.list[0].model or config.ai.model or "(none)"
    print(f"{path}: OK (agents: {agents}; model: {model}; channels: {', '.join(config.channels) or 'none'})")
    return 0


def cmd_pairing(args: argparse.Namespace) -> int:
    from memory.storage import Storage

    try:
        config = load_config(_config_path(args))
    except ConfigError as exc:
        print(exc, file=sys.stderr)
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


def cmd_memory_search(args: argparse.Namespace) -> int:
    from memory.archive import ArchiveStore
    from memory.storage import Storage

    if not args.archive:
        print(
            "clawgate memory search: only the session archive is searchable so far; add --archive "
            "(long-term memory search arrives with long-term memory)",
            file=sys.stderr,
        )
        return 2
    try:
        config = load_config(_config_path(args))
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2

    async def run() -> int:
        storage = await Storage.open(config.storage.resolved_database_url)
        try:
            hits = await ArchiveStore(storage.db).search(" ".join(args.query), user_id=args.user, limit=args.limit)
        finally:
            await storage.close()
        if args.json:
            print(json.dumps([_hit_json(h) for h in hits], ensure_ascii=False, indent=2))
            return 0
        for h in hits:
            who = f"{h.role} ({h.author})" if h.author else h.role
            print(f"[{h.session_key}] {h.created_at:%Y-%m-%d %H:%M}Z {who}: {h.snippet}")
            print(f"  id {h.id}  score {h.score:.3g}")
        if not hits:
            print("no archived messages match")
        return 0

    return asyncio.run(run())


def _hit_json(hit: ArchiveHit) -> dict[str, Any]:
    out = dataclasses.asdict(hit)
    out["created_at"] = hit.created_at.isoformat()
    out["archived_at"] = hit.archived_at.isoformat()
    return out


def cmd_run(args: argparse.Namespace) -> int:
    from gateway.app import Gateway

    path = _config_path(args)
    try:
        config = load_config(path)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        print("The gateway did not start. Fix the problems above (clawgate config check).", file=sys.stderr)
        return 2
    gateway = Gateway(config)
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
    if args.command == "pairing" and args.pairing_command in ("list", "approve"):
        return cmd_pairing(args)
    if args.command == "memory" and args.memory_command == "search":
        return cmd_memory_search(args)
    parser.print_help()
    return 0 if args.command is None else 2
