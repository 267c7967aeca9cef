"""Embedding models beyond the bundled MiniLM: a sentence-transformers model directory the test builds
and saves itself (a tiny BERT with an XLM-R-style SentencePiece vocabulary, as the multilingual MiniLM
and e5 have, and a tiny XLM-RoBERTa), run on every local runtime against sentence-transformers' own
vectors; how a directory or a served model finds its manifest entry; LiteLLM providers against the
fake OpenAI-compatible server (tests/fakes/llm.py serves /v1/embeddings), with the key and address
taken from `ai:` when memory.search has none, and the degradation, logged with its fix, when there
is no key at all."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gateway.config.load import parse_config
from gateway.config.model import Config
from gateway.doctor import checks as doctor
from gateway.doctor.context import Context
from gateway.recall.engine import embedder_from_config
from memory.embed.embeddings import EmbeddingError, LiteLLMEmbedder, LocalEmbedder, make_embedder
from memory.embed.manifest import load_manifest, match_entry, model_info
from memory.embed.providers import Credentials, chat_provider, litellm_route, resolve_credentials
from tests.fakes.llm import FakeLLM

TEXTS = [
    "my sister lives in lyon",
    "ma sœur habite à lyon",
    "mi hermana vive en lyon",
    "сестра дом",
    "妹妹 住在 里昂",
    "tea " * 60,  # past max_seq_length (48): truncated as sentence-transformers truncates
    "a",
]
KEY_VARIABLES = ("OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "COHERE_API_KEY")


# --- a tiny sentence-transformers model, built and saved here ----------------------------------------


def _unigram_tokenizer() -> tuple[Any, int]:
    """A SentencePiece-style unigram tokenizer as XLM-R's tokenizer.json holds one: <s> X </s>,
    ▁-marked words, pieces down to single characters (any script)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    words = "the my a sister lives in lyon ma sœur habite à vive en mi hermana tea дом сестра 妹妹 住在 里昂".split()
    vocab = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    vocab += [("▁" + w, -2.0 - n / 100) for n, w in enumerate(words)]
    vocab += [(c, -8.0) for c in sorted(set("".join(words)) | {"▁"})]
    tokenizer = Tokenizer(models.Unigram(vocab, unk_id=3, byte_fallback=False))
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    return tokenizer, len(vocab)


def build_model(root: Path, model_type: str) -> Path:
    """A 2-layer, 32-wide sentence encoder (mean pooling, normalized) saved by sentence-transformers."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast, XLMRobertaConfig, XLMRobertaModel

    tokenizer, vocab_size = _unigram_tokenizer()
    torch.manual_seed(0)
    shape: dict[str, Any] = {
        "vocab_size": vocab_size,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
    }
    shape |= {"intermediate_size": 64, "pad_token_id": 1}
    if model_type == "bert":
        model: Any = BertModel(BertConfig(**shape, max_position_embeddings=64))
    else:  # positions from pad_token_id + 1 on, as XLM-R counts them
        model = XLMRobertaModel(XLMRobertaConfig(**shape, max_position_embeddings=66, type_vocab_size=1), False)
    hf = root / f"{model_type}-hf"
    model.save_pretrained(hf)
    specials = {"bos_token": "<s>", "cls_token": "<s>", "eos_token": "</s>", "sep_token": "</s>"}
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", unk_token="<unk>", **specials
    ).save_pretrained(hf)
    modules = [Transformer(str(hf), max_seq_length=48), Pooling(32, "mean"), Normalize()]
    out = root / model_type
    SentenceTransformer(modules=modules, device="cpu").save(str(out))
    return out


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {kind: build_model(root, kind) for kind in ("bert", "xlm-roberta")}


def reference(path: Path, texts: list[str]) -> np.ndarray:
    """The vectors sentence-transformers itself gives, for the texts as they are (no prompt)."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
    model.default_prompt_name = None
    return np.asarray(model.encode(texts, normalize_embeddings=True, convert_to_numpy=True))


