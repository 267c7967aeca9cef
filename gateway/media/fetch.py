"""Downloading an attachment (docs/media.md): only from the platform's own hosts, streamed, and
stopped as soon as it passes its cap.

The hosts a channel may download from are origins (scheme, host and port) that the channel derives
from its configuration: the platform's file hosts, and the origin of its configured API base (a
proxy, a self-hosted Bot API server, or a local fake in tests). Nothing else is fetched, a redirect
included, and no URL is ever taken from a message's text. A URL may carry the bot's token
(Telegram's file URLs do), so errors and logs name the host, never the URL.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import aiohttp

MAX_REDIRECTS = 3
CHUNK = 64 * 1024
_DEFAULT_PORTS = {"http": 80, "https": 443}


class FetchRefused(Exception):
    """The URL is not on one of the channel's own hosts: nothing was requested from it."""

    def __init__(self, host: str) -> None:
        super().__init__(f"{host or 'that address'} is not one of the platform's hosts")
        self.host = host


class TooLarge(Exception):
    """The file is over its cap; reading stopped there (or never began: the size was declared)."""

    def __init__(self, cap: int) -> None:
        super().__init__(f"over {cap} bytes")
        self.cap = cap


class FetchFailed(Exception):
    """The platform did not hand the file over: `reason` in plain words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Fetched:
    data: bytes
    content_type: str | None  # what the server said it sent


def origin_of(url: str) -> str | None:
    """`scheme://host:port` of an http(s) URL, the port spelled out; None for anything else."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return f"{scheme}://{parts.hostname.lower()}:{port or _DEFAULT_PORTS[scheme]}"


def origins(urls: Iterable[str]) -> frozenset[str]:
    """The origins of `urls` (a channel's file hosts and API base), the unreadable ones left out."""
    return frozenset(o for o in (origin_of(u) for u in urls) if o is not None)


def allowed(url: str, allowed_origins: Iterable[str]) -> bool:
    origin = origin_of(url)
    return origin is not None and origin in origins(allowed_origins)


def _host(url: str) -> str:
    try:
        return urlsplit(url).hostname or ""
    except ValueError:
        return ""


async def download(
    session: aiohttp.ClientSession,
    url: str,
    headers: Mapping[str, str],
    *,
    allowed_origins: Iterable[str],
    cap: int,
    timeout: float,
) -> Fetched:
    """The file at `url`, at most `cap` bytes, within `timeout` seconds in all.

    Redirects are followed by hand, each checked against `allowed_origins` like the first URL; the
    credentials (`headers`) go only to the origin they were given for."""
    permitted = origins(allowed_origins)
    current, sent = url, dict(headers)
    try:
        async with asyncio.timeout(timeout):
            for _ in range(MAX_REDIRECTS + 1):
                if origin_of(current) not in permitted:
                    raise FetchRefused(_host(current))
                async with session.get(current, headers=sent, allow_redirects=False) as resp:
                    if resp.status in (301, 302, 303, 307, 308):
                        target = urljoin(current, resp.headers.get("Location", ""))
                        if origin_of(target) != origin_of(current):
                            sent = {k: v for k, v in sent.items() if k.lower() not in ("authorization", "cookie")}
                        current = target
                        continue
                    if resp.status != 200:
                        raise FetchFailed(f"the platform answered HTTP {resp.status}")
                    if resp.content_length is not None and resp.content_length > cap:
                        raise TooLarge(cap)
                    data = bytearray()
                    async for chunk in resp.content.iter_chunked(CHUNK):
                        data += chunk
                        if len(data) > cap:
                            raise TooLarge(cap)  # leaving the block closes the connection: no more is read
                    return Fetched(bytes(data), resp.content_type if "Content-Type" in resp.headers else None)
            raise FetchFailed("the platform redirected too many times")
    except TimeoutError:
        raise FetchFailed(f"the download took longer than {timeout:g} s") from None
    except aiohttp.ClientError as exc:
        raise FetchFailed(f"the download failed ({type(exc).__name__})") from None
