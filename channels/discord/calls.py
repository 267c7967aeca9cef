"""One bounded platform call per send/edit/typing, with discord.py's own retries switched off.

discord.py's HTTP client answers a 429 by sleeping `retry_after` and retrying (it raises
`RateLimited` instead only above `max_ratelimit_timeout`, which it clamps to at least 30 s), and
retries 500/502/504/524 up to five times with growing sleeps. The gateway owns retries, so for
calls made inside `platform_call` an aiohttp trace hook (discord.py's public `http_trace` option)
raises `PlatformRefusal` as soon as such a response arrives: discord.py never sees it, and the
response is closed by aiohttp. Requests outside a platform call (login, gateway discovery) keep
discord.py's behaviour.

What remains of discord.py's rate limiting: its per-route buckets, filled from X-RateLimit-*
headers of successful answers, make a request wait for the bucket's reset *before* it is sent
(and after the request that emptied it). That wait counts against the call's timeout; the hook
tells whether the request had gone out, so a timeout spent waiting is reported as not delivered.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TypeVar

import aiohttp

from channels.discord.errors import refusal_from, to_delivery_error

T = TypeVar("T")


@dataclass(slots=True)
class _Call:
    sent: bool = False  # the request's headers went out: the platform may act on it


_CURRENT: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("clawgate_discord_call", default=None)


def trace_config() -> aiohttp.TraceConfig:
    """The hook to pass as `discord.Client(http_trace=...)`."""
    trace = aiohttp.TraceConfig()
    trace.on_request_headers_sent.append(_headers_sent)
    trace.on_request_end.append(_request_end)
    return trace


async def platform_call(what: str, op: Callable[[], Awaitable[T]], *, timeout: float) -> T:
    """Run `op` (one discord.py request) within `timeout`; every failure becomes a DeliveryError."""
    call = _Call()
    token = _CURRENT.set(call)
    try:
        async with asyncio.timeout(timeout):
            return await op()
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        error = to_delivery_error(exc, what=what, sent=call.sent)
        if error is exc:
            raise
        raise error from exc
    finally:
        _CURRENT.reset(token)


async def _headers_sent(
    _session: aiohttp.ClientSession, _ctx: SimpleNamespace, _params: aiohttp.TraceRequestHeadersSentParams
) -> None:
    call = _CURRENT.get()
    if call is not None:
        call.sent = True


async def _request_end(
    _session: aiohttp.ClientSession, _ctx: SimpleNamespace, params: aiohttp.TraceRequestEndParams
) -> None:
    response = params.response
    if _CURRENT.get() is None or not (response.status == 429 or response.status >= 500):
        return
    try:
        body = await response.json(content_type=None)
    except (ValueError, aiohttp.ClientError):
        body = None
    raise refusal_from(response.status, response.headers, body)
