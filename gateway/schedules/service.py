"""The gateway's reminders, scheduled runs and webhooks, wired in one place: built before the turn
engine (the schedule_reminder tool), attached to the router and web server once they exist, started
with the job queue, and given each reloaded config."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from aiohttp import web

from gateway.config.model import Config
from gateway.core.events import utcnow
from gateway.core.logs import event
from gateway.jobs.runner import JobRunner
from gateway.schedules.hooks import HOOK_JOB, Hooks
from gateway.schedules.runs import Host, Runner
from gateway.schedules.scheduler import RUN_JOB, Scheduler
from gateway.schedules.tool import reminder_tool
from gateway.turn.tools import Tool
from memory.store.storage import Storage

log = logging.getLogger("clawgate.schedules")


class Schedules:
    def __init__(
        self,
        config: Config,
        storage: Storage,
        jobs: JobRunner,
        secrets: Sequence[str],
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.scheduler = Scheduler(config, storage, jobs.enqueue, clock=clock)
        self.hooks = Hooks(config, jobs.enqueue, secrets, lambda: clock().timestamp())
        self.jobs = jobs

    def tools(self) -> list[Tool]:
        """The model's schedule_reminder, unless reminders are off (`reminders.enabled: false`)."""
        return [reminder_tool(self.scheduler)] if self.scheduler.config.reminders.enabled else []

    def attach(self, router: Host, app: web.Application) -> None:
        runner = Runner(router)
        self.scheduler.runner = self.hooks.runner = runner
        self.jobs.register(RUN_JOB, self.scheduler.handle_job)
        self.jobs.register(HOOK_JOB, self.hooks.handle_job)
        self.hooks.mount(app)

    async def start(self) -> None:
        """The config's schedules brought into the database (added, changed, removed), and every
        active one's next due time queued: at start and after each reload."""
        await self.scheduler.start()

    async def reload(self) -> None:
        """`start` after a config reload, in the background: a failure is logged, the gateway goes on
        (the next start or reload brings the schedules up to date)."""
        try:
            await self.scheduler.start()
        except Exception as exc:
            event(log, "schedules_not_synced", logging.ERROR, error=type(exc).__name__)

    def use_config(self, config: Config) -> None:
        """A reloaded config: its hooks in force now, its schedules once `start` runs again."""
        self.scheduler.use_config(config)
        self.hooks.config = config
