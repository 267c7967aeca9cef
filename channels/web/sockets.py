"""The chat page's open WebSockets, by conversation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass(slots=True)
class Sockets:
    """The chat pages open on each conversation (by session key): a reply, an update or a typing
    frame goes to every one of them; a closed or failing socket is skipped."""

    by_conv: dict[str, set[web.WebSocketResponse]] = field(default_factory=dict)

    def add(self, key: str, ws: web.WebSocketResponse) -> None:
        self.by_conv.setdefault(key, set()).add(ws)

    def remove(self, key: str, ws: web.WebSocketResponse) -> None:
        group = self.by_conv.get(key)
        if group is not None:
            group.discard(ws)
            if not group:
                del self.by_conv[key]

    def watched(self, key: str) -> bool:
        """Whether any page has conversation `key` open."""
        return bool(self.by_conv.get(key))

    async def push(self, key: str, frame: dict[str, Any]) -> int:
        sent = 0
        for ws in list(self.by_conv.get(key, ())):
            if ws.closed:
                continue
            try:
                await ws.send_json(frame)
                sent += 1
            except (ConnectionError, RuntimeError):
                continue
        return sent
