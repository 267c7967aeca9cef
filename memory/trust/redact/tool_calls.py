"""Tool calls as they may be stored: their arguments (a JSON text) redacted like any message
(memory.trust.redact), and still JSON, so a later turn replays a call the provider accepts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from memory.trust.redact import REDACTED, redact


def _redact_leaves(value: Any, secrets: Sequence[str], key: str | None = None) -> Any:
    """Each string of a decoded JSON value redacted with its key beside it (`"password": "…"` is a
    secret where the bare value may not look like one), the structure kept."""
    if isinstance(value, dict):
        return {k: _redact_leaves(v, secrets, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_leaves(v, secrets, key) for v in value]
    if not isinstance(value, str) or not value:
        return value
    piece = json.dumps({key: value} if key is not None else value, ensure_ascii=False)
    try:
        hidden = json.loads(redact(piece, secrets))
    except ValueError:
        return REDACTED
    return hidden[key] if key is not None and isinstance(hidden, dict) else hidden


def redact_arguments(arguments: Any, secrets: Sequence[str]) -> Any:
    """A tool call's arguments (a JSON text) as they may be stored: redacted, and still the JSON
    they were, so the next turn's request replays a call the provider accepts."""
    if not isinstance(arguments, str):
        return _redact_leaves(arguments, secrets) if isinstance(arguments, dict | list) else arguments
    hidden = redact(arguments, secrets)
    if hidden == arguments:
        return arguments
    try:
        decoded = json.loads(arguments)
    except ValueError:
        return hidden  # never JSON: it stays text
    try:
        json.loads(hidden)
        return hidden
    except ValueError:  # a redacted span cut through the JSON's syntax (a key block without its end)
        return json.dumps(_redact_leaves(decoded, secrets), ensure_ascii=False)


def redact_tool_calls(calls: list[dict[str, Any]] | None, secrets: Sequence[str]) -> list[dict[str, Any]] | None:
    """Tool calls with their arguments redacted; the same list when nothing needed it."""
    if not calls:
        return calls
    out: list[dict[str, Any]] = []
    changed = False
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or "arguments" not in function:
            out.append(call)
            continue
        arguments = redact_arguments(function["arguments"], secrets)
        if arguments is function["arguments"] or arguments == function["arguments"]:
            out.append(call)
            continue
        changed = True
        out.append({**call, "function": {**function, "arguments": arguments}})
    return out if changed else calls
