"""Tools that reach memory, offered to the model through function calling (never to a public
audience: see ToolRegistry). Each one answers only from what the asking person may see."""

from __future__ import annotations

import json
import logging
from typing import Any

from gateway.core.logs import event
from gateway.jobs.consolidation import Consolidator, queue_consolidation, summary
from gateway.jobs.runner import JobRunner
from gateway.session.memory_service import MemoryRefused, MemoryService, agent_author
from gateway.turn.tools import Tool, ToolContext
from memory.archive.store import ArchiveStore
from memory.records.duplicates import Settled
from memory.records.model import MemoryRecord, Scope, ScopeKind
from memory.trust.policy import ADMIN, PUBLIC, SYSTEM, Actor, Where, archive_scope, instruction_grade

ARCHIVE_RESULT_CHARS = 500
log = logging.getLogger("clawgate.memory_tools")


def search_archive_tool(store: ArchiveStore) -> Tool:
    async def run(ctx: ToolContext, args: dict[str, Any]) -> str:
        query = str(args.get("query") or "").strip()
        if not query:
            return json.dumps({"error": "query is required"})
        try:
            limit = max(1, min(int(args.get("limit") or 5), 20))
        except (TypeError, ValueError):
            limit = 5
        user_id, keys = archive_scope(ctx.user_id, ctx.session_key, ctx.audience)
        hits = await store.search(query, user_id=user_id, session_keys=keys, limit=limit)
        return json.dumps(
            {
                "results": [
                    {
                        "when": h.created_at.isoformat(timespec="minutes"),
                        "conversation": h.session_key,
                        "role": h.role,
                        "text": h.content[:ARCHIVE_RESULT_CHARS]
                        + ("…" if len(h.content) > ARCHIVE_RESULT_CHARS else ""),
                    }
                    for h in hits
                ]
            },
            ensure_ascii=False,
        )

    return Tool(
        name="search_archive",
        description=(
            "Search older messages of this person's conversations that were summarized out of the current "
            "context (full text, any words). Use it when they refer to something said earlier that the "
            "summary does not cover."
        ),
        parameters={
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "words to look for"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 20, "description": "at most this many (5)"},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        run=run,
        memory=True,
    )


def _json(data: object) -> str:
    return json.dumps(data, ensure_ascii=False)


def _brief(record: MemoryRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "content": record.content,
        "scope": str(record.scope),
        "memory_class": record.memory_class.value,
        "provenance": record.provenance.value,
        "use": "instruction" if instruction_grade(record) else "evidence",
    }


def _actor_where(service: MemoryService, ctx: ToolContext) -> tuple[Actor, Where]:
    return Actor(ctx.user_id, frozenset(ctx.roles), "tool"), service.where(ctx.audience, ctx.session_key)


def memory_tools(service: MemoryService) -> list[Tool]:
    """find_memories, get_memories, store_memory, update_memory: the model's reach into long-term
    memory, always as the person it is talking to and with less trust than them (run "tool")."""

    async def find(ctx: ToolContext, args: dict[str, Any]) -> str:
        actor, where = _actor_where(service, ctx)
        query = str(args.get("query") or "").strip()
        if not query:
            return _json({"error": "query is required"})
        found = await service.search(actor, where, query, limit=_limit(args.get("limit"), 5, 20))
        ctx.looked_up("find_memories", query, [f.record.id for f in found])
        return _json({"memories": [dict(_brief(f.record), score=round(f.score, 3)) for f in found]})

    async def get(ctx: ToolContext, args: dict[str, Any]) -> str:
        actor, where = _actor_where(service, ctx)
        ids = args.get("ids")
        if not isinstance(ids, list) or not ids:
            return _json({"error": "ids must be a non-empty list of memory ids, copied verbatim"})
        out, missing = [], []
        asked = [str(i) for i in ids[:20]]
        for rid in asked:
            record = await service.get(actor, where, rid)
            if record is None:
                missing.append(rid)
            else:
                out.append(_brief(record))
        ctx.looked_up("get_memories", "", [m["id"] for m in out], asked)
        return _json({"memories": out, "not_found": missing})

    async def store(ctx: ToolContext, args: dict[str, Any]) -> str:
        actor, where = _actor_where(service, ctx)
        content = str(args.get("content") or "")
        # The turn's own scope (the person's in a DM, the conversation's in a group); may narrow.
        narrow = args.get("scope") == "personal"
        if ctx.user_id is None:  # a run for a conversation and nobody in it: its memory, or none
            scope = Scope.channel(ctx.session_key)
        elif narrow or where.audience != "team":
            scope = Scope.personal(ctx.user_id)
        else:
            scope = Scope.channel(ctx.session_key)
        try:
            settled = await service.remember_checked(actor, where, content, scope=scope, author=agent_author(ctx.agent))
        except MemoryRefused as exc:
            return _json({"error": f"not stored: {exc}"})
        return _json(_stored(ctx, settled))

    async def update(ctx: ToolContext, args: dict[str, Any]) -> str:
        actor, where = _actor_where(service, ctx)
        rid = str(args.get("id") or "").strip()
        action = "forget" if args.get("delete") is True else "supersede" if args.get("supersede") is True else "edit"
        try:
            done, record = await service.change_by_model(
                actor, where, action, rid, str(args.get("content") or ""), author=agent_author(ctx.agent)
            )
        except MemoryRefused as exc:
            return _json({"error": f"not changed: {exc}"})
        if done == "proposed":
            ctx.wrote(record.id, "proposed")
            return _json(
                {
                    "proposed": record.id,
                    "note": "not changed: a person wrote, confirmed or shares this memory, so the change waits "
                    "for their review (/memory review); tell them",
                }
            )
        if done == "forgotten":
            ctx.wrote(record.id, "forgotten")
            return _json({"forgotten": record.id})
        if done == "superseded":  # the answer is the replacement
            ctx.wrote(rid, "superseded")
            ctx.wrote(record.id, "stored")
        else:
            ctx.wrote(record.id, "edited")
        return _json({"updated": _brief(record)})

    ids_schema = {"type": "array", "items": {"type": "string"}, "description": "memory ids (mem-…), copied verbatim"}
    return [
        Tool(
            "find_memories",
            "Search the long-term memories this person may see (their own, this conversation's, shared ones). "
            "Use before answering questions about their preferences, decisions or facts they told you.",
            {
                "type": "object",
                "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 20}},
                "required": ["query"],
                "additionalProperties": False,
            },
            find,
            memory=True,
        ),
        Tool(
            "get_memories",
            "Read memories by id (ids from find_memories, copied verbatim).",
            {"type": "object", "properties": {"ids": ids_schema}, "required": ["ids"], "additionalProperties": False},
            get,
            memory=True,
        ),
        Tool(
            "store_memory",
            "Save a compact fact, preference or decision ONLY when the person explicitly asks you to remember "
            "it. It is kept in their own memory (in a group: the group's), as evidence they can confirm.",
            {
                "type": "object",
                "properties": {
                    "content": {"type": "string", "description": "one compact statement"},
                    "scope": {"type": "string", "enum": ["personal"], "description": "narrow a group memory to theirs"},
                },
                "required": ["content"],
                "additionalProperties": False,
            },
            store,
            memory=True,
        ),
        Tool(
            "update_memory",
            "Correct (content), replace (supersede: true, with the new content) or delete (delete: true) a "
            "memory by id, when the person asks. What a person wrote or confirmed, and shared memory, is not "
            "changed: the change is proposed for their review instead.",
            {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "content": {"type": "string"},
                    "supersede": {"type": "boolean"},
                    "delete": {"type": "boolean"},
                },
                "required": ["id"],
                "additionalProperties": False,
            },
            update,
            memory=True,
        ),
    ]


