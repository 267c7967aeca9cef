"""Bursts end to end on Telegram (docs/channels.md, "Bursts"): messages one person sends within
`debounce_ms` are one turn; a command is never part of one and keeps its place; nothing is lost when
the gateway stops in the middle of a burst. Time is a fake clock the test moves (no real waiting)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from gateway.app import Gateway
from gateway.core.events import event_to_payload
from gateway.turn.burst import Bursts
from memory.store.storage import Storage
from tests.fakes.llm import FakeLLM
from tests.fakes.telegram import FakeTelegram
from tests.telegram_world import telegram_world
from tests.unit.test_groups_pure import FakeTime, ev
from tests.waits import until

ADA = 1001
USERS = {"ada": {"identities": [f"telegram:{ADA}"]}}
World = tuple[Gateway, FakeTelegram, FakeLLM, FakeTime]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with telegram_world(tmp_path, USERS, telegram={"debounce_ms": 2000}) as (gw, tg, llm):
        t = FakeTime()
        assert gw.router is not None
        gw.router.bursts = Bursts(t.clock, t.sleep)
        yield gw, tg, llm, t


async def until_journal(gw: Gateway, ok: Callable[[dict[str, int]], bool]) -> None:
    """Until the journal's counts by status satisfy `ok`."""
    assert gw.storage is not None
    async with asyncio.timeout(10):
        while not ok(await gw.storage.journal.counts()):  # noqa: ASYNC110  # the database has no event to wait on
            await asyncio.sleep(0.02)


async def until_received(gw: Gateway, n: int) -> None:
    """Until `n` events wait in the journal (each is recorded before any burst waits on it)."""
    await until_journal(gw, lambda counts: counts.get("received", 0) >= n)


def finals(tg: FakeTelegram) -> list[str]:
    """The bot's DM messages as they read now, in the order they were first sent."""
    shown: dict[int, str] = {}
    for s in tg.sent:
        if s.chat_id == ADA:
            shown[s.message_id] = s.text
    return list(shown.values())


async def test_quick_messages_are_one_turn(world: World) -> None:
    gw, tg, llm, t = world
    for text in ("so about the deploy", "it moved to 17:30", "can you tell the team?"):
        await tg.dm(text, sender=ADA)
    await until_received(gw, 3)
    await t.advance(1.9)
    assert llm.requests == []  # still inside the window
    await t.advance(0.2)
    await until(lambda: "echo: so about the deploy\nit moved to 17:30\ncan you tell the team?" in finals(tg))
    assert len(llm.requests) == 1
    # The reply goes out before its event is marked done: wait for the mark, not only the reply.
    await until_journal(gw, lambda counts: not counts.get("received", 0))
    assert gw.storage is not None
    assert (await gw.storage.journal.counts()) == {"done": 1, "merged": 2}


async def test_a_command_is_never_merged_and_keeps_its_place(world: World) -> None:
    gw, tg, llm, t = world
    await tg.dm("first thought", sender=ADA)
    await until_received(gw, 1)
    await tg.dm("/help", sender=ADA)
    await tg.dm("second thought", sender=ADA)
    await until_received(gw, 3)
    await t.advance(2.1)  # both bursts are quiet now
    await until(lambda: len(finals(tg)) == 3 and finals(tg)[-1] == "echo: second thought")
    first, help_text, second = finals(tg)
    assert (first, second) == ("echo: first thought", "echo: second thought")
    assert help_text.startswith("Commands you can use here:")
    assert len(llm.requests) == 2


async def test_a_stop_in_the_middle_of_a_burst_loses_nothing(tmp_path: Path) -> None:
    async with telegram_world(tmp_path, USERS, telegram={"debounce_ms": 2000}) as (gw, tg, _llm):
        t = FakeTime()
        assert gw.router is not None
        gw.router.bursts = Bursts(t.clock, t.sleep)
        await tg.dm("one", sender=ADA)
        await tg.dm("two", sender=ADA)
        await until_received(gw, 2)
        # The gateway stops while the burst waits for quiet (the fake clock never moves).
    async with telegram_world(tmp_path, USERS, telegram={"debounce_ms": 2000}) as (gw, tg, _llm):
        # Each message was journaled on arrival and never merged: each is answered on its own.
        await until(lambda: {"echo: one", "echo: two"} <= {s.text for s in tg.sent})
        assert gw.storage is not None
        # A turn's reply goes out before its event is marked done: wait for the mark, not only the reply.
        await until_journal(gw, lambda counts: not counts.get("received", 0))
        assert (await gw.storage.journal.counts()).get("merged", 0) == 0  # never merged: answered apart


async def test_a_merge_is_one_transaction_the_leader_carries_the_burst(tmp_path: Path) -> None:
    storage = await Storage.open(f"sqlite:///{tmp_path}/j.db")
    try:
        parts = [ev("one", event_id="e1"), ev("two", event_id="e2"), ev("three", event_id="e3")]
        for part in parts:
            assert await storage.journal.record(part.event_id, "tg", part.ref.session_key, event_to_payload(part))
        merged = event_to_payload(ev("one\ntwo\nthree", event_id="e1"))
        await storage.journal.merge("e1", ["e2", "e3"], merged)
        (left,) = await storage.journal.unfinished()  # what a restart would answer
        assert (left.event_id, left.payload["text"]) == ("e1", "one\ntwo\nthree")
        assert await storage.journal.counts() == {"received": 1, "merged": 2}
    finally:
        await storage.close()
