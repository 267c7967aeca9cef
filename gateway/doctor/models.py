"""The doctor's model checks: which models the gateway may call (every agent's chain, then the
background model), and does each answer one request of one output token through LiteLLM, asked
with the configured key and `ai.api_base`; when not, why, and which config key or environment
variable fixes it. Failures are told apart by the kind `gateway.llm.client.classify` gives them.

A check returns a `Finding`; the doctor names it and removes every configured secret from it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.config.model import Config
from gateway.core.probe import Finding, mask_userinfo

if TYPE_CHECKING:
    from gateway.llm.client import LLMClient, ModelSpec


@dataclass(frozen=True, slots=True)
class ModelUse:
    """A model the gateway may call, and the config keys an operator fixes it with."""

    spec: ModelSpec = field(repr=False)  # holds the API key: never shown
    where: str  # the key that names the model: ai.model, ai.fallback[0], agents.list[1].model, ...
    key_from: str | None  # the key that gives its API key, when the config gives one

    @property
    def api_base(self) -> str | None:
        return mask_userinfo(self.spec.api_base) if self.spec.api_base else None


def configured_models(config: Config) -> list[ModelUse]:
    """Every agent's chain (its model, then its fallbacks: see gateway.turn.engine.model_chain) and the
    background model (ai.gemini with a key), each model once, in that order."""
    from gateway.llm.client import ModelSpec

    ai = config.ai
    key = ai.api_key.get_secret_value() if ai.api_key else None
    uses: list[ModelUse] = []

    def add(use: ModelUse) -> None:
        if all(u.spec != use.spec for u in uses):
            uses.append(use)

    for i, agent in enumerate(config.agents.list):
        own = agent.fallback is not None
        named = [(agent.model or ai.model, f"agents.list[{i}].model" if agent.model else "ai.model")]
        named += [
            (model, f"agents.list[{i}].fallback[{j}]" if own else f"ai.fallback[{j}]")
            for j, model in enumerate(agent.fallback if agent.fallback is not None else ai.fallback)
        ]
        for model, where in named:
            if model:
                add(ModelUse(ModelSpec(model, ai.api_base, key), where, "ai.api_key" if key else None))
    gemini = ai.gemini.api_key.get_secret_value() if ai.gemini.api_key else None
    if gemini and ai.gemini.model:
        add(ModelUse(ModelSpec(ai.gemini.model, api_key=gemini), "ai.gemini.model", "ai.gemini.api_key"))
    return uses


async def ask_model(client: LLMClient, use: ModelUse, timeout: float, variables: Mapping[str, str]) -> Finding:
    """One request of one output token through LiteLLM, within `timeout` seconds: its latency, or
    why it failed (`variables`: config path -> the ${VARIABLE} it is read from, for hints)."""
    from gateway.llm.client import classify

    litellm = await client.ready()
    data: dict[str, Any] = {"model": use.spec.model, "configured_at": use.where, "api_base": use.api_base}
    missing = await client.missing_credentials([use.spec])
    if missing:
        names = missing[use.spec.model]
        return Finding(
            "fail",
            f"no API key: none configured and {' / '.join(names)} not set",
            f"set {' or '.join(names)} in the gateway's environment, or ai.api_key",
            data | {"kind": "credentials"},
        )
    request: dict[str, Any] = {
        "model": use.spec.model,
        "messages": [{"role": "user", "content": "ping"}],
        "max_tokens": 1,
        "stream": False,
        "timeout": timeout,
        "max_retries": 0,
    }
    if use.spec.api_base:
        request["api_base"] = use.spec.api_base
    if use.spec.api_key:
        request["api_key"] = use.spec.api_key
    started = time.perf_counter()
    try:
        async with asyncio.timeout(timeout):
            await litellm.acompletion(**request)
    except Exception as exc:
        kind, status = classify(exc)
        status_text = f" ({status})" if status else ""
        data |= {"kind": kind, "status": status, "error": type(exc).__name__}
        found = _model_failure(use, kind, status_text, exc, litellm, timeout, variables)
        return Finding(found.status, found.detail, found.hint, data)
    ms = (time.perf_counter() - started) * 1000
    via = f" (api_base {use.api_base})" if use.api_base else ""
    return Finding("ok", f"answered in {ms:,.0f} ms{via}", data=data | {"latency_ms": round(ms)})


def _key_variable(litellm: Any, use: ModelUse) -> str:
    """Where the model's key comes from, for a hint: the config key (and its variable), or the
    provider's usual variable when it is set."""
    import os

    if use.key_from:
        return use.key_from
    try:
        provider = litellm.get_llm_provider(model=use.spec.model, api_base=use.spec.api_base)[1]
    except Exception:
        provider = None
    guess = f"{str(provider).upper()}_API_KEY" if provider else None
    return guess if guess and guess in os.environ else "the provider's key variable (or ai.api_key)"


def _model_failure(
    use: ModelUse, kind: str, status: str, exc: Exception, litellm: Any, timeout: float, variables: Mapping[str, str]
) -> Finding:
    """What a failed request says about the model, by the kind gateway.llm.client.classify gave it."""
    short = " ".join(str(exc).split())[:160]
    base = use.api_base or "the provider"
    network = f"check {'ai.api_base' if use.spec.api_base else 'the network and any proxy'}"
    if kind in ("auth", "credentials"):
        where = _key_variable(litellm, use)
        var = variables.get(where)
        shown = f"{where} (from ${var})" if var else where
        said = f"the provider refused the API key{status}" if kind == "auth" else "no API key was found for it"
        return Finding("fail", said, f"check {shown}")
    if kind == "not_found":
        return Finding(
            "fail",
            f"the provider does not know this model{status}",
            f"check {use.where}: a LiteLLM model id, the provider's own model name after the provider prefix",
        )
    if kind == "unknown_provider":
        return Finding(
            "fail", "not a LiteLLM model id", f"check {use.where}: it needs a provider prefix, e.g. openai/gpt-4o-mini"
        )
    if kind == "connection":
        return Finding("fail", f"cannot reach {base}", f"{network}, and that the server runs")
    if kind == "timeout":
        return Finding(
            "fail",
            f"no answer from {base} within {timeout:g} s",
            f"{network} (clawgate doctor --timeout SECONDS waits longer)",
        )
    if kind in ("rate_limit", "overloaded"):
        what = "rate limited" if kind == "rate_limit" else "overloaded"
        return Finding(
            "warn", f"reachable, but {what} now{status}", "the key works; retry later (the fallback models cover it)"
        )
    if kind in ("bad_request", "context_window"):
        return Finding(
            "warn",
            f"reachable, but the one-token test request was refused{status}: {short}",
            "the key and the model were accepted; the message says what the provider disliked",
        )
    if kind == "server":
        return Finding(
            "fail", f"{base} answered with a server error{status}", "try again later; if it stays, check the server"
        )
    return Finding("fail", f"{type(exc).__name__}{status}: {short}", "see the message; logging.level: DEBUG shows more")
