"""/remind, /reminders and /timezone (docs/schedules.md): reminders a person sets in chat."""

from __future__ import annotations

from gateway.schedules import reminders
from gateway.schedules.scheduler import ScheduleError
from gateway.schedules.when import WhenError
from gateway.turn.commands.context import CommandContext

USAGE = (
    "Usage: /remind WHEN WHAT, e.g. /remind in 20m stretch, /remind tomorrow 9:00 call the bank, "
    "/remind every monday 8:30 standup notes. Start WHAT with 'ask:' to have the assistant answer it then."
)
OFF = "Reminders are not running in this gateway."


async def remind(ctx: CommandContext, args: str) -> str:
    if ctx.schedules is None:
        return OFF
    if not args.strip():
        return USAGE
    try:
        s = await reminders.set_reminder(
            ctx.schedules, ctx.user, ctx.event.ref, ctx.audience, args, source=ctx.event.event_id, agent_run=False
        )
    except (ScheduleError, WhenError) as exc:
        return f"No reminder set: {exc}."
    return reminders.receipt(s)


async def reminders_command(ctx: CommandContext, args: str) -> str:
    if ctx.schedules is None:
        return OFF
    verb, _, rest = args.strip().partition(" ")
    if verb.lower() in ("cancel", "delete", "remove"):
        return await reminders.cancel(ctx.schedules, ctx.user, rest)
    if verb:
        return "Usage: /reminders (list yours) or /reminders cancel ID"
    return await reminders.listing(ctx.schedules, ctx.user)


async def timezone(ctx: CommandContext, args: str) -> str:
    if ctx.schedules is None:
        return OFF
    return await reminders.set_timezone(ctx.schedules, ctx.user, args)
