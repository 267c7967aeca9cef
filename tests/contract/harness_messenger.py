"""Contract-suite harness for Facebook Messenger: the real adapter against tests/fakes/messenger.py.

The adapter's webhook is served on loopback from the aiohttp application it was given (as the
gateway's web server serves it); the fake plays Meta, delivering signed webhook calls there and
answering the Send API. Messenger has only direct conversations: the group and thread cases skip.
The person the suite writes to wrote to the Page a minute before, so replies are inside Messenger's
24-hour window (the window itself is tested in tests/channels/test_messenger_adapter.py).
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import pytest
from aiohttp import web

import channels
from channels.messenger.config import MessengerChannelConfig
from gateway.core.events import ConversationKind, ConversationRef, MessageReceived
from gateway.core.ports import Adapter, ChannelServices
from tests.contract.harness import Sent, Where
from tests.fakes.conversations import MemoryConversations
from tests.fakes.messenger import PSID, Behavior, FakeMessenger, Hang, RateLimited, ServerError
from tests.fakes.messenger import Sent as FakeSent
from tests.fakes.serve import serve_loopback

CHANNEL = "messenger"


async def _no_history(_conv: ConversationRef, _identity: str) -> list[Any]:
    return []


def _sent(s: FakeSent) -> Sent:
    return Sent(chat_id=s.recipient, thread_id=None, message_id=s.mid, text=s.text)


class MessengerHarness:
    platform = "messenger"
    supports_groups = False

    def __init__(self) -> None:
        self.fake = FakeMessenger()
        self.app = web.Application()
        self.conversations = MemoryConversations()
        services = ChannelServices(
            http=self.app,
            authenticate=lambda _token, _peer: None,
            history=_no_history,
            conversations=self.conversations,
        )
        self._services = services
        self.adapter: Adapter = None  # type: ignore[assignment]  # made in start(), once the fake's URL is known
        self.inbound: asyncio.Queue[MessageReceived] = asyncio.Queue()
        self._runner: web.AppRunner | None = None
        self.webhook = ""

    async def _sink(self, ev: MessageReceived) -> None:
        await self.inbound.put(ev)

    async def start(self) -> None:
        await self.fake.start()
        config = MessengerChannelConfig.model_validate(self.fake.config(request_timeout=1))
        self.adapter = channels.create(CHANNEL, config, self._services)
        self._runner, url = await serve_loopback(self.app, shutdown_timeout=0.1)
        self.webhook = url + config.webhook_path
        wrote = self.fake.clock() - 60
        self.fake.last_inbound[PSID] = wrote
        await self.conversations.save(CHANNEL, PSID, {"last_inbound": wrote})
        await self.adapter.start(self._sink)

    async def stop(self) -> None:
        try:
            if self.adapter is not None:
                await self.adapter.stop()
            if self._runner is not None:
                await self._runner.cleanup()
        finally:
            await self.fake.stop()

    async def inject(
        self, where: Where, text: str, *, sender: str = "1001", mention: bool = False, from_self: bool = False
    ) -> None:
        if where != "dm":
            pytest.skip("Messenger has only direct conversations between a person and the Page")
        event = self.fake.echo(text) if from_self else self.fake.text(text)
        status = await self.fake.deliver(self.webhook, event)
        assert status == 200, status

    def conversation(self, where: Where) -> ConversationRef:
        return ConversationRef(CHANNEL, PSID, None, ConversationKind.DM)

    async def sent(self) -> list[Sent]:
        return [_sent(s) for s in self.fake.sent]

    async def wait_sent(self, n: int, timeout: float = 10) -> list[Sent]:
        return [_sent(s) for s in await self.fake.wait_sent(n, timeout)]

    def fail_next_send(self, kind: Literal["rate_limit", "timeout", "server"], retry_after: float = 1) -> None:
        behaviors: dict[str, Behavior] = {
            "rate_limit": RateLimited(retry_after),
            "timeout": Hang(),
            "server": ServerError(500),
        }
        self.fake.fail_next("send", behaviors[kind])

    async def drop_connection(self) -> None:
        # Meta calls the webhook with a request each time: there is no live connection to lose. The
        # nearest thing: every kept-alive connection, to the Graph API and to the webhook, is cut.
        await self.fake.drop_connections()
