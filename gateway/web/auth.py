"""Bearer tokens from config, and the throttle on failed sign-ins.

Tokens are looked up by their SHA-256 digest, so lookup timing tells nothing about the tokens
themselves, and a console session keeps only that digest.

Failed authentication is throttled per presented credential and per client address, with a wait
that doubles after a few free failures. A valid token is never refused by the throttle: people
behind one proxy or NAT share an address, and whoever guesses from it must not lock them out.
Guessing stays hopeless anyway (tokens are 16 or more characters); what the throttle buys is that
a guesser, or a client stuck on a revoked token, is told to back off (429 with Retry-After), is
seen in the log, and costs next to nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gateway.config.model import Config
from gateway.core.logs import event
from gateway.core.ports import Throttled
from memory.store.console_sessions import digest

log = logging.getLogger("clawgate.auth")
MAX_TOKEN_CHARS = 4096  # longer is never a token: not looked up


@dataclass(slots=True)
class _Failures:
    count: int = 0
    last: float = 0.0
    until: float = 0.0  # refused until this time (monotonic)


class AuthThrottle:
    """Failures counted per key (an address, a credential's digest): the first `free` cost
    nothing, then each makes the key wait `base` seconds, doubling up to `cap`. A key quiet for
    `forget` seconds starts over."""

    def __init__(
        self,
        *,
        free: int = 5,
        base: float = 1.0,
        cap: float = 300.0,
        forget: float = 900.0,
        max_keys: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.free, self.base, self.cap, self.forget = free, base, cap, forget
        self.max_keys = max_keys
        self.clock = clock
        self._keys: dict[str, _Failures] = {}

    def retry_after(self, keys: Iterable[str]) -> float:
        """Seconds until every one of `keys` may try again (0: now)."""
        now = self.clock()
        waits = [f.until - now for k in keys if (f := self._keys.get(k)) is not None]
        return max([0.0, *waits])

    def failed(self, keys: Iterable[str]) -> None:
        now = self.clock()
        for key in keys:
            f = self._keys.get(key)
            if f is None or now - f.last > self.forget:
                f = self._keys[key] = _Failures()
            f.count += 1
            f.last = now
            if f.count > self.free:
                wait = min(self.cap, self.base * 2 ** (f.count - self.free - 1))
                f.until = now + wait
                event(log, "auth_throttled", logging.WARNING, key=key, failures=f.count, wait_seconds=wait)
        if len(self._keys) > self.max_keys:
            self._prune(now)

    def succeeded(self, key: str) -> None:
        self._keys.pop(key, None)

    def _prune(self, now: float) -> None:
        """Forget quiet keys; under a spray of new ones, the least recent half."""
        self._keys = {k: f for k, f in self._keys.items() if now - f.last <= self.forget}
        if len(self._keys) > self.max_keys:
            newest = sorted(self._keys.items(), key=lambda item: item[1].last)[len(self._keys) // 2 :]
            self._keys = dict(newest)


class TokenAuth:
    def __init__(self, config: Config, throttle: AuthThrottle | None = None) -> None:
        self._by_digest: dict[str, str] = {}
        self.throttle = throttle or AuthThrottle()
        self.use_config(config)

    def use_config(self, config: Config) -> None:
        """The tokens of `config` from now on (a reload): a token no longer there stops working."""
        self._by_digest = {
            digest(tok.get_secret_value()): uid for uid, user in config.users.items() for tok in user.tokens
        }

    def __call__(self, token: str | None, address: str | None = None) -> str | None:
        found = self.check(token, address)
        return None if found is None else found[0]

    def check(self, token: str | None, address: str | None) -> tuple[str, str] | None:
        """(user id, the token's digest) for a valid token, whatever the throttle says; None for an
        invalid or missing one; Throttled when this token or `address` failed too often lately."""
        if not token:
            return None
        token_digest = digest(token)
        found = self._found(token_digest) if len(token) <= MAX_TOKEN_CHARS else None
        keys = (f"token:{token_digest[:16]}", f"address:{address or 'unknown'}")
        if found is not None:
            self.throttle.succeeded(keys[0])  # the address keeps its count: others may share it
            return found
        wait = self.throttle.retry_after(keys)
        if wait > 0:
            raise Throttled(wait)
        self.throttle.failed(keys)
        event(log, "auth_failed", address=address or "unknown", credential=keys[0])
        return None

    def identify(self, token: str | None) -> tuple[str, str] | None:
        """(user id, the token's digest) for a valid token; no throttle (callers that take tokens
        from the network use `check`)."""
        if not token or len(token) > MAX_TOKEN_CHARS:
            return None
        return self._found(digest(token))

    def _found(self, token_digest: str) -> tuple[str, str] | None:
        uid = self._by_digest.get(token_digest)
        return None if uid is None else (uid, token_digest)

    def holds(self, user_id: str, token_digest: str) -> bool:
        """Is the token with this digest still one of this user's (config may have changed)?"""
        return self._by_digest.get(token_digest) == user_id
