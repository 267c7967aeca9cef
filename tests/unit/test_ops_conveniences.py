"""Operator conveniences: JSON log lines, and config problems in plain words."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from gateway.config.load import ConfigError, parse_config
from gateway.core.logs import ACCESS_LOGGER, REDACTED, JsonFormatter, RedactingFilter, event, setup_logging


def _json_logger(filt: RedactingFilter) -> tuple[logging.Logger, io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(filt)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger(f"test.json.{id(stream)}")
    logger.handlers = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger, stream


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_json_line_carries_the_event_name_and_its_fields_as_keys() -> None:
    logger, stream = _json_logger(RedactingFilter())
    event(logger, "turn_completed", logging.WARNING, channel="web", ms=1.23456, ok=True, n=3, none=None, note='a "b"\n')
    (line,) = _lines(stream)
    assert line["event"] == "turn_completed"
    assert line["level"] == "WARNING" and line["logger"] == logger.name
    assert str(line["ts"]).endswith("+00:00")
    assert {k: line[k] for k in ("channel", "ms", "ok", "n", "none", "note")} == {
        "channel": "web",
        "ms": 1.2346,
        "ok": True,
        "n": 3,
        "none": None,
        "note": 'a "b"\n',
    }
    assert "\n" not in stream.getvalue().rstrip("\n")  # one object, one line


def test_a_field_named_like_a_line_key_does_not_overwrite_it() -> None:
    logger, stream = _json_logger(RedactingFilter())
    event(logger, "odd", level="x", event="y")
    (line,) = _lines(stream)
    assert line["event"] == "odd" and line["level"] == "INFO"
    assert line["level_"] == "x" and line["event_"] == "y"


def test_a_line_that_is_not_an_event_keeps_its_message_and_traceback() -> None:
    logger, stream = _json_logger(RedactingFilter(["hunter2-secret"]))
    try:
        raise RuntimeError("boom hunter2-secret")
    except RuntimeError:
        logger.exception("library said %s", "hello")
    (line,) = _lines(stream)
    assert line["message"] == "library said hello" and "event" not in line
    assert "RuntimeError" in str(line["exc"]) and "hunter2-secret" not in stream.getvalue()


def test_secrets_in_fields_are_redacted_in_json_too() -> None:
    secret = "my-configured-secret-value"
    logger, stream = _json_logger(RedactingFilter([secret, "424242"]))
    event(
        logger,
        "llm_call_failed",
        error=f"401 for key {secret}",
        header="Bearer abcdefghijklmnop1234",
        bot="123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw",
        pin=424242,
        count=7,
    )
    (line,) = _lines(stream)
    out = stream.getvalue()
    for leaked in (secret, "abcdefghijklmnop1234", "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw", "424242"):
        assert leaked not in out
    assert line["error"] == f"401 for key {REDACTED}"
    assert line["pin"] == REDACTED and line["count"] == 7


def test_text_lines_are_unchanged() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter(["s3cret-value"]))
    logger = logging.getLogger("test.text.unchanged")
    logger.handlers = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    event(logger, "turn_completed", channel="web", note="two words", key="s3cret-value")
    assert stream.getvalue().strip() == f'turn_completed channel=web note="two words" key={REDACTED}'


@pytest.fixture
def restored_logging() -> Iterator[None]:
    root = logging.getLogger()
    access = logging.getLogger(ACCESS_LOGGER)
    level, access_level, handlers = root.level, access.level, list(root.handlers)
    formatters = {h: h.formatter for h in handlers}
    yield
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
    for h, f in formatters.items():
        h.setFormatter(f)
    root.setLevel(level)
    access.setLevel(access_level)


def _ours() -> logging.Handler:
    return next(h for h in logging.getLogger().handlers if getattr(h, "_clawgate", False))


@pytest.mark.usefixtures("restored_logging")
def test_setup_logging_switches_the_format_and_the_access_log_and_keeps_them_when_not_named() -> None:
    setup_logging("INFO", fmt="json", access_log=True)
    assert isinstance(_ours().formatter, JsonFormatter)
    assert logging.getLogger(ACCESS_LOGGER).isEnabledFor(logging.INFO)
    setup_logging("DEBUG", ["another-secret"])  # a later call (new secrets) keeps both
    assert isinstance(_ours().formatter, JsonFormatter)
    assert logging.getLogger(ACCESS_LOGGER).isEnabledFor(logging.INFO)
    setup_logging("INFO", fmt="text", access_log=False)
    assert not isinstance(_ours().formatter, JsonFormatter)
    assert not logging.getLogger(ACCESS_LOGGER).isEnabledFor(logging.INFO)


def test_logging_config_defaults_and_choices() -> None:
    cfg = parse_config({}, env={})
    assert (cfg.logging.format, cfg.logging.access_log) == ("text", False)
    cfg = parse_config({"logging": {"format": "json", "access_log": True}}, env={})
    assert (cfg.logging.format, cfg.logging.access_log) == ("json", True)
    with pytest.raises(ConfigError, match=r"logging\.format"):
        parse_config({"logging": {"format": "xml"}}, env={})


# -- config problems in plain words ---------------------------------------------------------------

_TYPES = "the known types are web, telegram, discord, slack, teams, messenger"
_TARGET = {"channel": "web", "conversation": "c"}


@pytest.mark.parametrize(
    ("data", "path", "expected"),
    [
        (
            {"loging": {"level": "INFO"}},
            "loging",
            "unknown key; did you mean 'logging'? (got a section with the keys level)",
        ),
        ({"ai": {"modle": "x"}}, "ai.modle", "unknown key; did you mean 'model'? (got 'x')"),
        ({"ai": {"zzz": 1}}, "ai.zzz", "unknown key (got 1)"),
        ({"channels": {"web": {"prot": 80}}}, "channels.web.prot", "unknown key; did you mean 'port'?"),
        (
            {"channels": {"tg": {"type": "telegram", "token": "t", "bot_token": "x"}}},
            "channels.tg.bot_token",
            "unknown key; did you mean 'token'? (got '****')",
        ),
        ({"agents": {"list": [{"name": "a", "modell": "x"}]}}, "agents.list[0].modell", "did you mean 'model'?"),
        (
            {"channels": {"chat": {"type": "pager"}}},
            "channels.chat.type",
            f"unknown channel type; {_TYPES} (got 'pager')",
        ),
        ({"channels": {"chat": {"type": "telgram"}}}, "channels.chat.type", "did you mean 'telegram'?"),
        (
            {"channels": {"mybot": {"token": "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"}}},
            "channels.mybot",
            f"a channel needs a type (unless it is named after its platform); {_TYPES} "
            "(got a section with the keys token)",
        ),
        ({"users": {"u": {"tokens": ["short"]}}}, "users.u.tokens[0]", "must have at least 16 characters (got '****')"),
        (
            {"hooks": {"h": {"secret": "tiny", "prompt": "p", "target": _TARGET}}},
            "hooks.h.secret",
            "must have at least 16 characters (got '****')",
        ),
        (
            {"hooks": {"h": {"secret": "s" * 16, "prompt": "", "target": _TARGET}}},
            "hooks.h.prompt",
            "must have at least 1 character (got '')",
        ),
        ({"agents": {"list": [{"name": "x" * 65}]}}, "agents.list[0].name", "must have at most 64 characters"),
        (
            {"agents": {"list": [{"name": "two words"}]}},
            "agents.list[0].name",
            "may hold only letters, digits, '_', '.' and '-' (got 'two words')",
        ),
        ({"projects": {"bad name": {}}}, "projects.bad name", "the name may hold only letters, digits"),
        (
            {"schedules": {"s" * 65: {"every": "1h", "prompt": "p", "target": _TARGET}}},
            "schedules." + "s" * 65,
            "the name must have at most 64 characters",
        ),
        ({"ai": {"model": 5}}, "ai.model", "must be text (got 5)"),
        ({"ai": {"fallback": "one"}}, "ai.fallback", "must be a list"),
        ({"ai": {"timeout_seconds": "soon"}}, "ai.timeout_seconds", "must be a number (got 'soon')"),
        ({"channels": {"web": {"port": "http"}}}, "channels.web.port", "must be a whole number (got 'http')"),
        ({"channels": {"web": {"enabled": "maybe"}}}, "channels.web.enabled", "must be true or false"),
        ({"agents": "x"}, "agents", "must be a section of keys"),
        ({"ai": {"timeout_seconds": -1}}, "ai.timeout_seconds", "must be greater than 0 (got -1)"),
        ({"shutdown": {"timeout_seconds": 99999}}, "shutdown.timeout_seconds", "must be 3600 or less (got 99999)"),
        ({"channels": {"web": {"port": 70000}}}, "channels.web.port", "must be 65535 or less"),
        (
            {"logging": {"level": "info"}},
            "logging.level",
            "must be one of 'DEBUG', 'INFO', 'WARNING' or 'ERROR'; did you mean 'INFO'?",
        ),
        ({"logging": {"format": "jsn"}}, "logging.format", "must be one of 'text' or 'json'; did you mean 'json'?"),
        ({"channels": {"telegram": {}}}, "channels.telegram.token", "is required (got nothing)"),
        ({"users": {"a": {"identities": ["nocolon"]}}}, "users.a.identities", "identity 'nocolon' must look like"),
    ],
)
def test_config_problems_are_in_plain_words(data: dict[str, object], path: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "t", env={})
    found = {p.path: p.render() for p in info.value.problems}
    assert path in found, found
    assert expected in found[path]
    raw = (
        "Input should",
        "Extra inputs",
        "after validation",
        "discriminator",
        "Input tag",
        "Value error",
        "String should",
    )
    assert not any(r in found[path] for r in raw), found[path]


def test_no_secret_is_shown_for_a_section_that_is_wrong_as_a_whole() -> None:
    token = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
    with pytest.raises(ConfigError) as info:
        parse_config({"channels": {"mybot": {"token": token}}, "hooks": {"h": {"secret": "tiny"}}}, "t", env={})
    assert token not in str(info.value) and "tiny" not in str(info.value)
