"""Each platform conversation's own state, kept across restarts and shared by instances (the
ConversationState port of gateway/core/ports.py): a JSON object per (channel, conversation).

A channel writes the whole object each time; the newest write wins. Values are the platform's
addresses and times, never message text, and are capped so that no channel can grow a row without
bound by mistake."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

from gateway.core.events import utcnow
from memory.store.db import Database
from memory.store.schema import channel_conversations

MAX_BYTES = 8192  # one conversation's state, as JSON


def _save(conn: Connection, channel: str, conversation: str, data: dict[str, Any]) -> None:
    insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    now = utcnow()
    conn.execute(
        insert(channel_conversations)
        .values(channel=channel, conversation=conversation, data=data, updated_at=now)
        .on_conflict_do_update(
            index_elements=[channel_conversations.c.channel, channel_conversations.c.conversation],
            set_={"data": data, "updated_at": now},
        )
    )


def _load(conn: Connection, channel: str, conversation: str) -> dict[str, Any] | None:
    data = conn.execute(
        select(channel_conversations.c.data).where(
            channel_conversations.c.channel == channel, channel_conversations.c.conversation == conversation
        )
    ).scalar()
    return dict(data) if isinstance(data, dict) else None


class ConversationStateStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def load(self, channel: str, conversation: str) -> dict[str, Any] | None:
        return await self._db.read(_load, channel, conversation)

    async def save(self, channel: str, conversation: str, data: dict[str, Any]) -> None:
        size = len(json.dumps(data, separators=(",", ":")))
        if size > MAX_BYTES:
            raise ValueError(f"channel {channel!r}: a conversation's state is {size} bytes, over {MAX_BYTES}")
        await self._db.write(_save, channel, conversation, data)
