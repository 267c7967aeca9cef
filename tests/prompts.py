"""What a turn's prompt, as the fake model received it, carried of memory (DESIGN §12): Memory.md in
its system prompt; the turn's recall in its newest user message, before the person's own words."""

from __future__ import annotations

from typing import Any

from gateway.turn.context import MESSAGE


def recall_of(request: dict[str, Any]) -> str:
    """The recall block of the request's newest user message ("" when recall found nothing)."""
    last = next((m for m in reversed(request["messages"]) if m.get("role") == "user"), None)
    content = str(last.get("content") or "") if last else ""
    block, mark, _words = content.rpartition(MESSAGE + "\n")
    return block + MESSAGE if mark else ""


def memory_of(request: dict[str, Any]) -> str:
    """All the memory the request carried: its system prompt (instructions and Memory.md), then the
    turn's recall."""
    return str(request["messages"][0]["content"]) + "\n\n" + recall_of(request)
