"""Contract-suite harness for Microsoft Teams: the real adapter (the Agents SDK's Activity model and
connector client) against tests/fakes/teams.py, its endpoint served on loopback.

Conversations: "dm" is a personal chat, "group" a group chat, "thread" a reply inside a thread of a
team's channel. The bot is installed in each at start (a signed conversationUpdate), as in Teams,
where a bot can write only where it was installed or spoken to: that gives the adapter the
conversation references it sends with. `inject` returns once the endpoint answered, which it does
after handing the message on; there is no live connection to drop (Bot Service posts each activity).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from aiohttp import web

import channels
from channels.teams.config import TeamsChannelConfig
from gateway.core.events import ConversationKind, ConversationRef, MessageReceived
from gateway.core.ports import Adapter, ChannelServices
from tests.contract.harness import Sent, Where
from tests.fakes.conversations import MemoryConversations
from tests.fakes.serve import serve_loopback
from tests.fakes.teams import CHANNEL, GROUP_CHAT, Behavior, FakeTeams, Hang, RateLimited, Status, channel_config
from tests.fakes.teams import Sent as TeamsSent

NAME = "teams"
DM_CHAT = "a:1personal-chat-harness"
THREAD = "1709999999001"


async def _no_history(_conv: ConversationRef, _identity: str) -> list[Any]:
    return []


def _sent(s: TeamsSent) -> Sent:
    return Sent(chat_id=s.chat_id, thread_id=s.thread_id, message_id=s.activity_id, text=s.text or "", edit=s.edit)


class TeamsHarness:
    platform = "teams"
    supports_groups = True

    def __init__(
        self,
        *,
        fake: FakeTeams | None = None,
        conversations: MemoryConversations | None = None,
        accept: Callable[[MessageReceived], Awaitable[bool]] | None = None,
        install: bool = True,
        **config: Any,
    ) -> None:
        """The channel tests use the same harness: `fake` shared between two adapters (two
        processes), `conversations` their shared store, `accept` the gateway's journal, `install`
        the bot in the three conversations at start, `config` more keys of the channel."""
        self.fake = fake or FakeTeams()
        self.fake.bind()
        self.config = TeamsChannelConfig.model_validate(channel_config(self.fake, request_timeout=1) | config)
        self.conversations = conversations if conversations is not None else MemoryConversations()
        self.install = install
        self.app = web.Application()
        services = ChannelServices(
            http=self.app,
            authenticate=lambda _token, _peer: None,
            history=_no_history,
            accept=accept,
            conversations=self.conversations,
        )
        self.adapter: Adapter = channels.create(NAME, self.config, services)
        self.inbound: asyncio.Queue[MessageReceived] = asyncio.Queue()
        self._runner: web.AppRunner | None = None
        self.endpoint = ""

    async def _sink(self, ev: MessageReceived) -> None:
        await self.inbound.put(ev)

    def _conversation_json(self, where: Where) -> dict[str, Any]:
        if where == "dm":
            return {"conversationType": "personal", "id": DM_CHAT}
        if where == "group":
            return {"isGroup": True, "conversationType": "groupChat", "id": GROUP_CHAT}
        return {"isGroup": True, "conversationType": "channel", "id": f"{CHANNEL};messageid={THREAD}"}

    async def start(self, *, fake: bool = True) -> None:
        """`fake`: start the fake too (False: another harness shares it, and started it)."""
        if fake:
            await self.fake.start()
        self._runner, url = await serve_loopback(self.app)
        self.endpoint = url + self.config.endpoint_path
        await self.adapter.start(self._sink)
        for where in ("dm", "group", "thread") if self.install else ():
            status, body = await self.fake.post(self.endpoint, self.fake.installed(self._conversation_json(where)))
            assert status == 200, body

    async def stop(self, *, fake: bool = True) -> None:
        try:
            await self.adapter.stop()
        finally:
            if self._runner is not None:
                await self._runner.cleanup()
            if fake:
                await self.fake.stop()

    async def inject(
        self, where: Where, text: str, *, sender: str = "1001", mention: bool = False, from_self: bool = False
    ) -> None:
        activity = self.fake.activity(
            self._conversation_json(where), text, user=sender, mention=mention, from_self=from_self
        )
        if where == "thread":
            activity["replyToId"] = THREAD
        status, body = await self.fake.post(self.endpoint, activity)
        assert status == 200, body

    def conversation(self, where: Where) -> ConversationRef:
        if where == "dm":
            return ConversationRef(NAME, DM_CHAT, None, ConversationKind.DM)
        if where == "group":
            return ConversationRef(NAME, GROUP_CHAT, None, ConversationKind.GROUP)
        return ConversationRef(NAME, CHANNEL, THREAD, ConversationKind.GROUP)

    async def sent(self) -> list[Sent]:
        return [_sent(s) for s in self.fake.messages]

    async def wait_sent(self, n: int, timeout: float = 10) -> list[Sent]:
        return [_sent(s) for s in await self.fake.wait_sent(n, timeout)]

    def fail_next_send(self, kind: Literal["rate_limit", "timeout", "server"], retry_after: float = 1) -> None:
        behaviors: dict[str, Behavior] = {
            "rate_limit": RateLimited(retry_after),
            "timeout": Hang(),
            "server": Status(500),
        }
        self.fake.fail_next("send", behaviors[kind])

    async def drop_connection(self) -> None:
        """Nothing to drop: Bot Service opens a request per activity."""
