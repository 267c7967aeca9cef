"""Bearer tokens from config. Tokens are looked up by their SHA-256 digest, so lookup timing
tells nothing about the tokens themselves."""

from __future__ import annotations

import hashlib

from gateway.config import Config


class TokenAuth:
    def __init__(self, config: Config) -> None:
        self._by_digest: dict[bytes, str] = {}
        for uid, user in config.users.items():
            for tok in user.tokens:
                self._by_digest[_digest(tok.get_secret_value())] = uid

    def __call__(self, token: str | None) -> str | None:
        if not token:
            return None
        return self._by_digest.get(_digest(token))


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
