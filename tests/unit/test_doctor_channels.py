"""The doctor's network checks without a network: what Telegram's webhook state and Discord's shard
advice mean, where a hint says a setting comes from, the model chain it asks, secrets masked in
every result, groups run at the same time, the web channel's port, what needs the web server, and
each platform's probe in its own channel package (the only place its SDK is imported)."""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import socket
from pathlib import Path
from typing import Any

import pytest

import channels
from channels.discord.probe import shard_advice
from channels.telegram.probe import webhook_state
from gateway.config.load import parse_config
from gateway.core.probe import Probe
from gateway.doctor.channels import probe_channel, unpublished, web_access
from gateway.doctor.checks import config_variables, configured_models, run_checks
from gateway.doctor.context import Check, Context, Entry, Group, Result, redact

HOOK = "https://bot.example.com/telegram/tg"
REPO = Path(__file__).resolve().parents[2]


def _config(**data: Any) -> Any:
    return parse_config(data, "test", env={})


@pytest.mark.parametrize(
    ("expected", "actual", "last_error", "status", "said", "hint"),
    [
        (HOOK, HOOK, None, "ok", f"webhook {HOOK}, 3 update(s) waiting", None),
        (None, HOOK, None, "ok", f"webhook {HOOK}, 3 update(s) waiting", None),
        (HOOK, "", None, "warn", "no webhook is set, 3 update(s) waiting", "start the gateway: it registers"),
        (
            None,
            "",
            None,
            "warn",
            "no webhook is set and channels.tg.webhook_url is empty",
            "set channels.tg.webhook_url",
        ),
        (HOOK, "https://x/y", None, "warn", "Telegram delivers to https://x/y, not to", "another deployment"),
        (HOOK, HOOK, "Connection refused", "warn", "last delivery failed: Connection refused", f"check that {HOOK}"),
    ],
)
def test_webhook_state(
    expected: str | None, actual: str, last_error: str | None, status: str, said: str, hint: str | None
) -> None:
    got_status, got_said, got_hint = webhook_state("tg", expected, actual, 3, last_error)
    assert got_status == status and said in got_said
    assert (got_hint is None) if hint is None else (got_hint is not None and got_hint.startswith(hint))


@pytest.mark.parametrize(
    ("recommended", "configured", "status"),
    [(1, None, "ok"), (1, 4, "ok"), (2, None, "warn"), (4, 2, "warn"), (4, 4, "ok")],
)
def test_shard_advice(recommended: int, configured: int | None, status: str) -> None:
    got, said, hint = shard_advice(recommended, configured)
    assert got == status and said == f"{recommended} shard(s) recommended, {configured or 1} configured"
    assert (hint is None) == (status == "ok")
    if hint:
        assert f"shard_count: {recommended}" in hint


def test_config_variables_name_what_to_set(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "ai: {api_key: '${OPENAI_KEY}', api_base: 'http://${HOST:-localhost}/v1', model: openai/x}\n"
        "channels:\n  tg: {type: telegram, token: '${TG_TOKEN:-}'}\n"
        "users: {alice: {tokens: ['${ALICE_TOKEN}', literal-token-0123456789]}}\n"
    )
    assert config_variables(path) == {
        "ai.api_key": "OPENAI_KEY",
        "ai.api_base": "HOST",
        "channels.tg.token": "TG_TOKEN",
        "users.alice.tokens[0]": "ALICE_TOKEN",
    }
    assert config_variables(tmp_path / "missing.yaml") == {}
    probe = Probe("tg", _config(), 5, config_variables(path))
    assert probe.setting("token") == "channels.tg.token (from $TG_TOKEN)"
    assert probe.setting("api_base_url") == "channels.tg.api_base_url"