def _stored(ctx: ToolContext, settled: Settled) -> dict[str, Any]:
    """store_memory's answer: the stored memory, and what it did to a near-duplicate already there
    (docs/recall.md, "Duplicates and supersession")."""
    record, old = settled.record, settled.target
    if settled.outcome == "skipped" and old is not None:
        # In a group the person's own memory is never shown to the model (others read its replies).
        shown = {"id": old.id} if ctx.audience == "team" and old.scope.kind == ScopeKind.PERSONAL else _brief(old)
        return {"already_stored": shown, "note": "nothing new was stored: this memory already says it"}
    ctx.wrote(record.id, "stored")
    answer: dict[str, Any] = {
        "stored": _brief(record),
        "note": "stored as evidence, in the person's review queue: they may confirm it",
    }
    if old is not None and settled.outcome == "replaced":
        ctx.wrote(old.id, "superseded")
        answer["replaces"] = old.id
    elif old is not None and settled.outcome == "merged":
        ctx.wrote(old.id, "superseded")
        answer["merged_from"] = old.id
    elif old is not None and settled.outcome == "proposed" and settled.proposal is not None:
        ctx.wrote(settled.proposal.id, "proposed")
        answer["proposed"] = settled.proposal.id
        answer["note"] += f"; replacing {old.id} waits for their review (a person wrote, confirmed or shares it)"
    return answer


def _limit(value: object, default: int, cap: int) -> int:
    try:
        return max(1, min(int(value), cap)) if value is not None else default  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return default


def consolidate_tool(consolidator: Consolidator, jobs: JobRunner) -> Tool:
    """memory_consolidate: for administrators and system runs only (anyone else gets a refusal). A dry
    run answers what would move; a real run is queued as a `consolidate` job with the same cutoff. In
    a group the answer holds counts only: the lists name other people's records and files."""

    async def run(ctx: ToolContext, args: dict[str, Any]) -> str:
        roles = set(ctx.roles)
        if PUBLIC in roles or not roles & {ADMIN, SYSTEM}:
            event(log, "memory_consolidate_refused", why="not_allowed", run="tool")
            return _json({"error": "memory_consolidate is for administrators and system runs only; nothing was done"})
        days = args.get("lookback_days")
        if days is not None and (not isinstance(days, int) or isinstance(days, bool) or days < 0):
            return _json({"error": "lookback_days must be a whole number of days, 0 or more"})
        # A person's run covers global memory and their own, never other people's (DESIGN §8).
        plan = await consolidator.plan(lookback_days=days, owner=ctx.user_id)
        report = consolidator.report(plan, dry_run=True)
        shown = report if ctx.audience == "personal" else summary(report)
        if args.get("dry_run", True) is not False:
            return _json({"dry_run": True, "would_move": shown})
        job_id = await queue_consolidation(jobs, days, now=plan.now, owner=ctx.user_id)
        return _json(
            {
                "queued_job": job_id,
                "would_move": shown,
                "note": "runs in the background; `clawgate jobs list --kind consolidate` shows its result",
            }
        )

    return Tool(
        "memory_consolidate",
        "Administrators only: move old global memories and the administrator's own, and their daily notes, into "
        "Memory.md "
        "(records are forgotten, daily files archived). Run with dry_run first and show what would move; "
        "run for real (dry_run false) only when the administrator asks for it.",
        {
            "type": "object",
            "properties": {
                "dry_run": {"type": "boolean", "description": "only report what would move (default true)"},
                "lookback_days": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "consolidate what is older than this many days (default: the configured 30)",
                },
            },
            "additionalProperties": False,
        },
        run,
        memory=True,
        roles=frozenset({ADMIN, SYSTEM}),  # not even offered to anyone else (run() still checks)
    )
