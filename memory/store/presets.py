"""Tool presets (docs/memory.md, "Tool-failure hints and tool presets"): saved, known-good arguments for a
tool, with a note, that an administrator approved. When a call of that tool fails, the error the
model gets back offers the approved presets of that tool (gateway/turn/tools.py), so it can retry
with something that works instead of guessing.

A preset comes from a person, never from a failure: nothing a failing call said is stored. An
administrator's preset (chat or CLI) is approved at once; anyone else's is a proposal that is never
offered until an administrator approves it. Every field is checked before it is stored: a tool name
as function calling spells it, a short name, arguments that are one JSON object of bounded size, a
short note, and no secret anywhere (memory.trust.redact) -- a preset is shown to the model.
"""

from __future__ import annotations

import base64
import builtins
import json
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.engine import Connection, Row

from gateway.core.events import utcnow
from memory.store.db import Database
from memory.store.schema import tool_presets
from memory.trust.redact import contains_secret

ID_PREFIX = "pre-"
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # as OpenAI-style function calling names a function
PRESET_NAME = re.compile(r"[\w.-]{1,64}")
MAX_ARGUMENTS_CHARS = 2_000  # the arguments as compact JSON
MAX_NOTE_CHARS = 300
MAX_PER_TOOL = 50  # approved and proposed together
MAX_OFFERED = 3  # presets one failed call offers
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class PresetError(ValueError):
    """Preset input that cannot be stored, or a preset that cannot be found; the message says why."""


@dataclass(frozen=True, slots=True)
class Preset:
    id: str
    tool: str
    name: str
    arguments: Mapping[str, Any]
    note: str | None
    approved: bool
    created_by: str
    created_at: datetime

    def offer(self) -> dict[str, Any]:
        """What a failed call shows the model."""
        out: dict[str, Any] = {"name": self.name, "arguments": dict(self.arguments)}
        if self.note:
            out["note"] = self.note
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tool": self.tool,
            "name": self.name,
            "arguments": dict(self.arguments),
            "note": self.note,
            "approved": self.approved,
            "created_by": self.created_by,
            "created_at": self.created_at.isoformat(),
        }


def new_id() -> str:
    return ID_PREFIX + base64.b32encode(secrets.token_bytes(10)).decode("ascii").lower()


def validate(
    tool: str, name: str, arguments: Any, note: str | None, extra_secrets: Iterable[str] = ()
) -> tuple[str, str, dict[str, Any], str | None]:
    """The preset's fields, cleaned (note stripped, empty note None); PresetError naming the first
    field that is wrong. Never echoes a secret back."""
    tool, name = tool.strip(), name.strip()
    if not TOOL_NAME.fullmatch(tool):
        raise PresetError("the tool name must be 1-64 letters, digits, '_' or '-' (as the tool is called)")
    if not PRESET_NAME.fullmatch(name):
        raise PresetError("the preset name must be one word of 1-64 letters, digits, '_', '.' or '-'")
    if not isinstance(arguments, dict):
        raise PresetError('the arguments must be one JSON object, e.g. {"query": "deploy"}')
    try:
        encoded = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        raise PresetError("the arguments must be plain JSON (strings, numbers, booleans, lists, objects)") from None
    if len(encoded) > MAX_ARGUMENTS_CHARS:
        raise PresetError(f"the arguments are too long ({len(encoded)} characters; at most {MAX_ARGUMENTS_CHARS})")
    cleaned = (note or "").strip() or None
    if cleaned is not None:
        if len(cleaned) > MAX_NOTE_CHARS:
            raise PresetError(f"the note is too long ({len(cleaned)} characters; at most {MAX_NOTE_CHARS})")
        if _CONTROL.search(cleaned):
            raise PresetError("the note must be one line of text")
    extra = list(extra_secrets)
    if any(contains_secret(text, extra) for text in (name, encoded, cleaned or "")):
        raise PresetError("it contains something that looks like a secret (a key, token or password): not saved")
    return tool, name, json.loads(encoded), cleaned


