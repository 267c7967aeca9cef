"""Classification of failures that the fake-driven tests do not reach (pure, no network)."""

from __future__ import annotations

import aiohttp
import discord
import pytest

from channels.discord.errors import PlatformRefusal, refusal_from, to_delivery_error
from gateway.core.ports import DeliveryError


def test_sdk_rate_limited_keeps_its_retry_after() -> None:
    err = to_delivery_error(discord.RateLimited(42.5), what="send", sent=False)
    assert (err.retryable, err.retry_after, err.maybe_delivered) == (True, 42.5, False)


@pytest.mark.parametrize(
    ("status", "retryable", "maybe"),
    [
        (429, True, False),
        (500, True, False),
        (502, True, False),
        (503, True, False),
        (504, False, True),
        (524, False, True),
    ],
)
def test_refusals_by_status(status: int, retryable: bool, maybe: bool) -> None:
    err = to_delivery_error(PlatformRefusal(status, retry_after=None, code=None, message="x"), what="edit", sent=True)
    assert (err.retryable, err.maybe_delivered) == (retryable, maybe)


def test_retry_after_from_body_then_headers() -> None:
    assert refusal_from(429, {"Retry-After": "3"}, {"retry_after": 2.25}).retry_after == 2.25
    assert refusal_from(429, {"Retry-After": "3", "X-RateLimit-Reset-After": "2.5"}, "not json").retry_after == 2.5
    assert refusal_from(429, {"Retry-After": "3"}, None).retry_after == 3.0
    assert refusal_from(429, {}, {"retry_after": True}).retry_after is None
    assert refusal_from(500, {"Retry-After": "3"}, {"code": 0}).retry_after is None


@pytest.mark.parametrize(
    ("exc", "sent", "retryable", "maybe"),
    [
        (TimeoutError(), True, False, True),
        (TimeoutError(), False, True, False),  # still waiting for a rate-limit bucket: nothing went out
        (aiohttp.ServerDisconnectedError(), True, False, True),
        (aiohttp.ClientOSError(104, "reset"), False, True, False),
        (ConnectionResetError(), True, False, True),
        (discord.ClientException("bad argument"), False, False, False),
    ],
)
def test_transport_failures(exc: Exception, sent: bool, retryable: bool, maybe: bool) -> None:
    err = to_delivery_error(exc, what="send", sent=sent)
    assert (err.retryable, err.maybe_delivered) == (retryable, maybe)


def test_delivery_error_passes_through() -> None:
    original = DeliveryError("already classified", retryable=False)
    assert to_delivery_error(original, what="send", sent=True) is original
