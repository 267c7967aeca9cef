"""`clawgate memory search`: what a person could recall for a query (gateway.recall.search), one
query or a `--batch` file of them for evaluation, or the session archive (`--archive`).

A single search and every line of a batch give the same result objects (`hits_json`); a batch
loads the embedding model once and goes on past a bad line, reporting it in place."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, BinaryIO

from gateway.cli.common import emit, limit_type, record_json, with_storage
from gateway.cli.users import FIND_USERS, resolve_user, unknown_user
from gateway.config.model import Config

if TYPE_CHECKING:
    from gateway.recall.search import RecordSearch
    from gateway.session.memory_service import Found
    from memory.embed.embeddings import Embedder
    from memory.store.storage import Storage

DEFAULT_LIMIT = 10
MAX_LIMIT = 50  # what the record store returns at most per search


def add_parser(mem_sub: Any) -> None:
    search = mem_sub.add_parser(
        "search",
        help="what a user could recall, best first (or --archive; or --batch FILE.jsonl)",
        description="Long-term memories a user could recall, ranked as a turn's recall ranks them (by words and, "
        "with memory.search.provider set, by meaning), through the same policy as /memory search.",
    )
    search.add_argument("--archive", action="store_true", help="search archived conversation messages instead")
    search.add_argument("--user", metavar="USER_ID", help="as this user (required for long-term memory)")
    search.add_argument(
        "--limit",
        type=limit_type(MAX_LIMIT),
        default=DEFAULT_LIMIT,
        help=f"at most this many hits (1-{MAX_LIMIT}, default {DEFAULT_LIMIT}; with --batch, for lines without one)",
    )
    search.add_argument("--json", action="store_true", help="print the hits as JSON")
    search.add_argument(
        "--batch",
        metavar="FILE.jsonl",
        help='many searches, the model loaded once: one {"user": ID, "query": TEXT, "limit": N} per line '
        "(limit optional, other fields ignored, blank lines skipped; - reads standard input). With --json, one "
        'JSON line per query, {"line", "user", "query", "results"} with the results of a single --json search, '
        'or {"line", "error"}; without, a short block per query and errors on standard error. Exit code 1 when '
        "any line failed.",
    )
    search.add_argument("query", nargs="*", metavar="QUERY")


def run(args: argparse.Namespace, config: Config) -> int:
    if args.batch is not None:
        return _search_batch(args, config)
    if not args.query:
        print("clawgate memory search: a QUERY is required (or --batch FILE.jsonl)", file=sys.stderr)
        return 2
    if args.archive:
        return _search_archive(args, config)
    if not args.user:
        print("clawgate memory search: --user USER_ID is required (memory is searched as one person)", file=sys.stderr)
        return 2
    embedder = _search_embedder(config)
    if isinstance(embedder, str):
        print(f"clawgate memory search: {embedder}", file=sys.stderr)
        return 2

    async def work(storage: Storage) -> int:
        user = await resolve_user(config, storage, args.user)
        if user is None:
            print(f"clawgate memory search: {unknown_user(config, args.user)}", file=sys.stderr)
            return 2
        searcher = await _open_search(config, storage, embedder)
        found = await searcher.search(_actor(user), " ".join(args.query), args.limit)
        if args.json:
            emit(json.dumps(hits_json(found), ensure_ascii=False, indent=2))
        else:
            _print_hits(found, user.id)
        return 0

    return with_storage(config, work)


def hits_json(found: Sequence[Found]) -> list[dict[str, Any]]:
    """The result objects of `search --json`, single or --batch."""
    return [record_json(f.record, f.score) for f in found]


def _print_hits(found: Sequence[Found], user_id: str, indent: str = "") -> None:
    from gateway.session.memory_service import describe

    for f in found:
        print(f"{indent}{describe(f.record)}  (score {f.score:.3g})")
    if not found:
        print(f"{indent}nothing {user_id} could recall matches")


def _search_embedder(config: Config) -> Embedder | str | None:
    """The embedder a turn's recall would use (None: keyword search only), or why it cannot be built."""
    if not config.memory.enabled:
        return None
    try:
        from gateway.recall.engine import embedder_from_config  # the recall stack: only when searching

        return embedder_from_config(config)
    except ValueError as exc:
        return str(exc)


async def _open_search(config: Config, storage: Storage, embedder: Embedder | None) -> RecordSearch:
    """The searcher, loaded once; what it cannot rank by meaning is said on standard error."""
    from gateway.recall.search import RecordSearch

    def loading(model: str) -> None:
        print(f"loading {model} …", file=sys.stderr, flush=True)

    searcher = await RecordSearch.open(config, storage, embedder, on_load=loading)
    if embedder is not None and searcher.index is None:
        print(
            f"no memory has a vector for {embedder.model_id} yet: ranked by words alone "
            "(clawgate memory backfill-embeddings)",
            file=sys.stderr,
        )
    else:
        note = await searcher.coverage_note()
        if note:
            print(note, file=sys.stderr)
    return searcher


