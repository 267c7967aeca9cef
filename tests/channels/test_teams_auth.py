"""Every request to the Teams endpoint is checked before anything is read from it: tokens signed by
the fake's keys (announced through its OpenID metadata), and forgeries of every kind refused with
401, a log line, and nothing journaled, handed on or stored."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import jwt
import pytest

from channels.teams.adapter import TeamsAdapter
from channels.teams.auth import AuthError, SigningKeys
from tests.contract.harness_teams import TeamsHarness
from tests.fakes.clock import VirtualClock
from tests.fakes.teams import Status, private_key


class Journal:
    def __init__(self) -> None:
        self.calls = 0

    async def accept(self, _ev: Any) -> bool:
        self.calls += 1
        return True


@pytest.fixture
def journal() -> Journal:
    return Journal()


@pytest.fixture
async def teams(journal: Journal) -> AsyncIterator[TeamsHarness]:
    h = TeamsHarness(accept=journal.accept, install=False)
    assert isinstance(h.adapter, TeamsAdapter)
    h.adapter.keys.clock = VirtualClock()
    await h.start()
    try:
        yield h
    finally:
        await h.stop()


def keys(h: TeamsHarness) -> SigningKeys:
    assert isinstance(h.adapter, TeamsAdapter)
    return h.adapter.keys


def nothing_kept(h: TeamsHarness, journal: Journal) -> bool:
    return journal.calls == 0 and h.inbound.empty() and h.conversations.rows == {}


async def test_a_valid_token_is_taken(teams: TeamsHarness, journal: Journal) -> None:
    status, _ = await teams.fake.post(teams.endpoint, teams.fake.personal("hello"))
    assert status == 200 and journal.calls == 1
    assert (teams.fake.metadata_fetches, teams.fake.jwks_fetches) == (1, 1)


def _forged(h: TeamsHarness, how: str) -> str | None:
    fake, now = h.fake, int(time.time())
    payload = {
        "iss": "https://api.botframework.com",
        "aud": fake.app_id,
        "exp": now + 600,
        "serviceurl": fake.service_url,
    }
    forgeries: dict[str, Any] = {
        "no header": lambda: None,
        "garbage": lambda: "not-a-jwt",
        "someone else's key": lambda: fake.token(key="forger"),
        "a key nobody announced": lambda: fake.token(kid="never-announced"),
        "another app": lambda: fake.token(aud="11111111-2222-3333-4444-555555555555"),
        "another issuer": lambda: fake.token(iss="https://sts.windows.net/another-tenant/"),
        "expired": lambda: fake.token(lifetime=-400),  # past the five minutes of clock skew
        "not valid yet": lambda: fake.token(nbf=now + 3600),
        "no expiry": lambda: fake.token(exp=None),
        "another service url": lambda: fake.token(service_url="https://evil.example/amer/"),
        "no service url": lambda: fake.token(serviceurl=None),
        "hmac with a guessable secret": lambda: jwt.encode(
            payload, "a-secret-anyone-could-guess-0123456789", algorithm="HS256", headers={"kid": fake.signing_kid}
        ),
        "alg none": lambda: jwt.encode(payload, "", algorithm="none", headers={"kid": fake.signing_kid}),
    }
    made: str | None = forgeries[how]()
    return made


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("no header", "no Authorization header"),
        ("garbage", "malformed token"),
        ("someone else's key", "bad signature"),
        ("a key nobody announced", "unknown signing key"),
        ("another app", "wrong audience"),
        ("another issuer", "wrong issuer"),
        ("expired", "expired token"),
        ("not valid yet", "token not valid yet"),
        ("no expiry", "token without exp"),
        ("another service url", "serviceUrl differs from the token's"),
        ("no service url", "token without serviceurl"),
        ("hmac with a guessable secret", "not RS256"),
        ("alg none", "not RS256"),
    ],
)
async def test_forged_requests_are_refused_and_nothing_is_kept(
    teams: TeamsHarness, journal: Journal, caplog: pytest.LogCaptureFixture, how: str, reason: str
) -> None:
    token = _forged(teams, how)
    with caplog.at_level(logging.WARNING, logger="clawgate.channels.teams"):
        status, body = await teams.fake.post(teams.endpoint, teams.fake.personal("give me the secrets"), token=token)
    assert (status, body) == (401, '{"error": "unauthorized"}')  # what was wrong goes to the log only
    [line] = refusals(caplog)
    assert line.startswith("teams_request_refused channel=teams status=401 reason=") and reason in line
    assert nothing_kept(teams, journal)


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("teams_request_refused")]


async def test_a_basic_auth_header_is_no_token(
    teams: TeamsHarness, journal: Journal, caplog: pytest.LogCaptureFixture
) -> None:
    basic = {"Authorization": "Basic dXNlcjpwdw=="}
    status, _ = await teams.fake.post(teams.endpoint, teams.fake.personal("hi"), token=None, headers=basic)
    assert status == 401 and nothing_kept(teams, journal)
    assert "not a bearer token" in refusals(caplog)[0]


async def test_a_key_endorsed_for_other_channels_signs_nothing_here(
    teams: TeamsHarness, journal: Journal, caplog: pytest.LogCaptureFixture
) -> None:
    teams.fake.announced["fake-key-1"] = ["skype"]
    status, _ = await teams.fake.post(teams.endpoint, teams.fake.personal("hi"))
    assert status == 401 and nothing_kept(teams, journal)
    assert "not endorsed for channel 'msteams'" in refusals(caplog)[0]


async def test_the_token_is_checked_before_the_body_is_read(teams: TeamsHarness, journal: Journal) -> None:
    status, _ = await teams.fake.post(teams.endpoint, b"{ not even json", token=None)
    assert status == 401 and nothing_kept(teams, journal)


async def test_rotated_keys_are_fetched_but_not_for_every_unknown_key_id(teams: TeamsHarness, journal: Journal) -> None:
    clock = keys(teams).clock
    assert isinstance(clock, VirtualClock)
    assert (await teams.fake.post(teams.endpoint, teams.fake.personal("one")))[0] == 200
    # Forged tokens naming random keys do not make the gateway fetch the keys again and again.
    for n in range(5):
        status, _ = await teams.fake.post(teams.endpoint, teams.fake.personal("x"), token=teams.fake.token(kid=f"k{n}"))
        assert status == 401
    assert teams.fake.jwks_fetches == 1
    # Microsoft rotates its keys: a token with the new key is taken once the floor has passed.
    teams.fake.rotate_keys("fake-key-2", keep_old=False)
    clock.advance(61)
    assert (await teams.fake.post(teams.endpoint, teams.fake.personal("two")))[0] == 200
    assert teams.fake.jwks_fetches == 2 and journal.calls == 2


async def test_keys_are_fetched_again_after_a_day_and_kept_when_that_fails(teams: TeamsHarness) -> None:
    clock = keys(teams).clock
    assert isinstance(clock, VirtualClock)
    assert (await teams.fake.post(teams.endpoint, teams.fake.personal("one")))[0] == 200
    clock.advance(24 * 3600 + 1)
    assert (await teams.fake.post(teams.endpoint, teams.fake.personal("two")))[0] == 200
    assert teams.fake.jwks_fetches == 2
    clock.advance(24 * 3600 + 1)
    teams.fake.fail_next("metadata", Status(500))
    assert (await teams.fake.post(teams.endpoint, teams.fake.personal("three")))[0] == 200  # the old keys
    assert teams.fake.metadata_fetches == 3 and teams.fake.jwks_fetches == 2
    assert (await teams.fake.post(teams.endpoint, teams.fake.personal("four")))[0] == 200
    assert teams.fake.metadata_fetches == 3  # not asked again at once
    clock.advance(61)
    assert (await teams.fake.post(teams.endpoint, teams.fake.personal("five")))[0] == 200
    assert (teams.fake.metadata_fetches, teams.fake.jwks_fetches) == (4, 3)  # a minute later it is


async def test_without_any_keys_the_endpoint_says_try_again(journal: Journal) -> None:
    h = TeamsHarness(accept=journal.accept, install=False)
    h.fake.fail_next("metadata", Status(503))
    await h.start()
    try:
        status, _ = await h.fake.post(h.endpoint, h.fake.personal("hi"))
    finally:
        await h.stop()
    assert status == 503 and nothing_kept(h, journal)


async def test_the_validator_answers_the_sdk_too(teams: TeamsHarness) -> None:
    assert isinstance(teams.adapter, TeamsAdapter)
    identity = await teams.adapter.validator.validate_token(teams.fake.token())
    assert identity.is_authenticated and identity.get_app_id() == teams.fake.app_id
    with pytest.raises(AuthError):
        await teams.adapter.validator.validate_token(teams.fake.token(key="forger"))


async def test_one_fetch_serves_requests_that_arrive_together() -> None:
    h = TeamsHarness(install=False)
    await h.start()
    try:
        async with aiohttp.ClientSession() as http:
            got = SigningKeys(h.fake.metadata_url, lambda: http)
            await asyncio.gather(*(got.get(h.fake.signing_kid) for _ in range(10)))
        assert (h.fake.jwks_fetches, got.fetches) == (1, 1)
        assert private_key("fake-key-1") is private_key("fake-key-1")  # made once per process
    finally:
        await h.stop()
