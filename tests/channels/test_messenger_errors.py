"""Pure pieces of the Messenger channel as tables: Meta's errors -> DeliveryError (by code and status,
never by wording), the wait a rate limit asks for, the 24-hour window's decision, the CDN hosts
attachments may come from, and the config's checks."""

from __future__ import annotations

import json

import aiohttp
import pytest
from pydantic import ValidationError

from channels.messenger.config import MessengerChannelConfig
from channels.messenger.errors import DEFAULT_RATE_WAIT, GraphError, delivery_error
from channels.messenger.graph import wait_of
from channels.messenger.media import on_cdn
from channels.messenger.window import HUMAN_AGENT_WINDOW, MARGIN, WINDOW, Decision, decide, masked

H = 3600.0


@pytest.mark.parametrize(
    ("error", "retryable", "retry_after", "says"),
    [
        (GraphError(429, 613, None, "Calls to this API have exceeded the rate limit.", 2.0), True, 2.0, "613"),
        (GraphError(400, 613, None, "rate limit"), True, DEFAULT_RATE_WAIT, "613"),
        (GraphError(400, 4, 2018022, "Too many send requests"), True, DEFAULT_RATE_WAIT, "4/2018022"),
        (GraphError(400, 32, None, "Page request limit reached", 120.0), True, 120.0, "32"),
        (GraphError(429, None, None, "Too Many Requests", None), True, DEFAULT_RATE_WAIT, "429"),
        (GraphError(500, 1200, None, "Temporary send message failure"), True, None, "1200"),
        (GraphError(500, 2, None, "An unexpected error has occurred"), True, None, "HTTP 500"),
        (GraphError(503, None, None, "Service Unavailable"), True, None, "HTTP 503"),
        (GraphError(400, 10, 2018278, "sent outside of allowed window"), False, None, "24-hour window"),
        (GraphError(400, 551, 1545041, "This person isn't available right now."), False, None, "not available"),
        (GraphError(400, 100, 2018001, "No matching user found"), False, None, "not available"),
        (GraphError(400, 190, 463, "Error validating access token"), False, None, "error 190"),
        (GraphError(403, 200, 1545041, "Permissions error"), False, None, "pages_messaging"),
        (GraphError(400, 10, None, "Application does not have permission"), False, None, "pages_messaging"),
        (GraphError(400, 100, None, "Invalid parameter"), False, None, "error 100"),
    ],
)
def test_graph_errors_table(error: GraphError, retryable: bool, retry_after: float | None, says: str) -> None:
    got = delivery_error(error, "send")
    assert (got.retryable, got.retry_after, got.maybe_delivered) == (retryable, retry_after, False)
    assert says in str(got)


@pytest.mark.parametrize(
    ("exc", "retryable", "maybe"),
    [
        (aiohttp.ConnectionTimeoutError(), True, False),
        (TimeoutError(), False, True),
        (aiohttp.ServerTimeoutError(), False, True),
        (aiohttp.ServerDisconnectedError(), False, True),
        (ConnectionResetError(), False, True),
        (ValueError("bug"), False, False),
    ],
)
def test_transport_errors_table(exc: BaseException, retryable: bool, maybe: bool) -> None:
    # A refused connection is tested for real in test_messenger_adapter.py.
    got = delivery_error(exc, "send")
    assert (got.retryable, got.maybe_delivered) == (retryable, maybe)


def usage(*minutes: int) -> str:
    return json.dumps({"104": [{"type": "messenger", "estimated_time_to_regain_access": m} for m in minutes]})


@pytest.mark.parametrize(
    ("headers", "wait"),
    [
        ({}, None),
        ({"Retry-After": "7"}, 7.0),
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": "-3"}, 0.0),
        ({"X-Business-Use-Case-Usage": usage(0, 3)}, 180.0),
        ({"X-Business-Use-Case-Usage": usage(0)}, None),
        ({"X-Business-Use-Case-Usage": "not json"}, None),
        ({"X-Business-Use-Case-Usage": "[1, 2]"}, None),
        ({"Retry-After": "2", "X-Business-Use-Case-Usage": usage(5)}, 2.0),
    ],
)
def test_wait_of_table(headers: dict[str, str], wait: float | None) -> None:
    assert wait_of(headers) == wait


