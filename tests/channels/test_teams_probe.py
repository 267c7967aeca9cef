"""`clawgate doctor` for Teams: one client-credentials grant at the fake's token endpoint, the app id
masked, the secret never shown, each refusal with the setting to fix."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

import channels
from gateway.config.load import parse_config
from gateway.core.probe import Finding, Probe
from tests.fakes.teams import FakeTeams, Hang, Status, channel_config


@pytest.fixture
async def fake() -> AsyncIterator[FakeTeams]:
    f = await FakeTeams().start()
    yield f
    await f.stop()


async def ask(fake: FakeTeams, timeout: float = 2, web: bool = True, **teams: Any) -> Finding:
    config = parse_config(
        {"channels": {"web": {"port": 0, "enabled": web}, "ms": channel_config(fake) | teams}}, "test", env={}
    )
    return await channels.probe(
        Probe("ms", config, timeout, {"channels.ms.app_password": "TEAMS_SECRET"}), config.channels["ms"]
    )


def shown(found: Finding) -> str:
    return f"{found.detail} {found.hint} {found.data}"


async def test_good_credentials(fake: FakeTeams) -> None:
    found = await ask(fake)
    assert found.status == "ok", shown(found)
    assert found.detail.startswith("app 0b07…c1a0: Entra ID issued a Bot Connector token")
    assert "POST /api/messages" in found.detail
    assert fake.app_id not in shown(found) and fake.app_password not in shown(found)
    assert [r["client_id"] for r in fake.token_requests] == [fake.app_id]
    assert fake.sent == []  # read only: the token is used for nothing


async def test_a_wrong_secret_fails_with_a_hint(fake: FakeTeams) -> None:
    found = await ask(fake, app_password="an-old-secret-value-0000")
    assert found.status == "fail" and "refused the secret of app 0b07…c1a0" in found.detail
    assert "AADSTS7000215" in found.detail
    assert found.hint is not None and "channels.ms.app_password (from $TEAMS_SECRET)" in found.hint
    assert "an-old-secret-value-0000" not in shown(found) and found.data["reason"] == "credentials_refused"


async def test_an_app_unknown_to_the_tenant(fake: FakeTeams) -> None:
    found = await ask(fake, app_id="99999999-0000-4000-8000-000000000000")
    assert found.status == "fail" and "AADSTS700016" in found.detail
    assert "9999…0000" in found.detail and "99999999-0000" not in found.detail  # Entra ID's echo, masked
    assert found.hint is not None and f"registered in the tenant {fake.tenant_id}" in found.hint


async def test_the_token_endpoint_in_trouble(fake: FakeTeams) -> None:
    fake.fail_next("token", Status(503))
    found = await ask(fake)
    assert found.status == "fail" and found.data["reason"] == "token_endpoint" and "HTTP 503" in found.detail


async def test_no_answer_in_time(fake: FakeTeams) -> None:
    fake.fail_next("token", Hang())
    found = await ask(fake, timeout=0.3)
    assert found.status == "fail" and found.data["reason"] == "timeout"
    assert found.hint is not None and "channels.ms.token_url" in found.hint


async def test_nothing_listening(fake: FakeTeams) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    found = await ask(fake, token_url=f"http://127.0.0.1:{port}/t/oauth2/v2.0/token")
    assert found.status == "fail" and found.data["reason"] == "connection"


async def test_activities_need_the_web_server(fake: FakeTeams) -> None:
    found = await ask(fake, web=False)
    assert found.status == "fail" and "no web channel is enabled" in found.detail
    assert fake.token_requests == []
