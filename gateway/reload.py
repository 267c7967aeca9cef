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
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from gateway.config import AIConfig, ChatChannelConfig, Config
from gateway.config_load import ConfigError, ConfigProblem, load_config, secret_values
from gateway.logs import event, setup_logging

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger("clawgate.reload")

# How often the file is looked at, and how long a change must hold still before it is read (an
# editor may write a file in several steps).
POLL_SECONDS = 2.0
DEBOUNCE_SECONDS = 0.5

KeyPath = tuple[str, ...]

# Wired at start: a change waits for a restart (and the running value stays in force until then).
RESTART_ONLY: tuple[KeyPath, ...] = (
    ("storage",),  # the database, data_dir, session leases
    ("timezone",),  # the daily merge's clock, the dates of daily files
    ("memory", "enabled"),  # which tools a turn is offered, whether an embedder exists
    ("memory", "search"),  # the embedder and its model
    ("memory", "merge"),  # the daily merge's schedule
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
        "max_message_chars",
    }
)


def llm_settings(ai: AIConfig) -> dict[str, Any]:
    """The LLMClient's settings from `ai` (at start, and again on each reload)."""
    return {
        "timeout": ai.timeout_seconds,
        "retries": ai.retries,
        "backoff": ai.retry_backoff_seconds,
        "max_concurrent": ai.max_concurrent_calls,
        "temperature": ai.temperature,
        "transport": ai.transport,
    }


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


# -- the file --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fingerprint:
    mtime_ns: int
    size: int
    sha256: str


def fingerprint(path: Path) -> Fingerprint | None:
    """What the file is now; None when it cannot be read (an editor may be replacing it)."""
    try:
        data = path.read_bytes()
        st = path.stat()
    except OSError:
        return None
    return Fingerprint(st.st_mtime_ns, len(data), hashlib.sha256(data).hexdigest())


# -- applying --------------------------------------------------------------------------------------


async def apply(gw: Gateway, config: Config) -> None:
    """Hand `config` to every part of a started gateway that reads it. The only wait (declared
    users to the database) comes first; the swap itself has no await, so no turn sees half of it.
    A new part that keeps the config belongs here: tests/integration/test_reload.py walks the
    gateway's objects and names any still holding the old one."""
    router = gw.router
    assert gw.storage is not None and router is not None
    declared = gw.declared_users(config)
    if declared != gw.declared_users(gw.config):
        await gw.storage.identities.sync_declared(declared)
    gw.config = config
    gw.auth.use_config(config)
    gw.llm.configure(**llm_settings(config.ai))
    router.use_config(config)
    router.engine.config = config
    router.context.config = config
    router.session_memory.use_config(config)
    if router.memory is not None:
        router.memory.use_config(config)
    if router.recall is not None:
        router.recall.use_config(config)
    if gw.formation is not None:
        gw.formation.use_config(config)
    if gw.consolidator is not None:
        gw.consolidator.config = config
    if gw.openai_api is not None:
        gw.openai_api.config = config
    if gw.console is not None:
        gw.console.config = config


@dataclass
class Outcome:
    at: datetime
    trigger: str
    result: str  # applied, waiting_for_restart (only such changes), unchanged, failed
    changed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat(),
            "trigger": self.trigger,
            "result": self.result,
            "changed": self.changed,
            "errors": self.errors,
        }


class Reloader:
    def __init__(
        self,
        gateway: Gateway,
        path: Path,
        poll_seconds: float = POLL_SECONDS,
        debounce_seconds: float = DEBOUNCE_SECONDS,
    ) -> None:
        self.gateway = gateway
        self.path = Path(path)
        self.poll_seconds = poll_seconds
        self.debounce_seconds = debounce_seconds
        self._seen = fingerprint(self.path)  # the file as it was last read
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Outcome]] = set()
        self.loaded_at = datetime.now(UTC)
        self.last: Outcome | None = None
        self.attempts = 0
        self.needs_restart: tuple[str, ...] = ()

    def status(self) -> dict[str, Any]:
        return {
            "file": str(self.path),
            "loaded_at": self.loaded_at.isoformat(),
            "last_reload": self.last.to_json() if self.last is not None else None,
            "needs_restart": list(self.needs_restart),
        }

    def trigger(self, why: str) -> None:
        """Reload soon (a signal handler cannot wait)."""
        task = asyncio.get_running_loop().create_task(self.reload(why))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=5)

    async def reload(self, trigger: str) -> Outcome:
        """Read the file and apply what can change now; an invalid file changes nothing."""
        async with self._lock:
            try:
                return await self._reload(trigger)
            except Exception as exc:  # a bug here must not take the watcher (or the gateway) down
                log.debug("config reload traceback", exc_info=True)
                return self._failed(trigger, [ConfigProblem("(reload)", None, f"internal error: {type(exc).__name__}")])
            finally:
                self.attempts += 1  # finished attempts (tests wait on it)

    async def _reload(self, trigger: str) -> Outcome:
        self._seen = await asyncio.to_thread(fingerprint, self.path)
        try:
            new = await asyncio.to_thread(load_config, self.path)
        except ConfigError as exc:
            return self._failed(trigger, exc.problems)
        # New secrets are redacted from the logs before anything of the new file is logged.
        secrets = self.gateway.secrets
        secrets.extend(s for s in secret_values(new) if s not in secrets)
        setup_logging(self.gateway.config.logging.level, secrets)
        if self.gateway.session_memory is not None:  # the daily files keep a copy
            self.gateway.session_memory.daily.secrets = tuple(secrets)
        plan = plan_reload(self.gateway.config, new)
        if plan.problems:
            return self._failed(trigger, plan.problems)
        ignored = set(self.gateway.config.unread_keys())
        if plan.live:
            try:
                await apply(self.gateway, plan.config)
            except Exception as exc:  # the database refused the declared users: nothing was swapped
                problem = ConfigProblem("users", None, f"could not be saved ({type(exc).__name__})")
                return self._failed(trigger, [problem])
            setup_logging(plan.config.logging.level, self.gateway.secrets)
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
        self.last = Outcome(datetime.now(UTC), trigger, result, plan.sections)
        return self.last

    def _failed(self, trigger: str, problems: Sequence[ConfigProblem]) -> Outcome:
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
        self.last = Outcome(datetime.now(UTC), trigger, "failed", errors=errors)
        return self.last

    async def watch(self) -> None:
        """Reload when the file changes (its time, size or content). A file replaced by rename is
        read by its path, so it is seen too; one that is briefly missing is waited for."""
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
            if now == self._seen:
                continue
            await asyncio.sleep(self.debounce_seconds)
            if await asyncio.to_thread(fingerprint, self.path) != now:
                continue  # still being written: look again at the next poll
            await self.reload("file")
