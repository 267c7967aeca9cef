"""Meta's webhook signature: `X-Hub-Signature-256: sha256=<hex>`, the HMAC-SHA256 of the raw request
body keyed with the app secret. Checked on the bytes as received, before anything is parsed. Pure."""

from __future__ import annotations

import hashlib
import hmac

HEADER = "X-Hub-Signature-256"
_PREFIX = "sha256="
_HEX = frozenset("0123456789abcdef")


def sign(secret: str, body: bytes) -> str:
    """The header value Meta sends with `body`."""
    return _PREFIX + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def problem(secret: str, body: bytes, header: str | None) -> str | None:
    """Why `header` does not vouch for `body` (a short reason for the log), or None when it does."""
    if not header:
        return "missing_signature"
    scheme, sep, given = header.strip().partition("=")
    if not sep or scheme.lower() != "sha256":
        return "wrong_scheme"  # X-Hub-Signature's sha1=, or anything else
    given = given.lower()
    if len(given) != 64 or not set(given) <= _HEX:
        return "malformed_signature"
    expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected.encode(), given.encode()):
        return "bad_signature"
    return None
