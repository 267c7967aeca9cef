"""One line per event: `<event> key=value ...`, or one JSON object a line (`logging.format: json`),
with secrets redacted by a filter on the handler in both."""

from __future__ import annotations

import json
import logging
import math
import re
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Literal

LogFormat = Literal["text", "json"]
# The shared web server's one line per request (`logging.access_log`); its level is the switch.
ACCESS_LOGGER = "clawgate.access"
# Where `event` leaves its name and fields on the record, for the JSON formatter.
_EVENT_ATTR = "clawgate_event"
_FIELDS_ATTR = "clawgate_fields"

# Token shapes we redact even when they are not in the config: provider keys, bearer headers,
# Telegram bot tokens, Slack tokens.
_PATTERNS = [
    re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._\-~+/=]{8,}"),
    re.compile(r"\b\d{6,12}:[A-Za-z0-9_\-]{30,}\b"),
    re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"),
    re.compile(r"\bxapp-[A-Za-z0-9\-]{10,}"),
    re.compile(r"\bAIza[0-9A-Za-z_\-]{30,}"),
]
REDACTED = "[redacted]"


def _fmt_value(value: Any) -> str:
    # Floats keep their precision (floor=0.22), rounded only past what any reader needs.
    text = str(round(value, 4)) if isinstance(value, float) else str(value)
    if text == "" or any(c in text for c in ' ="\n'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


def _json_value(value: Any) -> str | int | float | bool | None:
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return round(value, 4) if math.isfinite(value) else str(value)
    return str(value)


def event(logger: logging.Logger, name: str, level: int = logging.INFO, /, **ctx: Any) -> None:
    """Log a stable event name with key=value context."""
    if not logger.isEnabledFor(level):
        return
    extra = {_EVENT_ATTR: name, _FIELDS_ATTR: {k: _json_value(v) for k, v in ctx.items()}}
    if ctx:
        text = " ".join(f"{k}={_fmt_value(v)}" for k, v in ctx.items())
        logger.log(level, "%s %s", name, text, extra=extra)
    else:
        logger.log(level, "%s", name, extra=extra)


class RedactingFilter(logging.Filter):
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self._secrets: list[str] = []
        self.add_secrets(secrets)

    def add_secrets(self, secrets: Iterable[str]) -> None:
        merged = set(self._secrets) | {s for s in secrets if s and len(s) >= 4}
        self._secrets = sorted(merged, key=len, reverse=True)

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        for pat in _PATTERNS:
            text = pat.sub(REDACTED, text)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        record.msg = self.redact(message)
        record.args = None
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        fields = getattr(record, _FIELDS_ATTR, None)
        if isinstance(fields, dict):
            setattr(record, _FIELDS_ATTR, {k: self._redact_value(v) for k, v in fields.items()})
        return True

    def _redact_value(self, value: Any) -> Any:
        if value is None or isinstance(value, (bool, float)):
            return value
        text = str(value)
        redacted = self.redact(text)
        # A number stays a number unless its digits are a secret (a numeric PIN or password).
        return value if isinstance(value, int) and redacted == text else redacted


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ts, level, logger, then the event name and its fields as keys (or
    `message` for a line that is not an event), and `exc` for a traceback. Runs after the
    redacting filter, so it only ever sees redacted text."""

    _RESERVED = frozenset({"ts", "level", "logger", "event", "message", "exc"})

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
        }
        name = getattr(record, _EVENT_ATTR, None)
        fields = getattr(record, _FIELDS_ATTR, None)
        if isinstance(name, str) and isinstance(fields, dict):
            out["event"] = name
            for key, value in fields.items():
                out[f"{key}_" if key in self._RESERVED else key] = value
        else:
            out["message"] = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            out["exc"] = record.exc_text
        return json.dumps(out, ensure_ascii=False, default=str)


def formatter(fmt: LogFormat) -> logging.Formatter:
    if fmt == "json":
        return JsonFormatter()
    return logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")


_filter = RedactingFilter()


def redactor() -> RedactingFilter:
    return _filter


def setup_logging(
    level: str = "INFO",
    secrets: Iterable[str] = (),
    *,
    fmt: LogFormat | None = None,
    access_log: bool | None = None,
) -> None:
    """Configure the process's logging (again, on a reload). `fmt` and `access_log` left at None
    keep what an earlier call set (text, no access log at first)."""
    _filter.add_secrets(secrets)
    root = logging.getLogger()
    root.setLevel(level)
    handler = next((h for h in root.handlers if getattr(h, "_clawgate", False)), None)
    if handler is None:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(formatter(fmt or "text"))
        handler.addFilter(_filter)
        handler._clawgate = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    elif fmt is not None:
        handler.setFormatter(formatter(fmt))
    access = logging.getLogger(ACCESS_LOGGER)
    if access_log is not None or access.level == logging.NOTSET:
        access.setLevel(logging.INFO if access_log else logging.WARNING)
    # Third-party libraries are chatty at INFO and may echo request bodies.
    for noisy in ("LiteLLM", "litellm", "httpx", "httpcore", "openai", "aiohttp.access", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
