"""Bearer tokens from config. Tokens are looked up by their SHA-256 digest, so lookup timing
tells nothing about the tokens themselves, and a console session keeps only that digest."""

from __future__ import annotations

from gateway.config import Config
from memory.console_sessions import digest


class TokenAuth:
    def __init__(self, config: Config) -> None:
        self._by_digest: dict[str, str] = {}
        self.use_config(config)

    def use_config(self, config: Config) -> None:
        """The tokens of `config` from now on (a reload): a token no longer there stops working."""
        self._by_digest = {
            digest(tok.get_secret_value()): uid for uid, user in config.users.items() for tok in user.tokens
        }

    def __call__(self, token: str | None) -> str | None:
        found = self.identify(token)
        return None if found is None else found[0]

    def identify(self, token: str | None) -> tuple[str, str] | None:
        """(user id, the token's digest) for a valid token."""
        if not token or len(token) > 4096:
            return None
        token_digest = digest(token)
        uid = self._by_digest.get(token_digest)
        return None if uid is None else (uid, token_digest)

    def holds(self, user_id: str, token_digest: str) -> bool:
        """Is the token with this digest still one of this user's (config may have changed)?"""
        return self._by_digest.get(token_digest) == user_id
