"""`clawgate migrate-storage --to URL`: its arguments, progress and report (the copy itself is
gateway/cli/migrate_storage.py)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import IO, Any

from gateway.cli.common import load_or_report
from gateway.cli.migrate_ends import USAGE, MigrateError
from gateway.cli.migrate_storage import BATCH, Summary, migrate


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "migrate-storage",
        help="copy the SQLite database into an empty PostgreSQL database (stop the gateway first)",
        description="Copies every table of the configured SQLite database into an empty PostgreSQL database "
        "in one transaction, and verifies the copy. The memory Markdown files stay in storage.data_dir.",
    )
    p.add_argument(
        "--to",
        required=True,
        metavar="URL",
        help="the target, e.g. postgresql+asyncpg://clawgate@db/clawgate (leave the password out: set PGPASSWORD)",
    )
    p.add_argument("--batch-size", type=int, default=BATCH, help=f"rows per batch (default {BATCH})")


class _StderrProgress:
    """One line per table, rewritten in place on a terminal as its batches go."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.tty = stream.isatty()

    def __call__(self, table: str, done: int, total: int) -> None:
        line = f"  {table:<20} {done:>10,} / {total:,} rows"
        if self.tty:
            self.stream.write("\r" + line + ("\n" if done >= total else ""))
        elif done >= total:
            self.stream.write(line + "\n")
        self.stream.flush()


def report(summary: Summary, memory_dir: Path, out: IO[str]) -> None:
    """What was copied, what stayed, and what to do next (the password never shown)."""
    w = out.write
    if summary.source_was is not None:
        w(f"brought the source from schema {summary.source_was} to {summary.revision} first\n")
    w(
        f"copied {summary.rows:,} rows in {len(summary.tables)} tables from {summary.source} to {summary.target} "
        f"(schema {summary.revision}) in {summary.seconds:.1f} s\n"
        "verified: every table has as many rows as the source and the same content (a checksum of every row)\n"
        f"moved {summary.sequences} id sequences past the copied ids\n"
    )
    if summary.vector_indexes:
        w(f"built {summary.vector_indexes} HNSW vector indexes and the planner's statistics\n")
    for t in summary.tables:
        notes = [f"computed by PostgreSQL: {', '.join(t.computed)}"] if t.computed else []
        notes += [f"left to their default: {', '.join(t.defaulted)}"] if t.defaulted else []
        w(f"  {t.name:<20} {t.rows:>10,}{'  (' + '; '.join(notes) + ')' if notes else ''}\n")
    if summary.full_text:
        w(f"not copied: SQLite's full-text indexes ({', '.join(summary.full_text)}); PostgreSQL indexes the text\n")
    if summary.not_copied:
        w(f"not copied, not part of clawgate's schema: {', '.join(summary.not_copied)}\n")
    w(f"the memory files stay where they are ({memory_dir}): they are files, not rows; keep storage.data_dir\n")
    w(f'next: in config.yaml set  storage.database_url: "{summary.target}"\n')
    if "***" in summary.target:
        w("      (the real password where *** stands, or better ${CLAWGATE_DB_PASSWORD} from the environment)\n")
    else:
        w("      (no password in the URL: the gateway, like this command, takes it from PGPASSWORD or ~/.pgpass)\n")
    w("      then start the gateway (clawgate run); clawgate doctor checks the new database\n")
    w(f"the SQLite database is left as it was ({summary.source}): keep it until you are happy with the move\n")


def run(args: argparse.Namespace, config_path: Path) -> int:
    config = load_or_report(config_path)
    if config is None:
        return USAGE
    try:
        summary = asyncio.run(
            migrate(
                config.storage.resolved_database_url,
                args.to,
                batch=args.batch_size,
                progress=_StderrProgress(sys.stderr),
            )
        )
    except MigrateError as error:
        print(f"clawgate migrate-storage: {error}", file=sys.stderr)
        return error.exit_code
    report(summary, config.storage.data_dir / "memory", sys.stdout)
    return 0
