"""LiteLLM behind one small client: streaming, timeouts, retries with backoff, fallback chain.

litellm takes ~4 s to import, so it is loaded in a thread after the gateway is ready; a turn
that arrives earlier waits for it. Errors are classified by exception type, never by text.

LiteLLM routes every model id. When it routes one to a plain OpenAI-compatible server at a
configured `api_base`, the request goes out through `gateway.llm.openai_wire` instead of
`litellm.acompletion` (same wire format, a twentieth of the CPU); `ai.transport: litellm` turns
that off.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from gateway.config.model import AIConfig
from gateway.core.logs import event
from gateway.llm.openai_wire import OpenAIWire, WireError

log = logging.getLogger("clawgate.llm")

# Must be set before litellm is imported: otherwise it fetches a price map from the network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

RETRYABLE = frozenset({"rate_limit", "overloaded", "server", "timeout", "connection"})

_HINTS = {
    "auth": "the provider refused the credentials: set ai.api_key (or the provider's key variable)",
    "credentials": "no API key was found for it: set ai.api_key in config.yaml or the provider's key variable "
    "(e.g. OPENAI_API_KEY)",
    "not_found": "the provider does not know this model: check ai.model",
    "bad_request": "the provider rejected the request",
    "context_window": "the conversation is too long for this model: start a new one with /new",
    "rate_limit": "the provider is rate limiting us",
    "overloaded": "the provider is overloaded",
    "server": "the provider returned a server error",
    "timeout": "the provider did not answer in time",
    "connection": "the provider could not be reached: check ai.api_base and the network",
    "no_model": "no model is configured: set ai.model in config.yaml",
    "unknown_provider": "this is not a LiteLLM model id (like 'openai/gpt-4o-mini'): check ai.model",
    "other": "the call failed",
}


@dataclass(frozen=True, slots=True)
class ModelSpec:
    model: str
    api_base: str | None = None
    api_key: str | None = None


@dataclass(slots=True)
class Attempt:
    model: str
    kind: str
    status: int | None = None


class LLMError(Exception):
    """Every model in the chain failed. `attempts` says which and why (no secrets)."""

    def __init__(self, attempts: list[Attempt]) -> None:
        self.attempts = attempts
        super().__init__("; ".join(f"{a.model}: {a.kind}" for a in attempts) or "no model configured")

    @property
    def kind(self) -> str:
        return self.attempts[-1].kind if self.attempts else "no_model"

    def user_message(self) -> str:
        if not self.attempts:
            return (
                "No language model is configured, so I can't answer yet. An operator can set "
                "`ai.model` (any LiteLLM model id, e.g. `openai/gpt-4o-mini`) and `ai.api_key` in config.yaml."
            )
        tried = "; ".join(f"`{a.model}` ({_HINTS.get(a.kind, a.kind)})" for a in self.attempts)
        return (
            f"Sorry, I couldn't get an answer from the model. Tried: {tried}. "
            "An operator can configure the model under `ai:` in config.yaml "
            "(`model`, `api_key`, `api_base`, `fallback`); `clawgate config check` validates it."
        )


@dataclass(slots=True)
class TextDelta:
    text: str


@dataclass(slots=True)
class Restart:
    """The stream failed after partial output and is being retried: discard what was shown."""

    model: str


@dataclass(slots=True)
class Completion:
    model: str
    text: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


LLMEvent = TextDelta | Restart | Completion


def _causes(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in chain and len(chain) < 10:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    return chain


def classify(exc: BaseException) -> tuple[str, int | None]:
    """Map a litellm/openai exception (by type) to a stable kind and HTTP status."""
    if isinstance(exc, WireError):
        return exc.kind, exc.status
    import litellm
    import openai

    # litellm reports a refused connection as InternalServerError(500): look at what caused it.
    for cause in _causes(exc)[1:]:
        if type(cause) is openai.OpenAIError:
            return "credentials", None  # raised by the client before any request: no usable key
        if isinstance(cause, openai.APITimeoutError):
            return "timeout", None
        if isinstance(cause, openai.APIConnectionError):
            return "connection", None
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    ordered: list[tuple[type[BaseException], str]] = [
        (litellm.ContextWindowExceededError, "context_window"),
        (litellm.AuthenticationError, "auth"),
        (litellm.PermissionDeniedError, "auth"),
        (litellm.NotFoundError, "not_found"),
        (litellm.RateLimitError, "rate_limit"),
        (litellm.ServiceUnavailableError, "overloaded"),
        (litellm.Timeout, "timeout"),
        (litellm.BadGatewayError, "server"),
        (litellm.InternalServerError, "server"),
        (litellm.APIConnectionError, "connection"),
        (litellm.BadRequestError, "bad_request"),
        (litellm.APIError, "server"),
        (asyncio.TimeoutError, "timeout"),
        (ConnectionError, "connection"),
    ]
    for cls, kind in ordered:
        if isinstance(exc, cls):
            if kind == "bad_request" and "LLM Provider NOT provided" in str(exc):
                return "unknown_provider", status
            if kind == "server" and status is not None and 400 <= status < 500 and status != 429:
                return "bad_request", status
            return kind, status
    return "other", status


def _retry_after(exc: BaseException) -> float | None:
    if isinstance(exc, WireError):
        return exc.retry_after
    headers = getattr(exc, "headers", None) or getattr(getattr(exc, "response", None), "headers", None)
    if not headers:
        return None
    try:
        value = headers.get("retry-after") or headers.get("Retry-After")
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


class LLMClient:
    def __init__(
        self,
        *,
        timeout: float = 60.0,
        retries: int = 2,
        backoff: float = 0.5,
        max_concurrent: int = 16,
        temperature: float | None = None,
        metrics: Any = None,
        transport: str = "auto",
    ) -> None:
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.temperature = temperature
        self._gate = asyncio.Semaphore(max_concurrent)
        self._max_concurrent = max_concurrent
        self._litellm: Any = None
        self._loading: asyncio.Task[Any] | None = None
        self._metrics = metrics
        self.transport = transport
        self._wire = OpenAIWire()
        self._direct_routes: dict[ModelSpec, tuple[str, str] | None] = {}

    def configure(
        self,
        *,
        timeout: float,
        retries: int,
        backoff: float,
        max_concurrent: int,
        temperature: float | None,
        transport: str,
    ) -> None:
        """New settings (a config reload) for the calls made from now on."""
        self.timeout, self.retries, self.backoff, self.temperature = timeout, retries, backoff, temperature
        if transport != self.transport:
            self.transport = transport
            self._direct_routes = {}
        if max_concurrent != self._max_concurrent:
            # Calls in flight hold and release the old gate; new calls queue at the new one.
            self._gate = asyncio.Semaphore(max_concurrent)
            self._max_concurrent = max_concurrent

    def start_loading(self) -> None:
        if self._loading is None and self._litellm is None:
            self._loading = asyncio.get_running_loop().create_task(asyncio.to_thread(self._import))

    @staticmethod
    def _import() -> Any:
        litellm: Any = importlib.import_module("litellm")
        # Keep litellm's per-call work small: no telemetry, no debug banners, no cost callbacks.
        litellm.telemetry = False
        litellm.suppress_debug_info = True
        litellm.drop_params = True
        litellm.turn_off_message_logging = True
        litellm.callbacks = []
        litellm.success_callback = []
        litellm.failure_callback = []
        litellm.set_verbose = False
        return litellm

    async def aclose(self) -> None:
        await self._wire.close()

    def _direct_route(self, litellm: Any, spec: ModelSpec) -> tuple[str, str] | None:
        """(URL, model name) when LiteLLM routes `spec` to a plain OpenAI-compatible server at a
        configured `api_base`: those requests skip litellm.acompletion (see gateway.llm.openai_wire)."""
        if spec in self._direct_routes:
            return self._direct_routes[spec]
        route = None
        if self.transport == "auto" and spec.api_base:
            try:
                model, provider, _key, _base = litellm.get_llm_provider(model=spec.model, api_base=spec.api_base)
            except Exception:
                provider = None  # not a model id LiteLLM knows: its own call reports that
            if provider == "openai":
                route = (spec.api_base.rstrip("/") + "/chat/completions", model)
        self._direct_routes[spec] = route
        return route

    @property
    def loaded(self) -> bool:
        return self._litellm is not None

    async def ready(self) -> Any:
        if self._litellm is None:
            self.start_loading()
            assert self._loading is not None
            self._litellm = await self._loading
        return self._litellm

    async def missing_credentials(self, chain: list[ModelSpec]) -> dict[str, list[str]]:
        """Models whose provider key is neither configured nor in the environment (name -> variables)."""
        litellm = await self.ready()
        missing: dict[str, list[str]] = {}
        for spec in chain:
            if spec.api_key:
                continue
            try:
                found = litellm.validate_environment(model=spec.model, api_base=spec.api_base)
            except Exception:
                continue  # unknown provider: the first call reports it
            if not found.get("keys_in_environment") and found.get("missing_keys"):
                missing[spec.model] = list(found["missing_keys"])
        return missing

    async def stream(
        self,
        chain: list[ModelSpec],
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        stream: bool = True,
    ) -> AsyncIterator[LLMEvent]:
        """Yield text deltas and finally one Completion; raise LLMError when every model failed.

        With `stream=False` the provider is asked for one JSON answer (about half litellm's CPU of a
        streamed call), for callers that cannot show a reply while it is written.
        """
        litellm = await self.ready()
        attempts: list[Attempt] = []
        async with self._gate:
            for spec in chain:
                for attempt in range(self.retries + 1):
                    emitted = False
                    started = time.perf_counter()
                    try:
                        route = self._direct_route(litellm, spec)
                        if route is not None:
                            events = self._direct_call(litellm, route, spec, messages, tools, stream)
                        elif stream:
                            events = self._one_call(litellm, spec, messages, tools)
                        else:
                            events = self._one_json_call(litellm, spec, messages, tools)
                        async for ev in events:
                            if isinstance(ev, TextDelta):
                                emitted = True
                            yield ev
                        self._observe(spec.model, "ok", started)
                        return
                    except asyncio.CancelledError:
                        raise
                    except Exception as exc:
                        kind, status = classify(exc)
                        self._observe(spec.model, kind, started)
                        event(
                            log,
                            "llm_call_failed",
                            logging.WARNING,
                            model=spec.model,
                            kind=kind,
                            status=status,
                            attempt=attempt + 1,
                            error=type(exc).__name__,
                        )
                        if emitted:
                            yield Restart(spec.model)
                        if kind in RETRYABLE and attempt < self.retries:
                            await asyncio.sleep(self._delay(attempt, _retry_after(exc)))
                            continue
                        attempts.append(Attempt(spec.model, kind, status))
                        break
        raise LLMError(attempts)

    async def ask(self, chain: list[ModelSpec], instructions: str, text: str) -> str:
        """One background question (summaries, flushes, formation, consolidation): `instructions`
        as the system message, `text` as the user's, the answer's whole text (one JSON call, not
        streamed). LLMError when every model failed."""
        messages = [{"role": "system", "content": instructions}, {"role": "user", "content": text}]
        final: Completion | None = None
        async for item in self.stream(chain, messages, None, stream=False):
            if isinstance(item, Completion):
                final = item
        assert final is not None
        return final.text

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), 30.0)
        base = self.backoff * (2**attempt)
        return base + random.uniform(0, base / 2)

    def _observe(self, model: str, outcome: str, started: float) -> None:
        if self._metrics is not None:
            self._metrics.llm_call(model, outcome, time.perf_counter() - started)

    def _kwargs(
        self, spec: ModelSpec, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, stream: bool
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": spec.model,
            "messages": messages,
            "stream": stream,
            "timeout": self.timeout,
            "max_retries": 0,  # retries are ours, so they are counted and logged once
        }
        if stream:
            kwargs["stream_options"] = {"include_usage": True}
        if spec.api_base:
            kwargs["api_base"] = spec.api_base
        if spec.api_key:
            kwargs["api_key"] = spec.api_key
        if tools:
            kwargs["tools"] = tools
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        return kwargs

    async def _one_json_call(
        self, litellm: Any, spec: ModelSpec, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> AsyncIterator[LLMEvent]:
        async with asyncio.timeout(self.timeout):
            response = await litellm.acompletion(**self._kwargs(spec, messages, tools, stream=False))
        message = response.choices[0].message
        reply = _Reply()
        if message.content:
            yield reply.text(message.content)
        for i, tc in enumerate(getattr(message, "tool_calls", None) or ()):
            reply.tool_call(i, tc.id, tc.function.name, tc.function.arguments)
        reply.usage = getattr(response, "usage", None)
        yield reply.completion(spec.model)

    async def _one_call(
        self, litellm: Any, spec: ModelSpec, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> AsyncIterator[LLMEvent]:
        kwargs = self._kwargs(spec, messages, tools, stream=True)
        async with asyncio.timeout(self.timeout):
            response = await litellm.acompletion(**kwargs)
        reply = _Reply()
        iterator = response.__aiter__()
        while True:
            try:
                async with asyncio.timeout(self.timeout):
                    chunk = await iterator.__anext__()
            except StopAsyncIteration:
                break
            reply.usage = getattr(chunk, "usage", None) or reply.usage
            if not chunk.choices:
                if reply.usage is not None:
                    # The usage chunk is the provider's last. Stopping here spares litellm a second
                    # full rebuild of the response and its cost bookkeeping (about 4 ms CPU a turn).
                    closer = getattr(response, "aclose", None)
                    if closer is not None:
                        await closer()
                    break
                continue
            delta = chunk.choices[0].delta
            text = getattr(delta, "content", None)
            if text:
                yield reply.text(text)
            for tc in getattr(delta, "tool_calls", None) or ():
                fn = tc.function
                reply.tool_call(tc.index or 0, tc.id, fn.name if fn else None, fn.arguments if fn else None)
        yield reply.completion(spec.model)

    async def _direct_call(
        self,
        litellm: Any,
        route: tuple[str, str],
        spec: ModelSpec,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        stream: bool,
    ) -> AsyncIterator[LLMEvent]:
        url, model = route
        # The key LiteLLM's OpenAI provider would use: configured, else litellm's, else the environment.
        api_key = spec.api_key or litellm.api_key or litellm.openai_key or os.environ.get("OPENAI_API_KEY")
        if not api_key:
            raise WireError("credentials", None, "no API key")
        body: dict[str, Any] = {"model": model, "messages": messages, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        if tools:
            body["tools"] = tools
        if self.temperature is not None:
            body["temperature"] = self.temperature
        reply = _Reply()
        async for data in self._wire.chat(url, api_key, body, self.timeout):
            if data.get("usage"):
                reply.usage = _Usage(data["usage"])
            choices = data.get("choices") or ()
            if not choices:
                continue
            part = (choices[0].get("delta") if stream else choices[0].get("message")) or {}
            if part.get("content"):
                yield reply.text(part["content"])
            for i, tc in enumerate(part.get("tool_calls") or ()):
                fn = tc.get("function") or {}
                reply.tool_call(tc.get("index", i), tc.get("id"), fn.get("name"), fn.get("arguments"))
        yield reply.completion(spec.model)


class _Usage:
    """Token counts of a wire answer, read like LiteLLM's usage object."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.prompt_tokens = data.get("prompt_tokens")
        self.completion_tokens = data.get("completion_tokens")


