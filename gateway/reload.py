"""Hot reload of config.yaml, on SIGHUP or when the file changes.

The new file is read with the project's loader (every problem listed); an invalid one changes
nothing: the gateway keeps running on its last good config and logs the problems' paths. A valid
one is compared with the running config key by key. What the parts read per turn or per request
(agents, models, access lists, users and tokens, budgets, recall, log level) applies at once; what
was wired at start (storage, data_dir, channels and their credentials, the web server's address,
the embedder, the daily merge's schedule, the time zone) waits for a restart: it is logged as such
and left as it runs, so the config every part sees is the one that is in force.

A turn already under way finishes with the settings it started with (TurnEngine reads its config
once per turn); the next one gets the new ones.

A file is read only once it holds still (two reads a debounce apart find it the same), so a file an
editor or `cp` is still writing is never parsed half-way. A valid file that would take every user,
every token or the model away (the usual shape of a truncated or emptied file) is refused: the
gateway keeps its last good config until the operator forces it (`clawgate reload --force`, which
sends SIGUSR1). Each outcome is written to `<data_dir>/reload-status.json`, where `clawgate reload`
reads it; it finds the gateway by `<data_dir>/clawgate.pid`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import yaml  # type: ignore[import-untyped]
from pydantic import BaseModel

from gateway.config.load import ConfigError, ConfigProblem, load_config, secret_values
from gateway.config.model import AgentConfig, Config
from gateway.core.channel_config import ChatChannelConfig
from gateway.core.logs import event, setup_logging
from gateway.reload_files import STATUS_FILE, write_atomically
from gateway.turn.engine import model_chain

log = logging.getLogger("clawgate.reload")

# How often the file is looked at, and how long a change must hold still before it is read (an
# editor may write a file in several steps).
POLL_SECONDS = 2.0
DEBOUNCE_SECONDS = 0.5
# A file still changing after this long is not read at all (`clawgate reload` waits 10 s in all).
SETTLE_SECONDS = 5.0
RECENT_OUTCOMES = 5  # kept in the status file, so a reload asked for is not hidden by a later one

KeyPath = tuple[str, ...]

# Wired at start: a change waits for a restart (and the running value stays in force until then).
RESTART_ONLY: tuple[KeyPath, ...] = (
    ("storage",),  # the database, data_dir, session leases
    ("timezone",),  # the daily merge's clock, the dates of daily files
    ("memory", "enabled"),  # which tools a turn is offered, whether an embedder exists
    ("memory", "search"),  # the embedder and its model
    ("memory", "merge"),  # the daily merge's schedule
    ("reminders", "enabled"),  # whether the model is offered its schedule_reminder tool
)
# A chat channel's access policy and limits are read by the router per message; its credentials,
# mode and endpoints belong to the adapter that was started with them.
LIVE_CHANNEL_KEYS = frozenset(
    {
        "dm_policy",
        "group_policy",
        "require_mention",
        "allow_from",
        "audience",
        "max_attachment_bytes",
        "media",
        "max_message_chars",
    }
)


# -- what changed, and what of it can apply now (pure) --------------------------------------------


def render(path: KeyPath) -> str:
    return ".".join(path) or "(root)"


def changed_paths(old: Any, new: Any, at: KeyPath = ()) -> list[KeyPath]:
    """The paths where `new` differs from `old`: model fields and mapping keys are walked, a list
    or a plain value that differs is one path. Secrets compare by value and are never returned."""
    if old == new:
        return []
    if isinstance(old, BaseModel) and type(old) is type(new):
        return [
            p
            for name in type(old).model_fields
            for p in changed_paths(getattr(old, name), getattr(new, name), (*at, name))
        ]
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[KeyPath] = []
        for key in [*old, *(k for k in new if k not in old)]:
            if key in old and key in new:
                out += changed_paths(old[key], new[key], (*at, str(key)))
            else:
                out.append((*at, str(key)))  # added or removed
        return out
    return [at]


def needs_restart(path: KeyPath, running: Config) -> bool:
    if any(path[: len(p)] == p for p in RESTART_ONLY):
        return True
    if path[0] == "channels":
        if len(path) < 3:
            return True  # a channel added, removed, or of another type
        return not (isinstance(running.channels.get(path[1]), ChatChannelConfig) and path[2] in LIVE_CHANNEL_KEYS)
    return False


_ABSENT = object()


def _get(node: Any, path: KeyPath) -> Any:
    for part in path:
        if isinstance(node, dict):
            if part not in node:
                return _ABSENT
            node = node[part]
        else:
            node = getattr(node, part)
    return node


def _put(node: Any, path: KeyPath, value: Any) -> Any:
    """A copy of `node` with `value` at `path` (_ABSENT removes a mapping key)."""
    head, rest = path[0], path[1:]
    if isinstance(node, dict):
        out = dict(node)
        if rest:
            out[head] = _put(node[head], rest, value)
        elif value is _ABSENT:
            out.pop(head, None)
        else:
            out[head] = value
        return out
    child = _put(getattr(node, head), rest, value) if rest else value
    return node.model_copy(update={head: child})


@dataclass(frozen=True)
class ReloadPlan:
    config: Config  # what to run on: the new file, with what needs a restart kept as it runs
    live: tuple[str, ...]  # changed paths that apply now
    restart: tuple[str, ...]  # changed paths that wait for a restart
    problems: tuple[ConfigProblem, ...] = ()  # the new settings do not fit with those kept

    @property
    def sections(self) -> list[str]:
        """The top-level keys that change now (what `config_reloaded` names)."""
        return sorted({p.split(".", 1)[0] for p in self.live})


def plan_reload(running: Config, new: Config) -> ReloadPlan:
    live: list[KeyPath] = []
    restart: list[KeyPath] = []
    effective = new
    for path in changed_paths(running, new):
        if needs_restart(path, running):
            restart.append(path)
            effective = _put(effective, path, _get(running, path))
        else:
            live.append(path)
    problems = tuple(
        ConfigProblem(p, v, f"{reason} (with the settings that wait for a restart as they run now)")
        for p, v, reason in effective.check_semantics()
    )
    return ReloadPlan(effective, tuple(map(render, live)), tuple(map(render, restart)), problems)


# -- what a reload must not take away (pure) -------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    code: str  # stable, for the log: empty_document, no_users, no_tokens, no_model
    words: str  # what is wrong with the new file, in plain words


def empty_document(data: bytes) -> bool:
    """Does the file hold nothing: no bytes, only comments, `{}` or null?"""
    try:
        return yaml.safe_load(data.decode("utf-8")) in (None, {})
    except (UnicodeDecodeError, yaml.YAMLError):
        return False  # a file that does not parse is reported as such by the loader


def _token_count(config: Config) -> int:
    return sum(len(user.tokens) for user in config.users.values())


def _has_model(config: Config, agent: AgentConfig) -> bool:
    return bool(model_chain(config, agent))  # the models a turn of this agent would try


def refusals(running: Config, new: Config, *, empty: bool) -> list[Refusal]:
    """Why `new` must not replace `running` unless forced: it is empty, or it takes every user,
    every token, `ai.model` or an agent's only model away. Empty: the new file may be applied."""
    if empty:
        return [Refusal("empty_document", "the file is empty (nothing but comments, {} or null)")]
    found: list[Refusal] = []
    if running.users and not new.users:
        found.append(Refusal("no_users", f"it declares no users (the running config has {len(running.users)})"))
    tokens = _token_count(running)
    if tokens and not _token_count(new):
        found.append(Refusal("no_tokens", f"no user has a token any more (the running config has {tokens})"))
    lost: list[str] = []
    if running.ai.model and not new.ai.model:
        lost.append("ai.model is gone")
    # The first agent answers every conversation that names none; the others are matched by name.
    pairs = [(running.agents.list[0], new.agents.list[0])] if running.agents.list and new.agents.list else []
    by_name = {a.name: a for a in new.agents.list}
    pairs += [(a, by_name[a.name]) for a in running.agents.list if a.name in by_name]
    for before, after in pairs:
        words = f"agent {after.name} would have no model"
        if words not in lost and _has_model(running, before) and not _has_model(new, after):
            lost.append(words)
    if lost:
        found.append(Refusal("no_model", "; ".join(lost)))
    return found


