"""The shared aiohttp web server: health, readiness, metrics, and JSON errors for every route."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from gateway.logs import event

log = logging.getLogger("clawgate.server")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except Exception as exc:
        event(log, "http_handler_failed", logging.ERROR, path=request.path, error=type(exc).__name__)
        log.debug("traceback", exc_info=True)
        return web.json_response({"error": "internal error"}, status=500)


class BodyTooLarge(Exception):
    def __init__(self, cap: int) -> None:
        super().__init__(f"the request body is larger than {cap // 1024:,} KiB")
        self.cap = cap


async def read_body(request: web.Request, cap: int) -> bytes:
    """The whole body, when it is at most `cap` bytes; BodyTooLarge otherwise. Routes whose bodies may
    be larger than the app's client_max_size (sized for chat messages) read through this. One
    read() returns what has arrived so far, so a body sent in pieces is read to its end."""
    if request.content_length is not None and request.content_length > cap:
        raise BodyTooLarge(cap)
    raw = bytearray()
    while len(raw) <= cap:
        chunk = await request.content.read(cap + 1 - len(raw))
        if not chunk:
            break
        raw += chunk
    if len(raw) > cap:
        raise BodyTooLarge(cap)
    return bytes(raw)


def build_app(max_body_bytes: int) -> web.Application:
    return web.Application(middlewares=[_errors], client_max_size=max_body_bytes)


def add_ops_routes(
    app: web.Application,
    *,
    ready: Callable[[], Awaitable[tuple[bool, dict[str, object]]]],
    metrics: Callable[[], bytes],
) -> None:
    async def healthz(_request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_request: web.Request) -> web.Response:
        ok, detail = await ready()
        return web.Response(
            text=json.dumps({"ready": ok, **detail}),
            status=200 if ok else 503,
            content_type="application/json",
        )

    async def metrics_route(_request: web.Request) -> web.Response:
        resp = web.Response(body=metrics())
        resp.content_type = "text/plain"
        resp.charset = "utf-8"
        resp.headers["Content-Type"] = "text/plain; version=0.0.4; charset=utf-8"
        return resp

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_route)
