"""What a formation job reads (memory/formation/admission.py says what it means): the session of an archived
range, its messages with each author identity resolved to its user and display name, and whether a
job already wrote its records. Reads only: identities are looked up, never created (an unknown
author is nobody's, so it owns nothing).

A speaker's name (DESIGN §6: attributed communication names the speaker) is their identity's display
name, which memory/store/identities.py keeps as the platform last gave it (declared and linked identities
included), cleaned for display."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from memory.formation.admission import ArchivedRange, Conversation, Source
from memory.formation.candidates import source_prefix
from memory.store.db import Database
from memory.store.identities import clean_name
from memory.store.schema import archived_messages, identities, memory_records, sessions


@dataclass(frozen=True, slots=True)
class Loaded:
    conversation: Conversation
    agent: str
    excluded: bool  # cleared with memory.session_memory.enabled false: kept out of memory for good
    sources: list[Source]


def _load(conn: Connection, rng: ArchivedRange) -> Loaded | None:
    session = conn.execute(
        select(
            sessions.c.key, sessions.c.agent, sessions.c.user_id, sessions.c.audience, sessions.c.memory_excluded
        ).where(sessions.c.id == rng.session_id)
    ).first()
    if session is None:
        return None
    rows = conn.execute(
        select(
            archived_messages.c.id,
            archived_messages.c.role,
            archived_messages.c.author,
            archived_messages.c.content,
            archived_messages.c.event_id,
        )
        .where(
            archived_messages.c.session_id == rng.session_id,
            archived_messages.c.id >= rng.first_id,
            archived_messages.c.id <= rng.last_id,
        )
        .order_by(archived_messages.c.id)
    ).all()
    authors = sorted({r.author for r in rows if r.author})
    known: dict[str, tuple[str, str | None]] = {}
    if authors:
        for ident in conn.execute(
            select(identities.c.identity, identities.c.user_id, identities.c.display_name).where(
                identities.c.identity.in_(authors)
            )
        ):
            known[ident.identity] = (ident.user_id, clean_name(ident.display_name))
    sources = []
    for r in rows:
        user_id, name = known.get(r.author, (None, None)) if r.author else (None, None)
        sources.append(Source(r.id, r.role, r.author, r.content, user_id, name, r.event_id))
    conversation = Conversation(session.key, session.audience, session.user_id)
    return Loaded(conversation, session.agent, bool(session.memory_excluded), sources)


def _written(conn: Connection, job_id: int) -> int:
    prefix = source_prefix(job_id)
    # Any status: a record the person already forgot must not come back on a re-run.
    return int(
        conn.execute(
            select(func.count())
            .select_from(memory_records)
            # A range, not LIKE: SQLite answers it from ix_memory_records_source.
            .where(memory_records.c.source >= prefix, memory_records.c.source < prefix[:-1] + chr(ord(prefix[-1]) + 1))
        ).scalar_one()
    )


class FormationSources:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def load(self, rng: ArchivedRange) -> Loaded | None:
        """The session and messages of `rng`; None when the session is gone."""
        return await self._db.read(_load, rng)

    async def written(self, job_id: int) -> int:
        """How many records job `job_id` has written (a run that died after writing, re-run)."""
        return await self._db.read(_written, job_id)
