"""Is an incoming request really from Azure Bot Service for this bot: the JWT in its Authorization
header, checked as "Authenticate requests from the Bot Connector service to your bot" (Bot Framework
docs) says, and nothing switches it off.

The SDK's JwtTokenValidator is the base. Two things it does are not enough here: it fetches signing
keys from hard-coded Microsoft addresses (so no test or sovereign cloud can point it elsewhere) and
it never checks the issuer. `TeamsTokenValidator` therefore resolves keys from the `jwks_uri` of the
configured OpenID metadata document, cached and refreshed when a token names a key it does not know
(Microsoft rotates them), and checks signature (RS256), issuer, audience (the app id), expiry and
not-before (five minutes of clock skew, as the docs allow). `check_activity` then ties the token to
the activity: its `serviceurl` claim must name the activity's serviceUrl (where replies carry the
bot's own token), and a key endorsed for some channels only signs activities of those channels.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import jwt
from microsoft_agents.hosting.core.authorization import (
    AgentAuthConfiguration,
    AuthenticationConstants,
    ClaimsIdentity,
    JwtTokenValidator,
)

from gateway.core.logs import event

log = logging.getLogger("clawgate.channels.teams.auth")

BOT_FRAMEWORK_ISSUER: str = AuthenticationConstants.AGENTS_SDK_TOKEN_ISSUER  # https://api.botframework.com
CLOCK_SKEW_SECONDS = 300
KEYS_MAX_AGE = 24 * 3600.0  # a day: rotated keys are announced well before they sign anything
KEYS_REFRESH_FLOOR = 60.0  # unknown key ids refetch the keys at most this often (forged tokens name any)


class AuthError(Exception):
    """The request is refused (401): `reason` says why, in words safe to log."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class KeysUnavailable(Exception):
    """No signing keys could be had (the metadata or key set is unreachable): nothing can be checked."""


@dataclass(frozen=True, slots=True)
class Verified:
    identity: ClaimsIdentity
    endorsements: frozenset[str]  # the channels the signing key may sign for; empty: any


