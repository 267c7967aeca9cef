"""The few Graph API calls the channel makes, over aiohttp: `GET /me` (which Page the token is for) and
the Send API (`POST /me/messages`). Every request goes to `{api_base_url}/{graph_version}/...`, the
test seam. The Page token travels in the Authorization header, never in a URL (URLs end up in logs),
and is masked in anything Meta says back. No call is retried here: the gateway decides retries."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import aiohttp

from channels.messenger.errors import GraphError

_MASK = "***"


def wait_of(headers: Mapping[str, str]) -> float | None:
    """How long Meta asks to wait: Retry-After, else the longest `estimated_time_to_regain_access`
    (minutes) of X-Business-Use-Case-Usage, the header Page-token calls are limited by."""
    value = headers.get("Retry-After")
    if value is not None:
        try:
            return max(0.0, float(value))
        except ValueError:
            pass
    usage = headers.get("X-Business-Use-Case-Usage")
    if not usage:
        return None
    try:
        data = json.loads(usage)
    except ValueError:
        return None
    minutes = [
        item.get("estimated_time_to_regain_access")
        for items in (data.values() if isinstance(data, dict) else [])
        if isinstance(items, list)
        for item in items
        if isinstance(item, dict)
    ]
    found = [float(m) for m in minutes if isinstance(m, int | float) and not isinstance(m, bool) and m > 0]
    return max(found) * 60 if found else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class GraphClient:
    def __init__(self, base_url: str, version: str, token: str, timeout: float) -> None:
        self.base = f"{base_url.rstrip('/')}/{version}"
        self._token = token
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> GraphClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _masked(self, text: str) -> str:
        return text.replace(self._token, _MASK) if self._token else text

    async def call(self, method: str, path: str, *, body: dict[str, Any] | None = None) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self._token}"}
        async with self._http().request(method, f"{self.base}{path}", json=body, headers=headers) as resp:
            raw = await resp.read()
            try:
                data = json.loads(raw) if raw else {}
            except ValueError:
                data = None
            if resp.status == 200 and isinstance(data, dict):
                return data
            error = data.get("error") if isinstance(data, dict) else None
            error = error if isinstance(error, dict) else {}
            message = error.get("message") if isinstance(error.get("message"), str) else ""
            raise GraphError(
                resp.status,
                _int(error.get("code")),
                _int(error.get("error_subcode")),
                self._masked(str(message))[:300] or (resp.reason or "no error message"),
                wait_of(resp.headers),
            )

    async def me(self) -> dict[str, Any]:
        """The Page the token speaks for: its id and name."""
        return await self.call("GET", "/me?fields=id,name")

    async def send(self, body: dict[str, Any]) -> dict[str, Any]:
        """A Send API request (a message or a sender action): Meta's answer."""
        return await self.call("POST", "/me/messages", body=body)