class _Reply:
    """A model's answer as it arrives (whole or in deltas), from either transport."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: Any = None

    def text(self, text: str) -> TextDelta:
        self.parts.append(text)
        return TextDelta(text)

    def tool_call(self, index: int, call_id: str | None, name: str | None, arguments: str | None) -> None:
        slot = self.calls.setdefault(index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        if call_id:
            slot["id"] = call_id
        if name:
            slot["function"]["name"] += name
        if arguments:
            slot["function"]["arguments"] += arguments

    def completion(self, model: str) -> Completion:
        tool_calls = [self.calls[i] for i in sorted(self.calls)]
        for i, tc in enumerate(tool_calls):
            tc["id"] = tc["id"] or f"call_{i}"
        return Completion(
            model=model,
            text="".join(self.parts),
            tool_calls=tool_calls,
            prompt_tokens=getattr(self.usage, "prompt_tokens", None),
            completion_tokens=getattr(self.usage, "completion_tokens", None),
        )


def llm_settings(ai: AIConfig) -> dict[str, Any]:
    """The LLMClient's settings from `ai` (at start, and again on each reload)."""
    return {
        "timeout": ai.timeout_seconds,
        "retries": ai.retries,
        "backoff": ai.retry_backoff_seconds,
        "max_concurrent": ai.max_concurrent_calls,
        "temperature": ai.temperature,
        "transport": ai.transport,
    }
