"""Chat commands for long-term memory: /remember, /forget and /memory … (DESIGN §6, §10).

People see their own memory, the conversation's, and shared memory; admins review global, project
and channel items, everyone reviews their own. Every answer says what happened or why not."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.session.memory_service import MemoryRefused, MemoryService, describe
from gateway.turn.commands import traces as trace_commands
from memory.records.duplicates import Settled
from memory.records.model import MemoryRecord, ScopeKind

if TYPE_CHECKING:
    from gateway.turn.commands.context import CommandContext
    from memory.trust.policy import Actor, Where

QUOTE_CHARS = 80  # of an existing memory, quoted in a reply
REVIEW_ACTIONS = ("confirm", "edit", "evidence", "scope", "stale", "merge", "reject", "dispute", "supersede", "undo")
USAGE = (
    "Usage: /memory search WORDS · /memory show ID · /memory list · /memory review · "
    "/memory confirm|evidence|stale|reject|dispute|undo ID · /memory edit ID TEXT · /memory scope ID SCOPE · "
    "/memory merge ID OTHER_ID · /memory supersede ID TEXT · /memory trace [N] · /memory preset …"
)


def _who(ctx: CommandContext) -> tuple[MemoryService, Actor, Where]:
    assert ctx.memory is not None, "memory commands are offered only with a memory service"
    return ctx.memory, ctx.actor, ctx.memory.where(ctx.audience, ctx.session_key)


async def remember(ctx: CommandContext, args: str) -> str:
    flag = None
    words = args.split()
    if words and words[0] in ("--global", "--channel", "--project"):
        flag = words[0][2:]
        args = args.split(None, 1)[1] if len(words) > 1 else ""
    if not args.strip():
        return (
            "Usage: /remember TEXT (your own memory), /remember --channel TEXT (this group), "
            "/remember --project TEXT (this group's project), /remember --global TEXT"
        )
    svc, actor, where = _who(ctx)
    try:
        settled = await svc.remember_checked(actor, where, args, flag=flag, source=ctx.event.event_id)
    except MemoryRefused as exc:
        return f"Not remembered: {exc}."
    return remembered(settled, in_group=where.audience == "team")


def remembered(settled: Settled, *, in_group: bool = False) -> str:
    """What /remember answers: where the memory went, and what it did to a memory already there
    (docs/recall.md, "Duplicates and supersession"). In a group, where others read the reply, what a
    personal memory says is never quoted: only its id."""
    record, old = settled.record, settled.target

    def said(memory: MemoryRecord, before: str = " (", after: str = ")") -> str:
        if in_group and memory.scope.kind == ScopeKind.PERSONAL:
            return ""
        text = " ".join(memory.content.split())
        quoted = f'"{text[:QUOTE_CHARS]}…"' if len(text) > QUOTE_CHARS else f'"{text}"'
        return f"{before}{quoted}{after}"

    if settled.outcome == "skipped" and old is not None:
        keep = f"/memory undo {record.id} keeps it anyway"
        return f"Already noted as {old.id}{said(old)}: nothing new was stored. ({keep}.)"
    note = "" if record.review_status.value == "none" else " It waits for review before it is used as an instruction."
    head = f"Remembered as {record.id} ({record.scope})"
    if old is None or settled.outcome == "created":
        return f"{head}.{note}"
    if settled.outcome == "replaced":
        return f"{head}; it replaces {old.id}{said(old)}.{note} (/memory undo {record.id} brings {old.id} back.)"
    if settled.outcome == "merged":
        merged = said(record, ": ", "")
        return f"{head}, merged with {old.id}{merged}.{note} (/memory undo {record.id} undoes the merge.)"
    if settled.outcome == "proposed" and settled.proposal is not None:
        return (
            f"{head}.{note} It may replace {old.id}{said(old)}, which you cannot change yourself: "
            f"the change waits for review as {settled.proposal.id}."
        )
    return f"{head}.{note} It resembles {old.id}{said(old)}: whether it replaces it is checked in the background."


async def forget(ctx: CommandContext, args: str) -> str:
    if not args.strip():
        return "Usage: /forget ID"
    svc, actor, where = _who(ctx)
    try:
        record = await svc.forget(actor, where, args.split()[0])
    except MemoryRefused as exc:
        return f"Not forgotten: {exc}"
    return f"Forgot {record.id}. (/memory undo {record.id} brings it back.)"


async def memory(ctx: CommandContext, args: str) -> str:
    verb, _, rest = args.strip().partition(" ")
    verb, rest = verb.lower(), rest.strip()
    if verb == "trace":
        return await trace_commands.trace(ctx, rest)
    if verb == "preset":
        return await trace_commands.preset(ctx, rest)
    svc, actor, where = _who(ctx)
    if verb == "search" and rest:
        found = await svc.search(actor, where, rest, limit=5)
        if not found:
            return f"No memory you can see matches {rest!r}."
        return "\n".join(describe(f.record) for f in found)
    if verb == "show" and rest:
        record = await svc.get(actor, where, rest.split()[0])
        if record is None:
            return f"No memory {rest.split()[0]} that you can see."
        return describe(record, long=True, target=await svc.target_of(actor, where, record))
    if verb == "list":
        records = await svc.listing(actor, where)
        return "\n".join(describe(r) for r in records) if records else "No memories here yet."
    if verb == "review":
        records = await svc.pending(actor, where)
        if not records:
            return "Nothing waits for your review."
        shown = [describe(r, target=await svc.target_of(actor, where, r)) for r in records]
        return "Waiting for review (/memory confirm|edit|evidence|reject ID):\n" + "\n".join(shown)
    if verb in REVIEW_ACTIONS and rest:
        record_id, _, arg = rest.partition(" ")
        try:
            record = await svc.review(actor, where, verb, record_id, arg.strip())
        except MemoryRefused as exc:
            return f"Not done: {exc}"
        return f"Done: {describe(record)}"
    return USAGE