class SigningKeys:
    """The signing keys announced at `metadata_url` (OpenID metadata -> its `jwks_uri` -> JWKS)."""

    def __init__(
        self,
        metadata_url: str,
        session: Callable[[], aiohttp.ClientSession],
        *,
        timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.metadata_url = metadata_url
        self._session = session
        self._timeout = timeout
        self.clock = clock  # a test moves time on with its own
        self.max_age = KEYS_MAX_AGE
        self.refresh_floor = KEYS_REFRESH_FLOOR
        self._keys: dict[str, tuple[jwt.PyJWK, frozenset[str]]] = {}
        self._fetched_at: float | None = None
        self._lock = asyncio.Lock()
        self.fetches = 0  # how often the key set was fetched (health and tests)

    async def get(self, kid: str) -> tuple[jwt.PyJWK, frozenset[str]]:
        """The key `kid` and its endorsements; AuthError when nobody announced it."""
        if self._stale() or kid not in self._keys:
            async with self._lock:  # one fetch for all the requests that wait on it
                if self._stale() or (kid not in self._keys and self._may_refresh()):
                    await self._refresh()
        found = self._keys.get(kid)
        if found is None:
            raise AuthError("unknown signing key")
        return found

    def _stale(self) -> bool:
        return self._fetched_at is None or self.clock() - self._fetched_at > self.max_age

    def _may_refresh(self) -> bool:
        return self._fetched_at is None or self.clock() - self._fetched_at >= self.refresh_floor

    async def _refresh(self) -> None:
        try:
            async with asyncio.timeout(self._timeout):
                metadata = await self._json(self.metadata_url)
                jwks_uri = metadata.get("jwks_uri")
                if not isinstance(jwks_uri, str) or not jwks_uri:
                    raise ValueError("the OpenID metadata names no jwks_uri")
                keys = _parse_keys(await self._json(jwks_uri))
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            event(log, "teams_keys_fetch_failed", logging.WARNING, url=self.metadata_url, error=type(exc).__name__)
            if not self._keys:
                raise KeysUnavailable(f"no signing keys from {self.metadata_url}: {type(exc).__name__}") from exc
            # Keep checking with the keys we have rather than refuse everything while it is down,
            # and ask again once the refresh floor has passed.
            self._fetched_at = self.clock() - self.max_age + self.refresh_floor
            return
        self._keys = keys
        self._fetched_at = self.clock()
        self.fetches += 1
        event(log, "teams_keys_fetched", logging.DEBUG, url=self.metadata_url, keys=len(keys))

    async def _json(self, url: str) -> Mapping[str, Any]:
        async with self._session().get(url) as resp:
            resp.raise_for_status()
            data = await resp.json(content_type=None)
        if not isinstance(data, Mapping):
            raise ValueError(f"{url} did not answer a JSON object")
        return data


def _parse_keys(jwks: Mapping[str, Any]) -> dict[str, tuple[jwt.PyJWK, frozenset[str]]]:
    keys: dict[str, tuple[jwt.PyJWK, frozenset[str]]] = {}
    for item in jwks.get("keys") or ():
        if not isinstance(item, Mapping) or not isinstance(item.get("kid"), str):
            continue
        try:
            key = jwt.PyJWK(dict(item), algorithm="RS256")
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
            continue  # not an RSA signing key: nothing we would accept a signature from
        endorsements = item.get("endorsements")
        names = (
            frozenset(e for e in endorsements if isinstance(e, str)) if isinstance(endorsements, list) else frozenset()
        )
        keys[item["kid"]] = (key, names)
    if not keys:
        raise ValueError("the key set holds no RSA signing key")
    return keys


class TeamsTokenValidator(JwtTokenValidator):
    """The SDK's validator with the keys of the configured metadata and every claim checked."""

    def __init__(self, configuration: AgentAuthConfiguration, keys: SigningKeys) -> None:
        super().__init__(configuration)
        self.keys = keys
        # Bot Framework tokens; a single-tenant bot also takes its tenant's Entra ID tokens (v1, v2).
        issuers = [BOT_FRAMEWORK_ISSUER]
        if configuration.TENANT_ID:
            issuers += [i for i in configuration.ISSUERS if i != BOT_FRAMEWORK_ISSUER]
        self.issuers = tuple(issuers)

    async def verify(self, token: str) -> Verified:
        kid = _kid(token)
        key, endorsements = await self.keys.get(kid)
        try:
            claims = jwt.decode(
                token,
                key=key,
                algorithms=["RS256"],
                issuer=self.issuers,
                leeway=CLOCK_SKEW_SECONDS,
                options={"require": ["exp", "iss", "aud"], "verify_aud": False},
            )
        except jwt.ExpiredSignatureError as exc:
            raise AuthError("expired token") from exc
        except jwt.ImmatureSignatureError as exc:
            raise AuthError("token not valid yet") from exc
        except jwt.InvalidIssuerError as exc:
            raise AuthError("wrong issuer") from exc
        except jwt.InvalidSignatureError as exc:
            raise AuthError("bad signature") from exc
        except jwt.MissingRequiredClaimError as exc:
            raise AuthError(f"token without {exc.claim}") from exc
        except jwt.PyJWTError as exc:
            raise AuthError(f"invalid token ({type(exc).__name__})") from exc
        # App ids are GUIDs, which Entra ID and the Azure portal write in either case.
        app_id = (self.configuration.CLIENT_ID or "").lower()
        audience = claims.get("aud")
        audiences = [audience] if isinstance(audience, str) else audience if isinstance(audience, list) else []
        if not app_id or not any(isinstance(a, str) and a.lower() == app_id for a in audiences):
            raise AuthError("wrong audience")
        return Verified(ClaimsIdentity(claims, True, "Bearer", security_token=token), endorsements)

    async def validate_token(self, token: str) -> ClaimsIdentity:
        """The SDK's entry point, with every check of `verify`."""
        return (await self.verify(token)).identity


def _kid(token: str) -> str:
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise AuthError("malformed token") from exc
    if header.get("alg") != "RS256":
        raise AuthError(f"token signed with {header.get('alg')!r}, not RS256")
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid:
        raise AuthError("token names no signing key")
    return kid


def bearer(header: str | None) -> str:
    """The token of an `Authorization: Bearer …` header; AuthError when there is none."""
    if not header:
        raise AuthError("no Authorization header")
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthError("Authorization is not a bearer token")
    return token.strip()


def _same_url(a: str, b: str) -> bool:
    return a.rstrip("/").lower() == b.rstrip("/").lower()


def check_activity(verified: Verified, activity: Mapping[str, Any]) -> None:
    """Tie a verified token to the activity it came with; AuthError when they disagree."""
    claims = verified.identity.claims
    service_url = activity.get("serviceUrl")
    claimed = claims.get(AuthenticationConstants.SERVICE_URL_CLAIM)
    if claimed is None and claims.get("iss") == BOT_FRAMEWORK_ISSUER:
        raise AuthError("token without serviceurl")
    if claimed is not None and not (isinstance(service_url, str) and _same_url(str(claimed), service_url)):
        raise AuthError("serviceUrl differs from the token's")
    channel = activity.get("channelId")
    if verified.endorsements and channel not in verified.endorsements:
        raise AuthError(f"signing key not endorsed for channel {channel!r}")
