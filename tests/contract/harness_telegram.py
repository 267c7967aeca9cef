"""The Telegram adapter (polling mode, real python-telegram-bot) against the local Bot API fake."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from aiohttp import web

import channels
from channels.telegram.config import TelegramChannelConfig
from gateway.core.events import ConversationKind, ConversationRef, MessageReceived
from gateway.core.ports import Adapter, ChannelServices, HistoryItem
from tests.contract.harness import Sent, Where
from tests.fakes.telegram import FORUM_ID, GROUP_ID, TOPIC_ID, Fail, FakeTelegram, Hang, SentMessage

CHANNEL = "telegram-test"
DM_USER = "1001"  # conversation("dm") is the DM with the default sender


async def _no_history(_conv: ConversationRef, _identity: str) -> list[HistoryItem]:
    return []


def services() -> ChannelServices:
    return ChannelServices(
        http=web.Application(),
        authenticate=lambda _token: None,
        history=_no_history,
        commands=(("help", "list commands"), ("new", "start a new conversation")),
    )


class TelegramHarness:
    platform = "telegram"
    supports_groups = True

    def __init__(self, **config: Any) -> None:
        self.fake = FakeTelegram()
        self.inbound: asyncio.Queue[MessageReceived] = asyncio.Queue()
        self._config = config
        self.adapter: Adapter

    def config(self) -> TelegramChannelConfig:
        values: dict[str, Any] = {
            "token": self.fake.token,
            "api_base_url": self.fake.api_base_url,
            "request_timeout": 1,
            "poll_timeout": 1,
            "dm_policy": "open",
        }
        return TelegramChannelConfig(**{**values, **self._config})

    async def start(self) -> None:
        await self.fake.start()
        self.adapter = channels.create(CHANNEL, self.config(), services())
        await self.adapter.start(self.inbound.put)

    async def stop(self) -> None:
        try:
            await self.adapter.stop()
        finally:
            await self.fake.stop()

    async def inject(
        self, where: Where, text: str, *, sender: str = DM_USER, mention: bool = False, from_self: bool = False
    ) -> None:
        user = int(sender)
        if from_self:
            chat = {
                "dm": self.fake.private_chat(self.fake.user(user)),
                "group": self.fake.group_chat(GROUP_ID),
                "thread": self.fake.group_chat(FORUM_ID, "Forum", forum=True),
            }[where]
            await self.fake.own(chat, text, thread_id=TOPIC_ID if where == "thread" else None)
        elif where == "dm":
            await self.fake.dm(text, sender=user)
        elif where == "group":
            await self.fake.group(text, sender=user, mention=mention)
        else:
            await self.fake.topic(text, sender=user, mention=mention)

    def conversation(self, where: Where) -> ConversationRef:
        if where == "dm":
            return ConversationRef(CHANNEL, DM_USER, None, ConversationKind.DM)
        if where == "group":
            return ConversationRef(CHANNEL, str(GROUP_ID), None, ConversationKind.GROUP)
        return ConversationRef(CHANNEL, str(FORUM_ID), str(TOPIC_ID), ConversationKind.GROUP)

    @staticmethod
    def _sent(m: SentMessage) -> Sent:
        thread = str(m.thread_id) if m.thread_id is not None else None
        return Sent(str(m.chat_id), thread, str(m.message_id), m.text, m.edit)

    async def sent(self) -> list[Sent]:
        """Accepted sends and edits, oldest first; `text` is what the person sees (markup parsed)."""
        return [self._sent(m) for m in self.fake.sent]

    async def wait_sent(self, n: int, timeout: float = 10) -> list[Sent]:
        return [self._sent(m) for m in await self.fake.wait_sent(n, timeout)]

    def fail_next_send(self, kind: Literal["rate_limit", "timeout", "server"], retry_after: float = 1) -> None:
        if kind == "rate_limit":
            self.fake.fail_next("sendMessage", Fail(429, retry_after=retry_after))
        elif kind == "timeout":
            # Telegram posts the message, but the answer never comes: "maybe delivered".
            self.fake.fail_next("sendMessage", Hang())
        else:
            self.fake.fail_next("sendMessage", Fail(500))

    async def drop_connection(self) -> None:
        """Cut the pending long poll's connection; PTB's polling loop reconnects (after ~1 s backoff)."""
        await self.fake.drop_poll("close")
