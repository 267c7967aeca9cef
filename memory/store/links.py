"""One-time link codes that join a person's identities, and DM pairing requests (DESIGN §3)."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Connection, Row

from gateway.core.events import utcnow
from memory.store.db import Database
from memory.store.schema import identities, link_codes, pairing_requests, sessions

# No 0/O, 1/I/L: codes are read aloud and typed on phones.
_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
LINK_TTL = timedelta(minutes=10)


def new_code(length: int = 8) -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(length))


def normalize_code(code: str) -> str:
    return "".join(ch for ch in code.upper() if ch.isalnum())


def _hash(code: str) -> str:
    return hashlib.sha256(normalize_code(code).encode()).hexdigest()


class LinkError(Exception):
    """A code that is unknown, used, expired, or would link an identity to itself."""


@dataclass(frozen=True, slots=True)
class PairingRequest:
    identity: str
    channel: str
    code: str
    display_name: str | None
    created_at: datetime
    approved_at: datetime | None
    chat_id: str | None = None  # the DM the request came from (None: made before it was kept)


def _create_link(conn: Connection, code_hash: str, user_id: str, identity: str) -> None:
    now = utcnow()
    conn.execute(
        insert(link_codes).values(
            code_hash=code_hash, user_id=user_id, created_by=identity, created_at=now, expires_at=now + LINK_TTL
        )
    )


def _redeem(conn: Connection, code_hash: str, identity: str) -> str:
    now = utcnow()
    row = conn.execute(select(link_codes).where(link_codes.c.code_hash == code_hash)).first()
    if row is None or row.used_at is not None or row.expires_at < now:
        raise LinkError("that code is unknown, already used or expired")
    if row.created_by == identity:
        raise LinkError("use the code from your other account, not the one that asked for it")
    used = conn.execute(
        update(link_codes)
        .where(link_codes.c.code_hash == row.code_hash, link_codes.c.used_at.is_(None))
        .values(used_at=now, used_by=identity)
    )
    if used.rowcount != 1:
        raise LinkError("that code is unknown, already used or expired")
    owner = conn.execute(select(identities.c.user_id).where(identities.c.identity == identity)).scalar()
    if owner is None:
        conn.execute(insert(identities).values(identity=identity, user_id=row.user_id, created_at=now))
    else:
        # A link is the person's own doing, not the config's: no longer a declared identity.
        conn.execute(
            update(identities).where(identities.c.identity == identity).values(user_id=row.user_id, declared=False)
        )
        left = conn.execute(select(identities.c.identity).where(identities.c.user_id == owner).limit(1)).first()
        if left is None and owner != row.user_id:
            # The user made for this account at first contact is merged away: its conversations
            # (and their archive) are the person's now, so they go on where they left off.
            conn.execute(update(sessions).where(sessions.c.user_id == owner).values(user_id=row.user_id))
    return str(row.user_id)


def _owner(conn: Connection, code_hash: str) -> str | None:
    row = conn.execute(
        select(link_codes.c.user_id, link_codes.c.used_at, link_codes.c.expires_at).where(
            link_codes.c.code_hash == code_hash
        )
    ).first()
    if row is None or row.used_at is not None or row.expires_at < utcnow():
        return None
    return str(row.user_id)


class LinkStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def owner(self, code: str) -> str | None:
        """The user who made `code`, while it is usable (known, unused, unexpired); nothing changes."""
        return await self._db.read(_owner, _hash(code))

    async def create(self, user_id: str, identity: str) -> str:
        code = new_code()
        await self._db.write(_create_link, _hash(code), user_id, identity)
        return code

    async def redeem(self, code: str, identity: str) -> str:
        """Move `identity` to the user who asked for `code`; returns that user's id."""
        return await self._db.write(_redeem, _hash(code), identity)


def _is_approved(conn: Connection, identity: str) -> bool:
    approved = conn.execute(
        select(pairing_requests.c.approved_at).where(pairing_requests.c.identity == identity)
    ).scalar()
    return approved is not None


