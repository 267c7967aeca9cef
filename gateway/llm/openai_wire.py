"""A direct client for servers that speak the OpenAI chat-completions wire format.

vLLM, llama.cpp, LM Studio, Ollama's `/v1`, a LiteLLM proxy: a self-hosted gateway is most often
pointed at one of these (`openai/<model>` with `ai.api_base`). For them LiteLLM's request
transformation is the identity, but each `litellm.acompletion` still costs about 6 ms of CPU on
this machine (the openai SDK over httpx, its logging object, a cost lookup), against 0.3 ms for the
same request over a pooled aiohttp session. `LLMClient` asks LiteLLM's own router which provider a
model id resolves to and sends only plain OpenAI-wire requests through here; every other provider
goes through `litellm.acompletion` as before.

Errors become `WireError` with the same kinds `gateway.llm.client.classify` gives LiteLLM's exceptions, so
retries, fallbacks and the user's message do not depend on the path a request took.
"""

from __future__ import annotations

import asyncio
import functools
import json
import urllib.request
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import aiohttp

_CONTEXT_HINTS = ("context_length_exceeded", "maximum context length", "context window", "too many tokens")


class WireError(Exception):
    """A failed request, already classified (kind as in gateway.llm.client.classify)."""

    def __init__(self, kind: str, status: int | None = None, detail: str = "", retry_after: float | None = None):
        super().__init__(f"{kind} ({status}): {detail}" if status else f"{kind}: {detail}")
        self.kind = kind
        self.status = status
        self.retry_after = retry_after


def kind_for_status(status: int, error: dict[str, Any]) -> str:
    """The error kind of an HTTP status and the OpenAI-style `error` object the server sent."""
    if status == 400:
        text = f"{error.get('code') or ''} {error.get('message') or ''}".lower()
        return "context_window" if any(h in text for h in _CONTEXT_HINTS) else "bad_request"
    if status in (401, 403):
        return "auth"
    if status == 404:
        return "not_found"
    if status == 408:
        return "timeout"
    if status == 429:
        return "rate_limit"
    if status == 503:
        return "overloaded"
    if status >= 500:
        return "server"
    return "bad_request"


def _retry_after(headers: Any) -> float | None:
    try:
        value = headers.get("Retry-After")
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


@functools.lru_cache(maxsize=64)
def proxy_for(url: str) -> str | None:
    """The proxy the environment (HTTPS_PROXY, NO_PROXY, ...) names for `url`, looked up once per URL:
    aiohttp's `trust_env` would look it up, and read ~/.netrc, in a thread on every request."""
    proxies = urllib.request.getproxies_environment()
    host = urlsplit(url).hostname or ""
    if not proxies or urllib.request.proxy_bypass(host):
        return None
    return proxies.get(urlsplit(url).scheme)


class OpenAIWire:
    """One pooled HTTP session for every OpenAI-compatible server the gateway talks to."""

    def __init__(self, max_connections: int = 100) -> None:
        self._max_connections = max_connections
        self._http: aiohttp.ClientSession | None = None

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._max_connections, keepalive_timeout=30),
                # Timeouts are the caller's (per call and per streamed chunk), like the LiteLLM path.
                timeout=aiohttp.ClientTimeout(total=None),
            )
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def chat(self, url: str, api_key: str, body: dict[str, Any], timeout: float) -> AsyncIterator[dict[str, Any]]:
        """POST a chat completion; yield the one JSON answer, or each streamed chunk when
        `body["stream"]` is true. Raises WireError (or asyncio.TimeoutError on a silent server)."""
        headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
        payload = json.dumps(body, ensure_ascii=False).encode()
        try:
            async with asyncio.timeout(timeout):
                # Proxies from the environment apply here as they do to LiteLLM's own client.
                response = await self._session().post(url, data=payload, headers=headers, proxy=proxy_for(url))
            try:
                if response.status >= 400:
                    await self._raise_for(response, timeout)
                if not body.get("stream"):
                    async with asyncio.timeout(timeout):
                        raw = await response.read()
                    yield self._decode(raw)
                    return
                async for chunk in self._events(response, timeout):
                    yield chunk
            finally:
                response.release()
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
            raise WireError("connection", None, type(exc).__name__) from exc
        except aiohttp.ClientConnectionError as exc:
            raise WireError("connection", None, type(exc).__name__) from exc

    @staticmethod
    async def _raise_for(response: aiohttp.ClientResponse, timeout: float) -> None:
        error: dict[str, Any] = {}
        try:
            async with asyncio.timeout(timeout):
                data = json.loads(await response.read())
            if isinstance(data, dict) and isinstance(data.get("error"), dict):
                error = data["error"]
        except (ValueError, aiohttp.ClientError):
            pass
        status = response.status
        # The server's message is kept for the log line's kind only; it never reaches a user.
        raise WireError(
            kind_for_status(status, error), status, str(error.get("type") or ""), _retry_after(response.headers)
        )

    @staticmethod
    def _decode(raw: bytes) -> dict[str, Any]:
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise WireError("server", None, "the answer is not JSON") from exc
        if not isinstance(data, dict):
            raise WireError("server", None, "the answer is not a JSON object")
        if isinstance(data.get("error"), dict):
            raise WireError("server", None, str(data["error"].get("type") or "error in answer"))
        return data

    async def _events(self, response: aiohttp.ClientResponse, timeout: float) -> AsyncIterator[dict[str, Any]]:
        """Server-sent events: `data: {json}` lines until `data: [DONE]` (or the end of the body)."""
        content = response.content
        while True:
            async with asyncio.timeout(timeout):
                line = await content.readline()
            if not line:
                return  # some servers end the body without [DONE]
            line = line.strip()
            if not line.startswith(b"data:"):
                continue  # blank separators, comments (": keep-alive"), event: names
            data = line[5:].strip()
            if data == b"[DONE]":
                return
            yield self._decode(data)
