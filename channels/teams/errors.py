"""What a Bot Connector call raised -> DeliveryError, by exception type and HTTP status only.

The SDK's connector client raises aiohttp's ClientResponseError (`raise_for_status`) for a refusal,
with the response's status and headers; transport failures are aiohttp's own exceptions. Teams'
rate-limit docs ("Optimize your bot with rate limiting") ask a bot to retry 429, 412, 502 and 504.
"""

from __future__ import annotations

import email.utils
import time

import aiohttp

from gateway.core.ports import DeliveryError

# Refusals that say the call can succeed later, unchanged.
_TRANSIENT = frozenset({408, 412, 425, 429})


class TeamsStartError(RuntimeError):
    """The channel could not start (its endpoint is taken on the shared server)."""


class TokenError(Exception):
    """The bot could not get a token for the Bot Connector. `retryable`: a transient failure of the
    token endpoint; False when it refused the app id or secret. Never carries the secret."""

    def __init__(self, message: str, *, retryable: bool, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.code = code


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """A Retry-After header: seconds, or an HTTP date (RFC 9110 allows both)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def delivery_error(exc: BaseException, op: str) -> DeliveryError:
    """The DeliveryError for a failed `op` ("send", "edit", "typing")."""
    if isinstance(exc, DeliveryError):
        return exc
    name = type(exc).__name__
    if isinstance(exc, TokenError):
        return DeliveryError(f"teams {op} failed: no Bot Connector token: {exc}", retryable=exc.retryable)
    if isinstance(exc, aiohttp.ClientResponseError):
        what = f"teams {op} failed: HTTP {exc.status}"
        if exc.status in _TRANSIENT:
            wait = retry_after_seconds(exc.headers.get("Retry-After")) if exc.headers else None
            return DeliveryError(what, retryable=True, retry_after=wait)
        # 5xx: the service failed the call, and Teams' docs ask for a retry (502, 504). 400 (malformed),
        # 401/403 (the token, a bot removed from the conversation), 404 (gone), 413 (too large): the
        # same call would fail again.
        return DeliveryError(what, retryable=exc.status >= 500)
    # Connecting failed (refused, DNS, TLS, connect timeout): nothing reached Teams.
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError):
        return DeliveryError(f"teams {op}: cannot connect ({name})", retryable=True)
    # Sent, and no answer: Teams may have posted it. Never repeated (docs/channels.md, "Delivery").
    if isinstance(exc, TimeoutError | aiohttp.ServerTimeoutError):
        return DeliveryError(f"teams {op}: timed out ({name})", retryable=False, maybe_delivered=True)
    if isinstance(exc, aiohttp.ClientError | ConnectionError):
        return DeliveryError(f"teams {op}: connection lost ({name})", retryable=False, maybe_delivered=True)
    # The SDK's own argument checks (an empty conversation or activity id), and anything unforeseen.
    return DeliveryError(f"teams {op}: {name}", retryable=False)
