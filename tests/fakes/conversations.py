"""An in-memory ConversationState (gateway/core/ports.py) for adapter tests without a database."""

from __future__ import annotations

import copy
from typing import Any


class MemoryConversations:
    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], dict[str, Any]] = {}

    async def load(self, channel: str, conversation: str) -> dict[str, Any] | None:
        row = self.rows.get((channel, conversation))
        return copy.deepcopy(row) if row is not None else None

    async def save(self, channel: str, conversation: str, data: dict[str, Any]) -> None:
        self.rows[(channel, conversation)] = copy.deepcopy(data)
