"""Contract-suite harness for Discord: the real discord.py adapter against tests/fakes/discord.py."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import aiohttp.web
from pydantic import SecretStr

import channels
from channels.discord.config import DiscordChannelConfig
from gateway.core.events import ConversationKind, ConversationRef, MessageReceived
from gateway.core.ports import Adapter, ChannelServices
from tests.contract.harness import Sent, Where
from tests.fakes.discord import (
    BOT_ID,
    BOT_USER,
    DM_CHANNEL_ID,
    TEXT_CHANNEL_ID,
    THREAD_ID,
    TOKEN,
    FakeDiscord,
    Outgoing,
    user,
)

NAME = "discord"


async def _no_history(*_args: Any) -> list[Any]:
    return []


class DiscordHarness:
    platform = "discord"
    supports_groups = True

    def __init__(self, request_timeout: float = 1.0) -> None:
        self.fake = FakeDiscord()
        self.inbound: asyncio.Queue[MessageReceived] = asyncio.Queue()
        self.request_timeout = request_timeout
        self.adapter: Adapter  # made in start(): its endpoints are the fake's, known once it listens

    async def start(self) -> None:
        await self.fake.start()
        config = DiscordChannelConfig(
            token=SecretStr(TOKEN),
            api_base_url=self.fake.api_base,
            gateway_url=self.fake.gateway_url,
            request_timeout=self.request_timeout,
        )
        services = ChannelServices(
            http=aiohttp.web.Application(),
            authenticate=lambda _token: None,
            history=_no_history,
            commands=(("help", "list commands"), ("new", "start a new conversation")),
        )
        self.adapter = channels.create(NAME, config, services)
        await self.adapter.start(self.inbound.put)

    async def stop(self) -> None:
        adapter = getattr(self, "adapter", None)
        if adapter is not None:
            await adapter.stop()
        await self.fake.stop()

    async def inject(
        self, where: Where, text: str, *, sender: str = "1001", mention: bool = False, from_self: bool = False
    ) -> None:
        author = BOT_USER if from_self else user(sender, f"user{sender}", global_name=f"User {sender}")
        mentions = [BOT_USER] if mention else []
        content = f"<@{BOT_ID}> {text}" if mention else text
        await self.fake.inject(self.fake.message(where, content, author=author, mentions=mentions))

    def conversation(self, where: Where) -> ConversationRef:
        if where == "dm":
            return ConversationRef(NAME, DM_CHANNEL_ID, None, ConversationKind.DM)
        if where == "group":
            return ConversationRef(NAME, TEXT_CHANNEL_ID, None, ConversationKind.GROUP)
        return ConversationRef(NAME, TEXT_CHANNEL_ID, THREAD_ID, ConversationKind.GROUP)

    async def sent(self) -> list[Sent]:
        return [_sent(o) for o in self.fake.outbox]

    async def wait_sent(self, n: int, timeout: float = 10) -> list[Sent]:
        return [_sent(o) for o in await self.fake.wait_outbox(n, timeout)]

    def fail_next_send(self, kind: Literal["rate_limit", "timeout", "server"], retry_after: float = 1) -> None:
        self.fake.fail_next(kind, route="send", retry_after=retry_after)

    async def drop_connection(self) -> None:
        await self.fake.drop_connection()


def _sent(o: Outgoing) -> Sent:
    if o.channel_id == THREAD_ID:
        return Sent(TEXT_CHANNEL_ID, THREAD_ID, o.message_id, o.content, o.edit)
    return Sent(o.channel_id, None, o.message_id, o.content, o.edit)
