"""Users and their platform identities (DESIGN §3)."""

from __future__ import annotations

import json
import logging
import time
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import String, cast, delete, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from gateway.core.events import utcnow
from gateway.core.logs import event
from memory.store.db import Database
from memory.store.schema import identities, users

log = logging.getLogger("clawgate.identities")


@dataclass(frozen=True, slots=True)
class User:
    id: str
    roles: tuple[str, ...]
    identities: tuple[str, ...] = ()

    def has_role(self, *roles: str) -> bool:
        return any(r in self.roles for r in roles)


def first_contact_id(identity: str) -> str:
    """A new user's id, derived from their first identity: `telegram:123` -> `telegram-123`."""
    return identity.replace(":", "-").replace("/", "-")[:128]


@dataclass(frozen=True, slots=True)
class DeclaredSync:
    """What applying config.yaml's users changed besides adding them: identities it gave someone
    before and no longer does (released: their next message comes from a new person), and users
    it no longer declares whose extra roles were taken back (user id → the roles they had)."""

    released: tuple[tuple[str, str], ...] = ()  # (identity, the user it belonged to)
    roles_reset: tuple[tuple[str, tuple[str, ...]], ...] = ()


PLAIN_ROLES = ["user"]  # what a person has without the config saying otherwise
MAX_NAME_CHARS = 64  # a display name heads every quoted line and record of its speaker: kept short


def clean_name(name: object) -> str | None:
    """A display name fit to show: one line, no control or format characters (a bidi override
    would reorder what follows it), at most MAX_NAME_CHARS; None when nothing is left."""
    if not isinstance(name, str):
        return None
    flat = " ".join("".join(c for c in name if c.isspace() or unicodedata.category(c) not in ("Cc", "Cf")).split())
    if len(flat) > MAX_NAME_CHARS:
        flat = flat[: MAX_NAME_CHARS - 1].rstrip() + "…"
    return flat or None


def _sync_declared(conn: Connection, declared: list[tuple[str, list[str], list[str]]]) -> DeclaredSync:
    now = utcnow()
    given: set[str] = set()
    for uid, roles, idents in declared:
        row = conn.execute(select(users.c.id).where(users.c.id == uid)).first()
        if row is None:
            conn.execute(insert(users).values(id=uid, roles=list(roles), created_at=now))
        else:
            conn.execute(update(users).where(users.c.id == uid).values(roles=list(roles)))
        for ident in idents:
            given.add(ident)
            owner = conn.execute(select(identities.c.user_id).where(identities.c.identity == ident)).scalar()
            if owner is None:
                conn.execute(insert(identities).values(identity=ident, user_id=uid, created_at=now, declared=True))
            else:
                conn.execute(
                    update(identities).where(identities.c.identity == ident).values(user_id=uid, declared=True)
                )
    # The config is the only source of roles and of declared identities: what it stopped saying
    # must not stay in force (an account taken out of an admin's list would otherwise stay admin).
    earlier = conn.execute(
        select(identities.c.identity, identities.c.user_id).where(identities.c.declared.is_(True))
    ).all()
    released = tuple((r.identity, r.user_id) for r in earlier if r.identity not in given)
    if released:
        conn.execute(delete(identities).where(identities.c.identity.in_([ident for ident, _ in released])))
    kept = {uid for uid, _, _ in declared}
    raised = conn.execute(
        select(users.c.id, users.c.roles).where(
            users.c.id.not_in(kept), cast(users.c.roles, String) != json.dumps(PLAIN_ROLES)
        )
    ).all()
    reset = tuple((r.id, tuple(r.roles)) for r in raised if list(r.roles) != PLAIN_ROLES)
    if reset:
        conn.execute(update(users).where(users.c.id.in_([uid for uid, _ in reset])).values(roles=PLAIN_ROLES))
    return DeclaredSync(released, reset)


def _load_user(conn: Connection, user_id: str) -> User | None:
    row = conn.execute(select(users).where(users.c.id == user_id)).first()
    if row is None:
        return None
    idents = conn.execute(
        select(identities.c.identity)
        .where(identities.c.user_id == user_id)
        .order_by(identities.c.created_at, identities.c.identity)
    ).scalars()
    return User(id=row.id, roles=tuple(row.roles), identities=tuple(idents))


def _users(conn: Connection, limit: int, offset: int) -> list[User]:
    rows = conn.execute(select(users).order_by(users.c.created_at, users.c.id).limit(limit).offset(offset)).all()
    ids = [r.id for r in rows]
    owned: dict[str, list[str]] = {uid: [] for uid in ids}
    if ids:
        found = conn.execute(
            select(identities.c.user_id, identities.c.identity)
            .where(identities.c.user_id.in_(ids))
            .order_by(identities.c.created_at, identities.c.identity)
        )
        for uid, ident in found:
            owned[uid].append(ident)
    return [User(id=r.id, roles=tuple(r.roles), identities=tuple(owned[r.id])) for r in rows]


def _display_names(conn: Connection) -> dict[str, str]:
    rows = conn.execute(
        select(identities.c.identity, identities.c.display_name).where(identities.c.display_name.is_not(None))
    )
    return {r.identity: r.display_name for r in rows if r.display_name.strip()}


