"""The daily merge (DESIGN §8): learned notes that say the same thing become one record.

Job `sys-memory-consolidate`, kind `merge`, queued once a day at `memory.merge.at` (03:00 local by
default). Its dedupe key names the local day, so two gateway instances, or a restart, queue it once;
a gateway that starts after the day's time, on a day without a merge yet, queues it then.

A merge group (memory/records/merge.py) is written as one batch: the survivor (the fullest note, which keeps
its text) gets a "merge" revision naming the notes it absorbed, and each of those becomes superseded
by it; every revision of the group shares one batch id, so `clawgate memory revisions undo ID` undoes
the whole merge. Each group is checked against the revision it was read at: a note that changed in
the meantime leaves its group unmerged (tried again tomorrow). Running the job twice merges nothing
twice: superseded notes are no longer active.

Logs: memory_merge_queued (day), memory_merged (groups, records, skipped).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from gateway.config.model import Config
from gateway.core.events import utcnow
from gateway.core.logs import event
from memory.records.merge import LEARNED, MergeGroup, merge_groups
from memory.records.model import RecordStatus
from memory.records.revisions import Change, RevisionLog
from memory.records.store import RecordError, RecordStore
from memory.store.jobs import Job

log = logging.getLogger("clawgate.merge")

MERGE_JOB = "merge"
MERGE_NAME = "sys-memory-consolidate"
MERGE_KEY = "sys:merge"
ACTOR = "system"
MAX_NOTES = 20_000  # learned notes looked at per run, oldest first
BATCHES_KEPT = 20  # batch ids kept in the job's result

Enqueue = Callable[..., Awaitable[int | None]]


def merge_due(now: datetime, at: time, zone: ZoneInfo) -> tuple[date | None, datetime]:
    """(the local day whose merge is due at `now`, None before the day's time; when to look next, UTC).
    Pure: the scheduler's clock is injected."""
    local = now.astimezone(zone)
    today_at = datetime.combine(local.date(), at, tzinfo=zone)
    if local.replace(tzinfo=None) >= today_at.replace(tzinfo=None):
        tomorrow = datetime.combine(local.date() + timedelta(days=1), at, tzinfo=zone)
        return local.date(), tomorrow.astimezone(UTC)
    return None, today_at.astimezone(UTC)


def dedupe_key(day: date) -> str:
    return f"{MERGE_NAME}:{day.isoformat()}"


class MergeScheduler:
    """Queues the day's merge job; `tick` is one look at the clock, `run` loops over ticks."""

    def __init__(self, enqueue: Enqueue, at: time, zone: ZoneInfo, clock: Callable[[], datetime] = utcnow) -> None:
        self.enqueue = enqueue
        self.at = at
        self.zone = zone
        self.clock = clock

    async def tick(self) -> datetime:
        """Queue the merge when it is due (once per local day, whoever asks); when to look again."""
        day, next_look = merge_due(self.clock(), self.at, self.zone)
        if day is not None:
            payload = {"name": MERGE_NAME, "day": day.isoformat()}
            job_id = await self.enqueue(MERGE_JOB, MERGE_KEY, payload, dedupe=dedupe_key(day))
            if job_id is not None:
                event(log, "memory_merge_queued", job=job_id, day=day.isoformat())
        return next_look

    async def run(self) -> None:
        while True:
            try:
                next_look = await self.tick()
            except Exception as exc:  # a busy or failing database: look again in a minute
                event(log, "memory_merge_schedule_failed", logging.WARNING, error=type(exc).__name__)
                next_look = self.clock() + timedelta(minutes=1)
            await asyncio.sleep(max(1.0, (next_look - self.clock()).total_seconds()))


def changes_for(group: MergeGroup) -> list[Change]:
    survivor = group.survivor
    absorbed = ", ".join(m.id for m in group.merged)
    changes = [Change(survivor.id, "merge", survivor.revision, {}, f"merged {absorbed}")]
    for note in group.merged:
        changes.append(
            Change(
                note.id,
                "merge",
                note.revision,
                {"status": RecordStatus.SUPERSEDED, "superseded_by": survivor.id},
                f"merged into {survivor.id}",
            )
        )
    return changes


class Merger:
    def __init__(self, records: RecordStore, revisions: RevisionLog) -> None:
        self.records = records
        self.revisions = revisions
        self.on_change: Callable[[], None] | None = None

    async def merge(self, now: datetime | None = None) -> dict[str, Any]:
        """Merge every group of learned notes that say the same thing; counts and batch ids."""
        now = now or utcnow()
        notes = await self.records.active(provenances=sorted(LEARNED), limit=MAX_NOTES)
        groups = await asyncio.to_thread(merge_groups, notes, now)  # thousands of notes: off the event loop
        batches: list[str] = []
        merged = skipped = 0
        for group in groups:
            try:
                batch, _ = await self.revisions.change_batch(changes_for(group), actor=ACTOR, now=now)
            except RecordError:  # a note changed or went since it was read: tomorrow's run sees it anew
                skipped += 1
                continue
            batches.append(batch)
            merged += len(group.merged)
        if batches and self.on_change is not None:
            self.on_change()
        event(log, "memory_merged", groups=len(batches), records=merged, skipped=skipped, notes=len(notes))
        return {"groups": len(batches), "records": merged, "skipped": skipped, "batches": batches[:BATCHES_KEPT]}

    async def handle_job(self, job: Job) -> Mapping[str, Any]:
        return await self.merge()


def scheduler_from_config(config: Config, enqueue: Enqueue) -> MergeScheduler:
    hours, minutes = config.memory.merge.time_of_day()
    return MergeScheduler(enqueue, time(hours, minutes), ZoneInfo(config.timezone))
