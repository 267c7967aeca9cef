"""Who is asking the console and its API: a bearer token (scripts), or a browser session that
signed in with a user's token (an HttpOnly, SameSite=Strict cookie).

A cookie is sent by the browser on its own, so every unsafe request made with one must prove it
comes from our own page: the session's CSRF token in the `X-CSRF-Token` header (scripts on the
page) or a `csrf` form field (plain forms), and an `Origin`, when the browser sends one, of this
very server. A bearer token is never sent by a browser unasked, so it needs neither."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Collection, Mapping

from aiohttp import web

from gateway.core.http_input import is_local_request
from gateway.core.logs import event
from gateway.web.auth import TokenAuth
from gateway.web.console.once import LINK_SESSION, OnceLink, Outcome
from gateway.web.console.service import Viewer
from memory.store.console_sessions import ConsoleSessionStore
from memory.store.identities import IdentityStore

log = logging.getLogger("clawgate.console")

COOKIE = "clawgate_console"
UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class Unauthenticated(Exception):
    """No valid token or session: the API answers 401, a page sends the browser to sign in."""


class CsrfRejected(Exception):
    """An unsafe request with a cookie but without proof that our own page sent it."""


class ConsoleAuth:
    def __init__(
        self,
        tokens: TokenAuth,
        sessions: ConsoleSessionStore,
        identities: IdentityStore,
        public_urls: Collection[str] = (),
        once: OnceLink | None = None,
        link_user: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.tokens = tokens
        self.sessions = sessions
        self.identities = identities
        # The web channels' public_url: the origins browsers see behind a TLS proxy.
        self.public_urls = frozenset(public_urls)
        # The one-time sign-in link (once.py) and who it signs in under the config in force (None:
        # some user has a token, and sessions a link opened end).
        self.once = once
        self.link_user = link_user

    def same_origin(self, request: web.Request) -> bool:
        """True unless the browser says the request comes from another origin than this server,
        as it is reached directly or at a configured public_url."""
        origin = request.headers.get("Origin")
        return origin is None or origin == f"{request.scheme}://{request.host}" or origin in self.public_urls

    def secure(self, request: web.Request) -> bool:
        """Whether the browser reached this server over HTTPS: directly, or at an https public_url
        for this host (a TLS proxy in front speaks plain HTTP to the gateway)."""
        return request.secure or f"https://{request.host.lower()}" in self.public_urls

    def set_cookie(self, response: web.StreamResponse, request: web.Request, session_id: str) -> None:
        response.set_cookie(
            COOKIE,
            session_id,
            max_age=int(self.sessions.ttl.total_seconds()),
            path="/",
            httponly=True,
            samesite="Strict",
            secure=self.secure(request),
        )

    async def viewer(self, request: web.Request, form: Mapping[str, str] | None = None) -> Viewer:
        """The signed-in person, or Unauthenticated; CsrfRejected for an unproven unsafe request;
        Throttled after too many wrong bearer tokens."""
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            found = self.tokens.check(token.strip(), request.remote)
            if found is None:
                raise Unauthenticated("invalid bearer token")
            return await self._viewer(found[0], None)
        session_id = request.cookies.get(COOKIE, "")
        session = await self.sessions.get(session_id) if session_id else None
        if session is None or not self._holds(session.user_id, session.token_digest):
            raise Unauthenticated("sign in first")
        if request.method in UNSAFE:
            sent = request.headers.get("X-CSRF-Token") or (form or {}).get("csrf", "")
            if not hmac.compare_digest(sent.encode(), session.csrf.encode()) or not self.same_origin(request):
                event(log, "console_csrf_rejected", logging.WARNING, path=request.path)
                raise CsrfRejected("the request did not come from this console: reload the page and try again")
        return await self._viewer(session.user_id, session.csrf)

    async def _viewer(self, user_id: str, csrf: str | None) -> Viewer:
        user = await self.identities.get_user(user_id)
        roles = frozenset(user.roles) if user is not None else frozenset({"user"})
        return Viewer(user_id, roles, csrf)

    async def sign_in(self, request: web.Request, token: str) -> tuple[str, Viewer] | None:
        """A new session for a valid token: (cookie value, viewer). None when the token is wrong;
        Throttled when it, or this address, failed too often lately (a valid token always signs in)."""
        found = self.tokens.check(token.strip(), request.remote)
        if found is None:
            return None
        session_id, session = await self.sessions.create(*found)
        event(log, "console_signed_in", user=found[0])
        return session_id, await self._viewer(found[0], session.csrf)

    def _holds(self, user_id: str, token_digest: str) -> bool:
        """Is a session still good: its token is still its user's, or a link opened it and links
        still sign in that user."""
        if token_digest == LINK_SESSION:
            return self.link_user() == user_id
        return self.tokens.holds(user_id, token_digest)

    async def sign_in_once(self, request: web.Request, code: str) -> tuple[str, Viewer] | Outcome | None:
        """A new session for the one-time link's `code`: (cookie value, viewer); the Outcome that
        refused it; None when links sign nobody in here (a user has a token, or the request is not
        from this machine)."""
        user_id = self.link_user()
        if self.once is None or user_id is None or not is_local_request(request):
            return None
        outcome = self.once.take(code)
        if outcome != Outcome.OK:
            event(log, "console_signin_link_refused", logging.WARNING, outcome=outcome.value)
            return outcome
        session_id, session = await self.sessions.create(user_id, LINK_SESSION)
        event(log, "console_signed_in", user=user_id, via="one_time_link")
        return session_id, await self._viewer(user_id, session.csrf)

    async def sign_out(self, request: web.Request) -> None:
        session_id = request.cookies.get(COOKIE, "")
        if session_id:
            await self.sessions.delete(session_id)


def clear_cookie(response: web.StreamResponse) -> None:
    response.del_cookie(COOKIE, path="/")