def _owner(conn: Connection, identity: str) -> str | None:
    owner = conn.execute(select(identities.c.user_id).where(identities.c.identity == identity)).scalar()
    return None if owner is None else str(owner)


def _rename(conn: Connection, identity: str, display_name: str) -> None:
    conn.execute(
        update(identities)
        .where(identities.c.identity == identity, identities.c.display_name.is_distinct_from(display_name))
        .values(display_name=display_name)
    )


def _insert_user(conn: Connection, uid: str, identity: str, display_name: str | None) -> bool:
    """Create user `uid` owning `identity`; False when that user id is taken."""
    if conn.execute(select(users.c.id).where(users.c.id == uid)).first():
        return False
    now = utcnow()
    conn.execute(insert(users).values(id=uid, roles=PLAIN_ROLES, created_at=now))
    conn.execute(insert(identities).values(identity=identity, user_id=uid, display_name=display_name, created_at=now))
    return True


def _timezone(conn: Connection, user_id: str) -> str | None:
    zone = conn.execute(select(users.c.timezone).where(users.c.id == user_id)).scalar()
    return str(zone) if zone else None


def _set_timezone(conn: Connection, user_id: str, zone: str | None) -> None:
    conn.execute(update(users).where(users.c.id == user_id).values(timezone=zone))


class IdentityStore:
    """Resolves identities to users. Declared users come from config; others are created on contact."""

    # With other instances on the database (a link, a pairing approval or a role given there), what
    # this process cached is dropped this often, so it never lags by more than that.
    SHARED_CACHE_SECONDS = 5.0

    def __init__(self, db: Database) -> None:
        self._db = db
        self._by_identity: dict[str, str] = {}
        self._users: dict[str, User] = {}
        self._cached_since = time.monotonic()
        self._named: dict[str, str] = {}  # identity → the display name this process last stored for it

    def _expire(self) -> None:
        if self._db.shared and time.monotonic() - self._cached_since > self.SHARED_CACHE_SECONDS:
            self._by_identity.clear()
            self._users.clear()
            self._cached_since = time.monotonic()

    async def sync_declared(self, declared: Iterable[tuple[str, list[str], list[str]]]) -> DeclaredSync:
        """Apply config-declared users (id, roles, identities); config wins over what was stored,
        and what it no longer declares is taken back (see DeclaredSync), each change logged."""
        done = await self._db.write(_sync_declared, list(declared))
        self._by_identity.clear()
        self._users.clear()
        for identity, uid in done.released:
            event(log, "config_identity_released", logging.WARNING, identity=identity, user=uid)
        for uid, roles in done.roles_reset:
            event(log, "config_user_roles_reset", logging.WARNING, user=uid, roles=",".join(roles), now="user")
        return done

    def forget(self, identity: str | None = None, user_ids: tuple[str, ...] = ()) -> None:
        """Drop cached lookups after identities moved between users (linking)."""
        if identity is not None:
            self._by_identity.pop(identity, None)
        for uid in user_ids:
            self._users.pop(uid, None)

    async def get_user(self, user_id: str) -> User | None:
        self._expire()
        if user_id in self._users:
            return self._users[user_id]
        user = await self._db.read(_load_user, user_id)
        if user is not None:
            self._users[user_id] = user
        return user

    async def timezone(self, user_id: str) -> str | None:
        """The time zone the person set with /timezone, if they did."""
        return await self._db.read(_timezone, user_id)

    async def set_timezone(self, user_id: str, zone: str | None) -> None:
        await self._db.write(_set_timezone, user_id, zone)

    async def users(self, limit: int = 200, offset: int = 0) -> list[User]:
        """Users in the order they were first seen, each with their identities."""
        return await self._db.read(_users, max(1, limit), max(0, offset))

    async def display_names(self) -> dict[str, str]:
        """identity → the name its person goes by there, for the identities that gave one."""
        return await self._db.read(_display_names)

    async def resolve(self, identity: str, display_name: str | None = None) -> User:
        """The user behind an identity, creating a new `user` on first contact. The name the
        platform gives the sender now is kept as the identity's display name (identities declared in
        config or joined by /link have none until they speak, and people rename themselves): it is
        how recall and formation name who said something. One write per identity and name."""
        self._expire()
        uid = self._by_identity.get(identity)
        if uid is None:
            uid = await self._db.read(_owner, identity)
            if uid is None:
                uid = await self._create(identity, clean_name(display_name))
            self._by_identity[identity] = uid
        name = clean_name(display_name)
        if name and self._named.get(identity) != name:
            await self._db.write(_rename, identity, name)
            self._named[identity] = name
        user = await self.get_user(uid)
        assert user is not None
        return user

    async def _create(self, identity: str, display_name: str | None) -> str:
        base = first_contact_id(identity)
        for attempt in range(100):
            uid = base if attempt == 0 else f"{base}-{attempt}"
            try:
                if await self._db.write(_insert_user, uid, identity, display_name):
                    return uid
            except IntegrityError:
                # Another task created this identity concurrently: use theirs.
                owner = await self._db.read(_owner, identity)
                if owner:
                    return owner
        raise RuntimeError(f"could not allocate a user id for {identity}")
