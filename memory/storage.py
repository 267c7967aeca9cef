"""One handle on the database: engine, migrations and the stores built on it."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.db import create_engine, migrate
from memory.identities import IdentityStore
from memory.journal import Journal
from memory.links import LinkStore, PairingStore
from memory.sessions import SessionStore


class Storage:
    def __init__(self, engine: AsyncEngine, history_messages: int = 40) -> None:
        self.engine = engine
        self.identities = IdentityStore(engine)
        self.sessions = SessionStore(engine, history_messages)
        self.journal = Journal(engine)
        self.links = LinkStore(engine)
        self.pairing = PairingStore(engine)

    @classmethod
    async def open(cls, url: str, history_messages: int = 40) -> Storage:
        engine = create_engine(url)
        await migrate(engine)
        return cls(engine, history_messages)

    async def ping(self) -> bool:
        try:
            async with self.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        except Exception:
            return False
        return True

    async def close(self) -> None:
        await self.engine.dispose()
