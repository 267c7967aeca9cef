"""Failed sign-ins are throttled per credential and per address, with a doubling wait; a valid
token is never refused, whoever failed from its address."""

from __future__ import annotations

import pytest

from gateway.config.load import parse_config
from gateway.core.ports import Throttled
from gateway.web.auth import AuthThrottle, TokenAuth

ALICE = "alice-token-0123456789"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def auth(clock: Clock, **kwargs: float) -> TokenAuth:
    config = parse_config({"users": {"alice": {"tokens": [ALICE]}}}, "test", env={})
    return TokenAuth(config, AuthThrottle(clock=clock, **kwargs))  # type: ignore[arg-type]


def fail(tokens: TokenAuth, token: str, address: str) -> float | None:
    """None for a plain refusal (401); the wait for a throttled one (429)."""
    try:
        assert tokens(token, address) is None
    except Throttled as exc:
        return exc.retry_after
    return None


def test_five_failures_are_free_then_the_wait_doubles_up_to_its_cap() -> None:
    clock = Clock()
    tokens = auth(clock, cap=8.0)
    assert [fail(tokens, f"guess-{i}", "10.0.0.9") for i in range(6)] == [None] * 6
    waits = []
    for i in range(5):
        wait = fail(tokens, f"late-{i}", "10.0.0.9")
        assert wait is not None and wait > 0
        clock.now += wait  # wait it out, then fail once more
        assert fail(tokens, f"again-{i}", "10.0.0.9") is None
        waits.append(wait)
    assert waits == [1.0, 2.0, 4.0, 8.0, 8.0]


def test_a_valid_token_always_passes_from_a_throttled_address() -> None:
    clock = Clock()
    tokens = auth(clock)
    for i in range(20):
        fail(tokens, f"guess-{i}", "203.0.113.7")  # one proxy, shared by everyone behind it
    assert fail(tokens, "guess-x", "203.0.113.7") is not None
    assert tokens(ALICE, "203.0.113.7") == "alice"


def test_one_credential_is_throttled_from_every_address() -> None:
    clock = Clock()
    tokens = auth(clock)
    for i in range(6):
        assert fail(tokens, "revoked-token-000000", f"10.0.0.{i}") is None
    assert fail(tokens, "revoked-token-000000", "10.9.9.9") is not None  # a new address, the same token
    assert fail(tokens, "another-guess-000000", "10.9.9.8") is None  # another token, another address


def test_quiet_keys_are_forgotten_and_a_spray_stays_bounded() -> None:
    clock = Clock()
    tokens = auth(clock, forget=60.0)
    for i in range(6):
        fail(tokens, f"guess-{i}", "10.0.0.1")
    clock.now += 61
    assert fail(tokens, "guess-new", "10.0.0.1") is None
    throttle = AuthThrottle(clock=clock, max_keys=100)
    for i in range(1000):
        throttle.failed([f"token:{i}"])
    assert len(throttle._keys) <= 101


@pytest.mark.parametrize("token", [None, ""])
def test_no_token_is_not_a_failure(token: str | None) -> None:
    clock = Clock()
    tokens = auth(clock)
    for _ in range(50):
        assert tokens(token, "10.0.0.1") is None
    assert fail(tokens, "guess", "10.0.0.1") is None
