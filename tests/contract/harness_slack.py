"""Contract-suite harness for Slack in Socket Mode: the real adapter against tests/fakes/slack.py.

Conversations: DMs come from one IM channel, groups from one public channel, and "thread" is a
reply inside a thread of that channel (started by someone else, so only a mention addresses the
bot). Injected messages are delivered as Events API envelopes over the socket; `inject` returns
once the adapter acked the envelope.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from aiohttp import web
from pydantic import SecretStr

import channels
from channels.slack.config import SlackChannelConfig
from gateway.core.events import ConversationKind, ConversationRef, MessageReceived
from gateway.core.ports import Adapter, ChannelServices
from tests.contract.harness import Sent, Where
from tests.fakes.slack import Behavior, FakeSlack, Hang, Posted, RateLimited, ServerError

CHANNEL = "slack"
DM_CHANNEL = "D0HARNESS"
GROUP_CHANNEL = "C0HARNESS"
THREAD_TS = "1690000000.000100"


async def _no_history(_conv: ConversationRef, _identity: str) -> list[Any]:
    return []


def _sent(p: Posted) -> Sent:
    return Sent(chat_id=p.channel, thread_id=p.thread_ts, message_id=p.ts, text=p.text, edit=p.edit)


class SlackHarness:
    platform = "slack"
    supports_groups = True

    def __init__(self) -> None:
        self.fake = FakeSlack()
        self.fake.bind()  # the port is reserved now so the adapter can be built before start()
        config = SlackChannelConfig(
            bot_token=SecretStr(self.fake.bot_token),
            app_token=SecretStr(self.fake.app_token),
            mode="socket",
            api_base_url=self.fake.api_base,
            request_timeout=1,
        )
        services = ChannelServices(
            http=web.Application(),
            authenticate=lambda _token: None,
            history=_no_history,
            commands=(("help", "list commands"), ("new", "start a new conversation")),
        )
        self.adapter: Adapter = channels.create(CHANNEL, config, services)
        self.inbound: asyncio.Queue[MessageReceived] = asyncio.Queue()

    async def _sink(self, ev: MessageReceived) -> None:
        await self.inbound.put(ev)

    async def start(self) -> None:
        await self.fake.start()
        await self.adapter.start(self._sink)

    async def stop(self) -> None:
        try:
            await self.adapter.stop()
        finally:
            await self.fake.stop()

    async def inject(
        self, where: Where, text: str, *, sender: str = "1001", mention: bool = False, from_self: bool = False
    ) -> None:
        if mention:
            text = f"<@{self.fake.bot_user_id}> {text}"
        chat = DM_CHANNEL if where == "dm" else GROUP_CHANNEL
        thread = THREAD_TS if where == "thread" else None
        event = self.fake.message(chat, text, user=sender, thread_ts=thread, from_bot=from_self)
        await self.fake.push_event(event)

    def conversation(self, where: Where) -> ConversationRef:
        if where == "dm":
            return ConversationRef(CHANNEL, DM_CHANNEL, None, ConversationKind.DM)
        thread = THREAD_TS if where == "thread" else None
        return ConversationRef(CHANNEL, GROUP_CHANNEL, thread, ConversationKind.GROUP)

    async def sent(self) -> list[Sent]:
        return [_sent(p) for p in self.fake.posted]

    async def wait_sent(self, n: int, timeout: float = 10) -> list[Sent]:
        return [_sent(p) for p in await self.fake.wait_posted(n, timeout)]

    def fail_next_send(self, kind: Literal["rate_limit", "timeout", "server"], retry_after: float = 1) -> None:
        behaviors: dict[str, Behavior] = {
            "rate_limit": RateLimited(retry_after),
            "timeout": Hang(),
            "server": ServerError(500),
        }
        behavior = behaviors[kind]
        self.fake.fail_next("chat.postMessage", behavior)

    async def drop_connection(self) -> None:
        await self.fake.drop_socket()
