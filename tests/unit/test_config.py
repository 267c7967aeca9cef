from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config.load import ConfigError, load_config, parse_config, secret_values

REPO = Path(__file__).resolve().parents[2]


def problems(data: object, env: dict[str, str] | None = None) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "t", env=env or {})
    return {p.path: p.render() for p in info.value.problems}


def test_defaults_are_usable() -> None:
    cfg = parse_config({}, env={})
    assert cfg.agents.list[0].name == "default"
    assert cfg.channels["web"].host == "127.0.0.1"
    assert cfg.channels["web"].port == 8080
    assert cfg.storage.resolved_database_url.endswith("data/clawgate.db")


def test_shipped_config_is_valid() -> None:
    cfg = load_config(REPO / "config.yaml", env={})
    assert cfg.ai.model == "openai/gpt-4o-mini"
    assert cfg.ai.api_key is None  # an empty ${VAR:-} falls back to "unset"
    assert cfg.users["local"].roles == ["admin"]


@pytest.mark.parametrize(
    ("value", "env", "expected"),
    [
        ("${M}", {"M": "openai/x"}, "openai/x"),
        ("${M:-openai/y}", {}, "openai/y"),
        ("${M:-openai/y}", {"M": ""}, "openai/y"),
        ("pre-${M}-post", {"M": "mid"}, "pre-mid-post"),
        ("no vars", {}, "no vars"),
    ],
)
def test_env_substitution(value: str, env: dict[str, str], expected: str) -> None:
    assert parse_config({"ai": {"model": value}}, env=env).ai.model == expected


def test_missing_variable_is_reported_with_its_path() -> None:
    found = problems({"ai": {"model": "${NOPE}"}})
    assert "ai.model" in found
    assert "NOPE is not set" in found["ai.model"]


def test_every_error_is_listed_with_path_value_and_reason() -> None:
    found = problems(
        {
            "ai": {"model": 5, "fallback": "not-a-list", "surprise": True, "timeout_seconds": -1},
            "channels": {"web": {"port": "http", "colour": "red"}},
            "users": {"a": {"roles": ["wizard"], "identities": ["nocolon"]}},
            "timezone": "Mars/Olympus",
            "memory": {"search": {"provider": "local", "runtime": "tensorflow"}},
        }
    )
    assert set(found) >= {
        "memory.search.runtime",
        "ai.model",
        "ai.fallback",
        "ai.surprise",
        "ai.timeout_seconds",
        "channels.web.port",
        "channels.web.colour",
        "users.a.roles[0]",
        "users.a.identities",
        "timezone",
    }
    assert "unknown key" in found["ai.surprise"]
    assert "'wizard'" in found["users.a.roles[0]"]
    assert "Mars/Olympus" in found["timezone"]
    assert "'onnx'" in found["memory.search.runtime"] and "'numpy'" in found["memory.search.runtime"]


def test_secrets_are_masked_in_errors() -> None:
    secret = "sk-supersecretvalue-123456"
    with pytest.raises(ConfigError) as info:
        parse_config({"ai": {"api_key": ["list", secret]}, "users": {"u": {"tokens": ["short"]}}}, env={})
    text = str(info.value)
    assert secret not in text and "short" not in text
    assert "ai.api_key" in text and "users.u.tokens[0]" in text
    assert "****" in text


def test_non_loopback_bind_requires_tokens() -> None:
    found = problems({"channels": {"web": {"host": "0.0.0.0"}}})
    assert "no user has tokens" in found["channels.web.host"]
    cfg = parse_config({"channels": {"web": {"host": "0.0.0.0"}}, "users": {"a": {"tokens": ["x" * 20]}}}, env={})
    assert not cfg.channels["web"].is_loopback


def test_cross_field_rules() -> None:
    found = problems(
        {
            "agents": {"list": [{"name": "a"}, {"name": "a"}]},
            "users": {
                "x": {"identities": ["telegram:1"], "tokens": ["t" * 20]},
                "y": {"identities": ["telegram:1"], "tokens": ["t" * 20]},
            },
        }
    )
    assert "duplicate agent name" in found["agents.list[1].name"]
    assert "already belongs to user 'x'" in found["users.y.identities[0]"]
    assert "same token as user 'x'" in found["users.y.tokens[0]"]
    assert "t" * 20 not in " ".join(found.values())


def test_channel_type_defaults_to_platform_name_and_unknown_types_fail() -> None:
    assert parse_config({"channels": {"web": {}}}, env={}).channels["web"].type == "web"
    found = problems({"channels": {"mychat": {"type": "pager"}}})
    assert any(path.startswith("channels.mychat") for path in found)


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("ai:\n  model: [unclosed\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert "line" in info.value.problems[0].path
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "missing.yaml", env={})


def test_secret_values_collects_every_secret() -> None:
    cfg = parse_config(
        {"ai": {"api_key": "k" * 20, "gemini": {"api_key": "g" * 20}}, "users": {"u": {"tokens": ["t" * 20]}}},
        env={},
    )
    assert set(secret_values(cfg)) == {"k" * 20, "g" * 20, "t" * 20}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )


def test_cli_config_check(tmp_path: Path) -> None:
    good = _cli("--config", str(REPO / "config.yaml"), "config", "check", cwd=tmp_path)
    assert good.returncode == 0, good.stderr
    assert "OK" in good.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("ai:\n  api_key: sk-leakme-0000000000000000\n  retries: lots\nchannels:\n  web:\n    port: -1\n")
    result = _cli("--config", str(bad), "config", "check", cwd=tmp_path)
    assert result.returncode == 2
    assert "ai.retries" in result.stderr and "channels.web.port" in result.stderr
    assert "sk-leakme" not in result.stderr + result.stdout


