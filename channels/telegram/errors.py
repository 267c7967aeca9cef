"""python-telegram-bot exceptions -> gateway.core.ports.DeliveryError, by exception type only.

PTB raises `TimedOut` and `NetworkError` for transport failures and chains the httpx exception
as `__cause__`; that cause tells whether the request can have reached Telegram.
"""

from __future__ import annotations

import datetime as dt
import warnings

import httpx
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    EndPointNotFound,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)
from telegram.warnings import PTBDeprecationWarning

from gateway.core.ports import DeliveryError

# Failures that happen before a single byte of the request left: safe to send again.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# Failures after the request was (maybe fully) written: Telegram may have acted on it.
_AFTER_SEND = (httpx.ReadError, httpx.ReadTimeout, httpx.WriteError, httpx.WriteTimeout, httpx.RemoteProtocolError)
_REJECTED = (BadRequest, Forbidden, InvalidToken, ChatMigrated, Conflict, EndPointNotFound)

# PTB warns, inside RetryAfter itself, that retry_after will become a timedelta; we accept both
# (retry_after_seconds), so the warning only adds noise to every rate limit.
warnings.filterwarnings("ignore", message=r".*`retry_after`.*", category=PTBDeprecationWarning)


class TelegramStartError(RuntimeError):
    """The channel could not connect at start (bad token, unreachable API, webhook refused)."""


def retry_after_seconds(exc: RetryAfter) -> float:
    # PTB 22 returns an int with a deprecation warning unless PTB_TIMEDELTA is set; accept both.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = exc.retry_after
    return value.total_seconds() if isinstance(value, dt.timedelta) else float(value)


def delivery_error(exc: TelegramError, op: str) -> DeliveryError:
    """The DeliveryError for a failed `op` ("send", "edit")."""
    what = f"telegram {op} failed: {type(exc).__name__}: {exc.message}"
    cause = exc.__cause__
    if isinstance(exc, RetryAfter):
        return DeliveryError(what, retryable=True, retry_after=retry_after_seconds(exc))
    if isinstance(exc, TimedOut):
        if isinstance(cause, _NOT_SENT):
            return DeliveryError(what, retryable=True)
        return DeliveryError(what, retryable=False, maybe_delivered=True)
    if isinstance(exc, _REJECTED):  # before NetworkError: BadRequest is a subclass of it
        return DeliveryError(what, retryable=False)
    if isinstance(exc, NetworkError):
        if isinstance(cause, _AFTER_SEND):
            return DeliveryError(what, retryable=False, maybe_delivered=True)
        # Connection refused, or an HTTP 5xx/502 answer: Telegram did not take the message.
        return DeliveryError(what, retryable=True)
    return DeliveryError(what, retryable=False)