@pytest.mark.parametrize("kind", ["bert", "xlm-roberta"])
@pytest.mark.parametrize("runtime", ["auto", "numpy", "sentence-transformers"])
async def test_a_local_model_directory_gives_sentence_transformers_vectors_on_every_runtime(
    models: dict[str, Path], kind: str, runtime: str, tmp_path: Path
) -> None:
    path = models[kind]
    # fp32: the same numbers as sentence-transformers (int8, the default, is tested in test_onnx_bert.py)
    embedder = make_embedder("local", str(path), runtime=runtime, precision="fp32")
    assert isinstance(embedder, LocalEmbedder) and embedder.model_id == str(path)
    embedder.cache_dir = tmp_path  # where the onnx graph is built
    try:
        vectors = await embedder.embed_documents(TEXTS)
        query = await embedder.embed_query(TEXTS[1])
    finally:
        embedder.close()
    assert embedder.runtime == ("onnx" if runtime == "auto" else runtime) and embedder.dim == 32
    expected = reference(path, TEXTS)
    assert np.sum(vectors * expected, axis=1).min() > 0.99999
    assert float(query @ expected[1]) > 0.99999  # no prefixes: a query is embedded as a document


def test_the_roberta_position_offset_matters(models: dict[str, Path]) -> None:
    """XLM-R counts positions from pad_token_id + 1: read from position 0, the vectors differ."""
    import dataclasses

    from memory.embed import minilm

    path = models["xlm-roberta"]
    spec = minilm.read_spec(path)
    assert spec.position_offset == 2 and spec.max_seq_length == 48  # from tokenizer_config.json (ST 5+)
    right = minilm.BertSentenceEncoder(path).encode(TEXTS[:2])
    original = minilm.read_spec
    minilm.read_spec = lambda p: dataclasses.replace(original(p), position_offset=0)  # type: ignore[assignment]
    try:
        wrong = minilm.BertSentenceEncoder(path).encode(TEXTS[:2])
    finally:
        minilm.read_spec = original
    assert np.sum(right * wrong, axis=1).max() < 0.999


def _with_prompts(src: Path, dest: Path, prompts: dict[str, str], default: str | None) -> Path:
    shutil.copytree(src, dest)
    config_file = dest / "config_sentence_transformers.json"
    config = json.loads(config_file.read_text())
    config["prompts"], config["default_prompt_name"] = prompts, default
    config_file.write_text(json.dumps(config))
    return dest


@pytest.mark.parametrize("runtime", ["auto", "sentence-transformers"])
async def test_a_directorys_own_prompts_are_its_prefixes_applied_once(
    models: dict[str, Path], tmp_path: Path, runtime: str
) -> None:
    # default_prompt_name set: sentence-transformers would add "query: " to every text by itself.
    path = _with_prompts(models["bert"], tmp_path / "model", {"query": "query: ", "passage": "passage: "}, "query")
    embedder = make_embedder("local", str(path), runtime=runtime)
    assert embedder is not None and (embedder.query_prefix, embedder.document_prefix) == ("query: ", "passage: ")
    assert model_info(str(path)).source == "model directory" and model_info(str(path)).min_cosine is None
    assert isinstance(embedder, LocalEmbedder)
    embedder.cache_dir = tmp_path / "cache"
    try:
        query = await embedder.embed_query("my sister lives in lyon")
        (document,) = await embedder.embed_documents(["my sister lives in lyon"])
    finally:
        embedder.close()
    expected = reference(path, ["query: my sister lives in lyon", "passage: my sister lives in lyon"])
    assert float(query @ expected[0]) > 0.99999 and float(document @ expected[1]) > 0.99999


# --- which manifest entry a model is -------------------------------------------------------------


