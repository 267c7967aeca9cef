"""Typed configuration. Every key lives here; docs/reference/config.md is generated from these models
(scripts/config_reference.py), so a field's `description=` or the comment above it is its documentation.

Models reject unknown keys. Cross-field rules (unique names, tokens required off loopback)
are checked in `Config.check_semantics` so that every problem is reported together.
"""

from __future__ import annotations

import builtins
import fnmatch
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator

from channels.discord.config import DiscordChannelConfig
from channels.messenger.config import MessengerChannelConfig
from channels.slack.config import SlackChannelConfig
from channels.teams.config import TeamsChannelConfig
from channels.telegram.config import TelegramChannelConfig
from channels.web.config import WebChannelConfig
from gateway.config.fields import Role, check_zone
from gateway.config.memory import MemoryConfig
from gateway.config.schedules import HookConfig, RemindersConfig, ScheduleConfig, schedule_problems
from gateway.core.channel_config import Strict


class GeminiConfig(Strict):
    """The background model: session summaries, memory formation, consolidation and duplicate checks
    use it when it has a key, else the agent's own model."""

    api_key: SecretStr | None = Field(default=None, description="Key for the background model; unset: it is not used.")
    model: str = Field(default="gemini/gemini-2.0-flash", description="LiteLLM model id of the background model.")


class TranscriptionConfig(Strict):
    """Voice notes and audio files made text (docs/media.md), through LiteLLM's transcription API."""

    # A LiteLLM model id, e.g. openai/whisper-1 or groq/whisper-large-v3; unset: voice is refused
    # with a message saying it needs this key.
    model: str | None = None
    # Unset: ai.api_base / ai.api_key when ai.model is of the same provider, else LiteLLM's defaults.
    api_base: str | None = None
    api_key: SecretStr | None = Field(default=None, description="Key for the transcription model (see api_base).")
    language: Annotated[str, Field(min_length=2, max_length=8)] | None = None  # ISO-639-1, e.g. "en"; unset: detected
    timeout_seconds: Annotated[float, Field(gt=0, le=600)] = Field(
        default=120.0, description="Seconds one transcription may take."
    )


class AIConfig(Strict):
    """The models the agents talk to, through LiteLLM, and how calls to them are retried."""

    model: str | None = Field(
        default=None, description="LiteLLM model id of the default agent, e.g. openai/gpt-4o-mini."
    )
    api_base: str | None = Field(
        default=None, description="Endpoint for these models: a proxy, Ollama, vLLM, any OpenAI-compatible server."
    )
    api_key: SecretStr | None = Field(
        default=None,
        description="Key for ai.model and its fallbacks; unset: LiteLLM reads the provider's own variable.",
    )
    fallback: list[str] = Field(
        default_factory=list, description="Model ids tried in order when a model keeps failing."
    )
    gemini: GeminiConfig = Field(default_factory=GeminiConfig)
    timeout_seconds: Annotated[float, Field(gt=0, le=600)] = Field(
        default=60.0, description="Seconds per call, and between two streamed chunks."
    )
    retries: Annotated[int, Field(ge=0, le=10)] = Field(
        default=2,
        description="Retries of one model on 429, 5xx, timeouts and connection errors, with backoff "
        "(Retry-After is honoured).",
    )
    retry_backoff_seconds: Annotated[float, Field(ge=0, le=60)] = Field(
        default=0.5, description="The first backoff; it doubles, with jitter."
    )
    max_concurrent_calls: Annotated[int, Field(ge=1, le=1000)] = Field(
        default=16, description="Model calls in flight at once, for the whole gateway."
    )
    max_tool_rounds: Annotated[int, Field(ge=0, le=20)] = Field(
        default=4, description="Tool-call rounds per turn before the model must answer."
    )
    temperature: Annotated[float, Field(ge=0, le=2)] | None = Field(
        default=None, description="Sampling temperature; unset: the provider's default."
    )
    # auto: requests LiteLLM routes to an OpenAI-compatible server at api_base go out directly
    # (gateway/llm/openai_wire.py); litellm: every request through litellm.acompletion.
    transport: Literal["auto", "litellm"] = "auto"
    # Pictures reach the model as images when it can see them: auto asks LiteLLM about every model of
    # the chain (unknown counts as no); on and off decide for every model (docs/media.md).
    vision: Literal["auto", "on", "off"] = "auto"
    transcription: TranscriptionConfig = Field(default_factory=TranscriptionConfig)


