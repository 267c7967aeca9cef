"""Slack SDK / network exceptions -> DeliveryError, by exception type, HTTP status and Slack error code."""

from __future__ import annotations

import asyncio

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError

from gateway.core.ports import DeliveryError


class SlackStartError(RuntimeError):
    """The channel could not start: bad token, unreachable Slack, or no Socket Mode hello."""


# Slack answers these with HTTP 200 and ok=false. The request may have partly taken effect
# ("It's possible some aspect of the operation succeeded"), so a post is not safe to repeat.
_MAYBE_APPLIED = frozenset({"internal_error", "fatal_error"})
# Transient on Slack's side before anything was done.
_TRANSIENT = frozenset({"service_unavailable", "team_added_to_org"})


def _retry_after(headers: object) -> float | None:
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):
        return None


def _api_error(exc: SlackApiError, method: str) -> DeliveryError:
    response = exc.response
    status = getattr(response, "status_code", None)
    data = getattr(response, "data", None)
    code = data.get("error") if isinstance(data, dict) else None
    what = f"slack {method} failed: status={status} error={code or 'unknown'}"
    if status == 429 or code == "ratelimited":
        return DeliveryError(what, retryable=True, retry_after=_retry_after(getattr(response, "headers", None)))
    if isinstance(status, int) and status >= 500:
        return DeliveryError(what, retryable=True)
    if code in _MAYBE_APPLIED:
        return DeliveryError(what, retryable=False, maybe_delivered=True)
    if code in _TRANSIENT:
        return DeliveryError(what, retryable=True)
    # channel_not_found, not_in_channel, invalid_auth, msg_too_long, message_not_found, ...
    return DeliveryError(what, retryable=False)


def to_delivery_error(exc: BaseException, method: str) -> DeliveryError:
    """Classify what a Web API call raised. `method` is the Slack method name, for the message."""
    if isinstance(exc, DeliveryError):
        return exc
    if isinstance(exc, SlackApiError):
        return _api_error(exc, method)
    name = type(exc).__name__
    # Connecting failed (refused, DNS, TLS, connect timeout): nothing reached Slack.
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError):
        return DeliveryError(f"slack {method}: cannot connect ({name})", retryable=True)
    # The request was (or may have been) sent and no answer came: it may have been posted.
    if isinstance(exc, asyncio.TimeoutError | aiohttp.ServerTimeoutError):
        return DeliveryError(f"slack {method}: timed out ({name})", retryable=False, maybe_delivered=True)
    if isinstance(exc, aiohttp.ClientError | ConnectionError):
        return DeliveryError(f"slack {method}: connection lost ({name})", retryable=False, maybe_delivered=True)
    if isinstance(exc, SlackClientError):
        return DeliveryError(f"slack {method}: client error ({name})", retryable=False)
    return DeliveryError(f"slack {method}: unexpected {name}", retryable=False)
