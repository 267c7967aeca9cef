"""The HTTP side of Meta's webhook, apart from what the adapter does with the events: the
subscription check (`GET`) and the cap on a call's body (`POST`, read by http_input.read_capped)."""

from __future__ import annotations

import hmac
from collections.abc import Mapping

# A Messenger webhook call is a batch of small JSON events (attachments are URLs): this is plenty.
MAX_BODY_BYTES = 1_000_000
_CHALLENGE_CHARS = 256


def subscription(query: Mapping[str, str], verify_token: str) -> tuple[str | None, str | None]:
    """(the challenge to echo, None) when Meta's subscription check is right, else (None, why not).

    Meta sends `hub.mode=subscribe`, the verify token set in the app's webhook settings, and a
    challenge it expects back as the whole body."""
    mode, token, challenge = query.get("hub.mode"), query.get("hub.verify_token"), query.get("hub.challenge")
    if mode != "subscribe":
        return None, "wrong_mode"
    if token is None or not hmac.compare_digest(token.encode(), verify_token.encode()):
        return None, "wrong_verify_token"
    if not challenge or len(challenge) > _CHALLENGE_CHARS or not (challenge.isascii() and challenge.isprintable()):
        return None, "bad_challenge"
    return challenge, None
