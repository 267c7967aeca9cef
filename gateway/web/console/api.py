"""The console's JSON API under /api/v1 (docs/api.md, "The console's JSON API"), described by openapi.yaml and served as
/api/v1/openapi.json. Every answer is JSON; every error is `{"error": "..."}` with its status."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from functools import cache
from importlib import resources
from typing import Any

import yaml  # type: ignore[import-untyped]
from aiohttp import web

from gateway.core.http_input import BadJson, BodyTooLarge, parse_json, read_body
from gateway.core.ports import Throttled, retry_after
from gateway.web.console.auth import ConsoleAuth, CsrfRejected, Unauthenticated, clear_cookie
from gateway.web.console.service import ConsoleError, ConsoleService, MemoryQuery, Viewer

Handler = Callable[[web.Request, Viewer], Awaitable[Any]]
# Room for the longest Memory.md (200,000 characters) even when every one is escaped.
MAX_BODY_BYTES = 4 * 1024 * 1024


@cache
def openapi_document() -> bytes:
    text = resources.files("gateway.web.console").joinpath("openapi.yaml").read_text(encoding="utf-8")
    return json.dumps(yaml.safe_load(text)).encode()


def error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def refused(exc: Unauthenticated | CsrfRejected | Throttled) -> web.Response:
    """Who is asking could not be established (401), a cookie request could not prove it came from
    the console (403), or too many wrong tokens came lately (429)."""
    if isinstance(exc, Throttled):
        return throttled(exc)
    return error(401 if isinstance(exc, Unauthenticated) else 403, str(exc))


def throttled(exc: Throttled) -> web.Response:
    response = error(429, f"{exc}: too many wrong tokens from this address or with this token")
    response.headers.update(retry_after(exc.retry_after))
    return response


def int_param(params: Mapping[str, str], name: str, default: int, low: int = 0, high: int = 10_000) -> int:
    """A whole-number query parameter; empty or missing means `default` (as a form sends it)."""
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConsoleError(f"{name} must be a whole number") from None
    if not low <= value <= high:
        raise ConsoleError(f"{name} must be between {low} and {high}")
    return value


def path_int(request: web.Request, name: str) -> int:
    try:
        value = int(request.match_info[name])
    except ValueError:
        raise ConsoleError(f"{name} must be a whole number") from None
    if not 0 < value < 2**62:
        raise ConsoleError(f"{name} is out of range")
    return value


def memory_query(params: Mapping[str, str]) -> MemoryQuery:
    """The memory browser's filters from a query string (the API's and the page's)."""

    def text(name: str, default: str = "", cap: int = 200) -> str:
        value = params.get(name, default)
        return str(value)[:cap]

    return MemoryQuery(
        q=text("q", cap=1000),
        scope=text("scope"),
        memory_class=text("memory_class"),
        provenance=text("provenance"),
        review_status=text("review_status"),
        status=text("status", "active") or "active",
        expiring=text("expiring") in ("1", "true", "on", "yes"),
        limit=int_param(params, "limit", 50, 0, 200) or 50,
        offset=int_param(params, "offset", 0, 0, 100_000),
    )


class TooLarge(ConsoleError):
    status = 413


async def json_body(request: web.Request) -> dict[str, Any]:
    try:
        raw = await read_body(request, MAX_BODY_BYTES)
    except BodyTooLarge as exc:
        raise TooLarge(str(exc)) from None
    try:
        body = parse_json(raw or b"null")
    except BadJson as exc:
        raise ConsoleError(str(exc)) from None
    if not isinstance(body, dict):
        raise ConsoleError("the body must be a JSON object")
    return body


def body_text(body: dict[str, Any], name: str, *, required: bool = True, cap: int = 200_000) -> str:
    value = body.get(name, None if required else "")
    if not isinstance(value, str):
        raise ConsoleError(f"{name} must be a string" if value is not None else f"{name} is required")
    if len(value) > cap:
        raise ConsoleError(f"{name} is longer than {cap:,} characters")
    return value