# -- the file --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fingerprint:
    mtime_ns: int
    size: int
    sha256: str


@dataclass(frozen=True)
class Snapshot:
    """The file as one read found it; `fingerprint` None when it could not be read."""

    fingerprint: Fingerprint | None
    data: bytes = b""


def snapshot(path: Path) -> Snapshot:
    try:
        data = path.read_bytes()
        st = path.stat()
    except OSError:
        return Snapshot(None)
    return Snapshot(Fingerprint(st.st_mtime_ns, len(data), hashlib.sha256(data).hexdigest()), data)


def fingerprint(path: Path) -> Fingerprint | None:
    """What the file is now; None when it cannot be read (an editor may be replacing it)."""
    return snapshot(path).fingerprint


@dataclass(frozen=True)
class Loaded:
    """config.yaml as it stood, still, while it was read: its config or why it has none."""

    fingerprint: Fingerprint | None
    config: Config | None
    error: ConfigError | None
    empty: bool


# -- applying --------------------------------------------------------------------------------------


@dataclass
class Outcome:
    at: datetime
    trigger: str  # file, sighup, sigusr1 (a forced reload), or what a caller named
    result: str  # applied, waiting_for_restart (only such changes), unchanged, refused, failed
    changed: list[str] = field(default_factory=list)  # the sections that changed now
    errors: list[str] = field(default_factory=list)  # failed: each problem's path and reason
    reason: str = ""  # refused: why, in plain words
    restart: list[str] = field(default_factory=list)  # the changed paths that wait for a restart
    forced: bool = False
    file_sha256: str | None = None  # of the file read: `clawgate reload` tells apart two reloads of one file

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat(),
            "trigger": self.trigger,
            "result": self.result,
            "changed": self.changed,
            "errors": self.errors,
            "reason": self.reason or None,
            "restart": self.restart,
            "forced": self.forced,
            "file_sha256": self.file_sha256,
        }


