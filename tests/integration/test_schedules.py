"""Reminders and scheduled runs through the real gateway (docs/schedules.md): Telegram on its local
fake, the fake model, and a virtual wall clock, so a reminder an hour away fires at once.

Nothing here sleeps: the clock moves, the job workers are woken, and the tests wait for what the
fake platform received."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.app import Gateway
from memory.store.schedules import CANCELLED, REMINDER
from tests.fakes.clock import WallClock
from tests.fakes.llm import FakeLLM, ToolCall
from tests.fakes.telegram import GROUP_ID, Fail, FakeTelegram
from tests.telegram_world import telegram_world
from tests.waits import until

ADA, BOB = 1001, 1002
USERS = {
    "ada": {"identities": [f"telegram:{ADA}"], "timezone": "Europe/Berlin"},
    "bob": {"identities": [f"telegram:{BOB}"]},
}


def texts(tg: FakeTelegram) -> list[str]:
    """What each message the bot sent shows now (a streamed reply's last edit)."""
    shown: dict[int, str] = {}
    for s in tg.sent:
        shown[s.message_id] = s.text
    return list(shown.values())


async def fire(gw: Gateway, clock: WallClock, **delta: float) -> None:
    """Move the wall clock and let the job workers run what fell due."""
    clock.advance(**delta)
    assert gw.jobs is not None
    await gw.jobs.idle()


async def said(tg: FakeTelegram, text: str) -> str:
    """Wait for a message containing `text`; the message."""
    await until(lambda: any(text in t for t in texts(tg)))
    return next(t for t in texts(tg) if text in t)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[tuple[Gateway, FakeTelegram, FakeLLM, WallClock]]:
    clock = WallClock()
    async with telegram_world(tmp_path, USERS, clock=clock, telegram={"dm_policy": "open"}) as (gw, tg, llm):
        yield gw, tg, llm, clock


async def test_a_reminder_fires_in_the_conversation_it_was_set_in_at_the_persons_time(world: Any) -> None:
    gw, tg, _llm, clock = world
    await tg.dm("/remind in 20m stretch your legs", sender=ADA)
    receipt = await said(tg, "⏰ Reminder #")
    assert "Wed 2 Dec 09:00 (Europe/Berlin)" in receipt and "stretch your legs" in receipt
    await fire(gw, clock, minutes=19)
    assert not any(t.startswith("⏰ Reminder: ") for t in texts(tg))  # not yet
    await fire(gw, clock, minutes=1)
    assert await said(tg, "⏰ Reminder: stretch your legs")
    reminder = (await gw.storage.schedules.list(statuses=()))[0]
    assert (reminder.status, reminder.runs, reminder.last_outcome) == ("done", 1, "ok")
    # The conversation's history says so: the model sees it was reminded (the gateway's words).
    history = await gw.storage.sessions.history(f"telegram:dm:{ADA}")
    assert history[-1].content == "⏰ Reminder: stretch your legs" and history[-1].author.startswith("clawgate:")


async def test_a_repeating_reminder_fires_each_time_and_listing_and_cancelling_are_the_persons_own(world: Any) -> None:
    gw, tg, _llm, clock = world
    await tg.dm("/remind every day 9:00 water the plants", sender=ADA)
    await said(tg, "every day at 09:00")
    await fire(gw, clock, minutes=20)  # 09:00 Berlin
    await said(tg, "⏰ Reminder: water the plants")
    await fire(gw, clock, days=1)
    await until(lambda: texts(tg).count("⏰ Reminder: water the plants") == 2)
    (mine,) = await gw.storage.schedules.list(owner="ada", kind=REMINDER)
    await tg.dm(f"/reminders cancel {mine.id}", sender=BOB)  # not Bob's to cancel
    assert await said(tg, f"You have no reminder #{mine.id}.")
    await tg.dm("/reminders", sender=ADA)
    listing = await said(tg, "Your reminders (1):")
    assert f"#{mine.id} Fri 4 Dec 09:00 (Europe/Berlin, every day at 09:00): water the plants" in listing
    await tg.dm(f"/reminders cancel {mine.id}", sender=ADA)
    await said(tg, f"Cancelled reminder #{mine.id}.")
    await fire(gw, clock, days=1)
    assert texts(tg).count("⏰ Reminder: water the plants") == 2
    assert (await gw.storage.schedules.get(mine.id)).status == CANCELLED  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("command", "answer"),
    [
        ("/remind yesterday 9:00 pay", "No reminder set: that time has passed"),
        ("/remind sometime pay", "No reminder set: I could not find a time at the start"),
        ("/remind in 2 years pay", "No reminder set: reminders can be set at most a year ahead"),
        ("/remind every 1 minutes spam", "No reminder set: a reminder repeats at most every 5 minutes"),
        ("/remind tomorrow", "No reminder set: say what to remind you of"),
        ("/timezone Mars/Olympus", "unknown IANA time zone"),
    ],
)
async def test_bad_reminders_get_a_clear_answer_and_nothing_is_scheduled(world: Any, command: str, answer: str) -> None:
    gw, tg, _llm, _clock = world
    await tg.dm(command, sender=BOB)
    assert await said(tg, answer)
    assert await gw.storage.schedules.list(statuses=()) == []