class ConsoleApi:
    def __init__(self, service: ConsoleService, auth: ConsoleAuth) -> None:
        self.service = service
        self.auth = auth

    def mount(self, app: web.Application) -> None:
        r = app.router
        r.add_get("/api/v1/openapi.json", self.openapi)
        r.add_post("/api/v1/session", self.sign_in)
        r.add_get("/api/v1/session", self._wrap(self.session))
        r.add_delete("/api/v1/session", self.sign_out)
        r.add_get("/api/v1/memory", self._wrap(self.memories))
        r.add_get("/api/v1/memory/{id}", self._wrap(self.record))
        r.add_post("/api/v1/memory/{id}/review", self._wrap(self.review))
        r.add_get("/api/v1/review", self._wrap(self.review_queue))
        r.add_post("/api/v1/revisions/{id}/undo", self._wrap(self.undo))
        r.add_get("/api/v1/traces", self._wrap(self.traces))
        r.add_get("/api/v1/core/{which}", self._wrap(self.core))
        r.add_put("/api/v1/core/{which}", self._wrap(self.save_core))
        r.add_get("/api/v1/status", self._wrap(self.status))
        r.add_get("/api/v1/users", self._wrap(self.users))
        r.add_get("/api/v1/pairing", self._wrap(self.pairing))
        r.add_post("/api/v1/pairing/{code}/approve", self._wrap(self.approve))
        r.add_get("/api/v1/jobs", self._wrap(self.jobs))
        r.add_post("/api/v1/jobs/{id}/retry", self._wrap(self.retry))

    def _wrap(self, handler: Handler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def run(request: web.Request) -> web.StreamResponse:
            try:
                viewer = await self.auth.viewer(request)
                return web.json_response(await handler(request, viewer))
            except (Unauthenticated, CsrfRejected, Throttled) as exc:
                return refused(exc)
            except ConsoleError as exc:
                return error(exc.status, str(exc))

        return run

    async def openapi(self, _request: web.Request) -> web.Response:
        return web.Response(body=openapi_document(), content_type="application/json")

    # -- session ---------------------------------------------------------------------------------

    async def sign_in(self, request: web.Request) -> web.StreamResponse:
        # Signing in sets a cookie: another site must not sign a visitor into someone else's account
        # (a cross-site form can post text/plain that parses as JSON, but cannot send application/json).
        if request.content_type != "application/json" or not self.auth.same_origin(request):
            return error(403, "sign in with a JSON body (Content-Type: application/json) from this server's own pages")
        try:
            token = body_text(await json_body(request), "token", cap=4096)
        except ConsoleError as exc:
            return error(exc.status, str(exc))
        try:
            signed = await self.auth.sign_in(request, token)
        except Throttled as exc:
            return throttled(exc)
        if signed is None:
            return error(401, "that token is not valid here")
        session_id, viewer = signed
        response = web.json_response({**viewer.json(), "csrf": viewer.csrf})
        self.auth.set_cookie(response, request, session_id)
        return response

    async def session(self, _request: web.Request, viewer: Viewer) -> dict[str, Any]:
        return {**viewer.json(), "csrf": viewer.csrf}

    async def sign_out(self, request: web.Request) -> web.StreamResponse:
        try:
            await self.auth.viewer(request)
        except (Unauthenticated, CsrfRejected, Throttled) as exc:
            return refused(exc)
        await self.auth.sign_out(request)
        response = web.Response(status=204)
        clear_cookie(response)
        return response

    # -- memory ----------------------------------------------------------------------------------

    async def memories(self, request: web.Request, viewer: Viewer) -> Any:
        return await self.service.memories(viewer, memory_query(request.query))

    async def record(self, request: web.Request, viewer: Viewer) -> Any:
        return await self.service.record(viewer, request.match_info["id"])

    async def review(self, request: web.Request, viewer: Viewer) -> Any:
        body = await json_body(request)
        action = body_text(body, "action", cap=32)
        arg = body_text(body, "arg", required=False, cap=20_000)
        return await self.service.review(viewer, request.match_info["id"], action, arg)

    async def review_queue(self, request: web.Request, viewer: Viewer) -> Any:
        limit, offset = int_param(request.query, "limit", 50, 1, 200), int_param(request.query, "offset", 0, 0, 100_000)
        return await self.service.review_queue(viewer, limit, offset)

    async def undo(self, request: web.Request, viewer: Viewer) -> Any:
        return await self.service.undo_revision(viewer, path_int(request, "id"))

    async def traces(self, request: web.Request, viewer: Viewer) -> Any:
        session = request.query.get("session", "")[:512]
        return await self.service.traces(viewer, session, int_param(request.query, "limit", 20, 1, 50))

    async def core(self, request: web.Request, viewer: Viewer) -> Any:
        return self.service.core_file(viewer, request.match_info["which"])

    async def save_core(self, request: web.Request, viewer: Viewer) -> Any:
        body = await json_body(request)
        text = body_text(body, "text")
        expected = body_text(body, "etag", cap=64)
        return self.service.save_core(viewer, request.match_info["which"], text, expected)

    # -- administration --------------------------------------------------------------------------

    async def status(self, _request: web.Request, viewer: Viewer) -> Any:
        return await self.service.status(viewer)

    async def users(self, request: web.Request, viewer: Viewer) -> Any:
        return await self.service.users(viewer, int_param(request.query, "limit", 200, 1, 1000))

    async def pairing(self, _request: web.Request, viewer: Viewer) -> Any:
        return await self.service.pairing(viewer)

    async def approve(self, request: web.Request, viewer: Viewer) -> Any:
        return await self.service.approve_pairing(viewer, request.match_info["code"])

    async def jobs(self, request: web.Request, viewer: Viewer) -> Any:
        status = request.query.get("status", "")[:16]
        kind = request.query.get("kind", "")[:64]
        return await self.service.jobs(viewer, status, kind, int_param(request.query, "limit", 50, 1, 200))

    async def retry(self, request: web.Request, viewer: Viewer) -> Any:
        return await self.service.retry_job(viewer, path_int(request, "id"))