def _request(conn: Connection, identity: str, channel: str, display_name: str | None, chat_id: str | None) -> str:
    row = conn.execute(
        select(pairing_requests.c.code, pairing_requests.c.chat_id).where(pairing_requests.c.identity == identity)
    ).first()
    if row is not None:
        if chat_id is not None and row.chat_id != chat_id:  # the newest DM is where they are told
            conn.execute(
                update(pairing_requests).where(pairing_requests.c.identity == identity).values(chat_id=chat_id)
            )
        return str(row.code)
    code = new_code(6)
    conn.execute(
        insert(pairing_requests).values(
            identity=identity,
            channel=channel,
            code=code,
            display_name=display_name,
            created_at=utcnow(),
            chat_id=chat_id,
        )
    )
    return code


def _approve(conn: Connection, code: str, approver: str) -> Row[Any] | None:
    row = conn.execute(select(pairing_requests).where(pairing_requests.c.code == normalize_code(code))).first()
    if row is not None and row.approved_at is None:
        conn.execute(
            update(pairing_requests)
            .where(pairing_requests.c.identity == row.identity)
            .values(approved_at=utcnow(), approved_by=approver)
        )
    return row


def _pending(conn: Connection) -> list[PairingRequest]:
    rows = conn.execute(
        select(pairing_requests).where(pairing_requests.c.approved_at.is_(None)).order_by(pairing_requests.c.created_at)
    ).all()
    return [PairingRequest(r.identity, r.channel, r.code, r.display_name, r.created_at, None) for r in rows]


def _unnotified(conn: Connection, channels: Collection[str], limit: int) -> list[PairingRequest]:
    rows = conn.execute(
        select(pairing_requests)
        .where(
            pairing_requests.c.approved_at.is_not(None),
            pairing_requests.c.notified_at.is_(None),
            pairing_requests.c.channel.in_(list(channels)),
        )
        .order_by(pairing_requests.c.approved_at)
        .limit(limit)
    ).all()
    return [
        PairingRequest(r.identity, r.channel, r.code, r.display_name, r.created_at, r.approved_at, r.chat_id)
        for r in rows
    ]


def _claim_notice(conn: Connection, identity: str, now: datetime) -> bool:
    claimed = conn.execute(
        update(pairing_requests)
        .where(
            pairing_requests.c.identity == identity,
            pairing_requests.c.approved_at.is_not(None),
            pairing_requests.c.notified_at.is_(None),
        )
        .values(notified_at=now)
    )
    return claimed.rowcount == 1


def _release_notice(conn: Connection, identity: str) -> None:
    conn.execute(update(pairing_requests).where(pairing_requests.c.identity == identity).values(notified_at=None))


class PairingStore:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._approved: set[str] = set()
        # Called after every approval made through this store (chat, console, API): the gateway
        # announces it at once instead of at its next sweep (gateway/pairing_notice.py).
        self.on_approve: Callable[[], None] | None = None

    async def is_approved(self, identity: str) -> bool:
        if identity in self._approved:
            return True
        approved = await self._db.read(_is_approved, identity)
        if approved:
            self._approved.add(identity)
        return approved

    async def request(self, identity: str, channel: str, display_name: str | None, chat_id: str | None = None) -> str:
        """The pending code for `identity`, creating one on first contact; `chat_id`: the DM it
        wrote from, where it is told once approved."""
        return await self._db.write(_request, identity, channel, display_name, chat_id)

    async def approve(self, code: str, approver: str) -> PairingRequest | None:
        row = await self._db.write(_approve, code, approver)
        if row is None:
            return None
        self._approved.add(row.identity)
        if self.on_approve is not None:
            self.on_approve()
        return PairingRequest(
            row.identity, row.channel, row.code, row.display_name, row.created_at, utcnow(), row.chat_id
        )

    async def pending(self) -> list[PairingRequest]:
        return await self._db.read(_pending)

    async def unnotified(self, channels: Collection[str], limit: int = 50) -> list[PairingRequest]:
        """Approved requests on `channels` whose person was not told yet, oldest approval first."""
        if not channels:
            return []
        return await self._db.read(_unnotified, channels, limit)

    async def claim_notice(self, identity: str, *, now: datetime | None = None) -> bool:
        """Mark `identity`'s approval as announced; True only for the one caller (of every instance
        sharing the database) that changed the row, who then sends the notice."""
        return bool(await self._db.write(_claim_notice, identity, now or utcnow()))

    async def release_notice(self, identity: str) -> None:
        """Give a claim back after a send that certainly failed: a later sweep tries again."""
        await self._db.write(_release_notice, identity)