async def test_a_public_conversation_takes_no_reminder(tmp_path: Path) -> None:
    telegram = {"dm_policy": "open", "audience": {str(GROUP_ID): "public"}}
    async with telegram_world(tmp_path, USERS, clock=WallClock(), telegram=telegram) as (gw, tg, _llm):
        await tg.group("/remind in 20m stretch", sender=ADA, mention=True)
        assert await said(tg, "No reminder set: reminders cannot be set in a public conversation")
        assert await gw.storage.schedules.list(statuses=()) == []


async def test_the_persons_own_time_zone_reads_their_times(world: Any) -> None:
    gw, tg, _llm, _clock = world
    await tg.dm("/timezone America/New_York", sender=BOB)
    await said(tg, "now use the time zone America/New_York")
    await tg.dm("/remind at 17:30 leave", sender=BOB)
    receipt = await said(tg, "⏰ Reminder #")
    assert "17:30 (America/New_York)" in receipt
    (s,) = await gw.storage.schedules.list(owner="bob")
    assert s.next_due is not None and s.next_due.hour == 22  # 17:30 in New York is 22:30 UTC
    await tg.dm("/timezone UTC", sender=ADA)  # Ada's comes from the config
    assert await said(tg, "set in the gateway's config")


async def test_the_model_sets_a_reminder_and_the_person_sees_the_gateways_record(world: Any) -> None:
    gw, tg, llm, clock = world
    llm.script(ToolCall("schedule_reminder", {"when": "tomorrow 9:00", "text": "call the bank"}))
    await tg.dm("remind me tomorrow at 9 to call the bank", sender=ADA)
    answer = await said(tg, "⏰ Reminder #")
    assert "Thu 3 Dec 09:00 (Europe/Berlin)" in answer and "call the bank" in answer
    await fire(gw, clock, days=1, minutes=20)
    assert await said(tg, "⏰ Reminder: call the bank")


async def test_an_agent_reminder_asks_the_model_and_its_prompt_forms_no_memory(world: Any) -> None:
    gw, tg, llm, clock = world
    await tg.dm("/remind in 1h ask: summarise my day", sender=ADA)
    await said(tg, "⏰ Reminder #")
    asked = len(llm.requests)
    await fire(gw, clock, hours=1)
    await until(lambda: len(llm.requests) > asked)
    prompt = llm.requests[-1]["messages"]
    assert "summarise my day" in prompt[-1]["content"] and "a reminder" in prompt[-1]["content"]
    await said(tg, "summarise my day")  # the fake model echoes what it was asked
    await gw.jobs.idle()  # the run keeps its messages after the answer is out
    history = await gw.storage.sessions.history(f"telegram:dm:{ADA}")
    run_prompt = next(m for m in history if "summarise my day" in m.content and m.role == "user")
    assert run_prompt.author.startswith("clawgate:")  # formation treats it as the gateway's words


