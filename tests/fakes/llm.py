"""A local OpenAI-compatible server for tests: JSON and SSE replies, tool calls, injected errors
and hangs, a journal of every request, and event-driven waits (no sleeps)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import multipart as aiohttp_multipart
from aiohttp import web

from tests.fakes.serve import serve_loopback


@dataclass
class Reply:
    text: str
    chunks: int = 3  # how many SSE pieces the text is cut into when streaming


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    call_id: str = "call_1"


@dataclass
class Fail:
    status: int
    message: str = "injected failure"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Hang:
    """Never answer (until the fake stops): the client's timeout must fire."""


@dataclass
class Gate:
    """Hold the request until the test calls `fake.release()`, then answer with `then`.

    With `before` (streaming requests only), that text is streamed first, then the hold begins:
    a reply cut mid-stream.
    """

    then: Reply = field(default_factory=lambda: Reply("released"))
    before: str = ""


@dataclass
class BreakStream:
    """Send some text, then cut the connection mid-stream."""

    text: str = "partial "


Behavior = Reply | ToolCall | Fail | Hang | Gate | BreakStream

# A model id LiteLLM says can see pictures (litellm.supports_vision): its requests carry image parts.
VISION_MODEL = "openai/gpt-4o"
TRANSCRIPTION_MODEL = "openai/whisper-1"


def image_parts(request: dict[str, Any]) -> list[str]:
    """The image URLs (data: URLs) of a chat request's messages, in order."""
    found = []
    for message in request.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            found += [p["image_url"]["url"] for p in content if isinstance(p, dict) and p.get("type") == "image_url"]
    return found


def user_text(request: dict[str, Any]) -> str:
    """The text of a chat request's newest user message (its text parts joined, when it has parts)."""
    last = next((m for m in reversed(request.get("messages", [])) if m.get("role") == "user"), None)
    content = last.get("content") if last else ""
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content or "")


def echo(request: dict[str, Any]) -> Behavior:
    last = next((m for m in reversed(request.get("messages", [])) if m.get("role") == "user"), None)
    content = last.get("content") if last else ""
    if isinstance(content, list):  # text and image parts: the text is echoed, the pictures counted
        images = sum(1 for p in content if isinstance(p, dict) and p.get("type") == "image_url")
        text = "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        content = text.rpartition("\u27e6message\u27e7\n")[2] + (f" [{images} image(s)]" if images else "")
    if isinstance(content, str):  # the person's words, after the memory the gateway recalled before them
        content = content.rpartition("\u27e6message\u27e7\n")[2]
    return Reply(f"echo: {content}")


