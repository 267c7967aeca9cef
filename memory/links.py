"""One-time link codes that join a person's identities, and DM pairing requests (DESIGN §3)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.events import utcnow
from memory.schema import identities, link_codes, pairing_requests

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


class LinkStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def create(self, user_id: str, identity: str) -> str:
        code = new_code()
        now = utcnow()
        expires = now + LINK_TTL
        async with self._engine.begin() as conn:
            await conn.execute(
                insert(link_codes).values(
                    code_hash=_hash(code), user_id=user_id, created_by=identity, created_at=now, expires_at=expires
                )
            )
        return code

    async def redeem(self, code: str, identity: str) -> str:
        """Move `identity` to the user who asked for `code`; returns that user's id."""
        now = utcnow()
        async with self._engine.begin() as conn:
            row = (await conn.execute(select(link_codes).where(link_codes.c.code_hash == _hash(code)))).first()
            if row is None or row.used_at is not None or row.expires_at < now:
                raise LinkError("that code is unknown, already used or expired")
            if row.created_by == identity:
                raise LinkError("use the code from your other account, not the one that asked for it")
            used = await conn.execute(
                update(link_codes)
                .where(link_codes.c.code_hash == row.code_hash, link_codes.c.used_at.is_(None))
                .values(used_at=now, used_by=identity)
            )
            if used.rowcount != 1:
                raise LinkError("that code is unknown, already used or expired")
            owner = (await conn.execute(select(identities.c.user_id).where(identities.c.identity == identity))).scalar()
            if owner is None:
                await conn.execute(insert(identities).values(identity=identity, user_id=row.user_id, created_at=now))
            else:
                await conn.execute(
                    update(identities).where(identities.c.identity == identity).values(user_id=row.user_id)
                )
        return str(row.user_id)


class PairingStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._approved: set[str] = set()

    async def is_approved(self, identity: str) -> bool:
        if identity in self._approved:
            return True
        async with self._engine.connect() as conn:
            approved = (
                await conn.execute(
                    select(pairing_requests.c.approved_at).where(pairing_requests.c.identity == identity)
                )
            ).scalar()
        if approved is not None:
            self._approved.add(identity)
        return approved is not None

    async def request(self, identity: str, channel: str, display_name: str | None) -> str:
        """The pending code for `identity`, creating one on first contact."""
        async with self._engine.begin() as conn:
            code = (
                await conn.execute(select(pairing_requests.c.code).where(pairing_requests.c.identity == identity))
            ).scalar()
            if code is not None:
                return str(code)
            code = new_code(6)
            await conn.execute(
                insert(pairing_requests).values(
                    identity=identity, channel=channel, code=code, display_name=display_name, created_at=utcnow()
                )
            )
        return code

    async def approve(self, code: str, approver: str) -> PairingRequest | None:
        async with self._engine.begin() as conn:
            row = (
                await conn.execute(select(pairing_requests).where(pairing_requests.c.code == normalize_code(code)))
            ).first()
            if row is None:
                return None
            if row.approved_at is None:
                await conn.execute(
                    update(pairing_requests)
                    .where(pairing_requests.c.identity == row.identity)
                    .values(approved_at=utcnow(), approved_by=approver)
                )
        self._approved.add(row.identity)
        return PairingRequest(row.identity, row.channel, row.code, row.display_name, row.created_at, utcnow())

    async def pending(self) -> list[PairingRequest]:
        async with self._engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(pairing_requests)
                    .where(pairing_requests.c.approved_at.is_(None))
                    .order_by(pairing_requests.c.created_at)
                )
            ).all()
        return [PairingRequest(r.identity, r.channel, r.code, r.display_name, r.created_at, None) for r in rows]
