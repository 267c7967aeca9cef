# ruff: noqa: RUF001  (the texts are unicode on purpose)
"""The numpy BERT runtime (memory.embed.minilm) on the bundled all-MiniLM-L6-v2: the same embeddings as
sentence-transformers, torch never imported, RSS and BLAS threads bounded, the safetensors reader,
refusal of models it does not run, and LocalEmbedder's choice of runtime with its fallback."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory.embed.embeddings import LOCAL_MODEL_ID, LocalEmbedder, local_model_path
from memory.embed.errors import EmbeddingError
from memory.embed.minilm import BertSentenceEncoder, UnsupportedModelError, limit_blas_threads, read_safetensors

REPO = Path(__file__).resolve().parents[2]

LONG = " ".join(f"word{n} and some more text about item {n}." for n in range(120))  # ~1000 tokens
TEXTS = [
    "",
    " ",
    "ok",
    "Hi!",
    "hello world",
    "Hello World",
    "   padded with spaces and\ttabs\n\nand newlines   ",
    "Alice drinks oolong tea every morning before work.",
    "The train to Lyon leaves at 7:45 from platform 3 — don't be late!",
    "What did Caroline say about the adoption agency last week?",
    "I'm swamped with the kids & work. What's up with you? Anything new?",
    "My sister adopted a puppy; his name is Miso and he loves chasing the cat.",
    "Remind me: dentist on Friday at 10am, plumber on Tuesday, and call mom on Sunday evening.",
    "def f(x):\n    return x ** 2  # squares\n",
    "https://example.com/path?query=1&other=two#anchor",
    "user@example.org wrote: 'see attachment v2.3.1-rc4'",
    "3.14159 2.71828 1.41421 1,000,000 $12.50 €9,99 50%",
    "Ünïcödé çàfé naïve résumé façade — «quotes» and ‘curly’ ones",
    "Straße, Ærø, Øresund, Łódź, İstanbul, ﬁnance (ligature)",
    "e\u0301 combining acute, a\u0308 combining diaeresis",
    "zero\u200bwidth\u200bspaces and a soft\u00adhyphen",
    "control\x00chars\x07in\x1ftext",
    "東京で寿司を食べました。とても美味しかったです。",
    "我昨天去了北京，天气很好。",
    "한국어 문장도 들어 있습니다.",
    "Привет, как дела? Всё хорошо.",
    "مرحبا، كيف حالك اليوم؟",
    "नमस्ते, आप कैसे हैं?",
    "שלום עולם",
    "Γειά σου Κόσμε",
    "ไปเที่ยวทะเลกันไหม",
    "🙂🎉🚀 emoji only? 👍🏽👨‍👩‍👧",
    "!!!???...,,,;;;:::",
    "a " * 40,
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "x" * 300,  # one word longer than max_input_chars_per_word: [UNK]
    "The quarterly tax report is due on Friday; send the draft to accounting by Wednesday noon.",
    "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    "Melanie: That's amazing! I painted a sunrise over the lake with the kids last weekend.",
    "We should go hiking in the Alps next summer, maybe around Chamonix or Zermatt if the weather holds.",
    " ".join(["the meeting notes from the planning session"] * 12),
    "Mixed 中文 and English in one sentence, with 日本語 too.",
    "Numbers: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
    "UPPERCASE SHOUTING ABOUT THE DEADLINE",
    "lowercase whisper about the deadline",
    "A" * 5 + " " + "B" * 5,
    "[CLS] [SEP] [PAD] [MASK] literal special-token strings",
    LONG,
    LONG[: len(LONG) // 2],
    "字" * 400,  # one token per CJK character: truncated at 256 tokens
]


@pytest.fixture(scope="module")
def encoder() -> BertSentenceEncoder:
    limit_blas_threads(1)  # as LocalEmbedder does with memory.search.threads (tests use 1)
    return BertSentenceEncoder(local_model_path())


@pytest.fixture(scope="module")
def reference() -> Iterator[LocalEmbedder]:
    """sentence-transformers (torch, one thread) through LocalEmbedder's fallback path: loaded once."""
    embedder = LocalEmbedder(threads=1, runtime="sentence-transformers")
    asyncio.run(embedder.load())
    assert embedder.runtime == "sentence-transformers"
    yield embedder
    embedder.close()


def _variant(tmp_path: Path, changes: dict[str, Any]) -> Path:
    """The bundled model directory, linked file by file, with some files replaced (None: removed)."""
    source, target = local_model_path(), tmp_path / "model"
    for path in source.rglob("*"):
        if path.is_file():
            link = target / path.relative_to(source)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(path)
    for name, content in changes.items():
        (target / name).unlink()
        if isinstance(content, bytes):
            (target / name).write_bytes(content)
        elif content is not None:
            (target / name).write_text(json.dumps(content))
    return target


