"""One line per event: `<event> key=value ...`, with secrets redacted by a filter on the handler."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterable
from typing import Any

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


def event(logger: logging.Logger, name: str, level: int = logging.INFO, /, **ctx: Any) -> None:
    """Log a stable event name with key=value context."""
    if not logger.isEnabledFor(level):
        return
    if ctx:
        logger.log(level, "%s %s", name, " ".join(f"{k}={_fmt_value(v)}" for k, v in ctx.items()))
    else:
        logger.log(level, "%s", name)


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
        return True


_filter = RedactingFilter()


def redactor() -> RedactingFilter:
    return _filter


def setup_logging(level: str = "INFO", secrets: Iterable[str] = ()) -> None:
    _filter.add_secrets(secrets)
    root = logging.getLogger()
    root.setLevel(level)
    if not any(getattr(h, "_clawgate", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        handler.addFilter(_filter)
        handler._clawgate = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    # Third-party libraries are chatty at INFO and may echo request bodies.
    for noisy in ("LiteLLM", "litellm", "httpx", "httpcore", "openai", "aiohttp.access", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
