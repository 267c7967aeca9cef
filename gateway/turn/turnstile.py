"""First come, first served, per key: a conversation's messages are answered in the order they
arrived, whatever their handlers wait for on the way (the journal, identity, access, the model
client still loading).

A place in a key's line is taken without waiting (`join` is not a coroutine), at the moment a
message arrives; its turn comes when every place before it has left. An asyncio.Lock is fair only
among tasks that already wait on it, so taken after a few awaits it serves them in the order those
awaits happened to finish, not the order the messages came in.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Place:
    """One place in a key's line; `leave()` it when done (or when giving up), exactly as a lock."""

    __slots__ = ("_line", "_lines", "_turn", "key")

    def __init__(self, lines: dict[str, deque[Place]], key: str) -> None:
        self.key = key
        self._lines = lines
        line = lines.get(key)
        if line is None:
            line = lines[key] = deque()
        self._line = line
        self._turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not line:
            self._turn.set_result(None)
        line.append(self)

    @property
    def ahead(self) -> int:
        """How many places are before this one (0: its turn, or it has left)."""
        try:
            return self._line.index(self)
        except ValueError:
            return 0

    async def wait(self) -> None:
        """Until every place before this one has left."""
        await self._turn

    def leave(self) -> None:
        """Out of the line (idempotent); the next place's turn comes if this one was first."""
        line = self._line
        try:
            first = line[0] is self
            line.remove(self)
        except (IndexError, ValueError):
            return  # left already
        if not line:
            if self._lines.get(self.key) is line:
                del self._lines[self.key]
        elif first and not line[0]._turn.done():
            line[0]._turn.set_result(None)


class Turnstile:
    def __init__(self) -> None:
        self._lines: dict[str, deque[Place]] = {}

    def join(self, key: str) -> Place:
        """A place at the end of `key`'s line, taken now."""
        return Place(self._lines, key)

    def waiting(self, key: str) -> int:
        """Places in `key`'s line, the one whose turn it is included."""
        line = self._lines.get(key)
        return len(line) if line is not None else 0

    def __len__(self) -> int:
        """Keys with anyone in line."""
        return len(self._lines)