def test_every_secret_is_masked_in_every_part_of_a_result() -> None:
    secret, short = "xoxb-123-secret", "abc"
    result = Result(
        "fail",
        f"GET https://api/bot{secret}/getMe failed",
        f"not {secret}",
        lines=(f"- {secret}",),
        data={"url": f"https://api/bot{secret}/", "nested": {"list": [secret, 1]}, "short": short},
        name="channel x",
    )
    clean = redact(result, [secret, short, secret])
    assert secret not in repr(clean) and "***" in clean.detail and clean.hint == "not ***"
    assert clean.lines == ("- ***",) and clean.data["nested"] == {"list": ["***", 1]}
    assert clean.data["short"] == "abc"  # under 4 characters: masking it would mangle every line
    assert redact(result, []) is result


def test_the_model_chain_is_every_agents_then_the_background_model_each_once() -> None:
    config = _config(
        ai={
            "model": "openai/a",
            "fallback": ["openai/b", "openai/a"],
            "api_key": "sk-main-0000",
            "gemini": {"api_key": "g-key-0000"},
        },
        agents={"list": [{"name": "one"}, {"name": "two", "model": "openai/c", "fallback": ["openai/b"]}]},
    )
    uses = configured_models(config)
    assert [(u.spec.model, u.where, u.key_from) for u in uses] == [
        ("openai/a", "ai.model", "ai.api_key"),
        ("openai/b", "ai.fallback[0]", "ai.api_key"),
        ("openai/c", "agents.list[1].model", "ai.api_key"),
        ("gemini/gemini-2.0-flash", "ai.gemini.model", "ai.gemini.api_key"),
    ]
    assert "sk-main" not in repr(uses) and configured_models(_config()) == []


async def test_groups_run_their_checks_at_the_same_time_and_report_them_in_order(tmp_path: Path) -> None:
    both = asyncio.Barrier(2)  # each check waits for the other: one at a time would hang

    async def waiting(ctx: Context) -> Result:
        async with asyncio.timeout(2):
            await both.wait()
        return Result("ok", "met")

    async def first(ctx: Context) -> Result:
        return Result("ok", "first")

    def expand_a(ctx: Context) -> list[tuple[str, Check]]:
        return [("a1", waiting)]

    def expand_b(ctx: Context) -> list[tuple[str, Check]]:
        return [("b1", waiting)]

    def needs_config(ctx: Context) -> list[tuple[str, Check]]:
        ctx.config()
        raise AssertionError("unreachable: there is no config")

    ctx = Context(tmp_path / "config.yaml")
    ctx.lack("config", "config.yaml did not load")
    entries: list[Entry] = [("first", first), Group("a", expand_a), Group("b", expand_b)]
    results = await run_checks(ctx, [*entries, Group("c", needs_config)])
    assert [(r.name, r.status, r.detail) for r in results] == [
        ("first", "ok", "first"),
        ("c", "skip", "skipped: config.yaml did not load"),  # one row for what could not be listed
        ("a1", "ok", "met"),
        ("b1", "ok", "met"),
    ]


def test_who_can_use_the_web_channel() -> None:
    config = _config(users={"alice": {"tokens": ["alice-token-0123456789"]}, "bob": {}})
    web = config.channels["web"]
    assert web_access(config, web) == (True, "1 user(s) with tokens, visitors on this machine chat as 'local'")
    closed = _config(channels={"web": {"allow_local_anonymous": False}})
    assert web_access(closed, closed.channels["web"]) == (False, "0 user(s) with tokens")


