"""Reminders and scheduled runs (docs/schedules.md): a row per reminder a person set and per
`schedules:` entry of the config, with where it answers and when it is next due.

A due time moves forward only by compare-and-set (`advance` names the due time it fired): two
instances that both finish the same run cannot move it twice. What a reminder says is redacted
before it is stored, like everything else (DESIGN §11)."""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.engine import Connection, Row

from gateway.core.events import utcnow
from memory.store.db import Database
from memory.store.schema import schedules, sessions
from memory.trust.redact import redact

ACTIVE, PAUSED, DONE, CANCELLED, REMOVED = "active", "paused", "done", "cancelled", "removed"
REMINDER, SCHEDULE = "reminder", "schedule"
MAX_TEXT = 4000


@dataclass(frozen=True, slots=True)
class Schedule:
    id: int
    kind: str
    name: str | None
    owner: str | None
    channel: str
    chat_id: str
    thread_id: str | None
    conv_kind: str
    text: str
    mode: str  # "message": the text is sent as it is; "agent": the text is a prompt for an agent run
    agent: str | None
    cron: str | None
    every_seconds: int | None
    zone: str
    first_due: datetime
    next_due: datetime | None
    until: datetime | None
    status: str
    runs: int
    last_run_at: datetime | None
    last_outcome: str | None
    last_error: str | None
    source: str | None
    created_at: datetime

    def to_json(self) -> dict[str, Any]:
        """What `clawgate schedules list --json` and the console's JSON API show of it."""

        def iso(at: datetime | None) -> str | None:
            return at.isoformat() if at is not None else None

        return {
            "id": self.id,
            "kind": self.kind,
            "name": self.name,
            "owner": self.owner,
            "status": self.status,
            "rule": self.cron or (f"every {self.every_seconds}s" if self.every_seconds else "once"),
            "zone": self.zone,
            "channel": self.channel,
            "target": {"channel": self.channel, "conversation": self.chat_id or None, "thread": self.thread_id},
            "mode": self.mode,
            "next_due": iso(self.next_due),
            "last_run_at": iso(self.last_run_at),
            "last_outcome": self.last_outcome,
            "last_error": self.last_error,
            "runs": self.runs,
        }

    @property
    def label(self) -> str:
        """How logs, the CLI and people name it: a config schedule by its name, a reminder by its id."""
        return self.name if self.name is not None else f"reminder {self.id}"


def _schedule(row: Row[Any]) -> Schedule:
    m = row._mapping
    return Schedule(**{f: m[f] for f in Schedule.__dataclass_fields__})


def _add(conn: Connection, values: Mapping[str, Any]) -> Schedule:
    new_id = conn.execute(insert(schedules).values(**values)).inserted_primary_key[0]  # type: ignore[index]
    return _schedule(conn.execute(select(schedules).where(schedules.c.id == new_id)).one())


def _get(conn: Connection, where: Any) -> Schedule | None:
    row = conn.execute(select(schedules).where(where)).first()
    return _schedule(row) if row is not None else None


def _list(conn: Connection, filters: Sequence[Any]) -> builtins.list[Schedule]:
    rows = conn.execute(select(schedules).where(*filters).order_by(schedules.c.id)).all()
    return [_schedule(r) for r in rows]


def _update(conn: Connection, where: Sequence[Any], values: Mapping[str, Any]) -> bool:
    return bool(conn.execute(update(schedules).where(*where).values(**values)).rowcount)


def _count(conn: Connection, owner: str) -> int:
    return int(
        conn.execute(
            select(func.count()).where(schedules.c.owner == owner, schedules.c.status.in_((ACTIVE, PAUSED)))
        ).scalar()
        or 0
    )


def _dm_chat(conn: Connection, channel: str, user_id: str) -> str | None:
    prefix = f"{channel}:dm:"
    key = conn.execute(
        select(sessions.c.key)
        .where(sessions.c.user_id == user_id, sessions.c.key.startswith(prefix, autoescape=True))
        # The DM itself, not a thread in it: the shortest of its keys (a chat id may hold colons).
        .order_by(func.length(sessions.c.key), sessions.c.id.desc())
        .limit(1)
    ).scalar()
    return str(key)[len(prefix) :] if key is not None else None


