"""The bot's own token for the Bot Connector: an OAuth 2.0 client-credentials grant at `token_url`
with the app id and secret, for the scope https://api.botframework.com/.default.

This is the SDK's token seam (AccessTokenProviderBase) filled in over aiohttp rather than with the
SDK's MSAL provider: MSAL discovers its authority over the network from fixed Microsoft addresses,
so neither a test nor a proxy could stand in for the token endpoint, and it would be one more
dependency for a single form POST. The token is cached until shortly before it expires and one
request serves every caller that needs it meanwhile. The secret goes in the request body only.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
from microsoft_agents.hosting.core.authorization import (
    AccessTokenProviderBase,
    AuthenticationConstants,
)

from channels.teams.errors import TokenError

SCOPE = AuthenticationConstants.AGENTS_SDK_SCOPE + "/.default"  # https://api.botframework.com/.default
EARLY_SECONDS = 300.0  # a token is renewed this long before it expires (clocks differ; calls take time)


def default_token_url(tenant_id: str | None) -> str:
    """Entra ID's token endpoint: the bot's own tenant for a single-tenant bot, else Bot Framework's."""
    return f"https://login.microsoftonline.com/{tenant_id or 'botframework.com'}/oauth2/v2.0/token"


def _reason(status: int, body: Mapping[str, Any]) -> tuple[str, str | None]:
    """What the token endpoint said, without echoing anything sent to it."""
    code = body.get("error") if isinstance(body.get("error"), str) else None
    description = body.get("error_description")
    # Entra ID's descriptions begin with an AADSTS code and its meaning; they never contain the secret.
    first = description.splitlines()[0][:200] if isinstance(description, str) and description else ""
    return (f"HTTP {status} {code or ''}: {first}".strip().rstrip(":"), code)


class BotToken(AccessTokenProviderBase):
    def __init__(
        self,
        token_url: str,
        app_id: str,
        app_password: str,
        session: Callable[[], aiohttp.ClientSession],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.token_url = token_url
        self._app_id = app_id
        self._password = app_password
        self._session = session
        self._clock = clock
        self._token: str | None = None
        self._expires_at = 0.0
        self._lock = asyncio.Lock()
        self.fetches = 0

    async def get_access_token(self, resource_url: str, scopes: list[str], force_refresh: bool = False) -> str:
        """A valid token (resource_url and scopes are the SDK's; the Bot Connector needs one scope)."""
        async with self._lock:
            if force_refresh or self._token is None or self._clock() >= self._expires_at:
                self._token, lifetime = await self._fetch(scopes[0] if scopes else SCOPE)
                self._expires_at = self._clock() + max(0.0, lifetime - EARLY_SECONDS)
            return self._token

    async def token(self, *, force_refresh: bool = False) -> str:
        return await self.get_access_token(AuthenticationConstants.AGENTS_SDK_SCOPE, [SCOPE], force_refresh)

    def forget(self, token: str) -> None:
        """The Bot Connector refused `token`: the next call asks for a new one."""
        if self._token == token:
            self._token = None

    async def _fetch(self, scope: str) -> tuple[str, float]:
        form = {
            "grant_type": "client_credentials",
            "client_id": self._app_id,
            "client_secret": self._password,
            "scope": scope,
        }
        try:
            async with self._session().post(self.token_url, data=form) as resp:
                status, raw = resp.status, await resp.read()
        except TimeoutError as exc:
            raise TokenError("token endpoint timed out", retryable=True, code="timeout") from exc
        except aiohttp.ClientError as exc:
            raise TokenError(f"token endpoint unreachable ({type(exc).__name__})", retryable=True) from exc
        self.fetches += 1
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {}
        body = body if isinstance(body, Mapping) else {}
        token = body.get("access_token")
        if status == 200 and isinstance(token, str) and token:
            return token, _seconds(body.get("expires_in"))
        said, code = _reason(status, body)
        # 400/401 name the app's credentials or its tenant (invalid_client, unauthorized_client...): no
        # retry can fix them. 429 and 5xx are the endpoint's own trouble.
        retryable = status == 429 or status >= 500
        raise TokenError(f"token endpoint refused: {said}", retryable=retryable, status=status, code=code)


def _seconds(value: object) -> float:
    """A token's lifetime: Entra ID sends a number of seconds (some proxies send it as a string)."""
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 3600.0