@pytest.mark.parametrize(
    ("web", "slack", "hint"),
    [
        ({"host": "127.0.0.1"}, None, None),
        ({"host": "0.0.0.0"}, None, "bound beyond loopback without channels.web.public_url"),
        ({"host": "0.0.0.0", "public_url": "https://chat.example.com"}, None, None),
        ({"host": "127.0.0.1"}, "http", "slack: the platform calls the gateway at its public address"),
        ({"host": "127.0.0.1", "allowed_hosts": ["chat.example.com"]}, "http", None),
        ({"host": "127.0.0.1"}, "socket", None),
        ({"host": "127.0.0.1"}, "teams", "slack, teams: the platform calls the gateway at its public address"),
    ],
)
def test_the_doctor_says_when_people_reach_the_web_channel_at_a_name_it_does_not_know(
    web: dict[str, Any], slack: str | None, hint: str | None
) -> None:
    channels_data: dict[str, Any] = {"web": web}
    if slack is not None:
        mode = "http" if slack == "teams" else slack
        channels_data["slack"] = {"bot_token": "xoxb-1", "app_token": "xapp-1", "signing_secret": "s", "mode": mode}
    if slack == "teams":
        channels_data["teams"] = {"app_id": "00000000-0000-0000-0000-000000000001", "app_password": "pw"}
    users = {"alice": {"tokens": ["alice-token-0123456789"]}}
    config = _config(channels=channels_data, users=users)
    found = unpublished(Probe("web", config, 1), config.channels["web"])
    assert (found is None) if hint is None else (found is not None and found.startswith(hint))


async def test_the_web_port_free_or_unusable_and_nobody_able_to_sign_in() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = _config(channels={"web": {"port": port, "allow_local_anonymous": False}})
    found = await probe_channel(Probe("web", config, 1), config.channels["web"])
    assert found.status == "warn" and found.detail.startswith(f"127.0.0.1:{port} is free for the gateway")
    assert found.hint is not None and found.hint.startswith("nobody can sign in")

    users = {"alice": {"tokens": ["alice-token-0123456789"]}}
    config = _config(channels={"web": {"host": "192.0.2.1", "port": port}}, users=users)  # TEST-NET: not ours
    found = await probe_channel(Probe("web", config, 1), config.channels["web"])
    assert (found.status, found.detail.split(";")[0]) == ("fail", "192.0.2.1 is not an address of this machine")

    off = _config(channels={"web": {"enabled": False}})
    assert (await probe_channel(Probe("web", off, 1), off.channels["web"])).status == "info"


async def test_webhooks_and_http_events_need_an_enabled_web_channel() -> None:
    config = _config(
        channels={
            "web": {"enabled": False},
            "tg": {"type": "telegram", "token": "1:x", "mode": "webhook", "webhook_secret": "s" * 16},
            "sl": {"type": "slack", "mode": "http", "bot_token": "xoxb-1", "signing_secret": "secret"},
            "ms": {"type": "teams", "app_id": "00000000-0000-0000-0000-000000000001", "app_password": "pw"},
            "fb": {"type": "messenger", "page_access_token": "EAA1", "app_secret": "s", "verify_token": "verify-me"},
        }
    )
    for name in ("tg", "sl", "ms", "fb"):
        found = await probe_channel(Probe(name, config, 1), config.channels[name])  # nothing is asked
        assert found.status == "fail" and "no web channel is enabled" in found.detail
        assert found.hint is not None and found.hint.startswith("add an enabled web channel")


def test_platform_sdks_are_imported_only_inside_their_channel_packages() -> None:
    """DESIGN §1: gateway/ asks a platform only through channels.probe and channels.create."""
    sdks = {"telegram", "discord", "slack_sdk", "slack_bolt", "microsoft_agents"}
    found = []
    for path in sorted((REPO / "gateway").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            found += [f"{path.relative_to(REPO)}: {n}" for n in names if n.split(".")[0] in sdks]
    assert found == []


async def test_every_platform_has_a_probe_and_the_web_channel_none() -> None:
    assert channels.PROBED_TYPES == {"telegram", "discord", "slack", "teams", "messenger"}
    for kind in sorted(channels.PROBED_TYPES):
        module = importlib.import_module(f"channels.{kind}.probe")
        assert inspect.iscoroutinefunction(module.probe)
    config = _config()
    with pytest.raises(ValueError, match="no probe for type 'web'"):
        await channels.probe(Probe("web", config, 1), config.channels["web"])
