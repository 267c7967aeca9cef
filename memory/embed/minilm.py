"""An inference-only BERT sentence encoder in numpy, for sentence-transformers models of the BERT
family with mean pooling: the bundled all-MiniLM-L6-v2 and its kin (DESIGN §7).

Why: torch and sentence-transformers cost ~400 MiB of RSS and seconds of imports to run a 22M-parameter
model; numpy is already loaded. This module needs only numpy and `tokenizers` (and threadpoolctl to
cap BLAS threads), and never imports torch, transformers or sentence-transformers.

What it runs, read from the model directory: modules.json must be Transformer → Pooling (mean) →
optional Normalize; config.json a `bert` model with the erf GELU and absolute positions, or one of the
RoBERTa family (`xlm-roberta`, `roberta`: the same layers, positions counted from pad_token_id + 1);
sentence_bert_config.json gives max_seq_length (longer input is truncated, as sentence-transformers
does; a model saved by sentence-transformers 5+ keeps it in tokenizer_config.json instead). The
tokenizer is whatever tokenizer.json holds: WordPiece for BERT, the SentencePiece unigram of XLM-R for
the multilingual models. Anything else raises UnsupportedModelError, so that the caller can use
sentence-transformers.

Weights stay in the file: the token embeddings (half of them) are read a row at a time with pread
(see RowTable), the rest are float32 views on a read-only mmap of model.safetensors (the header is
parsed here). safetensors' own numpy loader would copy every tensor into process memory (~87 MiB
for MiniLM); this way only the ~42 MiB of matrices every batch multiplies are resident, shared with
any other process reading the file, and dropped by the kernel under pressure rather than swapped.
Every matmul goes to numpy's BLAS, whose threads the caller caps (`limit_blas_threads`): with two
OpenBLAS threads on a busy 2-core machine a batch took 7x longer than with one.
"""

from __future__ import annotations

import itertools
import json
import math
import mmap
import os
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memory.embed.bert_spec import BertSpec as BertSpec
from memory.embed.bert_spec import UnsupportedModelError as UnsupportedModelError
from memory.embed.bert_spec import read_spec as read_spec
from memory.embed.bert_spec import weights_prefix as weights_prefix
from memory.embed.errors import EmbeddingError

Array = npt.NDArray[np.float32]

# One forward pass holds at most this many tokens (padded), BATCH_SIZE texts at most: it bounds the
# scratch arrays of one pass (9 arrays of tokens x hidden floats: 7 MiB for MiniLM; a larger budget was
# no faster).
MAX_BATCH_TOKENS = 512
BATCH_SIZE = 16
# Attention scores are computed for this many floats at most (a few texts at a time; 4 MiB), and the
# feed-forward block this many tokens at a time: scratch memory stays small and in cache.
SCORES_FLOATS = 1 << 20
FFN_ROWS = 256
_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "BF16": None, "I64": np.int64, "I32": np.int32}
# Abramowitz & Stegun 7.1.26: erf(z) = 1 - t·(a1 + a2·t + … + a5·t⁴)·exp(-z²), t = 1/(1 + p·z), z ≥ 0,
# absolute error ≤ 1.5e-7: the exact (erf) GELU to float32 precision, in a handful of vector passes
# (scipy.special.erf is scalar here: 5x slower, and importing scipy.special costs ~25 MiB).
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def load_tokenizer(spec: BertSpec) -> Any:
    """The model's fast tokenizer (tokenizers.Tokenizer), unpadded and truncated as
    sentence-transformers truncates; every id it gives is within the model's vocabulary."""
    from tokenizers import Tokenizer

    path = spec.transformer_dir / "tokenizer.json"
    if not path.is_file():
        raise UnsupportedModelError(f"{spec.transformer_dir}: no tokenizer.json (a slow tokenizer only)")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception for a file it cannot parse
        raise EmbeddingError(f"{path}: {exc}") from exc
    tokenizer.no_padding()  # tokenizer.json pads to a fixed 128; batches are padded by the encoder
    tokenizer.enable_truncation(max_length=spec.max_seq_length)
    if tokenizer.get_vocab_size(with_added_tokens=True) > spec.vocab_size:
        # Checked once, so that the encoders' gathers may skip their bounds checks.
        raise EmbeddingError(f"{path}: more tokens than the model's vocab_size {spec.vocab_size}")
    return tokenizer


