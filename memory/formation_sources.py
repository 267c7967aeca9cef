"""What a formation job reads (memory/formation.py says what it means): the session of an archived
range, its messages with each author identity resolved to its user and display name, and whether a
job already wrote its records. Reads only: identities are looked up, never created (an unknown
author is nobody's, so it owns nothing).

A speaker's name (DESIGN §6: attributed communication names the speaker) is the one their message
arrived with: the journaled inbound event of each message carries the sender's display name as the
platform gave it then. The identity's own display name is only the name of its first contact, and
config-declared or linked identities have none, so it is the fallback for messages without an event
(the web API's, or ones whose event is gone)."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from memory.db import Database
from memory.formation import ArchivedRange, Conversation, Source
from memory.formation_candidates import source_prefix
from memory.schema import archived_messages, identities, inbound_events, memory_records, sessions

MAX_NAME_CHARS = 64  # a display name heads every line and record of its speaker: kept short
_IN_CHUNK = 500  # ids per IN (…): a long range must not pass a database's parameter limit


@dataclass(frozen=True, slots=True)
class Loaded:
    conversation: Conversation
    agent: str
    excluded: bool  # cleared with memory.session_memory.enabled false: kept out of memory for good
    sources: list[Source]


def clean_name(name: object) -> str | None:
    """A display name fit to show: one line, no control or format characters (a bidi override
    would reorder what follows it), at most MAX_NAME_CHARS; None when nothing is left."""
    if not isinstance(name, str):
        return None
    flat = " ".join("".join(c for c in name if c.isspace() or unicodedata.category(c) not in ("Cc", "Cf")).split())
    if len(flat) > MAX_NAME_CHARS:
        flat = flat[: MAX_NAME_CHARS - 1].rstrip() + "…"
    return flat or None


def _event_names(conn: Connection, said: Sequence[tuple[str | None, str | None]]) -> dict[str, str]:
    """event id → the name its sender went by, for the (event id, author) pairs of `said` whose
    event was sent by that author (a name is never taken from an event of someone else)."""
    authors = {event_id: author for event_id, author in said if event_id and author}
    names: dict[str, str] = {}
    ids = sorted(authors)
    for at in range(0, len(ids), _IN_CHUNK):
        found = conn.execute(
            select(
                inbound_events.c.event_id,
                inbound_events.c.payload["sender"].as_string().label("sender"),
                inbound_events.c.payload["sender_name"].as_string().label("name"),
            ).where(inbound_events.c.event_id.in_(ids[at : at + _IN_CHUNK]))
        )
        for event_id, sender, name in found:
            cleaned = clean_name(name)
            if cleaned and sender == authors[event_id]:
                names[event_id] = cleaned
    return names


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
    said_as = _event_names(conn, [(r.event_id, r.author) for r in rows])
    sources = []
    for r in rows:
        user_id, name = known.get(r.author, (None, None)) if r.author else (None, None)
        name = said_as.get(r.event_id, name) if r.event_id else name
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
