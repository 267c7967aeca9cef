"""One handle on the database: migrations and the stores built on it."""

from __future__ import annotations

from collections.abc import Sequence

from memory.archive.store import ArchiveStore
from memory.records.revisions import RevisionLog
from memory.records.store import RecordStore
from memory.store.console_sessions import ConsoleSessionStore
from memory.store.db import Database
from memory.store.flushes import FlushStore
from memory.store.identities import IdentityStore
from memory.store.jobs import JobStore
from memory.store.links import LinkStore, PairingStore
from memory.store.platforms.conversations import ConversationStateStore
from memory.store.platforms.group_history import GroupHistoryStore
from memory.store.platforms.journal import Journal
from memory.store.schedules import ScheduleStore
from memory.store.sessions import SessionStore


class Storage:
    def __init__(self, db: Database, secrets: Sequence[str] = ()) -> None:
        """`secrets`: the gateway's configured secret values (one list a config reload extends in
        place), redacted verbatim from what is stored, beside the secret-like patterns."""
        self.db = db
        self.identities = IdentityStore(db)
        self.sessions = SessionStore(db, secrets)
        self.flushes = FlushStore(db)
        self.jobs = JobStore(db)
        self.archive = ArchiveStore(db)
        self.records = RecordStore(db)
        self.revisions = RevisionLog(db)  # across records: batches (merges), undo by revision id
        self.journal = Journal(db, secrets)
        self.links = LinkStore(db)
        self.pairing = PairingStore(db)
        self.console_sessions = ConsoleSessionStore(db)
        self.groups = GroupHistoryStore(db, secrets)  # unaddressed group messages: prompt context
        self.schedules = ScheduleStore(db, secrets)  # reminders and scheduled runs
        self.conversations = ConversationStateStore(db)  # a platform conversation's address, its window

    @classmethod
    async def open(cls, url: str, secrets: Sequence[str] = ()) -> Storage:
        """Open the database at `url`, bring its schema up to date and build the stores."""
        db = Database(url)
        try:
            await db.migrate()
        except BaseException:
            await db.close()
            raise
        return cls(db, secrets)

    async def ping(self) -> bool:
        return await self.db.ping()

    async def close(self) -> None:
        await self.db.close()
