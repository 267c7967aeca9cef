"""Recent group messages that were not addressed to the assistant: what was said in a group between
two turns, kept so the next turn there can see it (docs/channels.md, "Groups").

A row per message, per conversation (a thread or topic is a conversation of its own), pruned to the
newest `keep` in the same transaction that adds one. Text is redacted before it is stored, like
everything else (DESIGN §11), and capped. These rows are no session's messages: they are never
archived, flushed or read by formation, so they form no memory; they are read only to build the
prompt of a turn in the same conversation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

from memory.store.db import Database
from memory.store.schema import group_messages
from memory.trust.redact import redact

MAX_TEXT = 1000  # characters of one message kept: a bounded excerpt, not a transcript
MAX_NAME = 80


@dataclass(frozen=True, slots=True)
class GroupLine:
    speaker: str  # identity
    name: str | None
    text: str
    said_at: datetime


def _add(
    conn: Connection,
    conversation: str,
    event_id: str,
    speaker: str,
    name: str | None,
    text: str,
    said_at: datetime,
    keep: int,
) -> None:
    insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    # A resumed event is stored once: the event id is unique.
    conn.execute(
        insert(group_messages)
        .values(conversation=conversation, event_id=event_id, speaker=speaker, name=name, text=text, said_at=said_at)
        .on_conflict_do_nothing(index_elements=[group_messages.c.event_id])
    )
    newest = (
        select(group_messages.c.id)
        .where(group_messages.c.conversation == conversation)
        .order_by(group_messages.c.id.desc())
        .limit(keep)
    )
    floor = conn.execute(select(func.min(newest.subquery().c.id))).scalar()
    if floor is not None:
        conn.execute(
            delete(group_messages).where(group_messages.c.conversation == conversation, group_messages.c.id < floor)
        )


def _recent(conn: Connection, conversation: str, limit: int) -> list[GroupLine]:
    rows = conn.execute(
        select(group_messages.c.speaker, group_messages.c.name, group_messages.c.text, group_messages.c.said_at)
        .where(group_messages.c.conversation == conversation)
        .order_by(group_messages.c.id.desc())
        .limit(limit)
    ).all()
    return [GroupLine(r.speaker, r.name, r.text, r.said_at) for r in reversed(rows)]


def _clear(conn: Connection, conversation: str) -> int:
    return conn.execute(delete(group_messages).where(group_messages.c.conversation == conversation)).rowcount or 0


class GroupHistoryStore:
    def __init__(self, db: Database, secrets: Sequence[str] = ()) -> None:
        self._db = db
        self._secrets = secrets  # the gateway's configured secrets: a reload extends the list in place

    async def add(
        self,
        conversation: str,
        event_id: str,
        speaker: str,
        name: str | None,
        text: str,
        said_at: datetime,
        keep: int,
    ) -> None:
        """Keep one message of `conversation`, and only its newest `keep` (at least one)."""
        kept = redact(text, self._secrets)[:MAX_TEXT]
        shown = redact(name, self._secrets)[:MAX_NAME] if name else None
        await self._db.write(_add, conversation, event_id, speaker, shown, kept, said_at, max(1, keep))

    async def recent(self, conversation: str, limit: int) -> list[GroupLine]:
        """The newest `limit` messages of `conversation`, oldest first."""
        if limit <= 0:
            return []
        return await self._db.read(_recent, conversation, limit)

    async def clear(self, conversation: str) -> int:
        """Forget what `conversation` said (a /new there); how many messages were dropped."""
        return await self._db.write(_clear, conversation)
