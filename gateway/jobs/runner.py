"""Runs the job queue (memory/store/jobs.py) in the background of the gateway, never on the reply path.

Handlers are registered per kind. Workers (tasks; one by default) claim jobs; jobs of one key (a
session) run one at a time, in order, whatever the number of workers, because the store only hands
out the first unfinished job of a key. A running job's lease is renewed while it runs, so only a
dead process lets it go.

A handler returns a small JSON-able result (kept on the job) or raises: `JobFailed(permanent=True)`
for work that can never succeed (dead at once), anything else to be retried with backoff. Errors are
kept and logged by type and a redacted message: never a secret.

Every path logs a stable event: job_done, job_retry, job_dead, job_lease_lost.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from gateway.core.events import utcnow
from gateway.core.logs import event
from memory.store.jobs import DEAD, RUNNING, Job, JobStore
from memory.trust.redact import redact

log = logging.getLogger("clawgate.jobs")

Handler = Callable[[Job], Awaitable[Mapping[str, Any] | None]]
LEASE = timedelta(minutes=5)
# One worker: background jobs mostly wait on the model, and a second one doubled formation's
# throughput but also its bursts of work beside replies (benchmarks/formation.py: reply p99 +8 %
# with one worker, +14 % with two, at 300 ms per model call). Jobs are durable: a backlog only waits.
DEFAULT_WORKERS = 1
IDLE_POLL_SECONDS = 30.0  # at most this long between looks at the queue (a job queued elsewhere)
MIN_WAIT_SECONDS = 0.05
IDLE_RECHECK_SECONDS = 0.05  # idle(): how soon the workers are asked again while a lease still runs


class JobFailed(Exception):
    """A job that failed with a reason worth keeping; `permanent` ones are not retried."""

    def __init__(self, reason: str, *, permanent: bool = False) -> None:
        super().__init__(reason)
        self.permanent = permanent


class JobRunner:
    def __init__(
        self,
        store: JobStore,
        *,
        workers: int = DEFAULT_WORKERS,
        lease: timedelta = LEASE,
        secrets: list[str] | None = None,
        worker_id: str | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        # What "now" is for due times, claims and retries: a test's fake clock moves scheduled work
        # without waiting for it (the workers look again when woken: see wake()).
        self.clock = clock
        self.workers = workers
        self.lease = lease
        self.secrets = secrets if secrets is not None else []  # the gateway's own list: a reload adds to it
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}"
        self._handlers: dict[str, Handler] = {}
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._busy = 0  # workers claiming or running a job
        self._settled = asyncio.Event()  # set while nothing runs and nothing was due at the last look
        # Counts wake() calls: a look at the queue that began before the latest wake (a job queued, the
        # clock moved) may not call the runner settled, since it may have missed what the wake was for.
        self._woken = 0

    def register(self, kind: str, handler: Handler) -> None:
        self._handlers[kind] = handler

    @property
    def kinds(self) -> list[str]:
        return sorted(self._handlers)

    async def enqueue(self, kind: str, key: str, payload: Mapping[str, Any] | None = None, **kw: Any) -> int | None:
        """Queue a job and wake the workers; the job's id, or None for a duplicate (`dedupe`)."""
        job_id = await self.store.enqueue(kind, key, payload, now=self.clock(), **kw)
        self.wake()
        return job_id

    def wake(self) -> None:
        self._woken += 1
        self._settled.clear()
        self._wake.set()

    def start(self) -> None:
        if not self._tasks:
            loop = asyncio.get_running_loop()
            self._tasks = [loop.create_task(self._work(n)) for n in range(self.workers)]

    async def stop(self) -> None:
        """Cancel the workers: a job cut off here keeps its lease and runs again after it runs out
        (at the next start, or on another instance), as after a crash."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def idle(self, timeout: float = 30.0) -> None:
        """Wait until no job runs (here, or leased by a worker that is gone) and none is due now;
        jobs waiting for a retry later do not count (tests, CLI). TimeoutError past `timeout`."""
        self.wake()
        async with asyncio.timeout(timeout):
            while True:
                await self._settled.wait()
                await asyncio.sleep(0)  # let a worker that was just woken claim first
                if self._settled.is_set() and (await self.store.counts())[RUNNING] == 0:
                    return
                # A lease still runs, or a worker finished while the counts were read (and set the
                # event this clears): ask the workers again shortly instead of waiting for their poll.
                self._settled.clear()
                await asyncio.sleep(IDLE_RECHECK_SECONDS)
                self._wake.set()

    async def run_once(self) -> Job | None:
        """Claim and run one due job in this task (the CLI's `--now`, tests); the job, or None."""
        job = await self.store.claim(self.worker_id, self.lease, self.kinds, now=self.clock())
        if job is not None:
            await self._run(job)
        return job

    async def _work(self, n: int) -> None:
        while True:
            # Busy from the claim on, not only while a job runs: a worker that has just finished a job
            # and is claiming the next of its key must keep the others from calling the runner
            # settled (idle() returned with that next job still pending, seen on PostgreSQL).
            self._busy += 1
            looked_at = self._woken
            try:
                try:
                    job = await self.store.claim(self.worker_id, self.lease, self.kinds, now=self.clock())
                except Exception as exc:  # a busy or failing database: look again later
                    event(log, "job_claim_failed", logging.WARNING, error=type(exc).__name__)
                    job = None
                    await asyncio.sleep(1.0)
                if job is not None:
                    await self._run(job)
            finally:
                self._busy -= 1
            if job is not None:
                self._wake.set()  # the next job of its key may be due now: every worker looks again
                continue
            if looked_at != self._woken:
                continue  # woken while it looked: look again before calling anything settled
            if self._busy == 0:
                self._settled.set()
            await self._wait()

    async def _wait(self) -> None:
        # Cleared before the queue is read, not after: a wake that comes while it is read (a job
        # queued, idle() asking) must end this wait, not be cleared unseen and leave the worker asleep
        # for IDLE_POLL_SECONDS (idle() timed out so, seen under load).
        self._wake.clear()
        due = await self.store.next_due()
        wait = IDLE_POLL_SECONDS
        if due is not None:
            wait = min(wait, max(MIN_WAIT_SECONDS, (due - self.clock()).total_seconds()))
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns normally when the event is
        # set as the task is cancelled, losing the cancellation, and stop() then waits for a worker
        # that goes on claiming jobs (seen under load: a gateway that never stopped).
        try:
            async with asyncio.timeout(wait):
                await self._wake.wait()
        except TimeoutError:
            pass

    async def _run(self, job: Job) -> None:
        handler = self._handlers[job.kind]
        started = time.perf_counter()
        keeper = asyncio.get_running_loop().create_task(self._keep_lease(job))
        try:
            result = await handler(job)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            permanent = isinstance(exc, JobFailed) and exc.permanent
            reason = redact(f"{type(exc).__name__}: {exc}", self.secrets)
            status = await self.store.failed(job, reason, permanent=permanent, now=self.clock())
            name = "job_dead" if status == DEAD else "job_retry"
            level = logging.ERROR if status == DEAD else logging.WARNING
            event(
                log, name, level, job=job.id, kind=job.kind, key=job.key, attempt=job.attempts, error=type(exc).__name__
            )
            return
        finally:
            keeper.cancel()
        if await self.store.done(job, result, now=self.clock()):
            ms = (time.perf_counter() - started) * 1000
            event(log, "job_done", job=job.id, kind=job.kind, key=job.key, attempt=job.attempts, ms=round(ms, 1))
        else:
            event(log, "job_lease_lost", logging.WARNING, job=job.id, kind=job.kind, key=job.key)

    async def _keep_lease(self, job: Job) -> None:
        while True:
            await asyncio.sleep(self.lease.total_seconds() / 3)
            if not await self.store.extend(job, self.lease, now=self.clock()):
                event(log, "job_lease_lost", logging.WARNING, job=job.id, kind=job.kind, key=job.key)
                return
