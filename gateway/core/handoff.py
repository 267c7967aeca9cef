"""How a channel hands an inbound event to the gateway (its EventSink): in a task of its own, so that
receiving never waits for a turn. What the sink refuses is logged under the platform's name and never
raised into the platform's SDK: `<platform>_inbound_busy` when the session's queue is full (the
gateway told the person), `<platform>_sink_failed` for anything else (a bug: its traceback at DEBUG)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from gateway.core.events import MessageReceived
from gateway.core.logs import event
from gateway.core.ports import EventSink, SessionBusy


def hand_off(
    sink: EventSink, ev: MessageReceived, *, platform: str, channel: str, log: logging.Logger, tasks: set[Any]
) -> asyncio.Task[None]:
    """Run `sink(ev)` in a task kept in `tasks` (the adapter's own: it cancels them when it stops)."""
    task = asyncio.create_task(_deliver(sink, ev, platform, channel, log), name=f"{platform}-sink:{ev.event_id}")
    tasks.add(task)
    task.add_done_callback(tasks.discard)
    return task


async def _deliver(sink: EventSink, ev: MessageReceived, platform: str, channel: str, log: logging.Logger) -> None:
    try:
        await sink(ev)
    except SessionBusy:
        event(log, f"{platform}_inbound_busy", logging.WARNING, channel=channel, event_id=ev.event_id)
    except Exception as exc:
        fields = {"channel": channel, "event_id": ev.event_id, "error": type(exc).__name__}
        event(log, f"{platform}_sink_failed", logging.ERROR, **fields)
        log.debug("%s_sink_failed traceback", platform, exc_info=True)
