"""Tools that reach memory, offered to the model through function calling (never to a public
audience: see ToolRegistry). Each one answers only from what the asking person may see."""

from __future__ import annotations

import json
from typing import Any

from gateway.commands import archive_scope
from gateway.tools import Tool, ToolContext
from memory.archive import ArchiveStore

ARCHIVE_RESULT_CHARS = 500


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