def parse_command(text: str) -> tuple[str, str, Any, str | None]:
    """`TOOL NAME {json arguments} [note]` (the chat command's words) -> (tool, name, arguments,
    note); PresetError with the usage when the shape is wrong. The fields are checked by validate()."""
    usage = "use: TOOL NAME {json arguments} [note]"
    parts = text.strip().split(None, 2)
    if len(parts) < 3:
        raise PresetError(usage)
    tool, name, rest = parts
    if not rest.startswith("{"):
        raise PresetError(f"the arguments must be a JSON object starting with '{{' ({usage})")
    try:
        arguments, end = json.JSONDecoder().raw_decode(rest)
    except json.JSONDecodeError as exc:
        raise PresetError(f"the arguments are not valid JSON: {exc.msg} at character {exc.pos + 1}") from None
    return tool, name, arguments, rest[end:].strip() or None


def _preset(row: Row[Any]) -> Preset:
    return Preset(
        row.id, row.tool, row.name, row.arguments, row.note, bool(row.approved), row.created_by, row.created_at
    )


def _add(conn: Connection, values: dict[str, Any]) -> Preset:
    same = select(tool_presets.c.id).where(tool_presets.c.tool == values["tool"], tool_presets.c.name == values["name"])
    existing = conn.execute(same).scalar()
    if existing is not None:
        raise PresetError(
            f"{values['tool']} already has a preset named {values['name']!r} ({existing}): remove it first"
        )
    count = conn.execute(select(func.count()).where(tool_presets.c.tool == values["tool"])).scalar_one()
    if count >= MAX_PER_TOOL:
        raise PresetError(f"{values['tool']} has {count} presets already (at most {MAX_PER_TOOL}): remove one first")
    conn.execute(insert(tool_presets).values(**values))
    row = conn.execute(select(tool_presets).where(tool_presets.c.id == values["id"])).one()
    return _preset(row)


def _get(conn: Connection, preset_id: str) -> Preset | None:
    row = conn.execute(select(tool_presets).where(tool_presets.c.id == preset_id)).first()
    return None if row is None else _preset(row)


def _approve(conn: Connection, preset_id: str) -> Preset | None:
    conn.execute(update(tool_presets).where(tool_presets.c.id == preset_id).values(approved=True))
    return _get(conn, preset_id)


def _remove(conn: Connection, preset_id: str) -> Preset | None:
    found = _get(conn, preset_id)
    if found is not None:
        conn.execute(delete(tool_presets).where(tool_presets.c.id == preset_id))
    return found


def _list(conn: Connection, tool: str | None, approved: bool | None, limit: int) -> builtins.list[Preset]:
    stmt = select(tool_presets)
    if tool is not None:
        stmt = stmt.where(tool_presets.c.tool == tool)
    if approved is not None:
        stmt = stmt.where(tool_presets.c.approved == approved)
    stmt = stmt.order_by(tool_presets.c.tool, tool_presets.c.name).limit(limit)
    return [_preset(r) for r in conn.execute(stmt)]


class PresetStore:
    def __init__(self, db: Database, secrets: Sequence[str] = ()) -> None:
        self._db = db
        # The gateway's configured secrets, refused in a preset too: its own list, which a config
        # reload extends in place, so a new token is refused at once.
        self._secrets = secrets

    async def add(
        self,
        tool: str,
        name: str,
        arguments: Any,
        note: str | None,
        *,
        created_by: str,
        approved: bool,
        now: datetime | None = None,
    ) -> Preset:
        """Check and store a preset; PresetError (the reason) when it may not be stored."""
        tool, name, args, note = validate(tool, name, arguments, note, self._secrets)
        values = {
            "id": new_id(),
            "tool": tool,
            "name": name,
            "arguments": args,
            "note": note,
            "approved": approved,
            "created_by": created_by[:255],
            "created_at": now or utcnow(),
        }
        return await self._db.write(_add, values)

    async def get(self, preset_id: str) -> Preset | None:
        return await self._db.read(_get, preset_id.strip())

    async def approve(self, preset_id: str) -> Preset | None:
        """The preset, approved; None when there is no such preset."""
        return await self._db.write(_approve, preset_id.strip())

    async def remove(self, preset_id: str) -> Preset | None:
        """The preset that was removed; None when there was none."""
        return await self._db.write(_remove, preset_id.strip())

    async def list(
        self, *, tool: str | None = None, approved: bool | None = None, limit: int = 100
    ) -> builtins.list[Preset]:
        """Presets by tool and name (`approved` None: approved and proposed)."""
        return await self._db.read(_list, tool, approved, max(1, min(500, limit)))

    async def approved_for(self, tool: str, limit: int = MAX_OFFERED) -> builtins.list[Preset]:
        """The approved presets of `tool` a failed call offers."""
        return await self._db.read(_list, tool, True, limit)
