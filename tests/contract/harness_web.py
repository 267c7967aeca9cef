"""Contract harness for the web channel: a WebSocket client plays the platform side."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Literal

import aiohttp
import pytest
from aiohttp import web

import channels
from channels.web.config import WebChannelConfig
from gateway.core.events import ConversationKind, ConversationRef, MessageReceived
from gateway.core.ports import Adapter, ChannelServices, HistoryItem
from tests.contract.harness import Sent, Where
from tests.fakes.serve import serve_loopback


async def _no_history(_ref: ConversationRef, _identity: str) -> list[HistoryItem]:
    return []


class WebHarness:
    platform = "web"
    supports_groups = False

    def __init__(self) -> None:
        self.inbound: asyncio.Queue[MessageReceived] = asyncio.Queue()
        self._app = web.Application()
        services = ChannelServices(http=self._app, authenticate=lambda _t: None, history=_no_history)
        self.adapter: Adapter = channels.create("web", WebChannelConfig(port=0), services)
        self._runner: web.AppRunner | None = None
        self._http: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None
        self._frames: list[Sent] = []
        self._seen_ids: set[str] = set()
        self._changed = asyncio.Condition()
        self.url = ""

    async def _sink(self, ev: MessageReceived) -> None:
        await self.inbound.put(ev)

    async def start(self) -> None:
        self._runner, self.url = await serve_loopback(self._app)
        await self.adapter.start(self._sink)
        self._http = aiohttp.ClientSession()
        await self._connect()

    async def _connect(self) -> None:
        assert self._http is not None
        self._ws = await self._http.ws_connect(self.url + "/ws")
        await self._ws.send_json({"type": "hello"})
        ready = await self._ws.receive_json(timeout=5)
        assert ready["type"] == "ready", ready
        self._reader = asyncio.create_task(self._read(self._ws))

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        async for msg in ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            frame = json.loads(msg.data)
            if frame.get("type") != "reply":
                continue
            async with self._changed:
                self._frames.append(Sent("local", None, frame["id"], frame["text"], edit=frame["id"] in self._seen_ids))
                self._seen_ids.add(frame["id"])
                self._changed.notify_all()

    async def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self._ws is not None:
            await self._ws.close()
        if self._http is not None:
            await self._http.close()
        await self.adapter.stop()
        if self._runner is not None:
            await self._runner.cleanup()

    async def inject(
        self, where: Where, text: str, *, sender: str = "1001", mention: bool = False, from_self: bool = False
    ) -> None:
        if where != "dm":
            pytest.skip("the web channel has only direct conversations")
        if from_self:
            return  # the page never echoes the assistant's own messages back
        assert self._ws is not None
        await self._ws.send_json({"type": "message", "text": text})

    def conversation(self, where: Where) -> ConversationRef:
        return ConversationRef("web", "local", None, ConversationKind.DM)

    async def sent(self) -> list[Sent]:
        return list(self._frames)

    async def wait_sent(self, n: int, timeout: float = 10) -> list[Sent]:
        async with asyncio.timeout(timeout):
            async with self._changed:
                await self._changed.wait_for(lambda: len(self._frames) >= n)
        return list(self._frames)

    def fail_next_send(self, kind: Literal["rate_limit", "timeout", "server"], retry_after: float = 1) -> None:
        pytest.skip("the web channel has no platform API that could fail a send")

    async def drop_connection(self) -> None:
        # The browser reconnects by itself; the adapter must accept the new socket.
        assert self._ws is not None and self._reader is not None
        await self._ws.close()
        await self._reader
        await self._connect()
