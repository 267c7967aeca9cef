"""discord.py / aiohttp failures -> `DeliveryError`, classified by exception type and HTTP status."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp
import discord

from gateway.core.ports import DeliveryError

# A proxy that timed out waiting for Discord: the request may have been processed behind it.
AMBIGUOUS_5XX = frozenset({504, 524})


class DiscordStartError(RuntimeError):
    """The channel could not log in or connect; the cause is chained."""


class PlatformRefusal(Exception):
    """A 429 or 5xx answer, raised by our request hook before discord.py could sleep and retry it."""

    def __init__(self, status: int, *, retry_after: float | None, code: int | None, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" + (f" (code {code})" if code else ""))
        self.status = status
        self.retry_after = retry_after
        self.code = code


def refusal_from(status: int, headers: Mapping[str, str], body: Any) -> PlatformRefusal:
    """Build a refusal from a response; the JSON body's retry_after is the precise one (a float)."""
    body = body if isinstance(body, Mapping) else {}
    retry_after = _float(body.get("retry_after"))
    if retry_after is None:
        retry_after = _retry_after_header(headers)
    code = body.get("code")
    return PlatformRefusal(
        status,
        retry_after=retry_after if status == 429 else None,
        code=code if isinstance(code, int) else None,
        message=str(body.get("message") or "no message"),
    )


def to_delivery_error(exc: BaseException, *, what: str, sent: bool) -> DeliveryError:
    """`sent`: the request's headers went out, so the platform may have acted on it."""
    label = f"discord {what} failed"
    if isinstance(exc, DeliveryError):
        return exc
    if isinstance(exc, PlatformRefusal):
        return _by_status(label, exc.status, exc.retry_after, str(exc))
    if isinstance(exc, discord.RateLimited):
        return DeliveryError(f"{label}: rate limited", retryable=True, retry_after=exc.retry_after)
    if isinstance(exc, discord.HTTPException):
        retry_after = _retry_after_header(exc.response.headers) if exc.status == 429 else None
        return _by_status(label, exc.status, retry_after, f"HTTP {exc.status}: {exc.text or 'no message'}")
    if isinstance(exc, TimeoutError):
        if sent:
            return DeliveryError(f"{label}: timed out after sending", retryable=False, maybe_delivered=True)
        return DeliveryError(f"{label}: timed out before sending", retryable=True)
    if isinstance(exc, aiohttp.ClientConnectorError):  # never connected: nothing was sent
        return DeliveryError(f"{label}: cannot connect ({type(exc).__name__})", retryable=True)
    if isinstance(exc, (aiohttp.ClientError, OSError)):
        if sent:
            return DeliveryError(
                f"{label}: connection lost ({type(exc).__name__})", retryable=False, maybe_delivered=True
            )
        return DeliveryError(f"{label}: connection failed ({type(exc).__name__})", retryable=True)
    return DeliveryError(f"{label}: {type(exc).__name__}", retryable=False, maybe_delivered=sent)


def _by_status(label: str, status: int, retry_after: float | None, detail: str) -> DeliveryError:
    if status == 429:
        return DeliveryError(f"{label}: rate limited ({detail})", retryable=True, retry_after=retry_after)
    if status in AMBIGUOUS_5XX:
        return DeliveryError(f"{label}: {detail}", retryable=False, maybe_delivered=True)
    if status >= 500:
        return DeliveryError(f"{label}: {detail}", retryable=True)
    return DeliveryError(f"{label}: {detail}", retryable=False)


def _retry_after_header(headers: Mapping[str, str]) -> float | None:
    for name in ("X-RateLimit-Reset-After", "Retry-After"):
        value = _float(headers.get(name))
        if value is not None:
            return value
    return None


def _float(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None
