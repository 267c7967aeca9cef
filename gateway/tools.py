"""Tools the model may call through LiteLLM function calling. Small, side-effect free for now."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from gateway.events import utcnow


@dataclass(frozen=True, slots=True)
class ToolContext:
    user_id: str
    session_key: str
    timezone: str
    audience: str = "personal"  # personal | team | public (memory tools are hidden in public)
    roles: tuple[str, ...] = ()  # the person's roles: memory tools act for them, with less trust


ToolFn = Callable[[ToolContext, dict[str, Any]], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    run: ToolFn
    memory: bool = False  # reads or writes memory: never offered to a public audience

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


class ToolRegistry:
    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools = {t.name: t for t in (tools if tools is not None else [CURRENT_TIME])}

    def add(self, tool: Tool) -> None:
        self._tools[tool.name] = tool

    def _offered(self, ctx: ToolContext | None) -> dict[str, Tool]:
        if ctx is not None and ctx.audience == "public":
            return {n: t for n, t in self._tools.items() if not t.memory}
        return self._tools

    def schemas(self, ctx: ToolContext | None = None) -> list[dict[str, Any]]:
        return [t.schema() for t in self._offered(ctx).values()]

    async def call(self, ctx: ToolContext, name: str, raw_args: str) -> str:
        offered = self._offered(ctx)
        tool = offered.get(name)
        if tool is None:
            return json.dumps({"error": f"unknown tool {name!r}", "available": sorted(offered)})
        try:
            args = json.loads(raw_args or "{}")
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
        except ValueError as exc:
            return json.dumps({"error": f"invalid arguments: {exc}"})
        try:
            return await tool.run(ctx, args)
        except Exception as exc:  # a tool failure is reported to the model, never crashes the turn
            return json.dumps({"error": f"{name} failed: {type(exc).__name__}"})
