from __future__ import annotations

import io
import logging

from gateway.core.logs import REDACTED, RedactingFilter, event


def _capture(filt: RedactingFilter) -> tuple[logging.Logger, io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(filt)
    logger = logging.getLogger(f"test.redact.{id(stream)}")
    logger.handlers = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger, stream


def test_event_lines_are_key_value() -> None:
    logger, stream = _capture(RedactingFilter())
    event(logger, "turn_completed", channel="web", ms=1.234, note="two words", empty="")
    # Floats keep their precision (floor=0.22, not 0.2).
    assert stream.getvalue().strip() == 'turn_completed channel=web ms=1.234 note="two words" empty=""'


def test_configured_secrets_and_token_shapes_are_redacted() -> None:
    secret = "my-configured-secret-value"
    logger, stream = _capture(RedactingFilter([secret]))
    logger.info("key=%s", secret)
    logger.info("header Authorization: Bearer abcdefghijklmnop1234")
    logger.info("openai sk-proj-ABCDEFGHIJKLMNOPQRSTUV and telegram 123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw")
    logger.info("slack xoxb-1234567890-abcdefghij")
    out = stream.getvalue()
    for leaked in (secret, "abcdefghijklmnop1234", "sk-proj-ABC", "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw", "xoxb-1234"):
        assert leaked not in out
    assert out.count(REDACTED) >= 5


def test_exception_text_is_redacted() -> None:
    secret = "another-secret-value-42"
    logger, stream = _capture(RedactingFilter([secret]))
    try:
        raise RuntimeError(f"boom with {secret}")
    except RuntimeError:
        logger.exception("failed")
    assert secret not in stream.getvalue()
    assert "RuntimeError" in stream.getvalue()
