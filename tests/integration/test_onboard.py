"""`clawgate onboard` (docs/onboarding.md): the files it writes (secrets only in a 0600 .env, none in
config.yaml or on screen), what it refuses (overwriting, missing values), that `clawgate config
check` passes on what it wrote, its questions, and the gateway's reading of that .env."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]

from gateway.cli import onboard
from gateway.cli.main import main
from gateway.config import load
from gateway.config.load import load_config

TG_TOKEN = "123456:SECRET-telegram-token-abcdef"
API_KEY = "sk-SECRET-model-key-0123456789"
SLACK_BOT, SLACK_APP = "xoxb-SECRET-bot-0000", "xapp-SECRET-app-0000"
SECRETS = (TG_TOKEN, API_KEY, SLACK_BOT, SLACK_APP)
VARIABLES = (
    "CLAWGATE_TOKEN",
    "CLAWGATE_API_KEY",
    "TELEGRAM_BOT_TOKEN",
    "SLACK_BOT_TOKEN",
    "SLACK_APP_TOKEN",
    "DISCORD_BOT_TOKEN",
    "TEAMS_APP_PASSWORD",
    "CLAWGATE_PORT",
    "CLAWGATE_HOST",
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts without the variables onboarding writes, and leaves none behind: loading a
    .env puts its values into os.environ."""
    saved = dict(os.environ)
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    load._FROM_ENV_FILE.clear()
    load._WARNED.clear()
    yield
    os.environ.clear()
    os.environ.update(saved)
    load._FROM_ENV_FILE.clear()


def flags(config: Path, *more: str) -> list[str]:
    return [
        "onboard",
        "--non-interactive",
        "--no-doctor",
        "--config",
        str(config),
        "--api-key",
        API_KEY,
        "--channel",
        "telegram",
        "--telegram-token",
        TG_TOKEN,
        "--channel",
        "slack",
        "--slack-bot-token",
        SLACK_BOT,
        "--slack-app-token",
        SLACK_APP,
        *more,
    ]


def env_file(path: Path) -> dict[str, str]:
    from dotenv import dotenv_values

    return {k: v for k, v in dotenv_values(path).items() if v is not None}


