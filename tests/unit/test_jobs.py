"""The job queue over real SQLite (both database runners) and a real PostgreSQL (claims with
SKIP LOCKED), and the runner that works through it:
order and one-at-a-time per key, leases that run out, retries with backoff, dead letters, dedupe."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from gateway.core.events import utcnow
from gateway.jobs.runner import JobFailed, JobRunner
from memory.store.db import Database, Runner
from memory.store.jobs import DEAD, DONE, PENDING, RUNNING, Job, JobStore, retry_delay
from tests.postgres import fresh_database_url

LEASE = timedelta(minutes=5)


@pytest.fixture(params=["thread", "async", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[JobStore]:
    if request.param == "postgres":
        db = Database(fresh_database_url())
    else:
        runner: Runner = request.param
        prefix = "sqlite" if runner == "thread" else "sqlite+aiosqlite"
        db = Database(f"{prefix}:///{tmp_path / 'jobs.db'}", runner=runner)
    await db.migrate()
    yield JobStore(db)
    await db.close()


async def test_jobs_of_one_key_run_one_at_a_time_in_order(store: JobStore) -> None:
    a1 = await store.enqueue("formation", "session-a", {"n": 1})
    a2 = await store.enqueue("formation", "session-a", {"n": 2})
    b1 = await store.enqueue("formation", "session-b", {"n": 1})
    first = await store.claim("w1", LEASE)
    second = await store.claim("w2", LEASE)
    assert first is not None and second is not None
    assert (first.id, second.id) == (a1, b1)  # a2 waits for a1: same session
    assert await store.claim("w3", LEASE) is None
    assert await store.done(first, {"records": 3})
    third = await store.claim("w3", LEASE)
    assert third is not None and third.id == a2 and third.payload == {"n": 2}
    assert (await store.get(a1)).result == {"records": 3}  # type: ignore[union-attr]


async def test_only_the_kinds_asked_for_are_claimed(store: JobStore) -> None:
    await store.enqueue("merge", "sys:merge")
    assert await store.claim("w", LEASE, ["formation"]) is None
    job = await store.claim("w", LEASE, ["formation", "merge"])
    assert job is not None and job.kind == "merge"


async def test_a_job_whose_worker_died_is_claimed_again_after_its_lease(store: JobStore) -> None:
    now = utcnow()
    job_id = await store.enqueue("formation", "s", now=now)
    lost = await store.claim("dead-worker", LEASE, now=now)
    assert lost is not None and lost.attempts == 1
    assert await store.claim("other", LEASE, now=now + LEASE - timedelta(seconds=1)) is None  # still leased
    again = await store.claim("other", LEASE, now=now + LEASE + timedelta(seconds=1))
    assert again is not None and again.id == job_id and again.attempts == 2
    assert not await store.done(lost)  # the first worker lost it: its late finish changes nothing
    assert await store.done(again)
    assert (await store.get(job_id)).status == DONE  # type: ignore[union-attr]


async def test_failures_back_off_then_the_job_is_dead(store: JobStore) -> None:
    now = utcnow()
    job_id = await store.enqueue("formation", "s", max_attempts=2, now=now)
    job = await store.claim("w", LEASE, now=now)
    assert job is not None
    assert await store.failed(job, "model unreachable", now=now) == PENDING
    assert await store.claim("w", LEASE, now=now + retry_delay(1) - timedelta(seconds=1)) is None
    job = await store.claim("w", LEASE, now=now + retry_delay(1))
    assert job is not None and job.attempts == 2
    assert await store.failed(job, "model unreachable again", now=now) == DEAD
    dead = await store.get(job_id)
    assert dead is not None and dead.status == DEAD and dead.last_error == "model unreachable again"
    assert (await store.counts())[DEAD] == 1
    assert [j.id for j in await store.list(DEAD)] == [job_id]
    assert await store.retry(job_id)
    assert not await store.retry(job_id)  # pending now, not dead
    revived = await store.claim("w", LEASE)
    assert revived is not None and revived.attempts == 1


async def test_a_permanent_failure_is_dead_at_once_and_blocks_nothing_after_it(store: JobStore) -> None:
    first = await store.enqueue("formation", "s")
    second = await store.enqueue("formation", "s")
    job = await store.claim("w", LEASE)
    assert job is not None and job.id == first
    assert await store.failed(job, "bad payload", permanent=True) == DEAD
    nxt = await store.claim("w", LEASE)
    assert nxt is not None and nxt.id == second  # a dead job does not hold its session's queue


async def test_a_job_that_kills_its_worker_every_time_ends_up_dead(store: JobStore) -> None:
    now = utcnow()
    job_id = await store.enqueue("formation", "s", max_attempts=2, now=now)
    for attempt in range(2):
        now += LEASE + timedelta(seconds=1)
        job = await store.claim("w", LEASE, now=now)
        assert job is not None and job.attempts == attempt + 1  # never finished: the process died
    now += LEASE + timedelta(seconds=1)
    assert await store.claim("w", LEASE, now=now) is None
    dead = await store.get(job_id)
    assert dead is not None and dead.status == DEAD and "lease ran out" in (dead.last_error or "")


async def test_dedupe_queues_the_same_work_once(store: JobStore) -> None:
    assert await store.enqueue("formation", "s", dedupe="formation:1:10-20") is not None
    assert await store.enqueue("formation", "s", dedupe="formation:1:10-20") is None
    assert (await store.counts())[PENDING] == 1


async def test_next_due_ignores_a_job_waiting_for_an_earlier_one(store: JobStore) -> None:
    now = utcnow()
    assert await store.next_due() is None
    await store.enqueue("formation", "s", now=now)
    await store.enqueue("formation", "s", now=now)
    job = await store.claim("w", LEASE, now=now)
    assert job is not None
    due = await store.next_due()
    assert due is not None and due >= now + LEASE - timedelta(seconds=1)  # the lease, not the blocked job
    assert await store.extend(job, LEASE * 2, now=now)
    assert (await store.get(job.id)).status == RUNNING  # type: ignore[union-attr]


# --- the runner --------------------------------------------------------------------------------


async def test_the_runner_runs_each_session_in_order_and_sessions_side_by_side(store: JobStore) -> None:
    runner = JobRunner(store, workers=2)
    seen: list[tuple[str, int]] = []
    busy: dict[str, int] = {}
    overlapped = asyncio.Event()

    async def work(job: Job) -> Mapping[str, Any]:
        busy[job.key] = busy.get(job.key, 0) + 1
        assert busy[job.key] == 1  # never two of one session at once
        if len([k for k, n in busy.items() if n]) == 2:
            overlapped.set()
        await asyncio.wait_for(overlapped.wait(), 5)  # each waits until both sessions run at once
        seen.append((job.key, job.payload["n"]))
        busy[job.key] -= 1
        return {"n": job.payload["n"]}

    runner.register("formation", work)
    for n in range(3):
        await runner.enqueue("formation", "a", {"n": n})
        await runner.enqueue("formation", "b", {"n": n})
    runner.start()
    try:
        await runner.idle(timeout=20)
    finally:
        await runner.stop()
    assert [n for k, n in seen if k == "a"] == [0, 1, 2]
    assert [n for k, n in seen if k == "b"] == [0, 1, 2]
    assert (await store.counts())[DONE] == 6


async def test_a_job_queued_while_the_worker_reads_the_queue_wakes_it(store: JobStore) -> None:
    """A wake that lands while an idle worker asks the queue when the next job is due must not be
    lost: the job runs now, not after the worker's idle poll (30 s)."""
    runner = JobRunner(store, workers=1)
    ran = asyncio.Event()

    async def work(job: Job) -> Mapping[str, Any]:
        ran.set()
        return {}

    runner.register("formation", work)
    reading, go_on = asyncio.Event(), asyncio.Event()
    next_due = store.next_due

    async def slow_next_due() -> Any:
        due = await next_due()  # nothing due: read before the job below is queued
        reading.set()
        await go_on.wait()
        return due

    store.next_due = slow_next_due  # type: ignore[method-assign]
    runner.start()
    try:
        await asyncio.wait_for(reading.wait(), 5)  # the worker found nothing and reads the queue
        await runner.enqueue("formation", "a")  # queued (and woken) meanwhile
        go_on.set()
        await asyncio.wait_for(ran.wait(), 5)
    finally:
        await runner.stop()