class Reloadable(Protocol):
    """The running gateway as the reloader sees it (gateway.app.Gateway)."""

    config: Config  # the config in force

    def add_secrets(self, values: Sequence[str]) -> None:
        """Redact these too (from now on: logs, stored text, daily files)."""

    async def apply_config(self, config: Config) -> None:
        """Hand `config` to every part that reads it, at once."""


class Reloader:
    def __init__(
        self,
        gateway: Reloadable,
        path: Path,
        poll_seconds: float = POLL_SECONDS,
        debounce_seconds: float = DEBOUNCE_SECONDS,
        settle_seconds: float = SETTLE_SECONDS,
    ) -> None:
        self.gateway = gateway
        self.path = Path(path)
        self.poll_seconds = poll_seconds
        self.debounce_seconds = debounce_seconds
        self.settle_seconds = settle_seconds
        self._seen = fingerprint(self.path)  # the file as it was last read
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Outcome]] = set()
        self.loaded_at = datetime.now(UTC)
        self.last: Outcome | None = None
        self.recent: list[Outcome] = []  # the latest outcomes, oldest first
        self.attempts = 0
        self.needs_restart: tuple[str, ...] = ()

    def status(self) -> dict[str, Any]:
        return {
            "file": str(self.path),
            "loaded_at": self.loaded_at.isoformat(),
            "last_reload": self.last.to_json() if self.last is not None else None,
            "needs_restart": list(self.needs_restart),
        }

    def trigger(self, why: str, *, force: bool = False) -> None:
        """Reload soon (a signal handler cannot wait)."""
        task = asyncio.get_running_loop().create_task(self.reload(why, force=force))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=5)

    async def reload(self, trigger: str, *, force: bool = False) -> Outcome:
        """Read the file and apply what can change now; an invalid file changes nothing, and
        neither does one that takes every user, token or the model away unless `force`."""
        async with self._lock:
            try:
                outcome = await self._reload(trigger, force)
            except Exception as exc:  # a bug here must not take the watcher (or the gateway) down
                log.debug("config reload traceback", exc_info=True)
                problem = ConfigProblem("(reload)", None, f"internal error: {type(exc).__name__}")
                outcome = self._failed(trigger, [problem], force)
            self.recent = [*self.recent, outcome][-RECENT_OUTCOMES:]
            await asyncio.to_thread(self._write_status)
            self.attempts += 1  # finished attempts, their outcome written (tests wait on it)
            return outcome

    async def _reload(self, trigger: str, force: bool) -> Outcome:
        loaded = await self._load()
        if loaded is None:
            return self._unsettled(trigger, force)
        self._seen = loaded.fingerprint
        outcome = await self._use(loaded, trigger, force)
        outcome.file_sha256 = loaded.fingerprint.sha256 if loaded.fingerprint is not None else None
        return outcome

    async def _use(self, loaded: Loaded, trigger: str, force: bool) -> Outcome:
        """Apply the file read, what of it can apply now, unless it is invalid or refused."""
        if loaded.config is None:
            assert loaded.error is not None
            return self._failed(trigger, loaded.error.problems, force)
        new = loaded.config
        # New secrets are redacted from the logs before anything of the new file is logged.
        self.gateway.add_secrets(secret_values(new))
        refused = refusals(self.gateway.config, new, empty=loaded.empty)
        if refused and not force:
            return self._refused(trigger, refused)
        if refused:
            reason = ",".join(r.code for r in refused)
            event(log, "config_reload_forced", logging.WARNING, trigger=trigger, reason=reason, file=self.path)
        plan = plan_reload(self.gateway.config, new)
        if plan.problems:
            return self._failed(trigger, plan.problems, force)
        ignored = set(self.gateway.config.unread_keys())
        if plan.live:
            try:
                await self.gateway.apply_config(plan.config)
            except Exception as exc:  # the database refused the declared users: nothing was swapped
                problem = ConfigProblem("users", None, f"could not be saved ({type(exc).__name__})")
                return self._failed(trigger, [problem], force)
            wanted = plan.config.logging
            setup_logging(wanted.level, fmt=wanted.format, access_log=wanted.access_log)
            self.loaded_at = datetime.now(UTC)
            event(log, "config_reloaded", trigger=trigger, changed=",".join(plan.sections))
        elif not plan.restart:
            event(log, "config_reload_unchanged", trigger=trigger)
        for key, why in plan.config.unread_keys():
            if (key, why) not in ignored:
                event(log, "config_key_ignored", logging.WARNING, key=key, why=why)
        self.needs_restart = plan.restart
        if plan.restart:
            event(log, "config_reload_needs_restart", logging.WARNING, trigger=trigger, paths=",".join(plan.restart))
        result = "applied" if plan.live else "waiting_for_restart" if plan.restart else "unchanged"
        restart = list(plan.restart)
        self.last = Outcome(datetime.now(UTC), trigger, result, plan.sections, restart=restart, forced=force)
        return self.last

    async def _load(self) -> Loaded | None:
        """The file once it holds still, read by the project's loader; None when it is still being
        written after `settle_seconds`. It is looked at again after it was read: a write that came
        meanwhile (the loader may have read a half) means another wait."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.settle_seconds
        while True:
            settled = await self._settled(give_up)
            if settled is None:
                return None
            config: Config | None = None
            error: ConfigError | None = None
            try:
                config = await asyncio.to_thread(load_config, self.path)
            except ConfigError as exc:
                error = exc
            if await asyncio.to_thread(fingerprint, self.path) == settled.fingerprint:
                empty = settled.fingerprint is not None and empty_document(settled.data)
                return Loaded(settled.fingerprint, config, error, empty)
            if loop.time() >= give_up:
                return None

    async def _settled(self, give_up: float) -> Snapshot | None:
        """The file once two reads a debounce apart find it the same (time, size and content);
        None when that has not happened by `give_up` (the event loop's clock)."""
        loop = asyncio.get_running_loop()
        before = await asyncio.to_thread(snapshot, self.path)
        while True:
            await asyncio.sleep(self.debounce_seconds)
            now = await asyncio.to_thread(snapshot, self.path)
            if now.fingerprint == before.fingerprint:
                return now
            if loop.time() >= give_up:
                return None
            before = now

    def _unsettled(self, trigger: str, force: bool) -> Outcome:
        waited = f"{self.settle_seconds:g} s"
        event(
            log,
            "config_reload_skipped",
            logging.WARNING,
            reason="file_still_changing",
            trigger=trigger,
            file=self.path,
            waited=waited,
            kept="the running config",
        )
        error = f"(file): still being written after {waited} (it kept changing), so it was not read"
        self.last = Outcome(datetime.now(UTC), trigger, "failed", errors=[error], forced=force)
        return self.last

    def _refused(self, trigger: str, refused: Sequence[Refusal]) -> Outcome:
        # Codes and counts only: the file's values (tokens among them) are never logged.
        event(
            log,
            "config_reload_refused",
            logging.WARNING,
            reason=",".join(r.code for r in refused),
            trigger=trigger,
            file=self.path,
            kept="the last good config",
            force="clawgate reload --force",
        )
        words = f"{self.path} was not applied: " + "; ".join(r.words for r in refused)
        self.last = Outcome(datetime.now(UTC), trigger, "refused", reason=words)
        return self.last

    def _failed(self, trigger: str, problems: Sequence[ConfigProblem], force: bool = False) -> Outcome:
        # Paths and reasons only: a value may be a secret or a password in a database URL.
        errors = [f"{p.path}: {p.reason}" for p in problems]
        event(
            log,
            "config_reload_failed",
            logging.WARNING,
            trigger=trigger,
            file=self.path,
            problems=len(errors),
            errors="; ".join(errors),
            kept="the last good config",
        )
        self.last = Outcome(datetime.now(UTC), trigger, "failed", errors=errors, forced=force)
        return self.last

    def _write_status(self) -> None:
        """The latest outcomes to `<data_dir>/reload-status.json`, for `clawgate reload` (best
        effort: the reload itself has happened; a failure is logged)."""
        path = self.gateway.config.storage.data_dir / STATUS_FILE
        data = {"pid": os.getpid(), **self.status(), "recent": [o.to_json() for o in self.recent]}
        try:
            write_atomically(path, json.dumps(data, indent=2) + "\n")
        except OSError as exc:
            event(
                log, "reload_status_not_written", logging.WARNING, file=path, error=exc.strerror or type(exc).__name__
            )

    async def watch(self) -> None:
        """Reload when the file changes (its time, size or content). A file replaced by rename is
        read by its path, so it is seen too; one that is briefly missing is waited for; one being
        written is read once it holds still (`reload` waits for that)."""
        missing = False
        while True:
            await asyncio.sleep(self.poll_seconds)
            now = await asyncio.to_thread(fingerprint, self.path)
            if now is None:
                if not missing:
                    event(log, "config_file_missing", logging.WARNING, file=self.path, kept="the running config")
                missing = True
                continue
            missing = False
            if now != self._seen:
                await self.reload("file")
