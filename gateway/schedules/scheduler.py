"""Reminders and scheduled runs on the job queue (docs/schedules.md, DESIGN §13).

Each due time of a schedule is one job: kind `schedule_run`, dedupe `schedule:<id>:<due>`, run
after the due time. However many instances queue it (each does at start) and however often, it is
queued once; one worker claims it (the queue's lease), and the schedule's next due time moves only
by compare-and-set on the due time it fired, so a due time fires once. A run that dies mid-way is
claimed again when its lease runs out, and its delivery's idempotency key keeps it from posting
twice. A due time missed while no gateway ran fires once at the next start, marked late; the ones
before it are skipped, never made up.

A failed run is retried with the queue's backoff; after its last attempt the schedule records why
(`clawgate status`, the console) and moves on to its next due time.

The bookkeeping here needs no running channel: the CLI pauses, resumes and queues runs with the
same class, without a Runner; a running gateway's workers then run what is due.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy.exc import IntegrityError

from gateway.config.model import Config
from gateway.config.schedules import ScheduleConfig
from gateway.core.events import ConversationKind, ConversationRef, utcnow
from gateway.core.logs import event
from gateway.jobs.runner import JobFailed
from gateway.schedules.runs import Run, RunFailed, Runner
from gateway.schedules.when import When, cron_next
from memory.store.jobs import Job
from memory.store.schedules import ACTIVE, PAUSED, REMINDER, REMOVED, SCHEDULE, Schedule
from memory.store.storage import Storage

log = logging.getLogger("clawgate.schedules")

RUN_JOB = "schedule_run"
LATE_AFTER = timedelta(minutes=2)  # a run this long after its due time is marked late
RUN_ATTEMPTS = 4  # tries of one due time (the queue's backoff between them), then it is dead-lettered
DISABLED = "disabled"  # a config schedule with `enabled: false` (a CLI pause is PAUSED, and survives restarts)


class Enqueue(Protocol):
    """The job queue's enqueue (JobRunner's, or JobStore's in the CLI)."""

    async def __call__(
        self,
        kind: str,
        key: str,
        payload: Mapping[str, Any] | None = None,
        *,
        dedupe: str | None = None,
        run_after: datetime | None = None,
        max_attempts: int = ...,
    ) -> int | None: ...


class ScheduleError(ValueError):
    """A reminder or schedule that cannot be set or changed, in plain words for the person."""


def _stamp(at: datetime) -> str:
    return at.strftime("%Y%m%dT%H%M%SZ")


def when_of(s: Schedule) -> When:
    every = timedelta(seconds=s.every_seconds) if s.every_seconds else None
    return When(s.first_due, s.zone, cron=s.cron, every=every)