async def test_the_runner_retries_a_failure_and_keeps_secrets_out_of_the_error(
    store: JobStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="clawgate.jobs")
    runner = JobRunner(store, workers=1, secrets=["sk-live-abcdef123456"])
    calls = 0

    async def flaky(job: Job) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("provider said no to key sk-live-abcdef123456")

    runner.register("formation", flaky)
    job_id = await runner.enqueue("formation", "s", max_attempts=1)
    assert job_id is not None
    assert await runner.run_once() is not None
    job = await store.get(job_id)
    assert job is not None and job.status == DEAD and calls == 1
    assert "sk-live" not in (job.last_error or "") and "RuntimeError" in (job.last_error or "")
    assert "job_dead" in caplog.text and "sk-live" not in caplog.text


async def test_job_failed_permanent_skips_the_retries(store: JobStore) -> None:
    runner = JobRunner(store, workers=1)

    async def hopeless(job: Job) -> None:
        raise JobFailed("the session no longer exists", permanent=True)

    runner.register("formation", hopeless)
    job_id = await runner.enqueue("formation", "s")
    assert job_id is not None
    await runner.run_once()
    job = await store.get(job_id)
    assert job is not None and job.status == DEAD and job.attempts == 1
    assert job.last_error == "JobFailed: the session no longer exists"


