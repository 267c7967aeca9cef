"""The shared aiohttp web server: which Host it answers, health, readiness, metrics, and JSON errors
for every route.

DNS rebinding: a page on a name the attacker controls can make the victim's browser resolve that
name to 127.0.0.1 and talk to a gateway on this machine, its cookies and origin being the attacker's
own name. The browser then sends `Host: <that name>`, so every request whose Host is not one this
server is known by is refused (421) before any handler runs.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.typedefs import Middleware

from channels.telegram.config import TelegramChannelConfig
from channels.web.config import WebChannelConfig
from gateway.config.model import Config
from gateway.core.http_input import Address, BadJson, address_of, host_name, is_local_request, is_loopback_name
from gateway.core.logs import ACCESS_LOGGER, event
from gateway.core.ports import STORAGE_RETRY_SECONDS, retry_after
from memory.store.db import StorageUnwritable

log = logging.getLogger("clawgate.server")
access_log = logging.getLogger(ACCESS_LOGGER)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """The Host names this server answers: loopback names and addresses, the addresses it is bound
    to (any address when bound to all of them), and the names it is published under."""

    names: frozenset[str]
    addresses: frozenset[Address]
    any_address: bool

    @classmethod
    def build(cls, binds: Iterable[str], urls: Iterable[str], names: Iterable[str] = ()) -> HostPolicy:
        """`binds`: the addresses or names the web channels listen on; `urls`: addresses people and
        platforms reach the server at (public_url, a Telegram webhook_url); `names`: more host names."""
        known: set[str] = {n.lower().rstrip(".") for n in names}
        addresses: set[Address] = set()
        any_address = False
        for bind in binds:
            address = address_of(bind.strip("[]"))
            if address is None:
                known.add(bind.lower().rstrip("."))
            elif address.is_unspecified:
                any_address = True  # reached at any of its addresses, a kubelet probe's pod IP among them
            else:
                addresses.add(address)
        for url in urls:
            name = host_name(urlsplit(url).netloc)
            if name is not None:
                known.add(name)
        return cls(frozenset(known), frozenset(addresses), any_address)

    def allows(self, name: str | None) -> bool:
        if name is None:
            return False
        if is_loopback_name(name) or name in self.names:
            return True
        # An address, unlike a name, cannot be rebound: a page at http://<address>/ is this server's own.
        address = address_of(name)
        return address is not None and (self.any_address or address in self.addresses)


def _host_guard(policy: HostPolicy) -> Middleware:
    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        header = request.headers.get("Host")
        if not policy.allows(host_name(header)):
            event(log, "http_host_refused", logging.WARNING, host=(header or "")[:100], path=request.path[:200])
            return web.json_response(
                {
                    "error": f"this server does not answer to the host {(header or 'none')[:100]!r}; open it at "
                    "a loopback address or at channels.web.public_url (or list the name in allowed_hosts)"
                },
                status=421,
            )
        return await handler(request)

    return guard


@web.middleware
async def _access(request: web.Request, handler: Handler) -> web.StreamResponse:
    """One `http_request` line per request when `logging.access_log` is on (setup_logging sets this
    logger's level). The path only: a query string or a header may carry a token."""
    if not access_log.isEnabledFor(logging.INFO):
        return await handler(request)
    started = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    except asyncio.CancelledError:
        status = 499  # the client went away before the answer (nginx's word for it)
        raise
    finally:
        ms = round((time.perf_counter() - started) * 1000, 1)
        client = request.remote or ""
        event(
            access_log,
            "http_request",
            method=request.method,
            path=request.path[:200],
            status=status,
            ms=ms,
            client=client,
        )


# The JSON APIs: an unknown route or method there is answered in JSON too, not aiohttp's text page.
_CONSOLE_API = "/api/v1"
_OPENAI_API = "/v1"


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + "/")