@pytest.mark.parametrize(
    ("model_id", "is_dir", "entry"),
    [
        ("openai/text-embedding-3-small", False, "openai/text-embedding-3-small"),
        ("hosted_vllm/intfloat/multilingual-e5-small", False, "intfloat/multilingual-e5-small"),
        ("openai/intfloat/multilingual-e5-small", False, "intfloat/multilingual-e5-small"),
        ("openai/multilingual-e5-small", False, None),  # a short served name says nothing sure
        ("/models/multilingual-e5-small", True, "intfloat/multilingual-e5-small"),
        (
            "/models/Paraphrase-Multilingual-MiniLM-L12-v2",
            True,
            "sentence-transformers/paraphrase-multilingual-MiniLM-L12-v2",
        ),
        ("/hf/models--intfloat--multilingual-e5-base/snapshots/0123abc", True, "intfloat/multilingual-e5-base"),
        ("/hf/models--someone--multilingual-e5-base/snapshots/0123abc", True, None),  # another org's model
        ("/models/my-finetune", True, None),
        ("/models/text-embedding-3-small", True, "openai/text-embedding-3-small"),  # the name ends one entry only
    ],
)
def test_match_entry(model_id: str, is_dir: bool, entry: str | None) -> None:
    found = match_entry(model_id, load_manifest(), is_dir)
    assert (found.model_id if found else None) == entry


def test_a_directory_named_after_a_model_gets_its_manifest_entry(tmp_path: Path) -> None:
    path = tmp_path / "models--intfloat--multilingual-e5-small" / "snapshots" / "abc"
    path.mkdir(parents=True)
    info = model_info(str(path))
    assert info.model_id == str(path) and info.source == "manifest intfloat/multilingual-e5-small"
    assert (info.query_prefix, info.document_prefix, info.dim) == ("query: ", "passage: ", 384)


def test_every_calibrated_manifest_entry_says_on_what() -> None:
    for model_id, info in load_manifest().items():
        assert info.dim, model_id
        if info.min_cosine is not None or info.evidence_min_score is not None:
            assert info.calibrated_on and info.min_cosine is not None, model_id
    served = load_manifest()["openai/multilingual-e5-small-q4"]
    assert served.min_cosine is not None and served.evidence_min_score is not None  # measured (docs/recall.md)
    assert served.query_params == {"input_type": "query"} and served.document_params == {"input_type": "passage"}


# --- the key and address: memory.search's own, else ai:'s ----------------------------------------


@pytest.mark.parametrize(
    ("route", "own", "ai", "expected"),
    [
        # nothing of memory.search's own: ai:'s, for a chat model of the same provider
        (
            "openai/text-embedding-3-small",
            {},
            {"ai_model": "openai/gpt-4o-mini", "ai_api_base": "http://llm:8000/v1", "ai_api_key": "sk-ai"},
            Credentials("http://llm:8000/v1", "sk-ai", "ai.api_base", "ai.api_key"),
        ),
        (
            "openai/text-embedding-3-small",
            {},
            {"ai_model": "gpt-4o", "ai_api_key": "sk-ai"},  # a bare OpenAI name is OpenAI's
            Credentials(None, "sk-ai", None, "ai.api_key"),
        ),
        (
            "ollama/nomic-embed-text",
            {},
            {"ai_model": "ollama/llama3", "ai_api_base": "http://gpu:11434"},
            Credentials("http://gpu:11434", None, "ai.api_base", None),
        ),
        # another provider's key is never sent
        (
            "openai/text-embedding-3-small",
            {},
            {"ai_model": "anthropic/claude-3-5-haiku", "ai_api_key": "sk-ant"},
            Credentials(None, None, None, None),
        ),
        ("openai/x", {}, {"ai_model": "claude-3-haiku", "ai_api_key": "sk-ant"}, Credentials()),
        # own settings win; ai's key only goes to ai's address
        (
            "openai/x",
            {"api_key": "sk-own"},
            {"ai_model": "openai/gpt-4o", "ai_api_key": "sk-ai"},
            Credentials(None, "sk-own", None, "memory.search.api_key"),
        ),
        (
            "openai/x",
            {"api_base": "http://other/v1"},
            {"ai_model": "openai/gpt-4o", "ai_api_key": "sk-ai"},
            Credentials("http://other/v1", None, "memory.search.api_base", None),
        ),
        (
            "openai/x",
            {"api_base": "http://llm/v1"},
            {"ai_model": "openai/gpt-4o", "ai_api_base": "http://llm/v1", "ai_api_key": "sk-ai"},
            Credentials("http://llm/v1", "sk-ai", "memory.search.api_base", "ai.api_key"),
        ),
        # gemini: the background model's key
        (
            "gemini/text-embedding-004",
            {},
            {"ai_model": "openai/gpt-4o", "ai_api_key": "sk-ai", "gemini_api_key": "AIza-g"},
            Credentials(None, "AIza-g", None, "ai.gemini.api_key"),
        ),
        ("cohere/embed-multilingual-v3.0", {}, {"ai_model": "cohere/command-r", "ai_api_key": "co-k"}, None),
    ],
)
def test_resolve_credentials(route: str, own: dict[str, str], ai: dict[str, str], expected: Credentials | None) -> None:
    found = resolve_credentials(route, **own, **ai)
    if expected is None:  # any LiteLLM provider: the same rule
        expected = Credentials(None, ai["ai_api_key"], None, "ai.api_key")
    assert found == expected
    assert "sk-" not in repr(found) and "AIza" not in repr(found)  # the key is never in a repr