def test_cli_run_refuses_bad_config(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("channels:\n  web:\n    host: 0.0.0.0\n")
    result = _cli("--config", str(bad), "run", cwd=tmp_path)
    assert result.returncode == 2
    assert "did not start" in result.stderr and "channels.web.host" in result.stderr


def test_shipped_config_takes_host_and_token_from_the_environment() -> None:
    token = "a-long-enough-token-123"
    cfg = load_config(REPO / "config.yaml", env={"CLAWGATE_HOST": "0.0.0.0", "CLAWGATE_TOKEN": token})
    assert cfg.channels["web"].host == "0.0.0.0"
    assert [t.get_secret_value() for t in cfg.users["local"].tokens] == [token]
    with pytest.raises(ConfigError, match="no user has tokens"):
        load_config(REPO / "config.yaml", env={"CLAWGATE_HOST": "0.0.0.0"})


def test_platform_channels_need_their_credentials() -> None:
    found = problems(
        {
            "channels": {
                "telegram": {"mode": "webhook", "token": "123:abc"},
                "slack": {"bot_token": "xoxb-1", "mode": "http"},
                "slack-socket": {"type": "slack", "bot_token": "xoxb-1"},
                "discord": {"token": "d" * 30, "dm_policy": "sometimes"},
            }
        }
    )
    assert "channels.discord.dm_policy" in found
    found = problems(
        {
            "channels": {
                "telegram": {"mode": "webhook", "token": "123:abc"},
                "slack": {"bot_token": "xoxb-1", "mode": "http"},
                "slack-socket": {"type": "slack", "bot_token": "xoxb-1"},
            }
        }
    )
    assert "webhook mode needs a secret" in found["channels.telegram.webhook_secret"]
    assert "signing secret" in found["channels.slack.signing_secret"]
    assert "app-level token" in found["channels.slack-socket.app_token"]


def test_a_platform_posts_to_a_path_of_its_own_on_the_shared_server() -> None:
    teams = {"type": "teams", "app_id": "00000000-0000-0000-0000-000000000001", "app_password": "pw"}
    fb = {"type": "messenger", "page_access_token": "EAA1", "app_secret": "s", "verify_token": "verify-me"}
    found = problems(
        {
            "channels": {
                "teams": teams,
                "teams-2": teams,  # the same default path as the first
                "fb": {**fb, "webhook_path": "/api/v1/hook"},
                "fb-4": {**fb, "webhook_path": "/telegram/bot"},
                "fb-5": {**fb, "webhook_path": "/hooks/github"},
            }
        }
    )
    assert "channel 'teams' already receives" in found["channels.teams-2.endpoint_path"]
    assert "the gateway serves /api/v1 itself" in found["channels.fb.webhook_path"]
    assert "/telegram" in found["channels.fb-4.webhook_path"]
    assert "the gateway serves /hooks itself" in found["channels.fb-5.webhook_path"]
    for bad in ("hook", "/messenger/webhook?x=1"):  # the shape: the channel's own model
        assert (
            "starting with /" in problems({"channels": {"fb": {**fb, "webhook_path": bad}}})["channels.fb.webhook_path"]
        )
    assert "channels.teams.endpoint_path" not in found
    parse_config({"channels": {"teams": teams, "fb": fb, "fb-2": {**fb, "webhook_path": "/page-2/webhook"}}})


def test_schedules_and_hooks_are_checked_with_every_problem_named() -> None:
    target = {"channel": "web", "user": "alice"}
    bad = {
        "users": {"alice": {"timezone": "Europe/Berlin"}},
        "schedules": {
            "no-rule": {"prompt": "p", "target": target},
            "both": {"cron": "0 8 * * *", "every": "1h", "prompt": "p", "target": target},
            "bad-cron": {"cron": "0 25 * * *", "prompt": "p", "target": target},
            "too-often": {"every": "10s", "prompt": "p", "target": target},
            "two-places": {
                "every": "1h",
                "prompt": "p",
                "target": {"channel": "web", "user": "alice", "conversation": "c"},
            },
            "bad-zone": {"every": "1h", "prompt": "p", "timezone": "Mars/Base", "target": target},
        },
        "hooks": {"short-secret": {"secret": "x", "prompt": "p", "target": target}},
    }
    found = problems(bad)
    assert "give either cron" in found["schedules.no-rule"] and "not both" in found["schedules.both"]
    assert "not a valid cron expression" in found["schedules.bad-cron.cron"]
    assert "at most once a minute" in found["schedules.too-often.every"]
    assert "not both" in found["schedules.two-places.target"]
    assert "unknown IANA time zone" in found["schedules.bad-zone.timezone"]
    assert "at least 16" in found["hooks.short-secret.secret"]
    # Cross-references, once every value is well formed:
    found = problems(
        {
            "schedules": {
                "nowhere": {"every": "1h", "prompt": "p", "target": {"channel": "irc", "user": "bob"}},
                "no-agent": {
                    "every": "1h",
                    "prompt": "p",
                    "agent": "ghost",
                    "target": {"channel": "web", "conversation": "c"},
                },
            },
            "hooks": {
                "my hook": {"secret": "s" * 16, "prompt": "p", "target": {"channel": "web", "conversation": "c"}}
            },
        }
    )
    assert "no such channel" in found["schedules.nowhere.target.channel"]
    assert "no such user" in found["schedules.nowhere.target.user"]
    assert "no such agent" in found["schedules.no-agent.agent"]
    assert "letters, digits" in found["hooks.my hook"]
    ok = parse_config(
        {"users": {"alice": {}}, "schedules": {"digest": {"cron": "0 8 * * 1-5", "prompt": "p", "target": target}}}
    )
    assert ok.schedules["digest"].cron == "0 8 * * 1-5"
