"""Where discord.py connects. Its endpoints are process-global, so every Discord channel shares them.

discord.py builds each REST URL from the class attribute `discord.http.Route.BASE`, and a plain
`Client` opens the gateway at the class attribute `DiscordWebSocket.DEFAULT_GATEWAY` (it never
asks the API; an `AutoShardedClient` with a shard count does the same). Both are set here for the
whole process: all Discord channels of one process must therefore use the same `api_base_url`
and `gateway_url`, which `claim` checks when a channel is created.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

import yarl
from discord.gateway import DiscordWebSocket
from discord.http import Route


@dataclass(frozen=True, slots=True)
class Endpoints:
    api_base_url: str
    gateway_url: str | None  # None: ask GET /gateway/bot after login


_claims: dict[str, Endpoints] = {}


def endpoints_for(api_base_url: str, gateway_url: str | None) -> Endpoints:
    api = api_base_url.rstrip("/")
    if urlsplit(api).scheme not in ("http", "https") or not urlsplit(api).netloc:
        raise ValueError(f"api_base_url must be an http(s) URL, got {api_base_url!r}")
    if gateway_url is not None and (
        urlsplit(gateway_url).scheme not in ("ws", "wss") or not urlsplit(gateway_url).netloc
    ):
        raise ValueError(f"gateway_url must be a ws(s) URL, got {gateway_url!r}")
    return Endpoints(api, gateway_url)


def claim(channel: str, wanted: Endpoints) -> None:
    """Reserve the process-wide endpoints for `channel`; another channel wanting others is an error."""
    for other, theirs in _claims.items():
        if other != channel and theirs != wanted:
            raise ValueError(
                f"discord channel {channel!r} wants api_base_url={wanted.api_base_url!r} "
                f"gateway_url={wanted.gateway_url!r}, but channel {other!r} in this process uses "
                f"api_base_url={theirs.api_base_url!r} gateway_url={theirs.gateway_url!r}: discord.py keeps "
                "one set of endpoints per process, so all Discord channels must configure the same ones"
            )
    _claims[channel] = wanted


def release(channel: str) -> None:
    _claims.pop(channel, None)


def use_api(wanted: Endpoints) -> None:
    Route.BASE = wanted.api_base_url


def use_gateway(url: str) -> None:
    DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)
