"""Meta's webhook signature (X-Hub-Signature-256) and subscription check, as tables. The signatures
are made here with hmac directly, not with the code under test."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from channels.messenger.signature import problem, sign
from channels.messenger.webhook import subscription

SECRET = "app-secret-0123456789"
BODY = b'{"object":"page","entry":[]}'
GOOD = "sha256=" + hmac.new(SECRET.encode(), BODY, hashlib.sha256).hexdigest()


@pytest.mark.parametrize(
    ("header", "body", "why"),
    [
        (GOOD, BODY, None),
        (GOOD.upper().replace("SHA256=", "sha256="), BODY, None),  # hex digits in capitals are the same digest
        (f"  {GOOD} ", BODY, None),
        (None, BODY, "missing_signature"),
        ("", BODY, "missing_signature"),
        (GOOD, BODY + b" ", "bad_signature"),  # the body changed after signing
        (GOOD, b'{"object":"page","entry":[{}]}', "bad_signature"),
        ("sha256=" + hmac.new(b"another secret", BODY, hashlib.sha256).hexdigest(), BODY, "bad_signature"),
        ("sha1=" + hmac.new(SECRET.encode(), BODY, hashlib.sha1).hexdigest(), BODY, "wrong_scheme"),
        (GOOD.removeprefix("sha256="), BODY, "wrong_scheme"),  # no prefix at all
        ("sha512=" + "0" * 64, BODY, "wrong_scheme"),
        ("sha256=" + "0" * 63, BODY, "malformed_signature"),
        ("sha256=" + "z" * 64, BODY, "malformed_signature"),
        ("sha256=", BODY, "malformed_signature"),
    ],
)
def test_signature_table(header: str | None, body: bytes, why: str | None) -> None:
    assert problem(SECRET, body, header) == why


def test_sign_makes_what_meta_sends() -> None:
    assert sign(SECRET, BODY) == GOOD
    assert problem(SECRET, BODY, sign(SECRET, BODY)) is None


TOKEN = "verify-token-0123"


@pytest.mark.parametrize(
    ("query", "answer"),
    [
        ({"hub.mode": "subscribe", "hub.verify_token": TOKEN, "hub.challenge": "1158201444"}, ("1158201444", None)),
        (
            {"hub.mode": "subscribe", "hub.verify_token": "wrong-token", "hub.challenge": "1"},
            (None, "wrong_verify_token"),
        ),
        ({"hub.mode": "subscribe", "hub.challenge": "1"}, (None, "wrong_verify_token")),
        ({"hub.mode": "unsubscribe", "hub.verify_token": TOKEN, "hub.challenge": "1"}, (None, "wrong_mode")),
        ({"hub.verify_token": TOKEN, "hub.challenge": "1"}, (None, "wrong_mode")),
        ({"hub.mode": "subscribe", "hub.verify_token": TOKEN}, (None, "bad_challenge")),
        ({"hub.mode": "subscribe", "hub.verify_token": TOKEN, "hub.challenge": "x" * 257}, (None, "bad_challenge")),
        ({"hub.mode": "subscribe", "hub.verify_token": TOKEN, "hub.challenge": "<b>\n"}, (None, "bad_challenge")),
    ],
)
def test_subscription_table(query: dict[str, str], answer: tuple[str | None, str | None]) -> None:
    assert subscription(query, TOKEN) == answer