async def test_a_reminder_missed_while_down_fires_once_at_the_next_start_marked_late(tmp_path: Path) -> None:
    clock = WallClock()
    async with telegram_world(tmp_path, USERS, clock=clock, telegram={"dm_policy": "open"}) as (gw, tg, _llm):
        await tg.dm("/remind in 10m take the cake out", sender=ADA)
        await said(tg, "⏰ Reminder #")
    clock.advance(hours=3)  # the gateway was down when it fell due
    async with telegram_world(tmp_path, USERS, clock=clock, telegram={"dm_policy": "open"}) as (gw, tg, _llm):
        assert gw.jobs is not None
        await gw.jobs.idle()
        late = await said(tg, "⏰ Reminder: take the cake out")
        assert "late: the gateway was not running" in late
        (s,) = await gw.storage.schedules.list(statuses=())
        assert (s.runs, s.last_outcome) == (1, "late")
    async with telegram_world(tmp_path, USERS, clock=clock, telegram={"dm_policy": "open"}) as (gw, tg, _llm):
        assert gw.jobs is not None
        await gw.jobs.idle()
        assert not any("take the cake out" in t for t in texts(tg))  # never twice


async def test_a_run_the_platform_fails_is_retried_after_the_queues_backoff(world: Any) -> None:
    gw, tg, _llm, clock = world
    assert gw.router is not None
    gw.router.delivery._sleep = _no_wait  # the send's own quick retries: not what this test is about
    await tg.dm("/remind in 5m ping", sender=ADA)
    await said(tg, "⏰ Reminder #")
    for _ in range(4):  # the send and its three quick retries all fail: the run fails
        tg.fail_next("sendMessage", Fail(500))
    await fire(gw, clock, minutes=5)
    assert not any("⏰ Reminder: ping" in t for t in texts(tg))
    (job,) = await gw.storage.jobs.list(kind="schedule_run", status="pending")
    assert job.attempts == 1 and "refused" in (job.last_error or "")
    await fire(gw, clock, seconds=30)  # the queue's first backoff
    await said(tg, "⏰ Reminder: ping")
    (s,) = await gw.storage.schedules.list(statuses=())
    assert (s.last_outcome, s.runs) == ("ok", 1)


async def test_an_agent_run_the_platform_fails_is_answered_after_the_queues_backoff(world: Any) -> None:
    """The streamed answer's claim is given back too when nothing of it reached the platform."""
    gw, tg, _llm, clock = world
    assert gw.router is not None
    gw.router.delivery._sleep = _no_wait
    await tg.dm("/remind in 5m ask: summarise my day", sender=ADA)
    await said(tg, "⏰ Reminder #")
    for _ in range(12):  # every send of the first try fails, however it streams
        tg.fail_next("sendMessage", Fail(500))
    await fire(gw, clock, minutes=5)
    (job,) = await gw.storage.jobs.list(kind="schedule_run", status="pending")
    assert job.attempts == 1 and "refused" in (job.last_error or "")
    tg.heal()
    await fire(gw, clock, seconds=30)
    await said(tg, "summarise my day")
    (s,) = await gw.storage.schedules.list(statuses=())
    assert (s.last_outcome, s.runs) == ("ok", 1)


async def test_a_run_that_cannot_be_delivered_is_dead_lettered_with_its_reason(world: Any) -> None:
    gw, tg, _llm, clock = world
    await tg.dm("/remind in 5m ping", sender=ADA)
    await said(tg, "⏰ Reminder #")
    for _ in range(2):  # the adapter tries once more without formatting after a 400
        tg.fail_next("sendMessage", Fail(400, "Bad Request: chat not found"))
    await fire(gw, clock, minutes=5)
    (s,) = await gw.storage.schedules.list(statuses=())
    assert s.last_outcome == "dead" and "chat not found" in (s.last_error or "").lower()
    (dead,) = await gw.storage.jobs.list(status="dead", kind="schedule_run")
    assert "chat not found" in (dead.last_error or "").lower()
    assert (await gw.status())["jobs"]["dead"] == 1


async def _no_wait(_seconds: float) -> None:
    return None