def batches(ids: Sequence[Sequence[int]], batch_size: int) -> Iterator[list[int]]:
    """The texts (as indices into `ids`, their token ids) in forward passes: similar lengths together,
    since every text of a batch is padded to its longest; at most `batch_size` texts and
    MAX_BATCH_TOKENS padded tokens a pass (or one text, if that is longer)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    order = sorted(range(len(ids)), key=lambda n: len(ids[n]))
    at = 0
    while at < len(order):
        end = at + 1
        while end < len(order) and end - at < batch_size and (end - at + 1) * len(ids[order[end]]) <= MAX_BATCH_TOKENS:
            end += 1
        yield order[at:end]
        at = end


def encode_in_batches(
    tokenizer: Any, texts: Sequence[str], width: int, batch_size: int, forward: Callable[[list[list[int]]], Array]
) -> Array:
    """float32 (len(texts), width): `forward` run on the token ids of each batch (see batches), its
    rows put back in the texts' order. Both runtimes encode through this."""
    out = np.zeros((len(texts), width), dtype=np.float32)
    if not texts:
        return out
    # One text at a time: encode_batch starts a thread per core and was no faster.
    ids = [tokenizer.encode(text).ids for text in texts]
    for batch in batches(ids, batch_size):
        out[batch] = forward([ids[n] for n in batch])
    return out


def read_safetensors(path: Path) -> dict[str, npt.NDArray[Any]]:
    """Every tensor of a .safetensors file as a read-only numpy view on one mmap of the file."""
    return _map_safetensors(path)[0]