class Scheduler:
    def __init__(
        self,
        config: Config,
        storage: Storage,
        enqueue: Enqueue,
        runner: Runner | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.config = config
        self.storage = storage
        self.store = storage.schedules
        self.enqueue = enqueue
        self.runner = runner  # None in the CLI: it queues, a running gateway runs
        self.clock = clock

    def use_config(self, config: Config) -> None:
        self.config = config

    # -- the config's schedules ----------------------------------------------------------------

    async def start(self) -> None:
        """Bring the config's schedules into the database and queue every active due time (a missed
        one is due now: it fires once, late)."""
        await self.sync_config()
        for s in await self.store.list(statuses=(ACTIVE,)):
            await self.queue(s)

    async def sync_config(self) -> None:
        now = self.clock()
        for name, cfg in self.config.schedules.items():
            await self._sync_one(name, cfg, now)
        for s in await self.store.list(kind=SCHEDULE, statuses=(ACTIVE, PAUSED, DISABLED)):
            if s.name is not None and s.name not in self.config.schedules:
                await self.store.set_status(s.id, REMOVED, now=now)
                event(log, "schedule_removed", name=s.name)

    def _rule(self, cfg: ScheduleConfig) -> dict[str, Any]:
        zone = cfg.timezone or self.config.timezone
        interval = cfg.interval
        target = cfg.target
        return {
            "channel": target.channel,
            "chat_id": target.conversation or "",  # a user's DM is found when it runs
            "thread_id": target.thread,
            "conv_kind": "dm" if target.user is not None else target.kind,
            "owner": target.user,
            "text": cfg.prompt,
            "mode": "agent",
            "agent": cfg.agent,
            "cron": cfg.cron,
            "every_seconds": int(interval.total_seconds()) if interval is not None else None,
            "zone": zone,
            "until": cfg.until_utc(self.config.timezone),
        }

    def _first(self, rule: Mapping[str, Any], now: datetime) -> datetime:
        if rule["cron"] is not None:
            return cron_next(rule["cron"], rule["zone"], now)
        return now + timedelta(seconds=rule["every_seconds"])

    async def _sync_one(self, name: str, cfg: ScheduleConfig, now: datetime) -> None:
        rule = self._rule(cfg)
        existing = await self.store.named(name)
        if existing is None:
            first = self._first(rule, now)
            status = ACTIVE if cfg.enabled else DISABLED
            try:
                await self.store.add(
                    kind=SCHEDULE, name=name, first_due=first, next_due=first, source="config", now=now, **rule
                )
            except IntegrityError:  # another instance added it at the same start
                return
            if status != ACTIVE:
                added = await self.store.named(name)
                if added is not None:
                    await self.store.update(added.id, status=status, now=now)
            event(log, "schedule_added", name=name, first_due=first.isoformat(), status=status)
            return
        changes = {k: v for k, v in rule.items() if getattr(existing, k) != v}
        timing = {"cron", "every_seconds", "zone"} & changes.keys()
        if timing or (existing.status == DISABLED and cfg.enabled) or existing.status == REMOVED:
            first = self._first(rule, now)
            changes |= {"first_due": first, "next_due": first, "status": ACTIVE}
        if not cfg.enabled and existing.status in (ACTIVE, PAUSED):
            changes["status"] = DISABLED
        if changes:
            await self.store.update(existing.id, now=now, **changes)
            event(log, "schedule_changed", name=name, changed=",".join(sorted(changes)))

    # -- queueing ------------------------------------------------------------------------------

    async def queue(self, s: Schedule, *, due: datetime | None = None, manual: bool = False) -> int | None:
        """Queue the run of `s` at its next due time (or `due`, for a manual run); None when that
        due time is queued already."""
        at = due or s.next_due
        if at is None:
            return None
        payload = {"id": s.id, "due": at.isoformat(), "manual": manual}
        dedupe = f"schedule:{s.id}:{'manual:' if manual else ''}{_stamp(at)}"
        return await self.enqueue(
            RUN_JOB, f"schedule:{s.id}", payload, dedupe=dedupe, run_after=at, max_attempts=RUN_ATTEMPTS
        )

    # -- running -------------------------------------------------------------------------------

    async def handle_job(self, job: Job) -> dict[str, Any]:
        """Fire one due time of one schedule (the `schedule_run` job)."""
        if self.runner is None:
            raise JobFailed("this process runs no channels")
        s = await self.store.get(int(job.payload["id"]))
        due = datetime.fromisoformat(str(job.payload["due"]))
        manual = bool(job.payload.get("manual"))
        why = self._not_due(s, due, manual)
        if why is not None:
            event(log, "schedule_run_skipped", id=job.payload["id"], reason=why)
            if s is not None and why == "past its until":
                await self.store.advance(s.id, due, None, "skipped", now=self.clock())
            return {"skipped": why}
        assert s is not None
        now = self.clock()
        late = not manual and now - due > LATE_AFTER
        try:
            run = await self._run_of(s, due, late, manual)
            outcome = await self.runner.run(run)
        except Exception as exc:
            reason = str(exc) if isinstance(exc, RunFailed) else f"{type(exc).__name__}: {exc}"
            last = not (isinstance(exc, RunFailed) and not exc.retryable) and job.attempts < job.max_attempts
            if last:  # not yet the last try: the queue tries again after its backoff
                event(log, "schedule_run_retry", logging.WARNING, name=s.label, attempt=job.attempts, reason=reason)
                raise JobFailed(reason) from exc
            event(log, "schedule_run_dead", logging.ERROR, name=s.label, due=due.isoformat(), reason=reason)
            if not manual:
                await self._move_on(s, due, "dead", reason)
            raise JobFailed(reason, permanent=True) from exc
        if not manual:
            await self._move_on(s, due, "late" if late else outcome)
        event(log, "schedule_run_done", name=s.label, due=due.isoformat(), late=late, outcome=outcome)
        return {"outcome": outcome, "late": late, "manual": manual}

    @staticmethod
    def _not_due(s: Schedule | None, due: datetime, manual: bool) -> str | None:
        """Why the job of `due` no longer runs (the schedule is gone, paused, moved on, or past its
        `until`), or None. A manual run (`clawgate schedules run`) runs whatever the schedule's state."""
        if s is None:
            return "gone"
        if manual:
            return None
        if s.status != ACTIVE:
            return s.status
        if s.next_due != due:
            return "moved"
        if s.until is not None and due > s.until:
            return "past its until"
        return None

    async def _move_on(self, s: Schedule, due: datetime, outcome: str, error: str | None = None) -> None:
        """Record the run of `due` and queue the next due time after now (missed ones are skipped)."""
        nxt = when_of(s).next_after(max(due, self.clock()))
        if nxt is not None and s.until is not None and nxt > s.until:
            nxt = None
        if await self.store.advance(s.id, due, nxt, outcome, error, now=self.clock()) and nxt is not None:
            moved = await self.store.get(s.id)
            if moved is not None:
                await self.queue(moved)

    async def _run_of(self, s: Schedule, due: datetime, late: bool, manual: bool) -> Run:
        ref = ConversationRef(s.channel, s.chat_id, s.thread_id, ConversationKind(s.conv_kind))
        event_id = f"schedule:{s.id}:{'manual:' + _stamp(self.clock()) if manual else _stamp(due)}"
        kind = s.kind if s.kind == REMINDER else "schedule"
        when = f"due {self._local(due, s.zone)}" + (", late: the gateway was not running then" if late else "")
        if s.mode == "message":
            text = f"⏰ Reminder: {s.text}" + (f"\n({when})" if late else "")
            return Run(event_id, kind, s.label, ref, text, s.mode, s.agent, s.owner)
        what = f"a reminder {s.owner} set" if s.kind == REMINDER else f"scheduled run {s.label!r}"
        note = f"{what}, {when}: nobody wrote this just now; answer it for the conversation"
        return Run(event_id, kind, s.label, ref, s.text, s.mode, s.agent, s.owner, note)

    @staticmethod
    def _local(at: datetime, zone: str) -> str:
        from zoneinfo import ZoneInfo

        return f"{at.astimezone(ZoneInfo(zone)):%a %d %b %H:%M} ({zone})"
