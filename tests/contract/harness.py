"""What the adapter contract suite needs from each platform's test harness.

A harness owns one adapter (made through `channels.create`, exactly as the gateway makes it)
and the local protocol fake it talks to. Everything is event-driven: `inbound` receives what the
adapter hands to its sink; the fake's journal answers what was sent.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Literal, Protocol

from gateway.core.events import ConversationRef, MessageReceived
from gateway.core.ports import Adapter

Where = Literal["dm", "group", "thread"]


@dataclass(frozen=True)
class Sent:
    """One message the platform fake received from the adapter (sends and edits)."""

    chat_id: str
    thread_id: str | None
    message_id: str
    text: str
    edit: bool = False


class Harness(Protocol):
    platform: str  # "telegram" | "discord" | "slack" | "web"
    adapter: Adapter
    inbound: asyncio.Queue[MessageReceived]
    supports_groups: bool  # web has only DMs

    async def start(self) -> None:
        """Start the fake, then `adapter.start(sink)`; return once connected."""

    async def stop(self) -> None:
        """Stop the adapter (must return promptly), then the fake."""

    async def inject(
        self, where: Where, text: str, *, sender: str = "1001", mention: bool = False, from_self: bool = False
    ) -> None:
        """Make the fake deliver a message from `sender` (a platform user id) as the platform would.

        `mention` mentions the bot in a group; `from_self` makes the message the bot's own.
        """

    def conversation(self, where: Where) -> ConversationRef:
        """The conversation an injected message of that kind normalizes to."""

    async def sent(self) -> list[Sent]:
        """Messages and edits the fake received, oldest first."""

    async def wait_sent(self, n: int, timeout: float = 10) -> list[Sent]:
        """Wait until the fake received at least `n` sends/edits."""

    def fail_next_send(self, kind: Literal["rate_limit", "timeout", "server"], retry_after: float = 1) -> None:
        """The next send gets a 429 with retry_after, hangs past the client timeout, or a 500."""

    async def drop_connection(self) -> None:
        """Sever the live connection (poll or websocket); the adapter must reconnect by itself."""
