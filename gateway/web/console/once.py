"""A one-time sign-in link for the console while no user has a token (docs/onboarding.md, "Signing
in"): the gateway prints it at start, and opening it on this machine signs the browser in as the
local user, the person the loopback web chat already answers as.

The code is random (256 bits), new at every start, kept only as its SHA-256 digest in this process,
good once and for 15 minutes, and accepted only from a loopback client that asked by a loopback
name. It is never logged: the log says that a link was issued, and the access log shows paths only."""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from collections.abc import Callable
from datetime import datetime, timedelta
from enum import StrEnum

from gateway.config.model import Config
from gateway.core.events import utcnow
from gateway.core.logs import event

log = logging.getLogger("clawgate.console")

SIGNIN_PATH = "/console/signin/once"
TTL = timedelta(minutes=15)
# What a session opened by a link holds in place of a token's digest (those are hex: never this).
LINK_SESSION = "one-time-link"


class Outcome(StrEnum):
    OK = "ok"
    USED = "used"
    EXPIRED = "expired"
    WRONG = "wrong"


# What a browser is told when a link does not sign it in, by outcome.
REFUSALS = {
    Outcome.USED: "This sign-in link was used already: each link works once.",
    Outcome.EXPIRED: "This sign-in link has expired: a link works for 15 minutes.",
    Outcome.WRONG: "This sign-in link is not valid.",
}
NEW_LINK = (
    "For a new link, restart the gateway (it prints one at start while no user has a token), "
    "or set CLAWGATE_TOKEN (16+ characters), restart, and sign in with that token."
)


def link_user(config: Config) -> str | None:
    """Who a link signs in: the user the loopback web chat answers as (the one owning
    `web:<local_user>`), else the first admin config.yaml declares; None while any user has a
    token (people sign in with it) or there is nobody to be."""
    if any(u.tokens for u in config.users.values()):
        return None
    locals_ = [f"web:{ch.local_user}" for ch in config.web_channels().values() if ch.is_loopback]
    for uid, _roles, identities in config.declared_users():
        if any(ident in identities for ident in locals_):
            return uid
    return next((uid for uid, u in config.users.items() if "admin" in u.roles), None)


def _digest(code: str) -> str:
    return hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()


class OnceLink:
    """The current link's code, as a digest; `clock`: what "now" is (tests move it)."""

    def __init__(self, clock: Callable[[], datetime] = utcnow, ttl: timedelta = TTL) -> None:
        self.clock = clock
        self.ttl = ttl
        self._digest: str | None = None
        self._expires = datetime.min
        self._used: set[str] = set()

    def issue(self, user_id: str) -> str:
        """A new code (the one before it stops working), logged without the code itself."""
        code = secrets.token_urlsafe(32)
        self._digest = _digest(code)
        self._expires = self.clock() + self.ttl
        event(log, "console_signin_link_issued", user=user_id, valid_minutes=int(self.ttl.total_seconds() // 60))
        return code

    def take(self, code: str) -> Outcome:
        """Use `code`: OK once, then USED; EXPIRED past its time; WRONG for any other text."""
        if not code or len(code) > 256:
            return Outcome.WRONG
        presented = _digest(code)
        if presented in self._used:
            return Outcome.USED
        if self._digest is None or not hmac.compare_digest(presented, self._digest):
            return Outcome.WRONG
        if self.clock() >= self._expires:
            return Outcome.EXPIRED
        self._used.add(presented)
        self._digest = None
        return Outcome.OK


def startup_lines(config: Config, url: str, once: OnceLink) -> list[str]:
    """What `clawgate run` prints once it listens at `url`: where to chat, and how to sign in to the
    console, with a fresh link while no user has a token."""
    running = f"clawgate is running: open {url} to chat (Ctrl+C stops it)"
    if any(u.tokens for u in config.users.values()):
        return [running, f"web console: {url}/console (sign in with a user's token)"]
    who = link_user(config)
    if who is None:
        return [
            running,
            f"web console: {url}/console (no user has a token yet: set CLAWGATE_TOKEN (16+ characters) "
            "and restart to sign in)",
        ]
    code = once.issue(who)
    return [
        running,
        f"web console: sign in as {who} by opening, on this machine, {url}{SIGNIN_PATH}?code={code}",
        "  (the link works once, for 15 minutes; restart the gateway for a new one, or set CLAWGATE_TOKEN)",
    ]
