"""The direct OpenAI-wire client against odd but real server behaviour, on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web

from gateway.llm.client import classify
from gateway.llm.openai_wire import OpenAIWire, WireError, kind_for_status
from tests.fakes.serve import serve_loopback


@pytest.mark.parametrize(
    ("status", "error", "kind"),
    [
        (400, {"code": "context_length_exceeded"}, "context_window"),
        (400, {"message": "This model's maximum context length is 4096 tokens"}, "context_window"),
        (400, {"message": "bad tool schema"}, "bad_request"),
        (401, {}, "auth"),
        (403, {}, "auth"),
        (404, {}, "not_found"),
        (408, {}, "timeout"),
        (422, {}, "bad_request"),
        (429, {}, "rate_limit"),
        (500, {}, "server"),
        (502, {}, "server"),
        (503, {}, "overloaded"),
    ],
)
def test_statuses_map_to_the_kinds_litellm_errors_get(status: int, error: dict[str, Any], kind: str) -> None:
    assert kind_for_status(status, error) == kind
    assert classify(WireError(kind, status)) == (kind, status)


Handler = Callable[[web.Request], Any]


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Any]]:
    runners: list[web.AppRunner] = []

    async def start(handler: Handler) -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler)
        runner, url = await serve_loopback(app)
        runners.append(runner)
        return url + "/v1/chat/completions"

    yield start
    for runner in runners:
        await runner.cleanup()


@pytest.fixture
async def wire() -> AsyncIterator[OpenAIWire]:
    w = OpenAIWire()
    yield w
    await w.close()


async def sse(request: web.Request, lines: list[bytes], close: bool = False) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for line in lines:
        await resp.write(line)
    if close:
        assert request.transport is not None
        request.transport.close()
        return resp
    await resp.write_eof()
    return resp


async def collect(wire: OpenAIWire, url: str, stream: bool = True, timeout: float = 5) -> list[dict[str, Any]]:
    return [c async for c in wire.chat(url, "sk-test", {"model": "m", "messages": [], "stream": stream}, timeout)]


async def test_stream_skips_comments_and_ends_without_done(serve, wire: OpenAIWire) -> None:  # type: ignore[no-untyped-def]
    async def handler(request: web.Request) -> web.StreamResponse:
        return await sse(request, [b": keep-alive\n\n", b'data: {"choices": []}\n\n', b"event: x\ndata: {}\n\n"])

    assert await collect(wire, await serve(handler)) == [{"choices": []}, {}]


async def test_the_key_is_sent_as_a_bearer_token(serve, wire: OpenAIWire) -> None:  # type: ignore[no-untyped-def]
    seen: dict[str, Any] = {}

    async def handler(request: web.Request) -> web.Response:
        seen.update(auth=request.headers["Authorization"], body=await request.json())
        return web.json_response({"choices": [{"message": {"content": "ok"}}]})

    assert await collect(wire, await serve(handler), stream=False) == [{"choices": [{"message": {"content": "ok"}}]}]
    assert seen == {"auth": "Bearer sk-test", "body": {"model": "m", "messages": [], "stream": False}}


async def test_an_error_event_mid_stream_is_a_server_error(serve, wire: OpenAIWire) -> None:  # type: ignore[no-untyped-def]
    async def handler(request: web.Request) -> web.StreamResponse:
        return await sse(request, [b'data: {"choices": []}\n\n', b'data: {"error": {"type": "overloaded"}}\n\n'])

    with pytest.raises(WireError) as err:
        await collect(wire, await serve(handler))
    assert err.value.kind == "server"


async def test_a_cut_stream_is_a_connection_error(serve, wire: OpenAIWire) -> None:  # type: ignore[no-untyped-def]
    async def handler(request: web.Request) -> web.StreamResponse:
        return await sse(request, [b'data: {"choices": []}\n\n', b'data: {"choi'], close=True)

    with pytest.raises(WireError) as err:
        await collect(wire, await serve(handler))
    assert err.value.kind in ("connection", "server")


async def test_html_instead_of_json_is_a_server_error(serve, wire: OpenAIWire) -> None:  # type: ignore[no-untyped-def]
    async def handler(request: web.Request) -> web.Response:
        return web.Response(text="<html>gateway error page</html>", content_type="text/html")

    with pytest.raises(WireError) as err:
        await collect(wire, await serve(handler), stream=False)
    assert err.value.kind == "server"


async def test_error_status_carries_retry_after(serve, wire: OpenAIWire) -> None:  # type: ignore[no-untyped-def]
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "7"})

    with pytest.raises(WireError) as err:
        await collect(wire, await serve(handler))
    assert (err.value.kind, err.value.status, err.value.retry_after) == ("rate_limit", 429, 7.0)
    assert "slow down" not in str(err.value)  # the provider's text stays out of logs and replies


async def test_a_silent_server_times_out(serve, wire: OpenAIWire) -> None:  # type: ignore[no-untyped-def]
    stop = asyncio.Event()

    async def handler(request: web.Request) -> web.Response:
        await stop.wait()
        return web.Response()

    try:
        with pytest.raises(TimeoutError):
            await collect(wire, await serve(handler), timeout=0.2)
    finally:
        stop.set()


async def test_nothing_listening_is_a_connection_error(wire: OpenAIWire) -> None:
    with pytest.raises(WireError) as err:
        await collect(wire, "http://127.0.0.1:9/v1/chat/completions")
    assert err.value.kind == "connection"


def test_proxies_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.llm.openai_wire import proxy_for

    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    proxy_for.cache_clear()
    try:
        assert proxy_for("https://api.example.com/v1/chat/completions") == "http://proxy.internal:3128"
        assert proxy_for("http://127.0.0.1:8000/v1/chat/completions") is None
    finally:
        proxy_for.cache_clear()