def test_routes_and_chat_providers() -> None:
    assert litellm_route("openai", None) == "openai/text-embedding-3-small"
    assert litellm_route("ollama", "ollama/bge-m3") == "ollama/bge-m3"
    assert litellm_route("litellm", "cohere/embed-multilingual-v3.0") == "cohere/embed-multilingual-v3.0"
    for bad in (None, "", "embed-multilingual-v3.0", "cohere/"):
        with pytest.raises(ValueError, match="the litellm provider needs a LiteLLM route"):
            litellm_route("litellm", bad)
    with pytest.raises(ValueError, match=r"unknown memory\.search\.provider 'cohere'"):
        litellm_route("cohere", "embed-english-v3.0")
    assert [chat_provider(m) for m in (None, "gpt-4o-mini", "o3-mini", "openai/x", "claude-3", "gemini/g")] == [
        None,
        "openai",
        "openai",
        "openai",
        None,
        "gemini",
    ]


# --- LiteLLM against the fake OpenAI-compatible server ---------------------------------------------


@pytest.fixture
async def fake() -> AsyncIterator[FakeLLM]:
    server = await FakeLLM().start()
    yield server
    await server.stop()


@pytest.fixture
def no_key_variables(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in KEY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    yield


def config_of(ai: dict[str, Any], search: dict[str, Any]) -> Config:
    return parse_config({"ai": ai, "memory": {"search": search}}, "test", env={})


async def test_the_ai_key_and_address_reach_the_embeddings_server(
    fake: FakeLLM, no_key_variables: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    config = config_of(
        {"model": "openai/fake-model", "api_base": fake.api_base, "api_key": "sk-from-ai-0001"},
        {"provider": "openai", "model": "fake-embedder"},
    )
    embedder = embedder_from_config(config)
    assert isinstance(embedder, LiteLLMEmbedder) and embedder.model_id == "openai/fake-embedder"
    await embedder.load()
    documents = await embedder.embed_documents(["my sister lives in Lyon", "tea every morning"])
    query = await embedder.embed_query("where does my sister live")
    assert documents.shape == (2, 16) and float(query @ documents[0]) > float(query @ documents[1])
    assert [r["input"] for r in fake.embedding_requests] == [
        ["my sister lives in Lyon", "tea every morning"],
        ["where does my sister live"],
    ]
    for request in fake.embedding_requests:
        assert request["model"] == "fake-embedder"
        assert request["_headers"]["Authorization"] == "Bearer sk-from-ai-0001"
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("embedding_provider")]
    assert line == "embedding_provider model=openai/fake-embedder key_from=ai.api_key address_from=ai.api_base"
    assert not any("sk-from-ai" in r.getMessage() for r in caplog.records)


async def test_memory_searchs_own_key_and_the_manifests_input_types(fake: FakeLLM, no_key_variables: None) -> None:
    config = config_of(
        {"model": "openai/fake-model", "api_base": fake.api_base, "api_key": "sk-from-ai-0001"},
        # a model served under its manifest name: the side of each text goes as input_type
        {"provider": "litellm", "model": "openai/multilingual-e5-small-q4", "api_key": "sk-own-0002"},
    )
    embedder = embedder_from_config(config)
    assert isinstance(embedder, LiteLLMEmbedder) and embedder.key_from == "memory.search.api_key"
    fake.embedding_dim = embedder.dim  # the manifest's 384
    await embedder.embed_documents(["ma sœur habite à Lyon"])
    await embedder.embed_query("where does my sister live")
    document, query = fake.embedding_requests
    assert document["input_type"] == "passage" and query["input_type"] == "query"
    assert document["model"] == "multilingual-e5-small-q4" and document["input"] == ["ma sœur habite à Lyon"]
    assert {r["_headers"]["Authorization"] for r in fake.embedding_requests} == {"Bearer sk-own-0002"}


async def test_no_key_anywhere_is_a_logged_degradation_with_its_fix(
    fake: FakeLLM, no_key_variables: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    # ai:'s key is Anthropic's: never sent to OpenAI's address. Nothing else holds a key.
    config = config_of(
        {"model": "anthropic/claude-3-5-haiku", "api_key": "sk-ant-secret-0003"},
        {"provider": "openai", "model": "fake-embedder", "api_base": fake.api_base},
    )
    embedder = embedder_from_config(config)
    assert isinstance(embedder, LiteLLMEmbedder) and embedder.api_key is None
    with pytest.raises(EmbeddingError, match=r"no API key \(set memory.search.api_key"):
        await embedder.load()
    with pytest.raises(EmbeddingError):  # and so every use: recall stays lexical, nothing is sent
        await embedder.embed_query("anything")
    assert fake.embedding_requests == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    (line,) = [w for w in warnings if w.startswith("memory_recall_vector_degraded")]  # logged once
    assert "reason=missing_api_key model=openai/fake-embedder missing=OPENAI_API_KEY" in line
    assert "fix=" in line and "OPENAI_API_KEY" in line.split("fix=")[1] and "ai.api_key" in line
    assert not any("sk-ant" in r.getMessage() for r in caplog.records)


async def test_the_key_from_the_environment_is_enough(fake: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-0004")
    embedder = embedder_from_config(config_of({}, {"provider": "openai", "model": "e", "api_base": fake.api_base}))
    assert isinstance(embedder, LiteLLMEmbedder) and await embedder.missing_keys() == []
    await embedder.embed_query("hello")
    assert fake.embedding_requests[0]["_headers"]["Authorization"] == "Bearer sk-env-0004"


async def test_doctor_says_where_the_key_comes_from_or_that_there_is_none(
    tmp_path: Path, fake: FakeLLM, no_key_variables: None
) -> None:
    import yaml

    def run(ai: dict[str, Any]) -> Any:
        path = tmp_path / "config.yaml"
        data = {"storage": {"data_dir": str(tmp_path / "data")}, "ai": ai}
        data["memory"] = {"search": {"provider": "openai", "model": "fake-embedder"}}
        path.write_text(yaml.safe_dump(data))
        return doctor.run_checks(Context(path, offline=True))

    ok = {r.name: r for r in await run({"model": "openai/m", "api_base": fake.api_base, "api_key": "sk-doc-0005"})}
    row = ok["embeddings"]
    assert row.status == "ok", row.detail
    assert row.detail.endswith(f"address {fake.api_base} (ai.api_base), key from ai.api_key")
    assert "sk-doc" not in row.detail

    missing = {r.name: r for r in await run({"model": "anthropic/claude-3-5-haiku", "api_key": "sk-ant-0006"})}
    row = missing["embeddings"]
    assert row.status == "fail" and "no API key: recall is by keywords only" in row.detail
    assert row.hint is not None and "memory.search.api_key" in row.hint and "OPENAI_API_KEY" in row.hint
    assert missing["recall floor"].detail == "skipped: the embedding model has no API key"
