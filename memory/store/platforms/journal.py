"""Inbound event journal and outbound idempotency records (DESIGN §2: dedupe and no loss).

Secrets at rest (DESIGN §11): an event's payload keeps the text as it came in while the event is
unfinished (`received`), because a crashed turn is resumed from it and the live turn's request
carries the original. When the event is finished, whatever the status (done, ignored, refused,
failed), its text is replaced by the redacted text in the same transaction: a finished event is
only ever read to answer a retry with the recorded reply (see `matches`), never to run it again.
Outbound records hold keys, statuses and platform ids, no text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Insert, bindparam, delete, func, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from gateway.core.events import utcnow
from memory.store.db import Database
from memory.store.schema import inbound_events, outbound
from memory.trust.redact import redact

_TICK = timedelta(microseconds=1)
# Every turn runs these; built once so a call only binds parameters (bindparam names must differ
# from column names).
_RECORD = insert(inbound_events)
_CLAIM = insert(outbound)
_FINISH = (
    update(inbound_events)
    .where(inbound_events.c.event_id == bindparam("b_event_id"))
    .values(status=bindparam("b_status"), finished_at=bindparam("b_at"))
)
_SENT = (
    update(outbound)
    .where(outbound.c.idempotency_key == bindparam("b_key"))
    .values(status="sent", message_id=bindparam("b_message_id"))
)
_PAYLOAD = select(inbound_events.c.payload).where(inbound_events.c.event_id == bindparam("b_event_id"))
_SET_PAYLOAD = (
    update(inbound_events)
    .where(inbound_events.c.event_id == bindparam("b_event_id"))
    .values(payload=bindparam("b_payload"))
)
_STREAMING = (
    update(outbound)
    .where(outbound.c.idempotency_key == bindparam("b_key"))
    .values(status="streaming", message_id=bindparam("b_message_id"))
)


@dataclass(frozen=True, slots=True)
class PendingEvent:
    event_id: str
    channel: str
    payload: dict[str, Any]
    attempts: int
    session_key: str  # the conversation's key, as journaled


def _pending(r: Any) -> PendingEvent:
    return PendingEvent(r.event_id, r.channel, r.payload, r.attempts, r.session_key)


def finish_in(
    conn: Connection,
    event_id: str,
    status: str = "done",
    sent: tuple[str, str | None] | None = None,
    scrub: Callable[[str], str] | None = None,
) -> None:
    """Mark an inbound event finished and, when given, its reply (idempotency key, message id) sent,
    inside the caller's transaction. `scrub` redacts the journaled text; None: the caller knows
    it has nothing to redact."""
    if scrub is not None:
        _scrub_in(conn, event_id, scrub)
    conn.execute(_FINISH, {"b_event_id": event_id, "b_status": status, "b_at": utcnow()})
    if sent is not None:
        conn.execute(_SENT, {"b_key": sent[0], "b_message_id": sent[1]})


def _scrub_in(conn: Connection, event_id: str, scrub: Callable[[str], str]) -> None:
    payload = conn.execute(_PAYLOAD, {"b_event_id": event_id}).scalar()
    if not isinstance(payload, dict):
        return
    text = payload.get("text")
    if not isinstance(text, str) or not text:
        return
    hidden = scrub(text)
    if hidden != text:
        conn.execute(_SET_PAYLOAD, {"b_event_id": event_id, "b_payload": {**payload, "text": hidden}})


def _merge(
    conn: Connection, leader: str, followers: Sequence[str], payload: dict[str, Any], scrub: Callable[[str], str]
) -> None:
    conn.execute(_SET_PAYLOAD, {"b_event_id": leader, "b_payload": payload})
    for event_id in followers:
        finish_in(conn, event_id, "merged", scrub=scrub)


def _insert(conn: Connection, statement: Insert, row: dict[str, Any]) -> None:
    conn.execute(statement, row)  # one statement: Database.write_statement


def _release(conn: Connection, key: str) -> None:
    conn.execute(delete(outbound).where(outbound.c.idempotency_key == key, outbound.c.status == "sending"))


def _outbound_row(conn: Connection, key: str) -> tuple[str, str | None] | None:
    row = conn.execute(
        select(outbound.c.status, outbound.c.message_id).where(outbound.c.idempotency_key == key)
    ).first()
    return None if row is None else (str(row.status), row.message_id)


def _journaled(conn: Connection, event_id: str) -> tuple[str, PendingEvent] | None:
    r = conn.execute(select(inbound_events).where(inbound_events.c.event_id == event_id)).first()
    return None if r is None else (str(r.status), _pending(r))


def _unfinished(conn: Connection) -> list[PendingEvent]:
    rows = conn.execute(
        select(inbound_events)
        .where(inbound_events.c.status == "received")
        .order_by(inbound_events.c.received_at, inbound_events.c.event_id)
    ).all()
    return [_pending(r) for r in rows]


def _unfinished_in(conn: Connection, session_key: str) -> list[PendingEvent]:
    rows = conn.execute(
        select(inbound_events)
        .where(inbound_events.c.status == "received", inbound_events.c.session_key == session_key)
        .order_by(inbound_events.c.received_at, inbound_events.c.event_id)
    ).all()
    return [_pending(r) for r in rows]


def _waiting_sessions(conn: Connection, before: datetime, channels: list[str]) -> list[str]:
    rows = conn.execute(
        select(inbound_events.c.session_key)
        .where(
            inbound_events.c.status == "received",
            inbound_events.c.received_at < before,
            inbound_events.c.channel.in_(channels),
        )
        .group_by(inbound_events.c.session_key)
        .order_by(func.min(inbound_events.c.received_at))
    ).all()
    return [str(r.session_key) for r in rows]


def _bump_attempts(conn: Connection, event_id: str) -> None:
    conn.execute(
        update(inbound_events)
        .where(inbound_events.c.event_id == event_id)
        .values(attempts=inbound_events.c.attempts + 1)
    )


def _outbound_status(conn: Connection, key: str) -> str | None:
    status = conn.execute(select(outbound.c.status).where(outbound.c.idempotency_key == key)).scalar()
    return None if status is None else str(status)


def _streaming(conn: Connection, key: str, message_id: str) -> None:
    conn.execute(_STREAMING, {"b_key": key, "b_message_id": message_id})


def _counts(conn: Connection) -> dict[str, int]:
    rows = conn.execute(select(inbound_events.c.status, func.count()).group_by(inbound_events.c.status)).all()
    return {str(s): int(n) for s, n in rows}


class Journal:
    def __init__(self, db: Database, secrets: Sequence[str] = ()) -> None:
        self._db = db
        self._secrets = secrets  # the gateway's configured secrets: a reload extends the list in place
        self._last_at = datetime.min.replace(tzinfo=UTC)

    def _arrival(self) -> datetime:
        """Now, but later than any event this process journaled before: events are resumed in
        `received_at` order, and two that arrive within one microsecond must keep theirs."""
        at = max(utcnow(), self._last_at + _TICK)
        self._last_at = at
        return at

    async def record(self, event_id: str, channel: str, session_key: str, payload: dict[str, Any]) -> bool:
        """Journal an inbound event before it is processed. False when it was seen before."""
        row = {
            "event_id": event_id,
            "channel": channel,
            "session_key": session_key,
            "payload": payload,
            "status": "received",
            "received_at": self._arrival(),
            "attempts": 0,
        }
        try:
            await self._db.write_statement(_insert, _RECORD, row)
        except IntegrityError:
            return False
        return True

    async def finish(self, event_id: str, status: str = "done", sent: tuple[str, str | None] | None = None) -> None:
        """Finish an event that left no message in a session (a command, a refusal, an apology):
        its journaled text is redacted here."""
        secrets = self._secrets
        await self._db.write(finish_in, event_id, status, sent, lambda text: redact(text, secrets))

    async def merge(self, leader: str, followers: Sequence[str], payload: dict[str, Any]) -> None:
        """One transaction: `leader` now stands for a burst of messages (`payload`, the burst as one
        event) and `followers`, the burst's other messages, are finished as `merged`. Before it every
        message of the burst is an unfinished event of its own; after it, the leader is the one."""
        secrets = self._secrets
        await self._db.write(_merge, leader, followers, payload, lambda text: redact(text, secrets))

    def matches(self, event: PendingEvent, text: str) -> bool:
        """Whether `text` is what was journaled for `event`: as it came in, or, the event being
        finished, redacted. A retry under the same idempotency key is told apart from a reuse of the
        key for another message this way (two texts that differ only in a secret count as one)."""
        stored = event.payload.get("text")
        return stored == text or stored == redact(text, self._secrets)

    async def journaled(self, event_id: str) -> tuple[str, PendingEvent] | None:
        """(status, the event) of one journaled event; None when it was never seen."""
        return await self._db.read(_journaled, event_id)

    async def unfinished(self) -> list[PendingEvent]:
        return await self._db.read(_unfinished)

    async def unfinished_in(self, session_key: str) -> list[PendingEvent]:
        """A session's unfinished events, oldest first (the order they must be answered in)."""
        return await self._db.read(_unfinished_in, session_key)

    async def waiting_sessions(self, before: datetime, channels: list[str]) -> list[str]:
        """Sessions of `channels` with an event received before `before` and still unfinished,
        the longest waiting first."""
        return await self._db.read(_waiting_sessions, before, channels)

    async def bump_attempts(self, event_id: str) -> None:
        await self._db.write(_bump_attempts, event_id)

    async def claim_send(self, key: str, channel: str) -> tuple[str, str | None] | None:
        """Reserve an outbound idempotency key before sending.

        None: the key is new, go ahead. Otherwise (status, platform message id) of the earlier
        attempt: `sending` (it may or may not have arrived), `streaming` (a placeholder with that id
        is on screen and may be edited), `sent`, or `failed`.
        """
        row = {"idempotency_key": key, "channel": channel, "status": "sending", "created_at": utcnow()}
        try:
            await self._db.write_statement(_insert, _CLAIM, row)
        except IntegrityError:
            return await self._db.read(_outbound_row, key) or ("sending", None)
        return None

    async def release(self, key: str) -> None:
        """Give back a claim whose send certainly failed (nothing reached the platform), so that a
        later try of the same work may send under the same key; a claim past `sending` is kept."""
        await self._db.write_statement(_release, key)

    async def sent_before(self, key: str) -> tuple[str, str | None] | None:
        """(status, platform message id) of an earlier attempt to send under `key`, without claiming it."""
        return await self._db.read(_outbound_row, key)

    async def outbound_status(self, key: str) -> str | None:
        return await self._db.read(_outbound_status, key)

    async def streaming(self, key: str, message_id: str) -> None:
        """The placeholder of a streamed reply is on screen: a resumed turn edits it, never reposts."""
        await self._db.write(_streaming, key, message_id)

    async def counts(self) -> dict[str, int]:
        return await self._db.read(_counts)
