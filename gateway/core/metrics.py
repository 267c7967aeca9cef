"""Prometheus metrics, on a registry per gateway (so tests can run several gateways at once)."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.turns = Counter("clawgate_turns", "Turns handled", ["channel", "outcome"], registry=r)
        self.turn_latency = Histogram(
            "clawgate_turn_seconds",
            "Inbound message to final reply",
            ["channel"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        # model -> (outcome, unix time) of its latest call: the console's model reachability.
        self.last_llm_call: dict[str, tuple[str, float]] = {}
        self.llm_calls = Counter(
            "clawgate_llm_calls", "LLM calls by model and outcome", ["model", "outcome"], registry=r
        )
        self.llm_errors = Counter("clawgate_llm_errors", "LLM call failures by kind", ["kind"], registry=r)
        self.llm_latency = Histogram(
            "clawgate_llm_seconds", "LLM call duration", ["model"], buckets=_LATENCY_BUCKETS, registry=r
        )
        self.duplicates = Counter("clawgate_inbound_duplicates", "Redelivered events ignored", ["channel"], registry=r)
        self.queue_depth = Gauge("clawgate_session_queue_depth", "Turns waiting across sessions", registry=r)
        self.rejected = Counter(
            "clawgate_inbound_rejected", "Inbound messages refused", ["channel", "reason"], registry=r
        )

    def llm_call(self, model: str, outcome: str, seconds: float) -> None:
        self.last_llm_call[model] = (outcome, time.time())
        self.llm_calls.labels(model, outcome).inc()
        self.llm_latency.labels(model).observe(seconds)
        if outcome != "ok":
            self.llm_errors.labels(outcome).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
