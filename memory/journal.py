"""Inbound event journal and outbound idempotency records (DESIGN §2: dedupe and no loss)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.events import utcnow
from memory.schema import inbound_events, outbound


@dataclass(frozen=True, slots=True)
class PendingEvent:
    event_id: str
    channel: str
    payload: dict[str, Any]
    attempts: int


async def finish_in(
    conn: AsyncConnection, event_id: str, status: str = "done", sent: tuple[str, str | None] | None = None
) -> None:
    """Mark an inbound event finished and, when given, its reply (idempotency key, message id) sent,
    inside the caller's transaction."""
    await conn.execute(
        update(inbound_events).where(inbound_events.c.event_id == event_id).values(status=status, finished_at=utcnow())
    )
    if sent is not None:
        await conn.execute(
            update(outbound).where(outbound.c.idempotency_key == sent[0]).values(status="sent", message_id=sent[1])
        )


class Journal:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def record(self, event_id: str, channel: str, session_key: str, payload: dict[str, Any]) -> bool:
        """Journal an inbound event before it is processed. False when it was seen before."""
        try:
            async with self._engine.begin() as conn:
                await conn.execute(
                    insert(inbound_events).values(
                        event_id=event_id,
                        channel=channel,
                        session_key=session_key,
                        payload=payload,
                        status="received",
                        received_at=utcnow(),
                        attempts=0,
                    )
                )
        except IntegrityError:
            return False
        return True

    async def finish(self, event_id: str, status: str = "done", sent: tuple[str, str | None] | None = None) -> None:
        async with self._engine.begin() as conn:
            await finish_in(conn, event_id, status, sent)

    async def unfinished(self) -> list[PendingEvent]:
        async with self._engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(inbound_events)
                    .where(inbound_events.c.status == "received")
                    .order_by(inbound_events.c.received_at)
                )
            ).all()
        return [PendingEvent(r.event_id, r.channel, r.payload, r.attempts) for r in rows]

    async def bump_attempts(self, event_id: str) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                update(inbound_events)
                .where(inbound_events.c.event_id == event_id)
                .values(attempts=inbound_events.c.attempts + 1)
            )

    async def claim_send(self, key: str, channel: str) -> tuple[str, str | None] | None:
        """Reserve an outbound idempotency key before sending.

        None: the key is new, go ahead. Otherwise (status, platform message id) of the earlier
        attempt: `sending` (it may or may not have arrived), `streaming` (a placeholder with that id
        is on screen and may be edited), `sent`, or `failed`.
        """
        try:
            async with self._engine.begin() as conn:
                await conn.execute(
                    insert(outbound).values(idempotency_key=key, channel=channel, status="sending", created_at=utcnow())
                )
        except IntegrityError:
            async with self._engine.connect() as conn:
                row = (
                    await conn.execute(
                        select(outbound.c.status, outbound.c.message_id).where(outbound.c.idempotency_key == key)
                    )
                ).first()
            return (str(row.status), row.message_id) if row else ("sending", None)
        return None

    async def outbound_status(self, key: str) -> str | None:
        async with self._engine.connect() as conn:
            status = (await conn.execute(select(outbound.c.status).where(outbound.c.idempotency_key == key))).scalar()
        return None if status is None else str(status)

    async def streaming(self, key: str, message_id: str) -> None:
        """The placeholder of a streamed reply is on screen: a resumed turn edits it, never reposts."""
        async with self._engine.begin() as conn:
            await conn.execute(
                update(outbound)
                .where(outbound.c.idempotency_key == key)
                .values(status="streaming", message_id=message_id)
            )

    async def counts(self) -> dict[str, int]:
        from sqlalchemy import func

        async with self._engine.connect() as conn:
            rows = (
                await conn.execute(select(inbound_events.c.status, func.count()).group_by(inbound_events.c.status))
            ).all()
        return {str(s): int(n) for s, n in rows}
