"""Users and their platform identities (DESIGN §3)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.events import utcnow
from memory.schema import identities, users


@dataclass(frozen=True, slots=True)
class User:
    id: str
    roles: tuple[str, ...]
    identities: tuple[str, ...] = ()

    def has_role(self, *roles: str) -> bool:
        return any(r in self.roles for r in roles)


def _user_id_for(identity: str) -> str:
    """A new user's id, derived from their first identity: `telegram:123` -> `telegram-123`."""
    return identity.replace(":", "-").replace("/", "-")[:128]


class IdentityStore:
    """Resolves identities to users. Declared users come from config; others are created on contact."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._by_identity: dict[str, str] = {}
        self._users: dict[str, User] = {}

    async def sync_declared(self, declared: Iterable[tuple[str, list[str], list[str]]]) -> None:
        """Apply config-declared users (id, roles, identities); config wins over what was stored."""
        now = utcnow()
        async with self._engine.begin() as conn:
            for uid, roles, idents in declared:
                row = (await conn.execute(select(users.c.id).where(users.c.id == uid))).first()
                if row is None:
                    await conn.execute(insert(users).values(id=uid, roles=list(roles), created_at=now))
                else:
                    await conn.execute(update(users).where(users.c.id == uid).values(roles=list(roles)))
                for ident in idents:
                    owner = (
                        await conn.execute(select(identities.c.user_id).where(identities.c.identity == ident))
                    ).scalar()
                    if owner is None:
                        await conn.execute(insert(identities).values(identity=ident, user_id=uid, created_at=now))
                    elif owner != uid:
                        await conn.execute(update(identities).where(identities.c.identity == ident).values(user_id=uid))
        self._by_identity.clear()
        self._users.clear()

    def forget(self, identity: str | None = None, user_ids: tuple[str, ...] = ()) -> None:
        """Drop cached lookups after identities moved between users (linking)."""
        if identity is not None:
            self._by_identity.pop(identity, None)
        for uid in user_ids:
            self._users.pop(uid, None)

    async def get_user(self, user_id: str) -> User | None:
        if user_id in self._users:
            return self._users[user_id]
        async with self._engine.connect() as conn:
            row = (await conn.execute(select(users).where(users.c.id == user_id))).first()
            if row is None:
                return None
            idents = (
                await conn.execute(
                    select(identities.c.identity)
                    .where(identities.c.user_id == user_id)
                    .order_by(identities.c.created_at, identities.c.identity)
                )
            ).scalars()
            user = User(id=row.id, roles=tuple(row.roles), identities=tuple(idents))
        self._users[user_id] = user
        return user

    async def resolve(self, identity: str, display_name: str | None = None) -> User:
        """The user behind an identity, creating a new `user` on first contact."""
        uid = self._by_identity.get(identity)
        if uid is None:
            async with self._engine.connect() as conn:
                uid = (
                    await conn.execute(select(identities.c.user_id).where(identities.c.identity == identity))
                ).scalar()
            if uid is None:
                uid = await self._create(identity, display_name)
            self._by_identity[identity] = uid
        user = await self.get_user(uid)
        assert user is not None
        return user

    async def _create(self, identity: str, display_name: str | None) -> str:
        base = _user_id_for(identity)
        now = utcnow()
        for attempt in range(100):
            uid = base if attempt == 0 else f"{base}-{attempt}"
            try:
                async with self._engine.begin() as conn:
                    exists = (await conn.execute(select(users.c.id).where(users.c.id == uid))).first()
                    if exists:
                        continue
                    await conn.execute(insert(users).values(id=uid, roles=["user"], created_at=now))
                    await conn.execute(
                        insert(identities).values(
                            identity=identity, user_id=uid, display_name=display_name, created_at=now
                        )
                    )
                return uid
            except IntegrityError:
                # Another task created this identity concurrently: use theirs.
                async with self._engine.connect() as conn:
                    owner = (
                        await conn.execute(select(identities.c.user_id).where(identities.c.identity == identity))
                    ).scalar()
                if owner:
                    return str(owner)
        raise RuntimeError(f"could not allocate a user id for {identity}")