async def test_a_job_cut_off_by_stop_runs_again_after_restart(store: JobStore) -> None:
    started = asyncio.Event()
    runs: list[int] = []

    async def slow(job: Job) -> None:
        runs.append(job.attempts)
        started.set()
        await asyncio.Event().wait()  # until cancelled, as if the process were killed mid-job

    first = JobRunner(store, workers=1, lease=timedelta(milliseconds=200))
    first.register("formation", slow)
    job_id = await first.enqueue("formation", "s")
    first.start()
    await asyncio.wait_for(started.wait(), 10)
    await first.stop()
    assert (await store.get(job_id)).status == RUNNING  # type: ignore[union-attr]

    async def quick(job: Job) -> Mapping[str, Any]:
        runs.append(job.attempts)
        return {"ok": True}

    second = JobRunner(store, workers=1, lease=timedelta(milliseconds=200))
    second.register("formation", quick)
    second.start()
    try:
        await second.idle(timeout=10)
    finally:
        await second.stop()
    assert runs == [1, 2]
    assert (await store.get(job_id)).status == DONE  # type: ignore[union-attr]


async def test_old_finished_jobs_and_older_dead_letters_are_pruned(store: JobStore) -> None:
    from memory.store.jobs import KEEP_DEAD, KEEP_DONE

    now = utcnow()
    ids = [await store.enqueue("formation", f"s{n}", max_attempts=1, now=now) for n in range(3)]
    for n in range(3):
        job = await store.claim("w", LEASE, now=now)
        assert job is not None
        if n < 2:
            await store.done(job, now=now)
        else:
            await store.failed(job, "no", now=now)
    assert await store.prune(now=now + KEEP_DONE - timedelta(minutes=1)) == 0
    assert await store.prune(now=now + KEEP_DONE + timedelta(minutes=1)) == 2  # the dead letter stays
    assert [j.id for j in await store.list()] == [ids[2]]
    assert await store.prune(now=now + KEEP_DEAD + timedelta(minutes=1)) == 1