class ScheduleStore:
    def __init__(self, db: Database, secrets: Sequence[str] = ()) -> None:
        self._db = db
        self._secrets = secrets  # the gateway's configured secrets: a reload extends the list in place

    async def add(self, *, now: datetime | None = None, **values: Any) -> Schedule:
        """A new reminder or schedule (the columns of `schedules` as keywords), active."""
        now = now or utcnow()
        values["text"] = redact(values["text"], self._secrets)[:MAX_TEXT]
        row = {"status": ACTIVE, "runs": 0, "created_at": now, "updated_at": now, **values}
        return await self._db.write(_add, row)

    async def get(self, schedule_id: int) -> Schedule | None:
        return await self._db.read(_get, schedules.c.id == schedule_id)

    async def named(self, name: str) -> Schedule | None:
        return await self._db.read(_get, schedules.c.name == name)

    async def list(
        self, *, owner: str | None = None, kind: str | None = None, statuses: Sequence[str] = (ACTIVE, PAUSED)
    ) -> builtins.list[Schedule]:
        filters: list[Any] = [schedules.c.status.in_(tuple(statuses))] if statuses else []
        if owner is not None:
            filters.append(schedules.c.owner == owner)
        if kind is not None:
            filters.append(schedules.c.kind == kind)
        return await self._db.read(_list, filters)

    async def due_by(self, at: datetime) -> builtins.list[Schedule]:
        """Active schedules whose next due time is at or before `at` (missed ones, at a start)."""
        return await self._db.read(_list, [schedules.c.status == ACTIVE, schedules.c.next_due <= at])

    async def dm_chat(self, channel: str, user_id: str) -> str | None:
        """The chat id of the newest DM session `user_id` has on `channel` (their DM with the bot
        there: platforms name it by their own id, known once the person wrote), or None."""
        return await self._db.read(_dm_chat, channel, user_id)

    async def count_active(self, owner: str) -> int:
        return await self._db.read(_count, owner)

    async def advance(
        self,
        schedule_id: int,
        due: datetime,
        next_due: datetime | None,
        outcome: str,
        error: str | None = None,
        *,
        now: datetime | None = None,
    ) -> bool:
        """Record the run of `due` and move on to `next_due` (None: nothing left, the row is done).
        False when `due` is no longer its next due time: another run moved it, or it was edited."""
        now = now or utcnow()
        values: dict[str, Any] = {
            "next_due": next_due,
            "last_run_at": now,
            "last_outcome": outcome,
            "last_error": redact(error, self._secrets)[:512] if error else None,
            "runs": schedules.c.runs + 1,
            "updated_at": now,
        }
        if next_due is None:
            values["status"] = DONE
        where = [schedules.c.id == schedule_id, schedules.c.next_due == due]
        return await self._db.write(_update, where, values)

    async def failed(self, schedule_id: int, error: str, *, now: datetime | None = None) -> None:
        """A run that failed for good (dead-lettered): shown by `clawgate status` and the console."""
        now = now or utcnow()
        values = {"last_outcome": "dead", "last_error": redact(error, self._secrets)[:512], "updated_at": now}
        await self._db.write(_update, [schedules.c.id == schedule_id], values)

    async def set_status(
        self,
        schedule_id: int,
        status: str,
        *,
        owner: str | None = None,
        next_due: datetime | None = None,
        now: datetime | None = None,
    ) -> bool:
        """Pause, resume (with its `next_due`), cancel or remove; with `owner`, only that person's."""
        where: list[Any] = [schedules.c.id == schedule_id, schedules.c.status.in_((ACTIVE, PAUSED))]
        if owner is not None:
            where.append(schedules.c.owner == owner)
        values: dict[str, Any] = {"status": status, "updated_at": now or utcnow()}
        if status == ACTIVE:
            values["next_due"] = next_due
        return await self._db.write(_update, where, values)

    async def update(self, schedule_id: int, *, now: datetime | None = None, **values: Any) -> bool:
        """Change a config schedule to what the config says now (its rule, prompt, target)."""
        if "text" in values:
            values["text"] = redact(values["text"], self._secrets)[:MAX_TEXT]
        return await self._db.write(_update, [schedules.c.id == schedule_id], {**values, "updated_at": now or utcnow()})
