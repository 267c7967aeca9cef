"""`clawgate memory …`: import and export long-term memories, embed what recall searches, search what a
person could recall (gateway/cli/search.py), show and review memories (gateway/cli/review.py). The
operator at the shell runs these, but a search `--user` answers exactly as the gateway would answer
that person: the same policy, the same filters."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from gateway.cli import consolidate as cli_consolidate
from gateway.cli import review as cli_review
from gateway.cli import search as cli_search
from gateway.cli import trace as cli_trace
from gateway.cli.common import json_stdout, load_or_report, record_json, with_storage
from gateway.config.model import Config

if TYPE_CHECKING:
    from memory.embed.embeddings import Embedder
    from memory.store.storage import Storage

MAX_IMPORT_ERRORS_SHOWN = 20
IMPORT_FIELDS = frozenset({"content", "memory_class", "created_at", "source"})
# What `export` writes besides those: accepted and ignored on import (the import decides them anew).
EXPORT_ONLY_FIELDS = frozenset({"id", "scope", "provenance", "use_policy", "review_status"})
PAGE = 200
BACKFILL_BATCH = 256  # items per committed transaction (the local model encodes them 64 at a time)
PROGRESS_EVERY_TTY = 0.2  # seconds between redraws of the progress line on a terminal
PROGRESS_EVERY_LOG = 5.0  # seconds between progress lines otherwise (a log, a pipe)


def add_parsers(sub: Any) -> None:
    mem = sub.add_parser("memory", help="what the assistant remembers")
    mem_sub = mem.add_subparsers(dest="memory_command", metavar="SUBCOMMAND")
    cli_search.add_parser(mem_sub)
    cli_review.add_parsers(mem_sub)
    cli_trace.add_parsers(mem_sub)
    cli_consolidate.add_parsers(mem_sub)
    imp = mem_sub.add_parser("import", help="import memories from a JSONL file (all or nothing)")
    imp.add_argument("file", type=Path, metavar="FILE.jsonl")
    imp.add_argument("--scope", required=True, help="personal:<user>, channel:<conversation>, project:<name> or global")
    exp = mem_sub.add_parser("export", help="export long-term memories as JSONL")
    exp.add_argument("--scope", help="only this scope (default: every scope)")
    exp.add_argument("--output", type=Path, help="write to this file instead of standard output")
    backfill = mem_sub.add_parser(
        "backfill-embeddings",
        help="embed every memory, archived message and daily chunk missing a vector for the active model",
    )
    backfill.add_argument("--force", action="store_true", help="re-embed everything, not only what is missing")
    backfill.add_argument(
        "--batch", type=int, default=BACKFILL_BATCH, help=f"items per committed batch (default {BACKFILL_BATCH})"
    )


def run(args: argparse.Namespace, config_path: Path) -> int:
    handlers: dict[str, Callable[[argparse.Namespace, Config], int]] = {
        "search": cli_search.run,
        "show": cli_review.run_show,
        "review": cli_review.run_review,
        "import": _import,
        "export": _export,
        "backfill-embeddings": _backfill,
        "trace": cli_trace.run_trace,
        "preset": cli_trace.run_preset,
        "consolidate": cli_consolidate.run_consolidate,
        "revisions": cli_consolidate.run_revisions,
    }
    handler = handlers.get(args.memory_command or "")
    if handler is None:
        print(
            "usage: clawgate memory {search,show,review,import,export,backfill-embeddings,trace,preset,consolidate,"
            "revisions} … "
            "(clawgate memory --help)",
            file=sys.stderr,
        )
        return 2
    config = load_or_report(config_path)
    if config is None:
        return 2
    with json_stdout(getattr(args, "json", False)):
        return handler(args, config)


# -- import / export --------------------------------------------------------------------------------


def parse_import(lines: list[str], scope: Any, secrets: list[str]) -> tuple[list[Any], list[str]]:
    """(new records, errors as "line N: reason"). Every line is checked before anything is written."""
    from memory.records.fields import NewRecord
    from memory.records.model import MemoryClass, Provenance, ReviewStatus
    from memory.trust import policy, writeback

    items: list[NewRecord] = []
    errors: list[str] = []
    use, review, default_class = policy.trust_defaults(Provenance.IMPORTED, True, scope, False)
    for n, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            errors.append(f"line {n}: not JSON ({exc.msg})")
            continue
        if not isinstance(obj, dict):
            errors.append(f"line {n}: expected a JSON object")
            continue
        unknown = set(obj) - IMPORT_FIELDS - EXPORT_ONLY_FIELDS
        if unknown:
            errors.append(f"line {n}: unknown field(s) {', '.join(sorted(unknown))}")
            continue
        content = obj.get("content")
        if not isinstance(content, str) or not content.strip():
            errors.append(f"line {n}: `content` (a non-empty string) is required")
            continue
        try:
            memory_class = MemoryClass(obj.get("memory_class") or default_class)
        except ValueError:
            errors.append(f"line {n}: memory_class must be one of {', '.join(c.value for c in MemoryClass)}")
            continue
        created = None
        if obj.get("created_at") is not None:
            try:
                created = datetime.fromisoformat(str(obj["created_at"]))
            except ValueError:
                errors.append(f"line {n}: created_at is not ISO-8601")
                continue
            created = created if created.tzinfo else created.replace(tzinfo=UTC)
        source = obj.get("source")
        if source is not None and not isinstance(source, str):
            errors.append(f"line {n}: source must be a string")
            continue
        verdict = writeback.check(content, extra_secrets=secrets, sourced=source is not None)
        if verdict.action == "refuse":
            errors.append(f"line {n}: refused: {'; '.join(verdict.reasons)}")
            continue
        flagged = verdict.action == "flag"
        items.append(
            NewRecord(
                content=writeback.clean(content),
                memory_class=memory_class,
                provenance=Provenance.IMPORTED,
                use_policy=use if not flagged else dataclasses.replace(use, can_use_as_instruction=False),
                scope=scope,
                author="import",
                review_status=review if not flagged else ReviewStatus.PENDING,
                sensitivity="sensitive" if flagged else "normal",
                source=source,
                origin_audience="personal",
                created_at=created,
            )
        )
    return items, errors


def _import(args: argparse.Namespace, config: Config) -> int:
    from gateway.config.load import secret_values
    from memory.records.model import Scope, ScopeKind
    from memory.trust.policy import Actor, Where, WriteAccess, can_write

    try:
        scope = Scope.parse(args.scope)
    except ValueError as exc:
        print(f"clawgate memory import: {exc}", file=sys.stderr)
        return 2
    try:
        lines = args.file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        print(f"clawgate memory import: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    # The operator imports as an administrator, or as the owner for a personal scope.
    owner = scope.name if scope.kind == ScopeKind.PERSONAL else None
    actor = Actor(owner, frozenset({"admin"}), "import")
    allowed = can_write(
        actor, scope, Where("team", scope.name if scope.kind == ScopeKind.CHANNEL else None), WriteAccess()
    )
    if not allowed:
        print(f"clawgate memory import: {allowed.reason}", file=sys.stderr)
        return 2
    items, errors = parse_import(lines, scope, secret_values(config))
    if errors:
        print(f"{args.file}: {len(errors)} problem(s); nothing was imported:", file=sys.stderr)
        for e in errors[:MAX_IMPORT_ERRORS_SHOWN]:
            print(f"  - {e}", file=sys.stderr)
        if len(errors) > MAX_IMPORT_ERRORS_SHOWN:
            print(f"  … and {len(errors) - MAX_IMPORT_ERRORS_SHOWN} more", file=sys.stderr)
        return 2
    print(f"{args.file}: {len(items)} memories checked; importing into {scope} …", file=sys.stderr)

    async def work(storage: Storage) -> int:
        started = time.perf_counter()
        ids = await storage.records.import_batch(items)  # one transaction: all or nothing
        print(f"imported {len(ids)} memories into {scope} in {time.perf_counter() - started:.1f} s")
        if ids and config.memory.dedupe.enabled:  # compared with what the scope held, by the gateway's jobs
            from gateway.session.adjudicate import queue_import

            job = await queue_import(storage.jobs, ids, actor)
            print(f"the gateway compares them with what {scope} held before: job {job}", file=sys.stderr)
        return 0

    return with_storage(config, work)


def _export(args: argparse.Namespace, config: Config) -> int:
    from memory.records.model import Scope

    try:
        scopes = [str(Scope.parse(args.scope))] if args.scope else None
    except ValueError as exc:
        print(f"clawgate memory export: {exc}", file=sys.stderr)
        return 2

    async def work(storage: Storage) -> int:
        out = args.output.open("w", encoding="utf-8") if args.output else sys.stdout
        count, offset = 0, 0
        try:
            while True:
                page = await storage.records.list(scopes=scopes, limit=PAGE, offset=offset)
                for record in page:
                    out.write(json.dumps(record_json(record), ensure_ascii=False) + "\n")
                count += len(page)
                offset += len(page)
                if len(page) < PAGE:
                    break
        finally:
            if args.output:
                out.close()
        print(f"exported {count} memories", file=sys.stderr)
        return 0

    return with_storage(config, work)


# -- backfill-embeddings ----------------------------------------------------------------------------


class Progress:
    """done/total, items/s and ETA on stderr: one line redrawn in place on a terminal, a plain line
    every PROGRESS_EVERY_LOG seconds otherwise (so a log file is not flooded)."""

    def __init__(self, total: int, stream: TextIO, clock: Callable[[], float] = time.monotonic) -> None:
        self.total = total
        self.done = 0
        self._stream = stream
        self._clock = clock
        self._tty = stream.isatty()
        self._started = clock()
        self._shown = float("-inf")

    def rate(self) -> float:
        elapsed = self._clock() - self._started
        return self.done / elapsed if elapsed > 0 else 0.0

    def line(self) -> str:
        total = max(self.total, self.done)  # texts changed while we ran can add to the estimate
        rate = self.rate()
        eta = f"{(total - self.done) / rate:,.0f} s" if rate > 0 else "?"
        pct = 100.0 * self.done / total if total else 100.0
        return f"embedded {self.done:,}/{total:,} ({pct:.0f}%)  {rate:,.1f} items/s  ETA {eta}"

    def advance(self, n: int, force: bool = False) -> None:
        self.done += n
        now = self._clock()
        if not force and now - self._shown < (PROGRESS_EVERY_TTY if self._tty else PROGRESS_EVERY_LOG):
            return
        self._shown = now
        if self._tty:
            self._stream.write("\r\x1b[2K" + self.line())
        else:
            self._stream.write(self.line() + "\n")
        self._stream.flush()

    def finish(self) -> None:
        self.advance(0, force=True)
        if self._tty:
            self._stream.write("\n")
            self._stream.flush()


def _backfill(args: argparse.Namespace, config: Config) -> int:
    if args.batch < 1:
        print("clawgate memory backfill-embeddings: --batch must be at least 1", file=sys.stderr)
        return 2
    try:
        from gateway.recall.engine import embedder_from_config  # the recall stack: only when backfilling

        embedder = embedder_from_config(config)
    except ValueError as exc:
        print(f"clawgate memory backfill-embeddings: {exc}", file=sys.stderr)
        return 2
    if embedder is None:
        print(
            "clawgate memory backfill-embeddings: memory.search.provider is empty (keyword search only): "
            "nothing to embed",
            file=sys.stderr,
        )
        return 2
    progress: list[Progress] = []  # set once counted; read after an interruption
    try:
        return with_storage(config, lambda storage: _run_backfill(storage, embedder, args, progress))
    except KeyboardInterrupt:
        done = progress[0].done if progress else 0
        if args.force:  # nothing marks the rest as due: they keep their earlier vectors
            print(f"\ninterrupted: {done:,} items re-embedded; --force again redoes everything", file=sys.stderr)
        else:
            print(f"\ninterrupted: {done:,} items embedded and kept; run it again to continue", file=sys.stderr)
        return 130


async def _run_backfill(storage: Storage, embedder: Embedder, args: argparse.Namespace, out: list[Progress]) -> int:
    from memory.embed.embeddings import LocalEmbedder
    from memory.embed.items import KINDS
    from memory.embed.vectors import VectorStore, text_hash

    vectors = VectorStore(storage.db)
    model = embedder.model_id
    if isinstance(embedder, LocalEmbedder):
        print(f"loading {model} ({embedder.threads} thread(s)) …", file=sys.stderr)
        await embedder.load()
    pruned = await vectors.prune()
    before = await vectors.coverage(model)
    todo = {kind: total if args.force else total - covered for kind, (covered, total) in before.items()}
    print(
        f"{model}: {sum(todo.values()):,} to embed ("
        + ", ".join(f"{kind} {n:,}" for kind, n in todo.items())
        + (", everything again" if args.force else "")
        + ")"
        + (f"; removed {pruned:,} vectors of items no longer searchable" if pruned else ""),
        file=sys.stderr,
    )
    progress = Progress(sum(todo.values()), sys.stderr)
    out.append(progress)
    stored = {kind: 0 for kind in KINDS}
    started = time.perf_counter()
    try:
        for kind in KINDS:
            after: str | None = None
            while True:
                if args.force:
                    batch = await vectors.items(kind, args.batch, after=after)
                else:
                    batch = await vectors.missing(kind, model, args.batch, after=after)
                if not batch:
                    break
                matrix = await embedder.embed_documents([content for _, content in batch])
                rows = [(item_id, text_hash(content), matrix[i]) for i, (item_id, content) in enumerate(batch)]
                stored[kind] += await vectors.upsert(kind, rows, model)  # committed: a rerun continues here
                progress.advance(len(batch))
                after = batch[-1][0]
    except Exception as exc:
        progress.finish()
        print(
            f"clawgate memory backfill-embeddings: {type(exc).__name__}: {exc}; "
            f"{progress.done:,} items embedded and kept; "
            + ("--force again redoes everything" if args.force else "run it again to continue"),
            file=sys.stderr,
        )
        return 1
    progress.finish()
    elapsed = time.perf_counter() - started
    total = sum(stored.values())
    skipped = progress.done - total
    coverage = await vectors.coverage(model)
    print(
        f"embedded {total:,} items with {model} in {elapsed:.1f} s: {total / elapsed if elapsed > 0 else 0:,.1f} "
        "memories/s ("
        + ", ".join(f"{kind} {n:,}" for kind, n in stored.items())
        + ")"
        + (f"; {skipped:,} changed while embedding, left for the next run" if skipped else "")
    )
    print("coverage: " + ", ".join(f"{kind} {c:,}/{t:,}" for kind, (c, t) in coverage.items()))
    return 0