def test_non_interactive_writes_a_config_without_secrets_and_a_private_env(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    assert main(flags(config)) == 0
    out = capsys.readouterr()
    text = config.read_text()
    for secret in SECRETS:
        assert secret not in text
        assert secret not in out.out and secret not in out.err
    assert "${TELEGRAM_BOT_TOKEN}" in text and "${CLAWGATE_API_KEY}" in text and "${CLAWGATE_TOKEN}" in text
    assert "docs/platforms/telegram.md" in text  # comments point at the docs
    env = env_file(tmp_path / ".env")
    assert env["TELEGRAM_BOT_TOKEN"] == TG_TOKEN and env["CLAWGATE_API_KEY"] == API_KEY
    assert env["SLACK_BOT_TOKEN"] == SLACK_BOT and env["SLACK_APP_TOKEN"] == SLACK_APP
    assert len(env["CLAWGATE_TOKEN"]) >= 40 and env["CLAWGATE_TOKEN"] not in out.out
    assert stat.S_IMODE((tmp_path / ".env").stat().st_mode) == 0o600
    data = yaml.safe_load(text)
    assert data["channels"]["slack"] == {"bot_token": "${SLACK_BOT_TOKEN}", "app_token": "${SLACK_APP_TOKEN}"}
    assert "make run" in out.out or "clawgate --config" in out.out


def test_the_written_config_loads_and_config_check_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    assert main(flags(config)) == 0
    capsys.readouterr()
    assert main(["--config", str(config), "config", "check"]) == 0  # reads the .env beside it
    assert f"{config}: OK" in capsys.readouterr().out
    loaded = load_config(config)
    telegram = loaded.channels["telegram"]
    assert telegram.token.get_secret_value() == TG_TOKEN  # type: ignore[union-attr]
    assert loaded.users["local"].tokens[0].get_secret_value() == env_file(tmp_path / ".env")["CLAWGATE_TOKEN"]


def test_existing_files_are_never_replaced_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("mine: true\n")
    assert main(flags(config)) == 1
    err = capsys.readouterr().err
    assert str(config) in err and "--force" in err
    assert config.read_text() == "mine: true\n" and not (tmp_path / ".env").exists()

    config.unlink()
    (tmp_path / ".env").write_text("MINE=1\n")
    (tmp_path / ".env").chmod(0o644)
    assert main(flags(config)) == 1
    assert str(tmp_path / ".env") in capsys.readouterr().err
    assert not config.exists()

    assert main(flags(config, "--force")) == 0
    assert "TELEGRAM_BOT_TOKEN" in env_file(tmp_path / ".env")
    assert stat.S_IMODE((tmp_path / ".env").stat().st_mode) == 0o600  # not the old file's 0644


def test_missing_values_are_all_listed_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    argv = ["onboard", "--non-interactive", "--config", str(config), "--channel", "telegram", "--channel", "teams"]
    assert main([*argv, "--channel", "slack", "--slack-mode", "http", "--channel", "discord"]) == 2
    err = capsys.readouterr().err
    for flag in (
        "--telegram-token",
        "--teams-app-id",
        "--teams-app-password",
        "--slack-bot-token",
        "--slack-signing-secret",
        "--discord-token",
        "--public-url",
    ):
        assert flag in err
    assert not config.exists() and not (tmp_path / ".env").exists()


def test_webhook_channels_get_the_public_url_and_generated_secrets(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    argv = flags(config, "--telegram-mode", "webhook", "--public-url", "https://bot.example.com")
    argv += ["--channel", "messenger", "--messenger-page-token", "EAAG-SECRET", "--messenger-app-secret", "s" * 32]
    assert main(argv) == 0
    data = yaml.safe_load(config.read_text())
    assert data["channels"]["web"]["public_url"] == "https://bot.example.com"
    assert data["channels"]["telegram"]["webhook_url"] == "https://bot.example.com/telegram/telegram"
    env = env_file(tmp_path / ".env")
    assert len(env["TELEGRAM_WEBHOOK_SECRET"]) >= 16 and len(env["MESSENGER_VERIFY_TOKEN"]) >= 8
    load_config(config)


def test_a_secret_flag_left_out_is_read_from_its_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISCORD_BOT_TOKEN", "discord-SECRET-from-env")
    config = tmp_path / "config.yaml"
    argv = ["onboard", "--non-interactive", "--no-doctor", "--config", str(config), "--channel", "discord"]
    assert main(argv) == 0
    assert env_file(tmp_path / ".env")["DISCORD_BOT_TOKEN"] == "discord-SECRET-from-env"


def test_it_ends_with_the_doctor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    argv = [a for a in flags(config) if a != "--no-doctor"]
    assert main([*argv, "--offline"]) == 0
    out = capsys.readouterr().out
    assert "clawgate doctor:" in out and "channel telegram" in out and "Next:" in out
    for secret in SECRETS:
        assert secret not in out


def test_interactive_questions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    answers = iter(["", "telegram, nonsense", "telegram", "webhook", "", "https://chat.example.org"])
    secrets = iter([API_KEY, "", TG_TOKEN])
    asked: list[str] = []

    def ask(prompt: str) -> str:
        asked.append(prompt)
        return next(answers)

    def ask_secret(prompt: str) -> str:
        asked.append(prompt)
        assert "hidden" in prompt
        return next(secrets)

    config = tmp_path / "config.yaml"
    args = onboard.parser().parse_args(["--no-doctor"])
    assert onboard.run(args, config, ask=ask, ask_secret=ask_secret, interactive=True) == 0
    out = capsys.readouterr().out
    assert "not a channel: nonsense" in out and "this one is needed" in out  # asked again, twice
    assert "a webhook channel needs it" in out
    for secret in SECRETS:
        assert secret not in out and secret not in config.read_text()
    data = yaml.safe_load(config.read_text())
    assert data["ai"]["model"] == onboard.DEFAULT_MODEL
    assert data["channels"]["telegram"]["mode"] == "webhook"
    env = env_file(tmp_path / ".env")
    assert env["TELEGRAM_BOT_TOKEN"] == TG_TOKEN and env["CLAWGATE_API_KEY"] == API_KEY
    assert any("Telegram bot token" in q for q in asked)
    load_config(config)


def test_interactive_local_model_asks_for_its_address_and_no_key(tmp_path: Path) -> None:
    answers = iter(["ollama/llama3.1", "http://127.0.0.1:11434", ""])

    def no_secret(prompt: str) -> str:
        raise AssertionError(f"asked for a secret: {prompt}")

    config = tmp_path / "config.yaml"
    args = onboard.parser().parse_args(["--no-doctor"])
    assert onboard.run(args, config, ask=lambda _p: next(answers), ask_secret=no_secret, interactive=True) == 0
    ai = yaml.safe_load(config.read_text())["ai"]
    assert ai == {"model": "ollama/llama3.1", "api_base": "http://127.0.0.1:11434"}
    assert set(env_file(tmp_path / ".env")) == {"CLAWGATE_TOKEN"}


# -- the .env beside config.yaml ---------------------------------------------------------------------


def test_the_env_file_never_overrides_the_real_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.yaml"
    config.write_text('ai:\n  model: "${CLAWGATE_MODEL}"\nusers:\n  local:\n    tokens: ["${CLAWGATE_TOKEN}"]\n')
    env = tmp_path / ".env"
    fd = os.open(env, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"CLAWGATE_MODEL=openai/from-file\nCLAWGATE_TOKEN='token-from-the-file-0000'\n")
    os.close(fd)
    monkeypatch.setenv("CLAWGATE_MODEL", "openai/from-the-real-environment")
    loaded = load_config(config)
    assert loaded.ai.model == "openai/from-the-real-environment"
    assert loaded.users["local"].tokens[0].get_secret_value() == "token-from-the-file-0000"
    # A later read (a reload) takes the file's new value for what only the file had set.
    env.write_text("CLAWGATE_MODEL=openai/from-file\nCLAWGATE_TOKEN=token-changed-in-the-file-00\n")
    assert load_config(config).users["local"].tokens[0].get_secret_value() == "token-changed-in-the-file-00"


def test_an_env_file_others_may_read_is_warned_of(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("ai:\n  model: openai/x\n")
    (tmp_path / ".env").write_text("SOMETHING=1\n")
    (tmp_path / ".env").chmod(0o644)
    with caplog.at_level(logging.WARNING):
        load_config(config)
    assert "env_file_readable_by_others" in caplog.text and "chmod 600" in caplog.text


@pytest.mark.parametrize("secret", ["p$$w0rd${HOME}", "q\"uo'te #x", "ends\\", "\\n\\t", "é✓ spaced"])
def test_any_secret_comes_back_from_the_env_file_as_typed(tmp_path: Path, secret: str) -> None:
    config = tmp_path / "config.yaml"
    argv = ["onboard", "--non-interactive", "--no-doctor", "--config", str(config), "--api-key", secret]
    assert main(argv) == 0
    assert load_config(config).ai.api_key.get_secret_value() == secret  # type: ignore[union-attr]