NOW = 1_760_000_000.0


@pytest.mark.parametrize(
    ("age", "tag", "decision"),
    [
        (60.0, None, Decision("RESPONSE")),
        (23 * H, None, Decision("RESPONSE")),
        (23 * H, "ACCOUNT_UPDATE", Decision("RESPONSE")),  # inside the window no tag is needed
        (WINDOW - MARGIN + 1, None, None),
        (25 * H, None, None),
        (None, None, None),  # never wrote
        (25 * H, "ACCOUNT_UPDATE", Decision("MESSAGE_TAG", "ACCOUNT_UPDATE")),
        (None, "POST_PURCHASE_UPDATE", Decision("MESSAGE_TAG", "POST_PURCHASE_UPDATE")),
        (3 * 24 * H, "HUMAN_AGENT", Decision("MESSAGE_TAG", "HUMAN_AGENT")),
        (HUMAN_AGENT_WINDOW, "HUMAN_AGENT", None),
        (None, "HUMAN_AGENT", None),
    ],
)
def test_window_table(age: float | None, tag: str | None, decision: Decision | None) -> None:
    assert decide(None if age is None else NOW - age, NOW, tag) == decision


def test_people_are_masked_in_logs() -> None:
    assert masked("7000000000000001").startswith("psid#") and "7000000000000001" not in masked("7000000000000001")
    assert masked("1") != masked("2")


CDN = ["fbcdn.net", "fbsbx.com"]


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://scontent.xx.fbcdn.net/v/t1/a.jpg?oh=1", "https://scontent.xx.fbcdn.net:443"),
        ("https://scontent-iad3-2.xx.fbcdn.net/v/a.jpg", "https://scontent-iad3-2.xx.fbcdn.net:443"),
        ("https://cdn.fbsbx.com/v/t59/file.pdf", "https://cdn.fbsbx.com:443"),
        ("https://CDN.FBSBX.COM/x", "https://cdn.fbsbx.com:443"),
        ("http://cdn.fbsbx.com/x", None),  # never without TLS
        ("https://fbcdn.net.evil.example/x", None),
        ("https://evilfbcdn.net/x", None),
        ("https://user:pw@cdn.fbsbx.com/x", None),
        ("https://example.com/?u=https://cdn.fbsbx.com/x", None),
        ("ftp://cdn.fbsbx.com/x", None),
        ("https://[bad", None),
    ],
)
def test_cdn_hosts_table(url: str, origin: str | None) -> None:
    assert on_cdn(url, CDN) == origin


BASE = {"page_access_token": "t", "app_secret": "s", "verify_token": "verify-123"}


@pytest.mark.parametrize(
    ("more", "problem"),
    [
        ({"webhook_path": "messenger"}, "webhook_path"),
        ({"webhook_path": "/hook?x=1"}, "webhook_path"),
        ({"graph_version": "21.0"}, "graph_version"),
        ({"api_base_url": "graph.facebook.com"}, "api_base_url"),
        ({"media_hosts": ["https://fbcdn.net"]}, "media_hosts"),
        ({"message_tag": "PROMOTION"}, "message_tag"),
        ({"verify_token": "short"}, "verify_token"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_config_refuses(more: dict[str, object], problem: str) -> None:
    with pytest.raises(ValidationError) as info:
        MessengerChannelConfig.model_validate(BASE | more)
    assert problem in str(info.value)


def test_config_defaults() -> None:
    cfg = MessengerChannelConfig.model_validate(
        BASE | {"api_base_url": "https://graph.example/", "media_hosts": ["FBCDN.net"]}
    )
    assert cfg.api_base_url == "https://graph.example"
    assert (cfg.webhook_path, cfg.graph_version, cfg.message_tag) == ("/messenger/webhook", "v21.0", None)
    assert cfg.media_hosts == ["fbcdn.net"]
    assert cfg.dm_policy == "pairing"
