"""Reminders people set: `/remind`, `/reminders`, `/timezone` and the model's schedule_reminder tool
share these rules (docs/schedules.md). A reminder answers in the conversation it was set in, at a
time read in the person's time zone; it is theirs alone to list and cancel."""

from __future__ import annotations

from datetime import timedelta
from zoneinfo import ZoneInfo

from gateway.config.fields import check_zone, parse_duration
from gateway.core.events import ConversationRef
from gateway.schedules.scheduler import ScheduleError, Scheduler
from gateway.schedules.when import describe_cron, parse_reminder, span
from memory.store.identities import User
from memory.store.schedules import ACTIVE, CANCELLED, REMINDER, Schedule

AGENT_PREFIXES = ("ask:", "run:")  # "/remind every day 8:00 ask: summarise the news": an agent run


async def zone_of(scheduler: Scheduler, user: User) -> str:
    """The person's time zone: users.<id>.timezone, else what they set with /timezone, else the
    config's timezone."""
    declared = scheduler.config.users.get(user.id)
    if declared is not None and declared.timezone:
        return declared.timezone
    return await scheduler.storage.identities.timezone(user.id) or scheduler.config.timezone


async def set_reminder(
    scheduler: Scheduler, user: User, ref: ConversationRef, audience: str, text: str, *, source: str, agent_run: bool
) -> Schedule:
    """Set a reminder from `text` ("in 20m stretch"); ScheduleError or WhenError, in words for the
    person, when it cannot be."""
    cfg = scheduler.config.reminders
    if not cfg.enabled:
        raise ScheduleError("reminders are turned off here (reminders.enabled in the config)")
    if audience == "public" or user.has_role("public"):
        raise ScheduleError("reminders cannot be set in a public conversation: set one in a direct message")
    if await scheduler.store.count_active(user.id) >= cfg.max_per_user:
        raise ScheduleError(f"you have {cfg.max_per_user} reminders already: cancel one first (/reminders)")
    zone = await zone_of(scheduler, user)
    when, what = parse_reminder(text, zone, scheduler.clock(), min_interval=parse_duration(cfg.min_interval))
    lowered = what.lower()
    for prefix in AGENT_PREFIXES:
        if lowered.startswith(prefix):
            what, agent_run = what[len(prefix) :].strip(), True
    if not what:
        raise ScheduleError("say what the assistant should do at that time, after 'ask:'")
    s = await scheduler.store.add(
        kind=REMINDER,
        owner=user.id,
        channel=ref.channel,
        chat_id=ref.chat_id,
        thread_id=ref.thread_id,
        conv_kind=ref.kind.value,
        text=what,
        mode="agent" if agent_run else "message",
        cron=when.cron,
        every_seconds=int(when.every.total_seconds()) if when.every else None,
        zone=zone,
        first_due=when.first,
        next_due=when.first,
        source=source,
        now=scheduler.clock(),
    )
    await scheduler.queue(s)
    return s


def describe(s: Schedule) -> str:
    """One line about a reminder: its id, when it is next due (and how it repeats), what it says."""
    due = "not scheduled"
    if s.next_due is not None:
        local = s.next_due.astimezone(ZoneInfo(s.zone))
        due = f"{local:%a} {local.day} {local:%b %H:%M}"
    rule = ""
    if s.cron is not None:
        rule = f", {describe_cron(s.cron)}"
    elif s.every_seconds:
        rule = f", every {span(timedelta(seconds=s.every_seconds))}"
    kind = "ask: " if s.mode == "agent" else ""
    paused = " (paused)" if s.status != ACTIVE else ""
    return f"#{s.id} {due} ({s.zone}{rule}){paused}: {kind}{s.text}"


def receipt(s: Schedule) -> str:
    """What the person is shown when a reminder is set, in the gateway's words."""
    return f"⏰ Reminder {describe(s)} — cancel with /reminders cancel {s.id}"


async def listing(scheduler: Scheduler, user: User) -> str:
    mine = await scheduler.store.list(owner=user.id, kind=REMINDER)
    if not mine:
        return "You have no reminders. Set one with /remind, e.g. /remind tomorrow 9:00 call the bank"
    lines = [f"Your reminders ({len(mine)}):", *(describe(s) for s in mine)]
    lines.append("Cancel one with /reminders cancel ID")
    return "\n".join(lines)


async def cancel(scheduler: Scheduler, user: User, arg: str) -> str:
    wanted = arg.strip().lstrip("#")
    if not wanted.isdigit():
        return "Usage: /reminders cancel ID (the number /reminders shows)"
    if not await scheduler.store.set_status(int(wanted), CANCELLED, owner=user.id, now=scheduler.clock()):
        return f"You have no reminder #{wanted}."
    return f"Cancelled reminder #{wanted}."


async def set_timezone(scheduler: Scheduler, user: User, arg: str) -> str:
    zone = await zone_of(scheduler, user)
    wanted = arg.strip()
    if not wanted:
        return f"Your reminders use the time zone {zone}. Change it with /timezone Europe/Berlin"
    declared = scheduler.config.users.get(user.id)
    if declared is not None and declared.timezone:
        return f"Your time zone is {declared.timezone}, set in the gateway's config: an administrator can change it."
    try:
        check_zone(wanted)
    except ValueError as exc:
        return f"{exc}."
    await scheduler.storage.identities.set_timezone(user.id, wanted)
    return f"Your reminders now use the time zone {wanted}. Reminders set before keep their times."