def _no_route(request: web.Request) -> web.StreamResponse | None:
    """The JSON answer for a request under one of the JSON APIs that no route matched (404) or whose
    route has no handler for its method (405, with the Allow header); None elsewhere."""
    unmatched = request.match_info.http_exception
    if unmatched is None or unmatched.status not in (404, 405):
        return None
    path, status = request.path, unmatched.status
    if status == 405:
        allowed = unmatched.headers.get("Allow", "")
        message, code = f"{request.method} is not allowed on {path[:200]}; allowed: {allowed}", "method_not_allowed"
    else:
        message, code = f"no such route: {request.method} {path[:200]}", "not_found"
    headers = {"Allow": unmatched.headers["Allow"]} if "Allow" in unmatched.headers else None
    if _under(path, _CONSOLE_API):
        return web.json_response({"error": message}, status=status, headers=headers)
    if _under(path, _OPENAI_API):
        # The OpenAI error shape, as every other answer of /v1 (gateway/web/openai_api.py).
        body = {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
        return web.json_response(body, status=status, headers=headers)
    return None


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    no_route = _no_route(request)
    if no_route is not None:
        return no_route
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except BadJson as exc:
        return web.json_response({"error": str(exc)}, status=400)
    except StorageUnwritable as exc:
        event(log, "http_storage_unwritable", logging.WARNING, path=request.path, reason=exc.reason)
        return web.json_response(
            {"error": cannot_save(exc.reason)}, status=503, headers=retry_after(STORAGE_RETRY_SECONDS)
        )
    except Exception as exc:
        event(log, "http_handler_failed", logging.ERROR, path=request.path, error=type(exc).__name__)
        log.debug("traceback", exc_info=True)
        return web.json_response({"error": "internal error"}, status=500)


def cannot_save(reason: str) -> str:
    """What an HTTP caller is told when the storage refused a write (`reason`: why, in plain words)."""
    return f"the gateway cannot save anything right now ({reason}); try again later"


def build_app(max_body_bytes: int, hosts: HostPolicy) -> web.Application:
    # The access log is outermost: it sees a refused Host and the final status of every request.
    return web.Application(middlewares=[_access, _host_guard(hosts), _errors], client_max_size=max_body_bytes)


@dataclass(frozen=True, slots=True)
class MetricsAccess:
    """Who may read /metrics: this machine (a loopback peer at a loopback Host), a bearer of one of
    `tokens`, or anyone when `public`."""

    tokens: tuple[str, ...] = ()
    public: bool = False

    def allows(self, request: web.Request) -> bool:
        if self.public or is_local_request(request):
            return True
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        presented = token.strip().encode()
        # Every token is compared (no early exit), each in constant time.
        matches = [hmac.compare_digest(presented, t.encode()) for t in self.tokens]
        return scheme.lower() == "bearer" and bool(presented) and any(matches)


def add_ops_routes(
    app: web.Application,
    *,
    ready: Callable[[], Awaitable[tuple[bool, dict[str, object]]]],
    metrics: Callable[[], bytes],
    metrics_access: MetricsAccess = MetricsAccess(),
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

    async def metrics_route(request: web.Request) -> web.Response:
        if not metrics_access.allows(request):
            hint = (
                "send the metrics token (channels.web.metrics.token) as a bearer token"
                if metrics_access.tokens
                else "metrics are served to this machine only; set channels.web.metrics.token to scrape them"
            )
            return web.json_response({"error": hint}, status=401, headers={"WWW-Authenticate": "Bearer"})
        resp = web.Response(body=metrics())
        resp.content_type = "text/plain"
        resp.charset = "utf-8"
        resp.headers["Content-Type"] = "text/plain; version=0.0.4; charset=utf-8"
        return resp

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_route)


def host_policy(config: Config) -> HostPolicy:
    """The Host names the web server answers (DNS rebinding, gateway/web/server.py): where the web
    channels listen and are published, and where Telegram calls its webhooks."""
    webs = config.web_channels().values()
    urls = [c.public_url for c in webs if c.public_url]
    urls += [c.webhook_url for c in config.channels.values() if isinstance(c, TelegramChannelConfig) and c.webhook_url]
    names = [name for c in webs for name in c.allowed_hosts]
    return HostPolicy.build([c.host for c in webs], urls, names)


def metrics_access(webs: dict[str, WebChannelConfig]) -> MetricsAccess:
    tokens = tuple(c.metrics.token.get_secret_value() for c in webs.values() if c.metrics.token is not None)
    return MetricsAccess(tokens, public=any(c.metrics.public for c in webs.values()))
