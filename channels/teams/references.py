"""Conversation references: where each Teams conversation is answered (its Bot Connector service
URL, conversation id, tenant and the bot's account in it), kept in the database so that a restart,
another instance or a scheduled run can send there (gateway/core/ports.py, ConversationState).

An activity's reference is written when it is first seen or when it changed (Teams moves a tenant to
another service URL now and then), not on every message; this process remembers what it wrote.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from gateway.core.logs import event
from gateway.core.ports import ConversationState

log = logging.getLogger("clawgate.channels.teams")
MAX_REMEMBERED = 10_000  # references held in memory; older ones are read from the database again


@dataclass(frozen=True, slots=True)
class Reference:
    service_url: str
    conversation_id: str  # without a thread: a channel's replies add `;messageid=<root>`
    bot_id: str
    bot_name: str | None = None
    tenant_id: str | None = None

    @classmethod
    def of(cls, data: dict[str, Any]) -> Reference | None:
        service_url, conversation_id, bot_id = data.get("service_url"), data.get("conversation_id"), data.get("bot_id")
        if not (isinstance(service_url, str) and isinstance(conversation_id, str) and isinstance(bot_id, str)):
            return None
        name, tenant = data.get("bot_name"), data.get("tenant_id")
        return cls(
            service_url,
            conversation_id,
            bot_id,
            name if isinstance(name, str) else None,
            tenant if isinstance(tenant, str) else None,
        )


class References:
    def __init__(self, channel: str, store: ConversationState | None) -> None:
        self.channel = channel
        self.store = store
        self._known: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def _keep(self, key: str, data: dict[str, Any]) -> None:
        self._known[key] = data
        self._known.move_to_end(key)
        while len(self._known) > MAX_REMEMBERED:
            self._known.popitem(last=False)

    async def remember(self, key: str, data: dict[str, Any]) -> None:
        """Keep `data` for conversation `key`, writing it only when it differs from what we know."""
        if self._known.get(key) == data:
            return
        if self.store is not None:
            if key not in self._known and await self._load(key) == data:
                self._keep(key, data)  # another instance, or this one before a restart, wrote it
                return
            try:
                await self.store.save(self.channel, key, data)
            except Exception as exc:  # replies still work from memory; a restart would lose it
                event(log, "teams_reference_not_saved", logging.WARNING, channel=self.channel, error=type(exc).__name__)
        self._keep(key, data)
        event(
            log,
            "teams_reference_saved",
            logging.DEBUG,
            channel=self.channel,
            conversation_type=data.get("conversation_type"),
        )

    async def find(self, key: str) -> Reference | None:
        data = self._known.get(key)
        if data is None and self.store is not None:
            data = await self._load(key)
            if data is not None:
                self._keep(key, data)
        return Reference.of(data) if data is not None else None

    async def _load(self, key: str) -> dict[str, Any] | None:
        assert self.store is not None
        try:
            return await self.store.load(self.channel, key)
        except Exception as exc:
            event(log, "teams_reference_unreadable", logging.WARNING, channel=self.channel, error=type(exc).__name__)
            return None
