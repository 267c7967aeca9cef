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
