"""The console's one-time sign-in link (docs/onboarding.md, "Signing in"), printed at start while no
user has a token: it signs the local user in once, never after 15 minutes, never from another
machine, and its code is never logged."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import make_mocked_request

from gateway.app import Gateway
from gateway.config.load import parse_config
from gateway.config.model import Config
from gateway.web.console.once import OnceLink, Outcome, link_user, startup_lines
from tests.fakes.clock import WallClock

LINK = re.compile(r"(http://\S+/console/signin/once\?code=(\S+))")
# The default config.yaml's users: the person at this machine, an admin, without a token.
LOCAL = {"local": {"roles": ["admin"], "identities": ["web:local"], "tokens": []}}


def config(tmp_path: Path, users: Mapping[str, object]) -> Config:
    data = {
        "ai": {"model": "openai/fake-model", "api_base": "http://127.0.0.1:9/v1", "api_key": "sk-test-0000000000"},
        "storage": {"data_dir": str(tmp_path / "data")},
        "channels": {"web": {"host": "127.0.0.1", "port": 0}},
        "users": users,
        "memory": {"merge": {"enabled": False}},
    }
    return parse_config(data, "t", env={})


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[tuple[Gateway, WallClock]]:
    clock = WallClock()
    gw = Gateway(config(tmp_path, LOCAL), clock=clock)
    await gw.start()
    try:
        yield gw, clock
    finally:
        await gw.stop(deadline=1)


@pytest.fixture
async def browser() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
        yield session


def printed_link(gw: Gateway) -> tuple[str, str]:
    lines = startup_lines(gw.config, gw.url, gw.once)
    found = LINK.search("\n".join(lines))
    assert found, lines
    return found.group(1), found.group(2)


async def test_the_link_signs_the_local_user_in_once(
    world: tuple[Gateway, WallClock], browser: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    gw, _clock = world
    caplog.set_level(logging.DEBUG)
    link, code = printed_link(gw)
    assert len(code) >= 22  # 128 bits or more, URL-safe
    r = await browser.get(link, allow_redirects=False)
    assert r.status == 303 and r.headers["Location"] == "/console"
    r = await browser.get(gw.url + "/console", allow_redirects=False)
    assert r.status == 200  # signed in: the overview, not the sign-in page
    session = await (await browser.get(gw.url + "/api/v1/session")).json()
    assert session["user_id"] == "local"

    async with aiohttp.ClientSession() as other:  # a second browser, the same link
        r = await other.get(link, allow_redirects=False)
        assert r.status == 410
        text = await r.text()
        assert "used already" in text and "restart the gateway" in text and "CLAWGATE_TOKEN" in text
    assert "console_signin_link_issued" in caplog.text
    assert code not in caplog.text
    assert all(code not in str(rec.__dict__) for rec in caplog.records)


async def test_an_expired_or_wrong_code_signs_nobody_in(
    world: tuple[Gateway, WallClock], browser: aiohttp.ClientSession
) -> None:
    gw, clock = world
    link, code = printed_link(gw)
    r = await browser.get(link.replace(code, code[:-2] + "xx"), allow_redirects=False)
    assert r.status == 410 and "not valid" in await r.text()
    clock.advance(minutes=15, seconds=1)
    r = await browser.get(link, allow_redirects=False)
    assert r.status == 410 and "expired" in await r.text()
    r = await browser.get(gw.url + "/console", allow_redirects=False)
    assert r.status == 303 and r.headers["Location"].startswith("/console/login")


async def test_a_new_start_makes_a_new_code_and_the_old_one_stops(world: tuple[Gateway, WallClock]) -> None:
    gw, _clock = world
    _link, first = printed_link(gw)
    _link, second = printed_link(gw)
    assert first != second
    assert gw.once.take(first) == Outcome.WRONG
    assert gw.once.take(second) == Outcome.OK


class _Transport:
    """What aiohttp asks a request's transport for its peer."""

    def __init__(self, peer: str) -> None:
        self.peer = peer

    def get_extra_info(self, name: str, default: object = None) -> object:
        return (self.peer, 50000) if name == "peername" else default


async def test_a_link_from_another_machine_is_refused(world: tuple[Gateway, WallClock]) -> None:
    gw, _clock = world
    _link, code = printed_link(gw)
    from gateway.web.console.auth import ConsoleAuth

    assert gw.storage is not None
    auth = ConsoleAuth(gw.auth, gw.storage.console_sessions, gw.storage.identities, (), gw.once, lambda: "local")
    path = f"/console/signin/once?code={code}"
    remote = make_mocked_request("GET", path, headers={"Host": "127.0.0.1:8080"}, transport=_Transport("192.0.2.7"))
    assert await auth.sign_in_once(remote, code) is None
    rebinding = make_mocked_request("GET", path, headers={"Host": "evil.example"}, transport=_Transport("127.0.0.1"))
    assert await auth.sign_in_once(rebinding, code) is None
    local = make_mocked_request("GET", path, headers={"Host": "127.0.0.1:8080"}, transport=_Transport("127.0.0.1"))
    signed = await auth.sign_in_once(local, code)
    assert isinstance(signed, tuple)  # the refusals above did not use the code up


def test_who_a_link_signs_in(tmp_path: Path) -> None:
    assert link_user(config(tmp_path, LOCAL)) == "local"
    admins = {"ann": {"roles": ["user"]}, "root": {"roles": ["admin"]}}
    # No user owns web:local: the loopback chat's anonymous user is declared as `local` itself.
    assert link_user(config(tmp_path, admins)) == "local"
    with_token = {"local": {"roles": ["admin"], "identities": ["web:local"], "tokens": ["t" * 20]}}
    assert link_user(config(tmp_path, with_token)) is None
    lines = startup_lines(config(tmp_path, with_token), "http://127.0.0.1:8080", OnceLink())
    assert "sign in with a user's token" in lines[-1] and "code=" not in "".join(lines)


def test_the_link_expires_after_fifteen_minutes() -> None:
    clock = WallClock()
    once = OnceLink(clock)
    code = once.issue("local")
    clock.advance(minutes=14, seconds=59)
    assert once.take(code) == Outcome.OK
    assert once.take(code) == Outcome.USED
    code = once.issue("local")
    clock.now += timedelta(minutes=15)
    assert once.take(code) == Outcome.EXPIRED


async def test_a_session_a_link_opened_ends_once_a_user_has_a_token(
    world: tuple[Gateway, WallClock], browser: aiohttp.ClientSession, tmp_path: Path
) -> None:
    gw, _clock = world
    link, _code = printed_link(gw)
    assert (await browser.get(link, allow_redirects=False)).status == 303
    assert (await browser.get(gw.url + "/api/v1/session")).status == 200
    with_token = {"local": {"roles": ["admin"], "identities": ["web:local"], "tokens": ["token-now-set-0000"]}}
    await gw.apply_config(config(tmp_path, with_token))  # a reload
    assert (await browser.get(gw.url + "/api/v1/session")).status == 401