class AgentConfig(Strict):
    """One agent: a name clients pick it by, its model, and the administrator's instructions."""

    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")] = Field(
        description="How the agent is named (the OpenAI API's `model`, a schedule's `agent`); the first is the default."
    )
    model: str | None = Field(default=None, description="Its LiteLLM model id; unset: ai.model.")
    fallback: list[str] | None = Field(default=None, description="Its own fallback models; unset: ai.fallback.")
    instructions: str = Field(
        default="", description="The administrator's core instructions, first in every prompt of this agent."
    )
    bootstrap_max_chars: Annotated[int, Field(ge=0)] | None = Field(
        default=None, description="Overrides memory.bootstrap_max_chars for this agent."
    )


DEFAULT_INSTRUCTIONS = (
    "You are clawgate, a helpful assistant reached through a chat gateway. Answer clearly and concisely."
)


class AgentsConfig(Strict):
    list: builtins.list[AgentConfig] = Field(
        default_factory=lambda: [AgentConfig(name="default", instructions=DEFAULT_INSTRUCTIONS)],
        description="The agents; by default one, `default`, with short general instructions.",
    )


class StorageConfig(Strict):
    """Where the database and the memory files live."""

    data_dir: Path = Field(
        default=Path("data"),
        description="Folder of the SQLite database and the memory files (relative to the working directory).",
    )
    database_url: str | None = Field(
        default=None,
        description="sqlite:///path/to.db (run on one dedicated thread; sqlite+aiosqlite:// is read the same way), "
        "or postgresql+asyncpg://... (install with `pip install '.[postgres]'`); unset: SQLite in data_dir.",
    )
    # Several instances on one PostgreSQL: a session's lease lasts this long without renewal, so a
    # killed instance's sessions are taken over by the others after at most this many seconds.
    session_lease_seconds: Annotated[float, Field(ge=2, le=600)] = 30.0
    # How this instance is named in the session leases (default: host name and process id).
    instance_name: Annotated[str, Field(min_length=1, max_length=128)] | None = None

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'clawgate.db').as_posix()}"


AnyChannelConfig = (
    WebChannelConfig
    | TelegramChannelConfig
    | DiscordChannelConfig
    | SlackChannelConfig
    | TeamsChannelConfig
    | MessengerChannelConfig
)
ChannelConfig = Annotated[AnyChannelConfig, Field(discriminator="type")]


# The shared web server's own paths: a platform's endpoint may not sit on or under one of them.
_SERVER_PATHS = (
    "/api/v1",
    "/v1",
    "/console",
    "/ws",
    "/healthz",
    "/readyz",
    "/metrics",
    "/telegram",
    "/slack",
    "/hooks",
)


def _unusable_path(path: str, taken: dict[str, str]) -> str | None:
    """Why a platform cannot post to `path` on the shared server, or None (its shape is checked by
    the channel's own config model)."""
    if path == "/":
        return "must be a path of its own, such as /api/messages"
    for own in _SERVER_PATHS:
        if path == own or path.startswith(own + "/"):
            return f"the gateway serves {own} itself: choose another path"
    if path in taken:
        return f"channel {taken[path]!r} already receives its platform's calls at this path"
    return None


def _default_channels() -> dict[str, AnyChannelConfig]:
    return {"web": WebChannelConfig()}


PLATFORM_TYPES = ("web", "telegram", "discord", "slack", "teams", "messenger")


def _default_roles() -> list[Role]:
    return ["user"]


class UserConfig(Strict):
    """A person the operator declares: their roles, their accounts on the platforms, their tokens."""

    roles: list[Role] = Field(default_factory=_default_roles, description="admin, system, user or public.")
    identities: list[str] = Field(
        default_factory=list, description="The person's platform identities, e.g. telegram:123, discord:456."
    )
    tokens: list[Annotated[SecretStr, Field(min_length=16)]] = Field(
        default_factory=list,
        description="Bearer tokens (16+ characters) for the chat page, the console, the REST and OpenAI APIs.",
    )
    # The person's time zone, for reminders ("tomorrow 9:00"); unset: what they set with /timezone,
    # else the config's top-level timezone.
    timezone: str | None = None

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str | None) -> str | None:
        return check_zone(value) if value is not None else None

    @field_validator("identities")
    @classmethod
    def _identity_shape(cls, value: list[str]) -> list[str]:
        for ident in value:
            platform, sep, rest = ident.partition(":")
            if not sep or not platform or not rest:
                raise ValueError(f"identity {ident!r} must look like '<platform>:<id>', e.g. 'telegram:123'")
        return value


