"""Waiting in tests without fixed sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(cond: Callable[[], bool], timeout: float = 10) -> None:
    """Bounded poll of state that has no event to wait on (gateway internals, metrics)."""
    async with asyncio.timeout(timeout):
        while not cond():  # noqa: ASYNC110
            await asyncio.sleep(0.02)
