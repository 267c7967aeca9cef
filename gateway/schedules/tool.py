"""schedule_reminder: the model sets a reminder when a person asks it to ("remind me tomorrow at 9 to
call the bank"), under the same rules as /remind. What was set is shown under the model's answer in
the gateway's own words (ToolContext.receipts), so the person has the record whatever the model says."""

from __future__ import annotations

import json
from typing import Any

from gateway.schedules import reminders
from gateway.schedules.scheduler import ScheduleError, Scheduler
from gateway.schedules.when import WhenError
from gateway.turn.tools import Tool, ToolContext

DESCRIPTION = (
    "Set a reminder for the person you are talking with, delivered in this conversation. Use it only when "
    "they ask to be reminded. `when` is a time as a person writes it, in their time zone: 'in 20 minutes', "
    "'tomorrow 9:00', 'friday 17:30', 'dec 24 10am', 'every monday 8:30', 'every weekday 9:00'. `text` is "
    "what to remind them of. With agent_run true, at that time you are asked `text` and answer it (for "
    "'every morning summarise ...'); otherwise `text` is sent as it is."
)


def reminder_tool(scheduler: Scheduler) -> Tool:
    async def run(ctx: ToolContext, args: dict[str, Any]) -> str:
        if ctx.user_id is None or ctx.conversation is None:
            return json.dumps({"error": "reminders can be set only in a conversation with a person"})
        user = await scheduler.storage.identities.get_user(ctx.user_id)
        when, text = str(args.get("when") or "").strip(), str(args.get("text") or "").strip()
        if user is None or not when or not text:
            return json.dumps({"error": "give `when` (e.g. 'tomorrow 9:00') and `text`"})
        try:
            s = await reminders.set_reminder(
                scheduler,
                user,
                ctx.conversation,
                ctx.audience,
                f"{when} {text}",
                source=f"tool:{ctx.session_key}",
                agent_run=bool(args.get("agent_run")),
            )
        except (ScheduleError, WhenError) as exc:
            return json.dumps({"error": f"no reminder set: {exc}"})
        ctx.receipts.append(reminders.receipt(s))
        return json.dumps(
            {"set": reminders.describe(s), "note": "the person is shown this line under your answer"},
            ensure_ascii=False,
        )

    return Tool(
        name="schedule_reminder",
        description=DESCRIPTION,
        parameters={
            "type": "object",
            "properties": {
                "when": {"type": "string", "description": "when, as a person writes it, in their time zone"},
                "text": {"type": "string", "description": "what to remind them of, or what to answer then"},
                "agent_run": {"type": "boolean", "description": "true: answer `text` then, instead of sending it"},
            },
            "required": ["when", "text"],
            "additionalProperties": False,
        },
        run=run,
    )