def _actor(user: Any) -> Any:
    from memory.trust.policy import Actor

    return Actor(user.id, frozenset(user.roles), "chat")


# -- --batch ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class BatchQuery:
    user: str
    query: str
    limit: int


def parse_batch_line(raw: bytes | str, default_limit: int = DEFAULT_LIMIT) -> BatchQuery:
    """One line of a --batch file; ValueError saying what is wrong with it."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise ValueError('expected a JSON object: {"user": ID, "query": TEXT, "limit": N}')
    user, query, limit = obj.get("user"), obj.get("query"), obj.get("limit", default_limit)
    if not isinstance(user, str) or not user.strip():
        raise ValueError("`user` (a non-empty string, the user id) is required")
    if not isinstance(query, str) or not query.strip():
        raise ValueError("`query` (a non-empty string) is required")
    # bool is an int in Python: `"limit": true` is a mistake, not 1.
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"`limit` must be a whole number from 1 to {MAX_LIMIT} (got {json.dumps(limit)})")
    return BatchQuery(user.strip(), query, limit)


def _search_batch(args: argparse.Namespace, config: Config) -> int:
    for given, flag in ((args.archive, "--archive"), (args.user, "--user"), (args.query, "a QUERY")):
        if given:
            print(
                f"clawgate memory search: {flag} does not go with --batch (each line names its user and query)",
                file=sys.stderr,
            )
            return 2
    embedder = _search_embedder(config)
    if isinstance(embedder, str):
        print(f"clawgate memory search: {embedder}", file=sys.stderr)
        return 2
    try:
        stream: BinaryIO = sys.stdin.buffer if args.batch == "-" else open(args.batch, "rb")
    except OSError as exc:
        print(f"clawgate memory search: cannot read {args.batch}: {exc}", file=sys.stderr)
        return 2
    try:
        return with_storage(config, lambda storage: _run_batch(storage, config, embedder, stream, args))
    finally:
        if args.batch != "-":
            stream.close()


async def _run_batch(
    storage: Storage, config: Config, embedder: Embedder | None, stream: BinaryIO, args: argparse.Namespace
) -> int:
    searcher = await _open_search(config, storage, embedder)
    failed = 0
    nobody = False  # a line named a user nobody is: the way to find them is said once, at the end

    def fail(n: int, error: str) -> None:
        nonlocal failed
        failed += 1
        if args.json:
            emit(json.dumps({"line": n, "error": error}, ensure_ascii=False))
        else:
            print(f"line {n}: {error}", file=sys.stderr, flush=True)

    # Read as the lines come (a pipe may be slow); each answer is flushed before the next is read.
    for n, raw in enumerate(stream, start=1):
        if not raw.strip():
            continue
        try:
            q = parse_batch_line(raw, args.limit)
        except ValueError as exc:
            fail(n, str(exc))
            continue
        user = await resolve_user(config, storage, q.user)
        if user is None:
            fail(n, f"no user {q.user!r}")
            nobody = True
            continue
        found = await searcher.search(_actor(user), q.query, q.limit)
        if args.json:
            line = {"line": n, "user": user.id, "query": q.query, "results": hits_json(found)}
            emit(json.dumps(line, ensure_ascii=False))
        else:
            print(f"line {n} · {user.id} · {q.query}")
            _print_hits(found, user.id, indent="  ")
            print(flush=True)
    if nobody:
        print(f"clawgate memory search: {FIND_USERS}", file=sys.stderr)
    return 1 if failed else 0


# -- --archive --------------------------------------------------------------------------------------


def _search_archive(args: argparse.Namespace, config: Config) -> int:
    async def work(storage: Storage) -> int:
        hits = await storage.archive.search(" ".join(args.query), user_id=args.user, limit=args.limit)
        # Here --user filters by the owner id each session recorded: a name nobody has is a note that
        # explains the empty answer, not a refusal.
        if args.user and not hits and await resolve_user(config, storage, args.user) is None:
            print(f"note: {unknown_user(config, args.user)}", file=sys.stderr)
        if args.json:
            rows = []
            for h in hits:
                row = dataclasses.asdict(h)
                row["created_at"], row["archived_at"] = h.created_at.isoformat(), h.archived_at.isoformat()
                rows.append(row)
            emit(json.dumps(rows, ensure_ascii=False, indent=2))
            return 0
        for h in hits:
            who = f"{h.role} ({h.author})" if h.author else h.role
            print(f"[{h.session_key}] {h.created_at:%Y-%m-%d %H:%M}Z {who}: {h.snippet}")
            print(f"  id {h.id}  score {h.score:.3g}")
        if not hits:
            print("no archived messages match")
        return 0

    return with_storage(config, work)
