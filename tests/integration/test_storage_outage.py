"""A storage that cannot be written (a full disk): clear 503s instead of 500s, not ready while it
lasts, and nothing already accepted is lost: it is answered once writes work again.

The outage is SQLite's own: the driver raises the error SQLite gives on a full disk (SQLITE_FULL)
for every statement that writes. tests/e2e/test_every_door.py fills a real file system instead.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
from sqlalchemy import event

from gateway.app import Gateway
from memory.store.db import StorageUnwritable, unwritable_reason
from tests.conftest import auth
from tests.fakes.llm import FakeLLM, Gate, Reply
from tests.telegram_world import telegram_world
from tests.waits import until

_READS = ("SELECT", "PRAGMA", "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")


@contextmanager
def disk_full(gw: Gateway) -> Iterator[None]:
    """Every write to the gateway's SQLite database fails as on a full disk, until the block ends."""
    assert gw.storage is not None
    engine = gw.storage.db._engine
    assert engine is not None, "the tests' SQLite runs on the thread runner"

    def refuse(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if not statement.lstrip().upper().startswith(_READS):
            err = sqlite3.OperationalError("database or disk is full")
            err.sqlite_errorcode = 13  # type: ignore[attr-defined]  # SQLITE_FULL, as SQLite sets it
            raise err

    event.listen(engine, "before_cursor_execute", refuse)
    try:
        yield
    finally:
        event.remove(engine, "before_cursor_execute", refuse)


async def ready(http: aiohttp.ClientSession, gw: Gateway) -> tuple[int, dict[str, Any]]:
    r = await http.get(gw.url + "/readyz")
    return r.status, await r.json()


def test_unwritable_storage_is_told_apart_by_the_driver_s_code() -> None:
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = 13  # type: ignore[attr-defined]
    assert unwritable_reason(full) == "the disk is full"
    locked = sqlite3.OperationalError("database is locked")
    locked.sqlite_errorcode = 5  # type: ignore[attr-defined]
    assert unwritable_reason(locked) is None
    assert unwritable_reason(OSError(28, "No space left on device")) == "the disk is full"
    assert unwritable_reason(ValueError("database or disk is full")) is None  # never by the words


async def test_a_full_disk_answers_503_and_what_was_accepted_is_answered_afterwards(
    gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    assert gateway.storage is not None
    url = gateway.url + "/api/v1/messages"
    key = {"Idempotency-Key": "kept-through-the-outage"}
    # The first answer cannot be kept (nor is it shown); the turn runs again once it can be (the
    # fake model then echoes).
    fake_llm.script(Gate(then=Reply("an answer the full disk could not keep")))
    first = asyncio.create_task(http.post(url, json={"text": "keep this"}, headers={**auth(), **key}))
    await fake_llm.wait_requests(1)  # journaled, and its turn is under way
    with disk_full(gateway):
        fake_llm.release()
        r = await first
        assert r.status == 503 and r.headers["Retry-After"]
        assert "disk is full" in (reason := (await r.json())["error"]) and "kept" in reason
        status, body = await ready(http, gateway)
        assert status == 503 and body["ready"] is False and body["writable"] is False
        assert "disk is full" in body["problem"]
        r = await http.post(url, json={"text": "and this"}, headers=auth())
        assert r.status == 503  # not journaled: nothing is kept, the client must send it again
        assert "cannot save messages" in (await r.json())["error"]
        r = await http.post(gateway.url + "/v1/chat/completions", json=_openai("hi", "s1"), headers=auth())
        assert r.status == 503 and r.headers["Retry-After"]  # a conversation kept on the gateway
        assert (await r.json())["error"]["code"] == "storage_unwritable"
    await until(lambda: gateway.write_check is not None and gateway.write_check.last is None, timeout=15)
    assert (await ready(http, gateway))[0] == 200

    async def answered() -> bool:
        history = await gateway.storage.sessions.history("web:dm:alice")  # type: ignore[union-attr]
        return [m.content for m in history] == ["keep this", "echo: keep this"]

    async with asyncio.timeout(15):
        while not await answered():  # noqa: ASYNC110  # resumed by the gateway's own watch
            await asyncio.sleep(0.05)
    calls = len(fake_llm.requests)
    r = await http.post(url, json={"text": "keep this"}, headers={**auth(), **key})  # the client's retry
    assert r.status == 200 and (await r.json())["reply"] == "echo: keep this"
    assert r.headers["Idempotent-Replayed"] == "true" and len(fake_llm.requests) == calls


def _openai(text: str, user: str) -> dict[str, Any]:
    return {"model": "default", "user": user, "messages": [{"role": "user", "content": text}]}


async def test_a_person_on_telegram_is_told_and_answered_once_the_disk_has_room(tmp_path: Path) -> None:
    users = {"alice": {"identities": ["telegram:1001"]}}
    async with telegram_world(tmp_path, users) as (gw, tg, llm):
        llm.script(Gate(then=Reply("an answer the full disk could not keep")))
        await tg.dm("what did I miss?")
        await llm.wait_requests(1)
        with disk_full(gw):
            llm.release()
            told = await tg.wait_sent(1)
            assert "can't save anything right now" in told[0].text and "kept your message" in told[0].text
            await tg.dm("are you there?")  # cannot even be journaled: the person is asked to send it again
            asked = await tg.wait_sent(2)
            assert "send yours again" in asked[1].text
            # A transaction that writes nothing succeeds on a full disk too (a job claim that finds no
            # job): what was put off must be answered all the same.
            assert gw.storage is not None
            await gw.storage.db.write(lambda conn: conn.exec_driver_sql("SELECT 1").scalar())
            assert gw.storage.db.unwritable is None
        await tg.wait_for(lambda _: any(m.text == "echo: what did I miss?" for m in tg.sent), timeout=20)
        assert len([m for m in tg.sent if not m.edit]) == 3  # told once, asked once, answered once


async def test_background_work_survives_an_outage(gateway: Gateway, http: aiohttp.ClientSession) -> None:
    """Readiness and the job runner keep going through the outage and recover after it."""
    assert gateway.storage is not None and gateway.write_check is not None
    with disk_full(gateway):
        problem = await gateway.write_check.problem()
        assert problem is not None and "disk is full" in problem
        try:
            await gateway.storage.db.write(lambda conn: conn.exec_driver_sql("DELETE FROM write_checks"))
        except StorageUnwritable as err:
            assert err.reason == "the disk is full"
    await until(lambda: gateway.write_check is not None and gateway.write_check.last is None, timeout=15)
