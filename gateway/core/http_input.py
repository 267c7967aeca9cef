"""Reading what an HTTP client sends: a body up to a cap, JSON whose nesting is bounded, and
whether it comes from this machine (its peer and the host it asked for).

Every JSON body and WebSocket frame the gateway takes from the network goes through `parse_json`.
Python's decoder recurses once per nested array or object, so a few kilobytes of `[[[[…` raise
RecursionError inside it (a 500, and a stack walk for the interpreter); the depth is counted first,
on the raw bytes, and such a document is refused as bad input before the decoder sees it.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
# Deeper than any request the gateway serves (an OpenAI request with tool schemas nests about ten
# levels), far below what the decoder's recursion can take.
MAX_JSON_DEPTH = 64

# A JSON string: its brackets are text, not nesting. Written as an unrolled loop, linear in its length.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_OPEN = frozenset(b"[{")
_CLOSE = frozenset(b"]}")
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")


class BodyTooLarge(Exception):
    def __init__(self, cap: int) -> None:
        super().__init__(f"the request body is larger than {cap // 1024:,} KiB")
        self.cap = cap


class BadJson(ValueError):
    """A body or frame that is not the JSON asked for; the message says why, in plain words."""


async def read_body(request: web.Request, cap: int) -> bytes:
    """The whole body, when it is at most `cap` bytes; BodyTooLarge otherwise. One read() returns
    what has arrived so far, so a body sent in pieces (chunked, or a slow link) is read to its end."""
    if request.content_length is not None and request.content_length > cap:
        raise BodyTooLarge(cap)
    raw = bytearray()
    while len(raw) <= cap:
        chunk = await request.content.read(cap + 1 - len(raw))
        if not chunk:
            break
        raw += chunk
    if len(raw) > cap:
        raise BodyTooLarge(cap)
    return bytes(raw)


def too_deep(raw: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether arrays and objects nest more than `limit` levels deep in the JSON text `raw`.
    Brackets inside strings do not count. For text that is not JSON the answer means little, but
    the decoder refuses such text anyway, and no prefix it accepts nests deeper than counted here."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False  # too few brackets to go past the limit: no need to walk them
    depth = 0
    for byte in _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS):
        if byte in _OPEN:
            depth += 1
            if depth > limit:
                return True
        elif byte in _CLOSE:
            depth -= 1
    return False


def parse_json(raw: bytes | str, *, max_depth: int = MAX_JSON_DEPTH, what: str = "the body") -> Any:
    """`raw` decoded as UTF-8 JSON, or BadJson with the reason: invalid UTF-8, malformed JSON, or
    nested deeper than `max_depth`."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if too_deep(data, max_depth):
        raise BadJson(f"{what} nests arrays or objects more than {max_depth} levels deep")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadJson(f"{what} is not valid UTF-8") from None
    try:
        return json.loads(text)
    except RecursionError:  # unreachable after the depth count; kept so a miscount is still a 400
        raise BadJson(f"{what} nests arrays or objects too deeply") from None
    except ValueError as exc:
        raise BadJson(f"{what} is not valid JSON: {exc.args[0] if exc.args else exc}") from None


def host_name(host: str | None) -> str | None:
    """The name in a Host header (`evil.example:8080` -> `evil.example`, `[::1]:80` -> `::1`),
    lower case without a trailing dot; None when there is none or it is not a host."""
    if not host:
        return None
    try:
        name = urlsplit(f"//{host.strip()}").hostname
    except ValueError:
        return None
    if not name:
        return None
    return name.rstrip(".") or None


def address_of(name: str) -> Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def is_loopback_name(name: str | None) -> bool:
    """`localhost`, a name under `.localhost` (browsers resolve those to loopback themselves), or a
    loopback address."""
    if not name:
        return False
    if name == "localhost" or name.endswith(".localhost"):
        return True
    address = address_of(name)
    return address is not None and address.is_loopback


def is_loopback_peer(request: web.Request) -> bool:
    address = address_of(request.remote or "")
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address is not None and address.is_loopback


def is_local_request(request: web.Request) -> bool:
    """From this machine, to this machine by a loopback name: both the peer and the Host say so.
    A rebinding page comes from a loopback peer too, but under its own name."""
    return is_loopback_peer(request) and is_loopback_name(host_name(request.headers.get("Host")))


async def read_capped(request: web.Request, cap: int) -> bytes | None:
    """The request's whole body, or None once it passes `cap` bytes (a declared Content-Length over
    it is refused unread; otherwise reading stops there). StreamReader.read(n) returns what is
    buffered, not n bytes: the body is read in chunks until its end."""
    if request.content_length is not None and request.content_length > cap:
        return None
    data = bytearray()
    async for chunk in request.content.iter_chunked(64 * 1024):
        data += chunk
        if len(data) > cap:
            return None
    return bytes(data)
