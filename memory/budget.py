"""The session budget of DESIGN §4, as pure arithmetic: when a session is past its limit, how many of
its oldest messages to prune, and how much of a request to flush. No I/O, no clock.

Limits, exactly as operators read them in the docs:
- `max_tokens` > 0: the session may hold that many tokens; past it, it is cut to 60 % of it.
- `max_tokens` 0: `messages` is the limit instead (a message count), cut to 60 % of it.
- Either way a session never keeps more than half of `auto_flush_tokens` tokens.
- "Past" means strictly greater: a session exactly at its limit is left alone.
- The kept part starts at a user message, so a tool call is never separated from its result
  (tool exchanges happen between a user message and the next one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

KEEP_FRACTION = 0.6


@dataclass(frozen=True, slots=True)
class Budget:
    max_tokens: int = 40_000  # 0: count messages instead
    max_messages: int = 40
    flush_tokens: int = 80_000  # one request past this is flushed to the daily file

    @property
    def token_limit(self) -> int:
        cap = self.flush_tokens // 2
        return min(self.max_tokens, cap) if self.max_tokens > 0 else cap

    @property
    def message_limit(self) -> int | None:
        return self.max_messages if self.max_tokens == 0 else None

    def over(self, tokens: int, count: int) -> bool:
        """Past the limit: the older messages should be summarized and pruned."""
        limit = self.message_limit
        return tokens > self.token_limit or (limit is not None and count > limit)

    def twice_over(self, tokens: int, count: int) -> bool:
        """Twice past the limit: prune even without a summary."""
        limit = self.message_limit
        return tokens > 2 * self.token_limit or (limit is not None and count > 2 * limit)

    @property
    def token_target(self) -> int:
        return int(self.token_limit * KEEP_FRACTION)

    @property
    def message_target(self) -> int | None:
        limit = self.message_limit
        return None if limit is None else int(limit * KEEP_FRACTION)


def _first_user_at_or_after(roles: Sequence[str], start: int) -> int | None:
    for i in range(max(start, 1), len(roles)):
        if roles[i] == "user":
            return i
    return None


def _keep_from(roles: Sequence[str], tokens: Sequence[int], token_target: int, message_target: int | None) -> int:
    """The smallest start index > 0 at a user message whose suffix fits both targets; else the last
    user message (keep as little as the shape allows); 0 when there is nowhere to cut."""
    n = len(roles)
    # Walk back from the newest message while the suffix still fits: `fits_from` is the smallest
    # start index whose suffix fits.
    total, fits_from = 0, n
    for i in range(n - 1, -1, -1):
        total += tokens[i]
        if total > token_target or (message_target is not None and n - i > message_target):
            break
        fits_from = i
    start = _first_user_at_or_after(roles, fits_from)
    if start is not None:
        return start
    last_user = max((i for i in range(1, n) if roles[i] == "user"), default=0)
    return last_user


def plan_trim(roles: Sequence[str], tokens: Sequence[int], budget: Budget) -> int:
    """How many of the oldest messages to prune so the session falls to 60 % of its limit
    (0: nothing can be pruned without splitting the newest exchange)."""
    return _keep_from(roles, tokens, budget.token_target, budget.message_target)


def plan_flush(roles: Sequence[str], tokens: Sequence[int], fixed_tokens: int, budget: Budget) -> int:
    """How many of the oldest session messages a request must drop (into the daily file) when the
    request, `fixed_tokens` (instructions, summary, the new message) plus the session, passes
    `flush_tokens`; 0 when it does not. What is kept fits half of `flush_tokens` with the rest."""
    if fixed_tokens + sum(tokens) <= budget.flush_tokens:
        return 0
    room = max(budget.flush_tokens // 2 - fixed_tokens, 0)
    start = _keep_from(roles, tokens, room, None)
    # When even the newest exchange does not fit, all of it goes: the new message alone is the request.
    return start if sum(tokens[start:]) <= room else len(roles)