class SessionConfig(Strict):
    """How conversations map to sessions."""

    dm_scope: Literal["per_channel", "per_user"] = Field(
        default="per_channel",
        description="per_channel: one DM session per platform; per_user: a person's DM session follows them "
        "across linked platforms.",
    )
    # Accepted but no longer read: memory.session_memory decides what a session keeps.
    history_messages: Annotated[int, Field(ge=1, le=10_000)] | None = None
    max_pending_per_session: Annotated[int, Field(ge=1, le=10_000)] = Field(
        default=32, description="Messages that may wait in one conversation before the next gets 429 (or 'busy')."
    )


class ProjectConfig(Strict):
    """Where a project's memory belongs (`project:<name>`): recalled only in these conversations,
    and what formation learns there goes to the project."""

    # Conversation keys as logs name them (session=…), e.g. slack:group:C0123 or telegram:group:-100123;
    # a key covers its threads and topics too; * and ? match any characters (slack:group:C01*).
    conversations: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    # Channel names from `channels:`: every group conversation on them.
    channels: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)


ProjectName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]


class LoggingConfig(Strict):
    """What the gateway logs, and in which format."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(default="INFO", description="The lowest level logged.")
    # text: `<time> <level> <logger> <event> key=value ...`; json: one object a line, the same
    # event name and fields as keys, for a log collector. Secrets are redacted in both.
    format: Literal["text", "json"] = "text"
    # One `http_request` line per request on the shared web server: method, path (never the query
    # string or a header, where tokens travel), status, ms, client address.
    access_log: bool = False


class ShutdownConfig(Strict):
    """How the gateway stops."""

    # On SIGTERM or SIGINT, turns in flight get this long to finish; the rest are cancelled and
    # answered at the next start. Under `docker stop`'s 10 s, so the gateway still closes cleanly.
    timeout_seconds: Annotated[float, Field(ge=0, le=3600)] = 8.0


class Config(Strict):
    ai: AIConfig = Field(default_factory=AIConfig)
    agents: AgentsConfig = Field(default_factory=AgentsConfig, description="The agents people talk to.")
    storage: StorageConfig = Field(default_factory=StorageConfig)
    channels: dict[str, ChannelConfig] = Field(
        default_factory=_default_channels,
        description="The chat platforms, each under a name of your choosing; `type` says which platform it is "
        "(the name, when the name is a platform's).",
    )
    users: dict[str, UserConfig] = Field(default_factory=dict, description="People, by user id.")
    session: SessionConfig = Field(default_factory=SessionConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    projects: dict[ProjectName, ProjectConfig] = Field(
        default_factory=dict, description="Projects, by name: project:<name> memory belongs to their conversations."
    )
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    shutdown: ShutdownConfig = Field(default_factory=ShutdownConfig)
    timezone: str = Field(
        default="UTC", description="IANA time zone for dates shown to the model, the daily files' dates and reminders."
    )
    # Agent runs on a schedule, inbound webhooks, and the reminders people set (docs/schedules.md).
    schedules: dict[Annotated[str, Field(min_length=1, max_length=64)], ScheduleConfig] = Field(default_factory=dict)
    hooks: dict[str, HookConfig] = Field(default_factory=dict, description="Inbound webhooks, POST /hooks/<name>.")
    reminders: RemindersConfig = Field(default_factory=RemindersConfig)

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        return check_zone(value)

    def check_semantics(self) -> list[tuple[str, object, str]]:
        """Cross-field problems as (path, value, reason); empty when the config is usable."""
        problems: list[tuple[str, object, str]] = []
        names = [a.name for a in self.agents.list]
        if not names:
            problems.append(("agents.list", [], "at least one agent is required"))
        for i, name in enumerate(names):
            if name in names[:i]:
                problems.append((f"agents.list[{i}].name", name, "duplicate agent name"))
        seen_ident: dict[str, str] = {}
        seen_tokens: dict[str, str] = {}
        for uid, user in self.users.items():
            for j, ident in enumerate(user.identities):
                if ident in seen_ident:
                    problems.append(
                        (f"users.{uid}.identities[{j}]", ident, f"already belongs to user {seen_ident[ident]!r}")
                    )
                seen_ident[ident] = uid
            for j, tok in enumerate(user.tokens):
                raw = tok.get_secret_value()
                if raw in seen_tokens:
                    problems.append((f"users.{uid}.tokens[{j}]", tok, f"same token as user {seen_tokens[raw]!r}"))
                seen_tokens[raw] = uid
        for project, bound in self.projects.items():
            for j, channel in enumerate(bound.channels):
                if channel not in self.channels:
                    known = ", ".join(sorted(self.channels)) or "none"
                    problems.append((f"projects.{project}.channels[{j}]", channel, f"no such channel (known: {known})"))
            if not bound.conversations and not bound.channels:
                problems.append((f"projects.{project}", {}, "binds no conversation: list conversations or channels"))
        paths: dict[str, str] = {}  # the paths platforms post to on the shared server -> the channel's name
        for name, ch in self.channels.items():
            if isinstance(ch, TelegramChannelConfig) and ch.mode == "webhook" and ch.webhook_secret is None:
                problems.append(
                    (
                        f"channels.{name}.webhook_secret",
                        None,
                        "webhook mode needs a secret (16+ characters) to verify Telegram's calls",
                    )
                )
            if isinstance(ch, SlackChannelConfig):
                if ch.mode == "socket" and ch.app_token is None:
                    problems.append(
                        (f"channels.{name}.app_token", None, "socket mode needs an app-level token (xapp-...)")
                    )
                if ch.mode == "http" and ch.signing_secret is None:
                    problems.append(
                        (
                            f"channels.{name}.signing_secret",
                            None,
                            "http mode needs the signing secret to verify Slack's requests",
                        )
                    )
            if isinstance(ch, TeamsChannelConfig | MessengerChannelConfig) and ch.enabled:
                key = "endpoint_path" if isinstance(ch, TeamsChannelConfig) else "webhook_path"
                path = getattr(ch, key)
                if (why := _unusable_path(path, paths)) is not None:
                    problems.append((f"channels.{name}.{key}", path, why))
                paths.setdefault(path, name)
            if isinstance(ch, WebChannelConfig) and ch.enabled and not ch.is_loopback:
                if not seen_tokens:
                    problems.append(
                        (
                            f"channels.{name}.host",
                            ch.host,
                            "the web channel binds beyond loopback but no user has tokens; "
                            "add users.<id>.tokens or bind to 127.0.0.1",
                        )
                    )
        agents = [a.name for a in self.agents.list]
        problems += schedule_problems(self.schedules, self.hooks, self.channels, self.users, agents)
        return problems

    def unread_keys(self) -> list[tuple[str, str]]:
        """Keys that are accepted but have no effect, as (path, why), to be logged once at start."""
        unread = []
        if self.memory.mode is not None:
            unread.append(("memory.mode", "memory has one mode for now"))
        if self.memory.search.enabled is not None:
            unread.append(("memory.search.enabled", "memory.search.provider decides (empty: keyword search)"))
        if self.session.history_messages is not None:
            unread.append(("session.history_messages", "memory.session_memory decides what a session keeps"))
        return unread

    def declared_identities(self) -> frozenset[str]:
        """Identities the operator assigned to users here (trusted on every platform)."""
        return frozenset(i for u in self.users.values() for i in u.identities)

    def declared_users(self) -> list[tuple[str, list[str], list[str]]]:
        """The users this file declares, as (id, roles, identities): what the gateway writes to the
        database at start and on reload (IdentityStore.sync_declared), and what the CLI resolves
        `--user` against. A user with tokens owns web:<id> and api:<id>; a loopback web channel's
        anonymous local user is declared too."""
        declared = []
        for uid, user in self.users.items():
            idents = list(user.identities)
            if user.tokens:
                idents += [f"web:{uid}", f"api:{uid}"]
            declared.append((uid, [str(r) for r in user.roles], sorted(set(idents), key=idents.index)))
        for ch in self.web_channels().values():
            if ch.allow_local_anonymous and ch.is_loopback and ch.local_user not in self.users:
                declared.append((ch.local_user, ["user"], [f"web:{ch.local_user}"]))
        return declared

    def projects_of(self, conversation: str | None) -> tuple[str, ...]:
        """The projects `conversation` (a session key) is bound to, by name."""
        if conversation is None or not self.projects:
            return ()
        return tuple(name for name, bound in self.projects.items() if _binds(bound, conversation))

    def agent(self, name: str | None) -> AgentConfig | None:
        if name in (None, "", "default"):
            return self.agents.list[0]
        return next((a for a in self.agents.list if a.name == name), None)

    def web_channels(self) -> dict[str, WebChannelConfig]:
        return {n: c for n, c in self.channels.items() if isinstance(c, WebChannelConfig) and c.enabled}


def _binds(bound: ProjectConfig, conversation: str) -> bool:
    """Is `conversation` (`<channel>:<kind>:<chat>[:<thread>]`) one of `bound`'s? A listed key covers
    its threads; a channel covers its group conversations (a DM is one person's, never a project's)."""
    channel, _, rest = conversation.partition(":")
    if channel in bound.channels and not rest.startswith("dm:"):
        return True
    for pattern in bound.conversations:
        if conversation == pattern or conversation.startswith(pattern + ":"):
            return True
        if any(c in pattern for c in "*?[") and fnmatch.fnmatchcase(conversation, pattern):
            return True
    return False
