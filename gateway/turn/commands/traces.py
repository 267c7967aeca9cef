"""`/memory trace [N]` and `/memory preset …`: a person's own recall traces, and the tool presets
failed tool calls offer the model (docs/memory.md, "Tool-failure hints and tool presets").

Traces: the caller's own turns only. In a direct conversation, all of theirs; in a group, only
theirs in that group, so that nothing they asked elsewhere is shown in front of others.

Presets: an administrator's are approved at once; anyone else's is a proposal, never offered to the
model until an administrator approves it. Everyone sees the approved ones; a proposal is listed to
administrators and to whoever proposed it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from gateway.config.load import secret_values
from gateway.recall.trace import render
from memory.store.presets import Preset, PresetError, PresetStore, parse_command
from memory.store.traces import TraceStore

if TYPE_CHECKING:
    from gateway.turn.commands.context import CommandContext

DEFAULT_TRACES = 3
MAX_TRACES = 10
TRACE_USAGE = f"Usage: /memory trace [N] — your last N recall traces (default {DEFAULT_TRACES}, at most {MAX_TRACES})."
PRESET_USAGE = (
    "Usage: /memory preset list [TOOL] · /memory preset add TOOL NAME {json arguments} [note] · "
    "/memory preset approve ID (admins) · /memory preset remove ID"
)


async def trace(ctx: CommandContext, args: str) -> str:
    words = args.split()
    if len(words) > 1 or (words and not (words[0].isdigit() and 1 <= int(words[0]) <= MAX_TRACES)):
        return TRACE_USAGE
    limit = int(words[0]) if words else DEFAULT_TRACES
    in_group = ctx.audience != "personal"
    store = TraceStore(ctx.storage.db)
    views = await store.recent(user_id=ctx.user.id, session_key=ctx.session_key if in_group else None, limit=limit)
    if not views:
        where = " in this conversation" if in_group else ""
        return f"No recall traces of your turns{where} yet (a turn is traced when memory was recalled or written)."
    return "Your recall traces, newest first:\n" + render(views)


def _line(p: Preset) -> str:
    note = f" — {p.note}" if p.note else ""
    state = "" if p.approved else " [proposed, not offered until approved]"
    arguments = json.dumps(dict(p.arguments), ensure_ascii=False)
    return f"{p.id} {p.tool}/{p.name} {arguments}{note}{state}"


async def preset(ctx: CommandContext, args: str) -> str:
    verb, _, rest = args.strip().partition(" ")
    verb, rest = verb.lower(), rest.strip()
    admin = ctx.user.has_role("admin")
    store = PresetStore(ctx.storage.db, secret_values(ctx.config))
    if verb == "list":
        tool = rest.split()[0] if rest else None
        found = await store.list(tool=tool)
        shown = [p for p in found if p.approved or admin or p.created_by == ctx.user.id]
        if not shown:
            return "No tool presets" + (f" for {tool}." if tool else " yet.")
        return "Tool presets:\n" + "\n".join(_line(p) for p in shown)
    if verb == "add" and rest:
        try:
            tool, name, arguments, note = parse_command(rest)
            saved = await store.add(tool, name, arguments, note, created_by=ctx.user.id, approved=admin)
        except PresetError as exc:
            return f"Preset not saved: {exc}."
        if saved.approved:
            return f"Saved {saved.id} ({saved.tool}/{saved.name}): offered when a {saved.tool} call fails."
        return (
            f"Proposed {saved.id} ({saved.tool}/{saved.name}): not offered until an admin approves it "
            f"(/memory preset approve {saved.id})."
        )
    if verb == "approve" and rest:
        if not admin:
            return "Only an admin approves tool presets."
        done = await store.approve(rest.split()[0])
        return f"Approved {done.id} ({done.tool}/{done.name})." if done else f"No tool preset {rest.split()[0]}."
    if verb == "remove" and rest:
        pid = rest.split()[0]
        found_one = await store.get(pid)
        # Someone else's proposal is reported like a missing preset; a proposer may withdraw theirs.
        if found_one is None or not (found_one.approved or admin or found_one.created_by == ctx.user.id):
            return f"No tool preset {pid} that you can remove."
        if found_one.approved and not admin:
            return "Only an admin removes an approved tool preset."
        await store.remove(found_one.id)
        return f"Removed {found_one.id} ({found_one.tool}/{found_one.name})."
    return PRESET_USAGE