def _map_safetensors(path: Path) -> tuple[dict[str, npt.NDArray[Any]], dict[str, int]]:
    """The tensors as views on a read-only mmap, and where each one's data starts in the file.

    The format: an 8-byte little-endian header length, a JSON header mapping each name to its dtype,
    shape and [begin, end) byte offsets after the header, then the raw little-endian data."""
    try:
        with path.open("rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        raise UnsupportedModelError(f"{path.parent}: no {path.name}") from None
    except (OSError, ValueError) as exc:
        raise EmbeddingError(f"{path}: cannot map it ({exc})") from exc
    size = len(mapped)
    header_len = int.from_bytes(mapped[:8], "little") if size >= 8 else -1
    if not 0 < header_len <= size - 8:
        raise EmbeddingError(f"{path}: not a safetensors file (header length {header_len}, file {size} bytes)")
    try:
        header = json.loads(mapped[8 : 8 + header_len])
    except ValueError as exc:
        raise EmbeddingError(f"{path}: bad safetensors header ({exc})") from exc
    start = 8 + header_len
    tensors: dict[str, npt.NDArray[Any]] = {}
    offsets: dict[str, int] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(info.get("dtype"))
        if dtype is None:
            raise UnsupportedModelError(f"{path}: tensor {name} is {info.get('dtype')}, not a numpy dtype")
        shape = tuple(int(n) for n in info["shape"])
        begin, end = (int(n) for n in info["data_offsets"])
        count = math.prod(shape)
        if not (0 <= begin <= end <= size - start and end - begin == count * np.dtype(dtype).itemsize):
            raise EmbeddingError(f"{path}: tensor {name} has offsets {begin}..{end} for shape {shape} {dtype}")
        tensors[name] = np.frombuffer(mapped, dtype=dtype, count=count, offset=start + begin).reshape(shape)
        offsets[name] = start + begin
    return tensors, offsets


class RowTable:
    """A float32 (rows, width) table in a file, read a row at a time with pread.

    For the token embeddings (45 MiB for MiniLM): a batch needs a few hundred of its 30522 rows, and
    rows read through the mapping would stay in the process's RSS, each with up to 15 neighbouring
    pages (the kernel's fault-around), until most of the table is resident. Read this way, the rows
    live in the page cache only (shared, and dropped first under pressure); ~1 µs a row."""

    def __init__(self, path: Path, offset: int, shape: tuple[int, int]) -> None:
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        weakref.finalize(self, os.close, self._fd)
        self._offset = offset
        self.rows, self.width = shape
        self._row_bytes = self.width * 4

    def take(self, ids: npt.NDArray[np.intp], out: Array, scratch: Array) -> None:
        """out[i] = table[ids[i]]; ids in range (the caller checked), scratch of (len(ids), width)."""
        unique, inverse = np.unique(ids, return_inverse=True)
        for n, row in enumerate(unique.tolist()):
            if os.preadv(self._fd, [scratch[n]], self._offset + row * self._row_bytes) != self._row_bytes:
                raise EmbeddingError(f"short read of token embedding {row}: the model file changed?")
        np.take(scratch, inverse, axis=0, out=out, mode="clip")


@dataclass(frozen=True, slots=True)
class _Layer:
    query: Array  # weights as stored, (out, in): the matmuls read them transposed, without a copy
    query_bias: Array
    key: Array
    key_bias: Array
    value: Array
    value_bias: Array
    attn_out: Array
    attn_out_bias: Array
    attn_norm: tuple[Array, Array]
    up: Array
    up_bias: Array
    down: Array
    down_bias: Array
    out_norm: tuple[Array, Array]


def token_embeddings(spec: BertSpec) -> RowTable:
    """The model's token embedding table, read a row at a time (both runtimes gather from it)."""
    weights = spec.transformer_dir / "model.safetensors"
    tensors, offsets = _map_safetensors(weights)
    get = _TensorReader(tensors, weights)
    table = get("embeddings.word_embeddings.weight", (spec.vocab_size, spec.hidden))
    return RowTable(
        weights, offsets[get.name_of("embeddings.word_embeddings.weight")], (table.shape[0], table.shape[1])
    )


class BertSentenceEncoder:
    """A loaded model: `encode(texts)` gives one pooled (and, if the model says so, unit) row per text."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        spec = read_spec(self.path)
        self.spec = spec
        weights = spec.transformer_dir / "model.safetensors"
        get = _TensorReader(read_safetensors(weights), weights)
        h, i = spec.hidden, spec.intermediate
        self._word = token_embeddings(spec)
        self._position = get("embeddings.position_embeddings.weight", (spec.max_positions, h))[spec.position_offset :]
        self._token_type0 = get("embeddings.token_type_embeddings.weight", (None, h))[0]
        self._embed_norm = (get("embeddings.LayerNorm.weight", (h,)), get("embeddings.LayerNorm.bias", (h,)))
        self._layers = []
        for n in range(spec.layers):
            p = f"encoder.layer.{n}."
            self._layers.append(
                _Layer(
                    query=get(p + "attention.self.query.weight", (h, h)),
                    query_bias=get(p + "attention.self.query.bias", (h,)),
                    key=get(p + "attention.self.key.weight", (h, h)),
                    key_bias=get(p + "attention.self.key.bias", (h,)),
                    value=get(p + "attention.self.value.weight", (h, h)),
                    value_bias=get(p + "attention.self.value.bias", (h,)),
                    attn_out=get(p + "attention.output.dense.weight", (h, h)),
                    attn_out_bias=get(p + "attention.output.dense.bias", (h,)),
                    attn_norm=(
                        get(p + "attention.output.LayerNorm.weight", (h,)),
                        get(p + "attention.output.LayerNorm.bias", (h,)),
                    ),
                    up=get(p + "intermediate.dense.weight", (i, h)),
                    up_bias=get(p + "intermediate.dense.bias", (i,)),
                    down=get(p + "output.dense.weight", (h, i)),
                    down_bias=get(p + "output.dense.bias", (h,)),
                    out_norm=(get(p + "output.LayerNorm.weight", (h,)), get(p + "output.LayerNorm.bias", (h,))),
                )
            )
        self._tokenizer = load_tokenizer(spec)
        # A batch holds MAX_BATCH_TOKENS tokens, or one text if that is longer.
        tokens = max(MAX_BATCH_TOKENS, spec.max_seq_length) * h
        scores = max(SCORES_FLOATS, spec.heads * spec.max_seq_length**2)
        ffn = FFN_ROWS * i
        self._workspace = _Workspace(
            dict.fromkeys(("x", "rows", "q", "k", "v", "q_grid", "k_grid", "v_grid", "context"), tokens)
            | dict.fromkeys(("up", "gelu_a", "gelu_b", "gelu_c"), ffn)
            | {"down": FFN_ROWS * h, "scores": scores}
        )
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        return self.spec.hidden

    def encode(self, texts: Sequence[str], batch_size: int = BATCH_SIZE) -> Array:
        """float32 (len(texts), dim): mean-pooled, L2-normalized if the model has a Normalize module."""
        with self._lock:  # one workspace
            out = encode_in_batches(self._tokenizer, texts, self.spec.hidden, batch_size, self._forward)
        if self.spec.normalize:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), np.float32(1e-12))
        return out

    def _forward(self, batch: list[list[int]]) -> Array:
        """Pooled rows of one batch. Tokens are packed (no padding) for every per-token step, the
        matmuls that are nearly all of the work; only attention sees the padded (texts, length) grid."""
        spec, ws = self.spec, self._workspace
        grid = _Grid.of(batch)
        x = ws.get("x", (grid.tokens, spec.hidden))
        ids = np.fromiter(itertools.chain.from_iterable(batch), dtype=np.intp, count=grid.tokens)
        self._word.take(ids, x, ws.get("rows", x.shape))
        # mode="clip": indices are in range (checked at load), and "raise" would copy through a buffer.
        x += np.take(self._position, grid.positions, axis=0, out=ws.get("q", x.shape), mode="clip")
        x += self._token_type0
        _layer_norm(x, *self._embed_norm, spec.layer_norm_eps)
        for layer in self._layers:
            self._attention(layer, x, grid)
            self._feed_forward(layer, x)
        pooled: Array = np.add.reduceat(x, grid.starts, axis=0)
        pooled /= grid.lengths[:, None].astype(np.float32)
        return pooled

    def _attention(self, layer: _Layer, x: Array, grid: _Grid) -> None:
        """x ← LayerNorm(x + self-attention(x)), in place."""
        spec, ws = self.spec, self._workspace
        heads, head_dim = spec.heads, spec.hidden // spec.heads
        b, length, packed = grid.texts, grid.length, (grid.tokens, spec.hidden)
        q = _linear(x, layer.query, layer.query_bias, ws.get("q", packed))
        q *= np.float32(1.0 / math.sqrt(head_dim))
        k = _linear(x, layer.key, layer.key_bias, ws.get("k", packed))
        v = _linear(x, layer.value, layer.value_bias, ws.get("v", packed))
        if grid.slots is not None:  # texts of different lengths: onto the padded grid
            q, k, v = (
                grid.spread(m, ws.get(name + "_grid", (b * length, spec.hidden)))
                for name, m in (("q", q), ("k", k), ("v", v))
            )
        context = ws.get("context", (b, length, heads, head_dim))
        # A few texts at a time, so that the (texts, heads, length, length) scores stay small.
        step = max(1, SCORES_FLOATS // (heads * length * length))
        for at in range(0, b, step):
            n = min(step, b - at)
            rows = slice(at * length, (at + n) * length)
            scores = ws.get("scores", (n, heads, length, length))
            keys = _split_heads(k[rows], n, length, heads).transpose(0, 1, 3, 2)
            np.matmul(_split_heads(q[rows], n, length, heads), keys, out=scores)
            scores += grid.key_bias[at : at + n]
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            # Written straight into token order: (n, length, heads, head_dim) seen as (n, heads, length, head_dim).
            np.matmul(scores, _split_heads(v[rows], n, length, heads), out=context[at : at + n].transpose(0, 2, 1, 3))
        flat = context.reshape(b * length, spec.hidden)
        if grid.slots is not None:
            flat = np.take(flat, grid.slots, axis=0, out=ws.get("q", packed), mode="clip")  # q is on the grid now
        attended = _linear(flat, layer.attn_out, layer.attn_out_bias, ws.get("k", packed))  # k is used
        x += attended
        _layer_norm(x, *layer.attn_norm, spec.layer_norm_eps)

    def _feed_forward(self, layer: _Layer, x: Array) -> None:
        """x ← LayerNorm(x + down(GELU(up(x)))), in place, FFN_ROWS tokens at a time: the
        intermediate activations (4x wider) stay small and in cache."""
        spec, ws = self.spec, self._workspace
        for at in range(0, x.shape[0], FFN_ROWS):
            rows = x[at : at + FFN_ROWS]
            n = rows.shape[0]
            up = _linear(rows, layer.up, layer.up_bias, ws.get("up", (n, spec.intermediate)))
            _gelu(up, ws.get("gelu_a", up.shape), ws.get("gelu_b", up.shape), ws.get("gelu_c", up.shape))
            down = _linear(up, layer.down, layer.down_bias, ws.get("down", (n, spec.hidden)))
            rows += down
        _layer_norm(x, *layer.out_norm, spec.layer_norm_eps)


@dataclass(frozen=True, slots=True)
class _Grid:
    """Where the packed tokens of a batch sit in the padded (texts, length) grid attention needs."""

    texts: int
    length: int  # the longest text's, in tokens
    tokens: int  # real tokens, packed text after text
    lengths: npt.NDArray[np.intp]
    starts: npt.NDArray[np.intp]  # each text's first packed row
    positions: npt.NDArray[np.intp]  # each packed token's position in its text
    slots: npt.NDArray[np.intp] | None  # each packed token's row in the grid; None: no padding
    key_bias: Array  # (texts, 1, 1, length): 0 for a token, float32's lowest for padding (exp → 0)

    @classmethod
    def of(cls, batch: list[list[int]]) -> _Grid:
        lengths = np.array([len(ids) for ids in batch], dtype=np.intp)
        texts, length, tokens = len(batch), int(lengths.max()), int(lengths.sum())
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.intp)
        positions = np.arange(tokens, dtype=np.intp) - np.repeat(starts, lengths)
        slots = positions + np.repeat(np.arange(texts, dtype=np.intp) * length, lengths)
        mask = np.zeros(texts * length, dtype=np.float32)
        mask[slots] = 1.0
        key_bias = ((1.0 - mask) * np.finfo(np.float32).min).reshape(texts, 1, 1, length)
        return cls(
            texts, length, tokens, lengths, starts, positions, None if tokens == texts * length else slots, key_bias
        )

    def spread(self, packed: Array, out: Array) -> Array:
        """The packed rows onto the grid, zeros in the padding (whatever was there may not be finite)."""
        out.fill(0.0)
        out[self.slots] = packed
        return out


class _Workspace:
    """Scratch arrays kept between batches, each allocated once at its largest size.

    Fresh multi-MB numpy arrays are not reused memory: glibc hands big freed blocks back to the
    kernel, and touching them again costs a page fault per 4 KiB (that was half the encoder's
    time). Allocated at the largest size a batch can need (`reserve`, in floats), a buffer never
    moves, so no freed holes are left in the heap either; its pages become resident only as far as
    batches have used it."""

    def __init__(self, reserve: dict[str, int]) -> None:
        self._reserve = reserve
        self._buffers: dict[str, Array] = {}

    def get(self, name: str, shape: tuple[int, ...]) -> Array:
        size = math.prod(shape)
        buffer = self._buffers.get(name)
        if buffer is None or buffer.size < size:
            buffer = self._buffers[name] = np.empty(max(size, self._reserve.get(name, 0)), dtype=np.float32)
        return buffer[:size].reshape(shape)

    @property
    def nbytes(self) -> int:
        return sum(buffer.nbytes for buffer in self._buffers.values())


def _split_heads(m: Array, b: int, length: int, heads: int) -> Array:
    """(b·length, hidden) → (b, heads, length, head_dim), a view."""
    return m.reshape(b, length, heads, -1).transpose(0, 2, 1, 3)


class _TensorReader:
    """Fetches a named float32 tensor of the expected shape (None: any size on that axis)."""

    def __init__(self, tensors: dict[str, npt.NDArray[Any]], path: Path) -> None:
        self._tensors = tensors
        self._path = path
        self._prefix = weights_prefix(tensors)

    def name_of(self, name: str) -> str:
        return self._prefix + name

    def __call__(self, name: str, shape: tuple[int | None, ...]) -> Array:
        tensor = self._tensors.get(self._prefix + name)
        if tensor is None:
            raise UnsupportedModelError(f"{self._path}: no tensor {name} (not a BertModel checkpoint)")
        if tensor.dtype != np.float32:
            raise UnsupportedModelError(f"{self._path}: {name} is {tensor.dtype}; this runtime runs float32 weights")
        if len(tensor.shape) != len(shape) or any(w not in (None, n) for n, w in zip(tensor.shape, shape, strict=True)):
            raise EmbeddingError(f"{self._path}: {name} has shape {tensor.shape}, config.json says {shape}")
        return tensor


def _linear(x: Array, weight: Array, bias: Array, out: Array) -> Array:
    np.matmul(x, weight.T, out=out)  # BLAS reads the stored (out, in) matrix transposed, in place
    out += bias
    return out


def _layer_norm(x: Array, weight: Array, bias: Array, eps: float) -> None:
    """In place, over the last axis (biased variance, as torch)."""
    x -= x.mean(axis=-1, keepdims=True)
    var = np.einsum("ij,ij->i", x, x)[:, None]
    var /= np.float32(x.shape[-1])
    var += np.float32(eps)
    x *= 1.0 / np.sqrt(var)
    x *= weight
    x += bias


def _gelu(x: Array, a: Array, t: Array, e: Array) -> None:
    """In place: x·Φ(x) with the exact (erf) Φ, as relu(x) - |x|/2·t·poly(t)·exp(-x²/2);
    a, t and e are scratch arrays of x's shape."""
    np.abs(x, out=a)
    np.multiply(a, np.float32(_ERF_P / math.sqrt(2.0)), out=t)
    t += np.float32(1.0)
    np.reciprocal(t, out=t)
    np.multiply(a, a, out=e)
    e *= np.float32(-0.5)
    np.exp(e, out=e)
    e *= a
    poly = np.multiply(t, np.float32(0.5 * _ERF_A[4]), out=a)
    for coefficient in reversed(_ERF_A[:4]):
        poly += np.float32(0.5 * coefficient)
        poly *= t
    poly *= e
    np.maximum(x, np.float32(0.0), out=x)
    x -= poly


def limit_blas_threads(threads: int) -> bool:
    """Cap numpy's BLAS at `threads` threads, for the whole process (OpenBLAS has one count per
    process), with threadpoolctl. False when threadpoolctl is missing: then only OPENBLAS_NUM_THREADS
    (or OMP_NUM_THREADS) set before numpy is first imported limits it."""
    try:
        from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]
    except ImportError:
        return False
    threadpool_limits(limits=threads, user_api="blas")  # kept: not used as a context manager
    return True
