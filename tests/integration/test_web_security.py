"""The chat WebSocket refuses cross-site origins (a page on another site must not drive a local gateway)."""

from __future__ import annotations

import aiohttp
import pytest

from gateway.app import Gateway


async def test_ws_refuses_foreign_origin(gateway: Gateway, http: aiohttp.ClientSession) -> None:
    with pytest.raises(aiohttp.WSServerHandshakeError) as info:
        await http.ws_connect(f"{gateway.url}/ws", origin="http://evil.example")
    assert info.value.status == 403


async def test_ws_accepts_same_origin(gateway: Gateway, http: aiohttp.ClientSession) -> None:
    async with http.ws_connect(f"{gateway.url}/ws", origin=gateway.url) as ws:
        await ws.send_json({"type": "hello"})
        frame = await ws.receive_json(timeout=10)
    assert frame["type"] == "ready"
    assert frame["user"] == "local"