def _json(name: str, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((local_model_path() / name).read_text())
    return data | changes


def _json_list(name: str) -> list[Any]:
    data: list[Any] = json.loads((local_model_path() / name).read_text())
    return data


CLS_POOLING = _json("1_Pooling/config.json", pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
TOKENIZER_PAST_VOCAB = _json("tokenizer.json") | {
    "added_tokens": [
        *_json("tokenizer.json")["added_tokens"],
        {"id": 30522, "content": "[NEW]", "single_word": False, "lstrip": False, "rstrip": False}
        | {"normalized": False, "special": True},
    ]
}
WITH_DENSE = [
    *_json_list("modules.json"),
    {"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"},
]


async def test_the_same_embeddings_as_sentence_transformers(
    encoder: BertSentenceEncoder, reference: LocalEmbedder
) -> None:
    ours = encoder.encode(TEXTS)
    theirs = await reference.embed_documents(TEXTS)
    assert ours.shape == theirs.shape == (len(TEXTS), 384) and ours.dtype == np.float32
    assert np.linalg.norm(ours, axis=1) == pytest.approx(np.ones(len(TEXTS)), abs=1e-5)
    cosines = np.sum(ours * theirs, axis=1)
    worst = int(np.argmin(cosines))
    assert cosines.min() >= 0.9999, f"text {worst} {TEXTS[worst][:40]!r}: cosine {cosines[worst]}"


def test_a_text_gives_the_same_row_alone_or_in_any_batch(encoder: BertSentenceEncoder) -> None:
    texts = TEXTS[:24]
    together = encoder.encode(texts)
    alone = np.stack([encoder.encode([t])[0] for t in texts])
    in_pairs = encoder.encode(texts, batch_size=2)
    assert together == pytest.approx(alone, abs=2e-6)  # padding changes nothing
    assert together == pytest.approx(in_pairs, abs=2e-6)
    assert encoder.encode([]).shape == (0, 384)
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        encoder.encode(["x"], batch_size=0)


def test_input_past_max_seq_length_is_truncated(encoder: BertSentenceEncoder) -> None:
    assert encoder.spec.max_seq_length == 256  # sentence_bert_config.json
    head = " ".join(f"token{n}" for n in range(300))  # far more than 256 tokens
    a, b, short = encoder.encode([head + " apples and pears", head + " a different ending", head[:200]])
    assert float(a @ b) == pytest.approx(1.0, abs=1e-6)  # the tails were cut
    assert float(a @ short) < 0.999


def test_both_forms_of_the_pooling_config_are_read(tmp_path: Path, encoder: BertSentenceEncoder) -> None:
    for n, pooling in enumerate(
        [{"embedding_dimension": 384, "pooling_mode": "mean"}, {"word_embedding_dimension": 384}]
    ):
        other = BertSentenceEncoder(_variant(tmp_path / str(n), {"1_Pooling/config.json": pooling}))
        assert other.encode(["hello there"]) == pytest.approx(encoder.encode(["hello there"]), abs=1e-6)


def test_read_safetensors_maps_the_file_without_copies() -> None:
    from safetensors.numpy import load_file

    path = local_model_path() / "model.safetensors"
    ours = read_safetensors(path)
    theirs = load_file(path)
    assert set(ours) == set(theirs)
    for name, array in theirs.items():
        assert ours[name].dtype == array.dtype and np.array_equal(ours[name], array), name
    word = ours["embeddings.word_embeddings.weight"]
    assert not word.flags.writeable and not word.flags.owndata  # a view on the read-only mapping


def test_torch_is_never_imported_and_rss_and_threads_stay_small() -> None:
    probe = """
import json, sys
def rss():
    return next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmRSS')) / 1024
import numpy
bare = rss()
import memory.embed.minilm
from memory.embed.embeddings import local_model_path
memory.embed.minilm.limit_blas_threads(1)
encoder = memory.embed.minilm.BertSentenceEncoder(local_model_path())
texts = [f"message {n}: " + "the garden, the weather and the neighbours " * (n % 9) for n in range(60)]
encoder.encode(texts + ["word " * 400, "日本語のテキスト", "", "ok"])
used = rss() - bare
import asyncio
from threadpoolctl import threadpool_info
from memory.embed.embeddings import LocalEmbedder
embedder = LocalEmbedder(threads=1, runtime="numpy")
asyncio.run(embedder.embed_query("hello"))
heavy = sorted(m for m in ("torch", "transformers", "sentence_transformers", "scipy") if m in sys.modules)
blas = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
before = rss()
onnx = LocalEmbedder(threads=1)  # auto: onnxruntime
asyncio.run(onnx.embed_documents(texts))
onnx_used = rss() - before
heavy += sorted(m for m in ("torch", "onnx") if m in sys.modules)  # onnx builds the graph in a child
print(json.dumps({"used": used, "heavy": heavy, "runtime": embedder.runtime, "blas": blas,
                  "onnx_runtime": onnx.runtime, "onnx_used": onnx_used}))
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["heavy"] == [] and result["runtime"] == "numpy" and result["onnx_runtime"] == "onnx"
    assert result["blas"] and set(result["blas"]) == {1}  # memory.search.threads
    # Weights ~45 MiB (mapped, touched pages only), tokenizer ~10, scratch ~12, numpy's imports:
    # ~90 MiB over a bare python with numpy, where torch + sentence-transformers take ~480.
    assert result["used"] < 110, result
    # onnxruntime (~29 MiB) with its prepacked weights (mapped from the cached graph's data file).
    assert result["onnx_used"] < 130, result


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"1_Pooling/config.json": CLS_POOLING}, "not mean pooling"),
        ({"1_Pooling/config.json": {"embedding_dimension": 384, "pooling_mode": "max"}}, r"\['max'\], not mean"),
        ({"1_Pooling/config.json": {"embedding_dimension": 384, "pooling_mode": ["mean", "cls"]}}, "not mean"),
        ({"sentence_bert_config.json": {"transformer_task": "fill-mask"}}, "settings this runtime ignores"),
        ({"modules.json": WITH_DENSE}, "not Transformer, Pooling"),
        ({"modules.json": None}, "no modules.json"),
        ({"config.json": _json("config.json", model_type="distilbert")}, "not one of bert"),
        ({"config.json": _json("config.json", hidden_act="gelu_new")}, "not the erf 'gelu'"),
        ({"config.json": _json("config.json", position_embedding_type="relative_key")}, "position_embedding_type"),
        ({"sentence_bert_config.json": {"max_seq_length": 256, "do_lower_case": True}}, "do_lower_case"),
        ({"model.safetensors": None}, "no model.safetensors"),
        ({"tokenizer.json": None}, "no tokenizer.json"),
    ],
)
def test_models_it_does_not_run_are_refused(tmp_path: Path, changes: dict[str, Any], reason: str) -> None:
    with pytest.raises(UnsupportedModelError, match=reason):
        BertSentenceEncoder(_variant(tmp_path, changes))


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"model.safetensors": b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      "}, "bad safetensors header"),
        ({"model.safetensors": b"\xff" * 16}, "not a safetensors file"),
        ({"config.json": _json("config.json", intermediate_size=1024)}, "has shape"),
        ({"config.json": _json("config.json", num_attention_heads=7)}, "not a multiple of 7 heads"),
        ({"tokenizer.json": TOKENIZER_PAST_VOCAB}, "more tokens than the model's vocab_size"),
    ],
)
def test_a_broken_model_is_an_error_not_a_fallback(tmp_path: Path, changes: dict[str, Any], reason: str) -> None:
    with pytest.raises(EmbeddingError, match=reason) as caught:
        BertSentenceEncoder(_variant(tmp_path, changes))
    assert not isinstance(caught.value, UnsupportedModelError)


async def test_local_embedder_runs_numpy_when_asked_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="clawgate.embeddings")
    embedder = LocalEmbedder(threads=1, runtime="numpy")
    try:
        assert not embedder.loaded
        await embedder.load()
        assert embedder.loaded and embedder.runtime == "numpy" and embedder.dim == 384
    finally:
        embedder.close()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("embedding_runtime")]
    assert lines == [f"embedding_runtime runtime=numpy model={LOCAL_MODEL_ID} threads=1"]
    with pytest.raises(ValueError, match="runtime 'tensorflow': one of auto, onnx, numpy, sentence-transformers"):
        LocalEmbedder(runtime="tensorflow")


async def test_without_threadpoolctl_the_uncapped_threads_are_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "threadpoolctl", None)  # import threadpoolctl → ImportError
    caplog.set_level(logging.INFO, logger="clawgate.embeddings")
    embedder = LocalEmbedder(threads=1, runtime="numpy")
    try:
        await embedder.load()
    finally:
        embedder.close()
    (record,) = [r for r in caplog.records if r.getMessage().startswith("embedding_runtime")]
    assert record.levelno == logging.WARNING
    assert "runtime=numpy" in record.getMessage() and "threads=unlimited" in record.getMessage()
    assert "OPENBLAS_NUM_THREADS" in record.getMessage()


async def test_other_models_fall_back_to_sentence_transformers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, reference: LocalEmbedder
) -> None:
    path = _variant(tmp_path, {"1_Pooling/config.json": CLS_POOLING})
    forced = LocalEmbedder(threads=1, model_path=path, model_id=str(path), runtime="numpy")
    try:
        with pytest.raises(UnsupportedModelError, match="not mean pooling"):
            await forced.embed_query("hello")
        assert not forced.loaded
    finally:
        forced.close()

    caplog.set_level(logging.INFO, logger="clawgate.embeddings")
    embedder = LocalEmbedder(threads=1, model_path=path, model_id=str(path))
    try:
        cls_vectors = await embedder.embed_documents(["My sister adopted a puppy", "The tax report is due"])
        assert embedder.runtime == "sentence-transformers" and embedder.dim == 384
    finally:
        embedder.close()
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("embedding_runtime")]
    # The configured precision names the vector space; this runtime computes fp32 and says so.
    assert line.startswith(
        f"embedding_runtime runtime=sentence-transformers model={path}#int8 threads=1 precision=fp32 reason="
    )
    assert "not mean pooling" in line
    mean_vectors = await reference.embed_documents(["My sister adopted a puppy", "The tax report is due"])
    assert np.sum(cls_vectors * mean_vectors, axis=1).max() < 0.99  # it pooled as its config says
