"""Tools the model may call through LiteLLM function calling.

A call that fails (a tool name the model made up, arguments that are not one JSON object, a tool
that raised) returns an error object to the model, never an exception to the turn. The error
carries a short `hint` saying what to check and, when administrators saved some, the approved
presets of that tool (memory/store/presets.py): arguments known to work. Nothing from the failure itself
is stored. A tool that reports its own error (`{"error": …}`) gets the presets added too, and keeps
its own wording.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from gateway.core.events import ConversationRef, utcnow
from gateway.core.logs import event
from memory.store.presets import MAX_OFFERED, Preset
from memory.store.traces import Lookup

log = logging.getLogger("clawgate.tools")


@dataclass(frozen=True, slots=True)
class ToolContext:
    user_id: str | None  # None: a run for a conversation and nobody in it (gateway/schedules)
    session_key: str
    timezone: str
    audience: str = "personal"  # personal | team | public (memory tools are hidden in public)
    roles: tuple[str, ...] = ()  # the person's roles: memory tools act for them, with less trust
    agent: str = ""  # the agent answering: what the model writes is authored by it, never by the person
    # Records the memory tools wrote during the turn, as (record id, action), for its recall trace.
    written: list[tuple[str, str]] = field(default_factory=list, compare=False)
    # What the model looked up in memory during the turn, for its recall trace too.
    lookups: list[Lookup] = field(default_factory=list, compare=False)
    # The conversation the turn answers in (tools that act there: a reminder); None for an API request.
    conversation: ConversationRef | None = None
    # Lines the gateway adds under the model's answer, for the record (a reminder that was set): the
    # person sees what a tool did in the gateway's words, whatever the model says about it.
    receipts: list[str] = field(default_factory=list, compare=False)

    def wrote(self, record_id: str, action: str) -> None:
        self.written.append((record_id, action))

    def looked_up(self, tool: str, query: str, found: Sequence[str], asked: Sequence[str] = ()) -> None:
        self.lookups.append(Lookup(tool, query, tuple(found), tuple(asked)))


ToolFn = Callable[[ToolContext, dict[str, Any]], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    run: ToolFn
    memory: bool = False  # reads or writes memory: never offered to a public audience
    roles: frozenset[str] = frozenset()  # offered only to callers with one of these roles (empty: anyone)

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


async def _current_time(ctx: ToolContext, args: dict[str, Any]) -> str:
    zone = args.get("timezone") or ctx.timezone
    try:
        tz = ZoneInfo(str(zone))
    except Exception:
        return json.dumps({"error": f"unknown time zone {zone!r}"})
    now: datetime = utcnow().astimezone(tz)
    return json.dumps({"timezone": str(zone), "now": now.isoformat(timespec="seconds"), "weekday": now.strftime("%A")})


CURRENT_TIME = Tool(
    name="get_current_time",
    description="Current date and time, in the gateway's time zone unless another IANA zone is given.",
    parameters={
        "type": "object",
        "properties": {"timezone": {"type": "string", "description": "IANA zone, e.g. Europe/Berlin"}},
        "additionalProperties": False,
    },
    run=_current_time,
)


class PresetSource(Protocol):
    async def approved_for(self, tool: str, limit: int = MAX_OFFERED) -> Sequence[Preset]: ...


UNKNOWN_HINT = "Call one of the available tools, with its name spelled exactly as listed."
RAISED_HINT = (
    "The tool failed while running. Check each argument's value (ids copied verbatim, formats as the "
    "parameters describe); do not repeat the same call unchanged. If it fails again, tell the person."
)
PRESETS_HINT = "Administrators saved the presets below for this tool: arguments known to work."
_NAME_CHARS = 64  # a made-up tool name is logged this long at most


def arguments_hint(tool: Tool) -> str:
    """What the arguments of `tool` must look like, from its parameter schema."""
    props = sorted((tool.parameters.get("properties") or {}).keys())
    required = list(tool.parameters.get("required") or [])
    hint = "Send the arguments as one JSON object"
    if required:
        hint += f" with {', '.join(required)}"
    if props:
        hint += f"; its parameters are {', '.join(props)}"
    return hint + "."


class ToolRegistry:
    def __init__(self, tools: list[Tool] | None = None, presets: PresetSource | None = None) -> None:
        self._tools = {t.name: t for t in (tools if tools is not None else [CURRENT_TIME])}
        self.presets = presets  # approved presets offered when a call fails

    def add(self, tool: Tool) -> None:
        self._tools[tool.name] = tool

    def _offered(self, ctx: ToolContext | None) -> dict[str, Tool]:
        """The tools this caller may see: memory tools never in public, role-bound tools only to
        their roles (no context, as for listing every tool: all of them)."""
        if ctx is None:
            return self._tools
        public = ctx.audience == "public"
        return {
            n: t
            for n, t in self._tools.items()
            if not (public and t.memory) and (not t.roles or t.roles & set(ctx.roles))
        }

    def schemas(self, ctx: ToolContext | None = None) -> list[dict[str, Any]]:
        return [t.schema() for t in self._offered(ctx).values()]

    async def call(self, ctx: ToolContext, name: str, raw_args: str) -> str:
        offered = self._offered(ctx)
        tool = offered.get(name)
        if tool is None:
            # No presets: a name that is not offered here has none the model may use.
            event(log, "tool_failed_hint", tool=name[:_NAME_CHARS], kind="unknown_tool", presets=0)
            return json.dumps({"error": f"unknown tool {name!r}", "hint": UNKNOWN_HINT, "available": sorted(offered)})
        try:
            args = json.loads(raw_args or "{}")
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
        except ValueError as exc:
            return await self._failed(tool, "invalid_arguments", f"invalid arguments: {exc}", arguments_hint(tool))
        try:
            result = await tool.run(ctx, args)
        except Exception as exc:  # a tool failure is reported to the model, never crashes the turn
            return await self._failed(tool, "raised", f"{name} failed: {type(exc).__name__}", RAISED_HINT)
        return await self._with_presets(tool, result)

    async def _offers(self, tool: Tool) -> list[dict[str, Any]]:
        """The approved presets of `tool`, as the model sees them; none when they cannot be read
        (logged: the failure is reported without them)."""
        if self.presets is None:
            return []
        try:
            return [p.offer() for p in await self.presets.approved_for(tool.name, MAX_OFFERED)]
        except Exception as exc:
            event(log, "tool_presets_unavailable", logging.WARNING, tool=tool.name, error=type(exc).__name__)
            return []

    async def _failed(self, tool: Tool, kind: str, error: str, hint: str) -> str:
        offers = await self._offers(tool)
        event(log, "tool_failed_hint", tool=tool.name, kind=kind, presets=len(offers))
        out: dict[str, Any] = {"error": error, "hint": hint}
        if offers:
            out["presets"] = offers
        return json.dumps(out, ensure_ascii=False)

    async def _with_presets(self, tool: Tool, result: str) -> str:
        """A tool's own error object (its own wording and hint kept), with the tool's approved presets
        added when there are any."""
        if self.presets is None or '"error"' not in result:
            return result
        try:
            parsed = json.loads(result)
        except ValueError:
            return result
        if not isinstance(parsed, dict) or "error" not in parsed or "presets" in parsed:
            return result
        offers = await self._offers(tool)
        if not offers:
            return result
        event(log, "tool_failed_hint", tool=tool.name, kind="reported", presets=len(offers))
        return json.dumps({"hint": PRESETS_HINT, **parsed, "presets": offers}, ensure_ascii=False)
