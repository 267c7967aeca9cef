"""What a chat command is handed (`CommandContext`), and the limiter that guards /link codes: apart
from the commands themselves, so the command modules need not import each other."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.config.model import AgentConfig, Config
from gateway.core.events import ConversationKind, MessageReceived
from gateway.schedules.scheduler import Scheduler
from gateway.session.budget import FlushTarget, SessionMemory
from gateway.session.memory_service import MemoryService
from memory.store.identities import User
from memory.store.storage import Storage
from memory.trust.policy import Actor


class AttemptLimiter:
    """At most `limit` attempts per key in a sliding window (guards /link codes against guessing).
    Per process: with several instances each counts its own."""

    def __init__(self, limit: int = 5, window: float = 600.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.window = window
        self._clock = clock
        self._hits: dict[str, deque[float]] = {}

    def allow(self, key: str, limit: int | None = None) -> bool:
        """Count an attempt under `key`; False (and not counted) past `limit` (default: the limiter's)."""
        now = self._clock()
        hits = self._hits.setdefault(key, deque())
        while hits and now - hits[0] > self.window:
            hits.popleft()
        if len(hits) >= (self.limit if limit is None else limit):
            return False
        hits.append(now)
        return True


@dataclass(frozen=True, slots=True)
class CommandContext:
    event: MessageReceived
    user: User
    session_key: str
    agent: AgentConfig
    config: Config
    storage: Storage
    session_memory: SessionMemory
    limiter: AttemptLimiter = field(default_factory=AttemptLimiter)
    audience: str = "personal"
    memory: MemoryService | None = None
    schedules: Scheduler | None = None  # reminders; None where the gateway runs none (tests, tools)

    @property
    def actor(self) -> Actor:
        return Actor(self.user.id, frozenset(self.user.roles), "chat")

    @property
    def flush_target(self) -> FlushTarget | None:
        dm = self.event.ref.kind == ConversationKind.DM
        return FlushTarget.of(dm, self.user.id, self.session_key, self.audience)
