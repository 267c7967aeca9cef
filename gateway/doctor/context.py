"""What a doctor check is handed (`Context`: what earlier checks learned) and what it returns
(`Result`, or `Skipped` when what it needs is broken), the groups of checks known only once the config
is, and secrets masked in whatever a check says. gateway/doctor/checks.py holds the checks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gateway.config.model import Config

if TYPE_CHECKING:
    from gateway.llm.client import LLMClient
    from memory.embed.embeddings import Embedder
    from memory.store.db import Database

Status = Literal["ok", "info", "warn", "fail", "skip"]
STATUSES: tuple[Status, ...] = ("ok", "info", "warn", "fail", "skip")
CHECK_TIMEOUT_S = 20.0  # a database that does not answer is a failed check, not a hung doctor
PROBE_TIMEOUT_S = 5.0  # each channel's and model's network check (--timeout)


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

    def __init__(self, config_path: Path, *, offline: bool = False, timeout: float = PROBE_TIMEOUT_S) -> None:
        self.config_path = config_path
        self.offline = offline  # ask no platform and no model
        self.timeout = timeout  # each network check, in seconds
        self.variables: dict[str, str] = {}  # config path -> the ${VARIABLE} it is read from
        self.secrets: list[str] = []  # every configured secret, masked in every result
        self._config: Config | None = None
        self._db: Database | None = None
        self._embedder: Embedder | None = None
        self._llm: LLMClient | None = None
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

    def llm(self) -> LLMClient:
        """The model client the model checks share (LiteLLM is imported once, in a thread)."""
        if self._llm is None:
            from gateway.llm.client import LLMClient

            self._llm = LLMClient(timeout=self.timeout, retries=0)
        return self._llm

    async def close(self) -> None:
        if self._db is not None:
            await self._db.close()
        if self._llm is not None:
            await self._llm.aclose()


Check = Callable[[Context], Awaitable[Result]]


@dataclass(frozen=True, slots=True)
class Group:
    """Checks known once the config is (`expand`), run at the same time and reported in order. When
    they cannot be known, one row named `name` says why."""

    name: str
    expand: Callable[[Context], Sequence[tuple[str, Check]]]


Entry = tuple[str, Check] | Group


def redact(result: Result, secrets: Sequence[str]) -> Result:
    """The result with every secret replaced by *** (an SDK's message may quote a token or a URL
    that holds one)."""
    shown = sorted((s for s in set(secrets) if len(s) >= 4), key=len, reverse=True)  # shorter ones would mangle text
    if not shown:
        return result

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            for secret in shown:
                value = value.replace(secret, "***")
            return value
        if isinstance(value, Mapping):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(clean(v) for v in value)
        return value

    return replace(
        result,
        detail=clean(result.detail),
        hint=clean(result.hint),
        lines=clean(result.lines),
        data=clean(result.data),
    )