class FakeLLM:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.embedding_requests: list[dict[str, Any]] = []  # bodies of /v1/embeddings, with "_headers"
        self.embedding_dim = 16
        # /v1/audio/transcriptions: each request's fields and file size, and the texts to answer with
        # (in order; when none is queued: "transcript of <n> bytes").
        self.transcriptions: list[dict[str, Any]] = []
        self.transcripts: deque[str] = deque()
        self._scripts: dict[str | None, deque[Behavior]] = {}
        self.default: Callable[[dict[str, Any]], Behavior] = echo
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._stop = asyncio.Event()
        self._gate = asyncio.Event()
        self.in_flight = 0
        self.max_in_flight = 0
        self.url = ""

    @property
    def api_base(self) -> str:
        return f"{self.url}/v1"

    def script(self, *behaviors: Behavior, model: str | None = None) -> None:
        """Queue behaviors for the next requests (for one model name, or any)."""
        self._scripts.setdefault(model, deque()).extend(behaviors)

    async def start(self) -> FakeLLM:
        # Requests with pictures in them run to megabytes, as real providers take (20 MB at OpenAI).
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_post("/v1/audio/transcriptions", self._transcriptions)
        self._runner, self.url = await serve_loopback(app)
        return self

    def release(self) -> None:
        """Let every request held by a Gate answer (and later Gates pass at once)."""
        self._gate.set()

    async def stop(self) -> None:
        self._stop.set()
        self._gate.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def wait_for(self, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float = 10) -> None:
        async with asyncio.timeout(timeout):
            async with self._changed:
                await self._changed.wait_for(lambda: predicate(self.requests))

    async def wait_requests(self, n: int, timeout: float = 10) -> None:
        await self.wait_for(lambda reqs: len(reqs) >= n, timeout)

    def _next(self, body: dict[str, Any]) -> Behavior:
        model = str(body.get("model", ""))
        for key in (model, None):
            queue = self._scripts.get(key)
            if queue:
                return queue.popleft()
        return self.default(body)

    async def _embeddings(self, request: web.Request) -> web.Response:
        """One vector per input: its words hashed into `embedding_dim` dimensions (texts sharing words are close)."""
        body = await request.json()
        body["_headers"] = dict(request.headers)
        self.embedding_requests.append(body)
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = []
        for i, text in enumerate(texts):
            vector = [0.0] * self.embedding_dim
            for word in str(text).lower().split():
                vector[zlib.crc32(word.encode()) % self.embedding_dim] += 1.0
            data.append({"object": "embedding", "index": i, "embedding": vector})
        usage = {"prompt_tokens": len(texts), "total_tokens": len(texts)}
        return web.json_response({"object": "list", "data": data, "model": body.get("model"), "usage": usage})

    async def _transcriptions(self, request: web.Request) -> web.Response:
        """OpenAI's transcription endpoint: a multipart form with `file` and `model` (and optional
        `language`, `response_format`); answers `{"text": ...}`."""
        fields: dict[str, Any] = {"_headers": dict(request.headers)}
        reader = await request.multipart()
        async for part in reader:
            if not isinstance(part, aiohttp_multipart.BodyPartReader):
                continue
            if part.name == "file":
                content = await part.read(decode=False)
                fields |= {
                    "filename": part.filename,
                    "bytes": len(content),
                    "content_type": part.headers.get("Content-Type"),
                }
            elif part.name:
                fields[part.name] = await part.text()
        async with self._changed:
            self.transcriptions.append(fields)
            self._changed.notify_all()
        text = self.transcripts.popleft() if self.transcripts else f"transcript of {fields.get('bytes', 0)} bytes"
        if fields.get("response_format") == "text":
            return web.Response(text=text)
        return web.json_response({"text": text})

    async def _models(self, _request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        body["_headers"] = dict(request.headers)
        async with self._changed:
            self.requests.append(body)
            self._changed.notify_all()
        behavior = self._next(body)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._answer(request, body, behavior)
        finally:
            self.in_flight -= 1

    async def _answer(self, request: web.Request, body: dict[str, Any], behavior: Behavior) -> web.StreamResponse:
        if isinstance(behavior, Gate) and behavior.before and body.get("stream"):
            return await self._stream_with_pause(request, body, behavior)
        if isinstance(behavior, Gate):
            await self._gate.wait()
            behavior = behavior.then
        if isinstance(behavior, Fail):
            return web.json_response(
                {"error": {"message": behavior.message, "type": "fake_error", "code": str(behavior.status)}},
                status=behavior.status,
                headers=behavior.headers,
            )
        if isinstance(behavior, Hang):
            await self._stop.wait()
            return web.Response(status=503)
        model = body.get("model", "fake-model")
        if not body.get("stream"):
            return web.json_response(self._json(model, behavior))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for chunk in self._chunks(model, behavior):
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        if isinstance(behavior, BreakStream):
            assert request.transport is not None
            request.transport.close()
            return resp
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _stream_with_pause(self, request: web.Request, body: dict[str, Any], gate: Gate) -> web.StreamResponse:
        model = body.get("model", "fake-model")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        chunks = self._chunks(model, Reply(gate.before, chunks=1))
        for chunk in chunks[:2]:  # the role chunk and the text before the pause
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await self._gate.wait()
        for chunk in self._chunks(model, gate.then)[1:]:
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    @staticmethod
    def _json(model: str, b: Behavior) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": None}
        finish = "stop"
        if isinstance(b, ToolCall):
            message["tool_calls"] = [
                {
                    "id": b.call_id,
                    "type": "function",
                    "function": {"name": b.name, "arguments": json.dumps(b.arguments)},
                }
            ]
            finish = "tool_calls"
        else:
            message["content"] = b.text
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }

    @staticmethod
    def _chunks(model: str, b: Behavior) -> list[dict[str, Any]]:
        cid = f"chatcmpl-{uuid.uuid4().hex[:12]}"

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        out = [chunk({"role": "assistant", "content": ""})]
        if isinstance(b, ToolCall):
            args = json.dumps(b.arguments)
            half = len(args) // 2
            out.append(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": b.call_id,
                                "type": "function",
                                "function": {"name": b.name, "arguments": args[:half]},
                            }
                        ]
                    }
                )
            )
            out.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[half:]}}]}))
            out.append(chunk({}, "tool_calls"))
            return out
        if isinstance(b, BreakStream):
            out.append(chunk({"content": b.text}))
            return out
        assert isinstance(b, Reply)
        n = max(1, min(b.chunks, len(b.text) or 1))
        size = -(-len(b.text) // n) if b.text else 0
        for i in range(n):
            piece = b.text[i * size : (i + 1) * size]
            if piece:
                out.append(chunk({"content": piece}))
        out.append(chunk({}, "stop"))
        out.append(
            {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        )
        return out
