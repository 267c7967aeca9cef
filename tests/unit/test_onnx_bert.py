"""The onnxruntime runtime (memory.embed.onnx_bert) on the bundled all-MiniLM-L6-v2: the numpy runtime's
vectors, the graph built once and cached (rebuilt when the model changes or the cached file is
damaged, never half-written), the same refusals, and LocalEmbedder falling back to numpy when
onnxruntime or a writable cache is missing."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from memory.embed.embeddings import LOCAL_MODEL_ID, LocalEmbedder, local_model_path, model_info
from memory.embed.minilm import BertSentenceEncoder, UnsupportedModelError, limit_blas_threads
from memory.embed.onnx_bert import DATA_FILE, MODEL_FILE, OnnxSentenceEncoder, build_into, cached_model
from tests.unit.test_minilm import CLS_POOLING, TEXTS, _json, _variant


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def onnx_encoder(cache: Path) -> OnnxSentenceEncoder:
    return OnnxSentenceEncoder(local_model_path(), cache_dir=cache)


@pytest.fixture(scope="module")
def numpy_encoder() -> Iterator[BertSentenceEncoder]:
    limit_blas_threads(1)
    yield BertSentenceEncoder(local_model_path())


def test_the_same_vectors_as_the_numpy_runtime(
    onnx_encoder: OnnxSentenceEncoder, numpy_encoder: BertSentenceEncoder
) -> None:
    ours = onnx_encoder.encode(TEXTS, batch_size=7)  # padded batches of mixed lengths
    reference = numpy_encoder.encode(TEXTS)
    assert ours.shape == (len(TEXTS), 384) and ours.dtype == np.float32
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    cosines = np.sum(ours * reference, axis=1)
    assert cosines.min() > 0.99999, [TEXTS[i] for i in np.argsort(cosines)[:3]]
    alone = np.stack([onnx_encoder.encode([t])[0] for t in TEXTS[:12]])
    assert np.allclose(alone, ours[:12], atol=1e-5)  # padding changes nothing
    assert onnx_encoder.encode([]).shape == (0, 384)


def test_int8_is_its_own_graph_and_space_and_close_to_fp32(onnx_encoder: OnnxSentenceEncoder, cache: Path) -> None:
    int8 = OnnxSentenceEncoder(local_model_path(), cache_dir=cache, precision="int8")
    assert int8.model_file.parent != onnx_encoder.model_file.parent
    assert (int8.model_file.parent / DATA_FILE).stat().st_size < 15_000_000  # a quarter of the fp32 matrices
    ours, exact = int8.encode(TEXTS, batch_size=7), onnx_encoder.encode(TEXTS, batch_size=7)
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    cosines = np.sum(ours * exact, axis=1)
    assert 0.97 < cosines.min() < 0.99999, cosines.min()  # quantized, yet the same model's vectors
    # The nearest other text of most texts is the same under both precisions (84 % of these).
    assert (np.argsort(-(ours @ ours.T), axis=1)[:, 1] == np.argsort(-(exact @ exact.T), axis=1)[:, 1]).mean() > 0.8
    assert cached_model(local_model_path(), cache, "int8") == (int8.model_file, False)
    with pytest.raises(ValueError, match="precision 'int4'"):
        cached_model(local_model_path(), cache, "int4")


def test_the_vector_space_follows_the_precision() -> None:
    assert LocalEmbedder(precision="int8").model_id == LOCAL_MODEL_ID + "#int8"
    assert LocalEmbedder(precision="fp32").model_id == LOCAL_MODEL_ID
    assert LocalEmbedder(runtime="numpy", precision="int8").model_id == LOCAL_MODEL_ID  # numpy computes fp32
    # Calibrated on its own, on the same tune half: a grid step below fp32's floor.
    assert (model_info(LOCAL_MODEL_ID + "#int8").min_cosine, model_info(LOCAL_MODEL_ID).min_cosine) == (0.16, 0.17)
    with pytest.raises(ValueError, match="precision"):
        LocalEmbedder(precision="fp16")


def test_the_graph_is_built_once_and_rebuilt_for_a_changed_model(tmp_path: Path, cache: Path) -> None:
    first, built = cached_model(local_model_path(), cache)
    assert (first.parent / DATA_FILE).stat().st_size > 40_000_000  # the matrices beside the graph
    assert (first.parent / MODEL_FILE).stat().st_size < 1_000_000
    again, built = cached_model(local_model_path(), cache)
    assert again == first and not built
    changed = _variant(tmp_path, {"model.safetensors": (local_model_path() / "model.safetensors").read_bytes()})
    other, built = cached_model(changed, cache)
    assert built and other != first  # another file: another key
    assert not [p for p in cache.iterdir() if p.name.startswith(".build-")]  # no staging left behind


def test_a_damaged_cached_graph_is_built_afresh(tmp_path: Path) -> None:
    encoder = OnnxSentenceEncoder(local_model_path(), cache_dir=tmp_path)
    expected = encoder.encode(["the harbour at dawn"])
    data = encoder.model_file.parent / DATA_FILE
    data.write_bytes(data.read_bytes()[:1000])  # a disk that lost most of it
    again = OnnxSentenceEncoder(local_model_path(), cache_dir=tmp_path)
    assert again.built and np.allclose(again.encode(["the harbour at dawn"]), expected, atol=1e-6)


def test_two_processes_building_at_once_share_one_graph(tmp_path: Path) -> None:
    results: list[tuple[Path, bool]] = []
    threads = [threading.Thread(target=lambda: results.append(cached_model(local_model_path(), tmp_path)))]
    threads.append(threading.Thread(target=lambda: results.append(cached_model(local_model_path(), tmp_path))))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(results) == 2 and results[0][0] == results[1][0]
    assert [p.name for p in tmp_path.iterdir()] == [results[0][0].parent.name]


def test_a_cached_graph_runs_without_the_onnx_package(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    cached_model(local_model_path(), cache)
    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx → ImportError
    assert OnnxSentenceEncoder(local_model_path(), cache_dir=cache).encode(["hi"]).shape == (1, 384)


def test_without_onnx_and_no_cached_graph_it_is_unsupported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(UnsupportedModelError, match="onnx package"):
        build_into(local_model_path(), tmp_path)  # what the building child runs


def test_the_childs_refusal_reaches_the_caller(tmp_path: Path) -> None:
    # read_spec accepts it (the parent's check), the builder finds a tensor missing (the child's).
    header = b'{"__metadata__": {}}'
    weights = len(header).to_bytes(8, "little") + header
    model = _variant(tmp_path, {"model.safetensors": weights})
    with pytest.raises(UnsupportedModelError, match=r"no tensor embeddings\.position_embeddings\.weight"):
        cached_model(model, tmp_path / "cache")


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"1_Pooling/config.json": CLS_POOLING}, "not mean pooling"),
        ({"config.json": _json("config.json", model_type="distilbert")}, "not one of bert"),
        ({"tokenizer.json": None}, "no tokenizer.json"),
    ],
)
def test_models_it_does_not_run_are_refused(tmp_path: Path, changes: dict[str, object], reason: str) -> None:
    with pytest.raises(UnsupportedModelError, match=reason):
        OnnxSentenceEncoder(_variant(tmp_path, changes), cache_dir=tmp_path / "cache")


async def test_local_embedder_prefers_onnx_and_says_so(caplog: pytest.LogCaptureFixture, cache: Path) -> None:
    caplog.set_level(logging.INFO, logger="clawgate.embeddings")
    embedder = LocalEmbedder(threads=1, cache_dir=cache)
    try:
        assert embedder.runtime == "auto" and not embedder.loaded
        vector = await embedder.embed_query("where did we go hiking?")
        assert embedder.runtime == "onnx" and embedder.dim == 384 and vector.shape == (384,)
    finally:
        embedder.close()
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("embedding_runtime")]
    assert line.startswith(f"embedding_runtime runtime=onnx model={LOCAL_MODEL_ID}#int8 threads=1 graph={cache}")
    assert line.endswith(" precision=int8")


@pytest.mark.parametrize("missing", ["onnxruntime", "cache"])
async def test_local_embedder_falls_back_to_numpy(
    missing: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = tmp_path / "cache"
    if missing == "onnxruntime":
        monkeypatch.setitem(sys.modules, "onnxruntime", None)
        reason = "onnxruntime is not installed"
    else:
        cache.write_text("a file where the cache directory should be")
        reason = "cannot write the ONNX model cache"
    caplog.set_level(logging.INFO, logger="clawgate.embeddings")
    embedder = LocalEmbedder(threads=1, cache_dir=cache / "onnx")
    try:
        await embedder.load()
        assert embedder.runtime == "numpy"
    finally:
        embedder.close()
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("embedding_runtime")]
    assert "runtime=numpy" in line and f'reason="onnx: {reason}' in line


async def test_a_query_is_not_held_up_by_a_busy_python_thread(onnx_encoder: OnnxSentenceEncoder) -> None:
    """One GIL-free call: a pure-Python loop beside it costs a switch interval or two, where the numpy
    runtime's ~100 small calls each waited for the GIL (42-466 ms a query measured)."""
    stop = threading.Event()

    def spin() -> None:
        n = 0
        while not stop.is_set():
            n += 1

    onnx_encoder.encode(["warm up"])
    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        started = time.perf_counter()
        for n in range(10):
            await asyncio.to_thread(onnx_encoder.encode, [f"what did we talk about on day {n}?"])
        per_query = (time.perf_counter() - started) / 10
    finally:
        stop.set()
        spinner.join()
    assert per_query < 0.1, per_query  # generous for a loaded CI machine; numpy's p95 was 0.5 s


def test_cache_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from memory.embed.onnx_bert import default_cache_dir

    monkeypatch.setenv("CLAWGATE_CACHE_DIR", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c" / "onnx"
    monkeypatch.delenv("CLAWGATE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert default_cache_dir() == tmp_path / "x" / "clawgate" / "onnx"
    assert os.environ.get("CLAWGATE_CACHE_DIR") is None


def test_the_configured_runtime_reaches_the_embedder() -> None:
    from gateway.config.load import parse_config
    from gateway.recall.engine import embedder_from_config

    config = parse_config({"memory": {"search": {"provider": "local", "runtime": "numpy"}}}, env={})
    embedder = embedder_from_config(config)
    assert isinstance(embedder, LocalEmbedder) and embedder.runtime == "numpy" and not embedder.loaded
