"""Times people write, and cron rules, read in their time zone (gateway/schedules/when.py). Pure:
`now` is given. Wednesday 2 December 2026, 08:40 in Berlin (07:40 UTC)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.config.fields import check_cron, parse_duration
from gateway.schedules.when import When, WhenError, cron_next, describe_cron, parse_reminder, span

NOW = datetime(2026, 12, 2, 7, 40, tzinfo=UTC)
BERLIN = "Europe/Berlin"


@pytest.mark.parametrize(
    ("text", "due_local", "what"),
    [
        ("in 20m stretch", "2026-12-02 09:00", "stretch"),
        ("in 20 minutes stretch", "2026-12-02 09:00", "stretch"),
        ("in an hour tea", "2026-12-02 09:40", "tea"),
        ("in 1h30m tea", "2026-12-02 10:10", "tea"),
        ("in 2 weeks renew", "2026-12-16 08:40", "renew"),
        ("tomorrow 9:00 call the bank", "2026-12-03 09:00", "call the bank"),
        ("tomorrow at 9 to call the bank", "2026-12-03 09:00", "call the bank"),
        ("me tomorrow at 9pm to call mum", "2026-12-03 21:00", "call mum"),
        ("at 17:30 deploy", "2026-12-02 17:30", "deploy"),
        ("9:00 coffee", "2026-12-02 09:00", "coffee"),  # later today
        ("8:00 coffee", "2026-12-03 08:00", "coffee"),  # passed today: tomorrow
        ("noon lunch", "2026-12-02 12:00", "lunch"),
        ("tonight call mum", "2026-12-02 20:00", "call mum"),
        ("friday pay rent", "2026-12-04 09:00", "pay rent"),
        ("next friday 10:00 review", "2026-12-04 10:00", "review"),
        ("dec 24 10am buy gifts", "2026-12-24 10:00", "buy gifts"),
        ("2026-12-24 10:00 gifts", "2026-12-24 10:00", "gifts"),
    ],
)
def test_one_off_times_are_read_in_the_persons_zone(text: str, due_local: str, what: str) -> None:
    when, said = parse_reminder(text, BERLIN, NOW)
    from zoneinfo import ZoneInfo

    assert f"{when.first.astimezone(ZoneInfo(BERLIN)):%Y-%m-%d %H:%M}" == due_local
    assert said == what and not when.repeats


@pytest.mark.parametrize(
    ("text", "cron", "every", "first_local", "what"),
    [
        ("every monday 8:30 standup notes", "30 8 * * 1", None, "2026-12-07 08:30", "standup notes"),
        ("every weekday 8:30 standup", "30 8 * * 1-5", None, "2026-12-03 08:30", "standup"),
        ("every day water plants", "0 9 * * *", None, "2026-12-02 09:00", "water plants"),
        ("every morning ask: summarise the news", "0 8 * * *", None, "2026-12-03 08:00", "ask: summarise the news"),
        ("every weekend at 10 sleep in", "0 10 * * 6,0", None, "2026-12-05 10:00", "sleep in"),
        ("every 2 hours drink water", None, timedelta(hours=2), "2026-12-02 10:40", "drink water"),
    ],
)
def test_repeating_rules(text: str, cron: str | None, every: timedelta | None, first_local: str, what: str) -> None:
    from zoneinfo import ZoneInfo

    when, said = parse_reminder(text, BERLIN, NOW)
    assert (when.cron, when.every, said) == (cron, every, what)
    assert f"{when.first.astimezone(ZoneInfo(BERLIN)):%Y-%m-%d %H:%M}" == first_local


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "say when and what"),
        ("call the bank", "could not find a time"),
        ("5 pushups", "could not find a time"),  # a bare number is no time
        ("yesterday 9:00 pay", "that time has passed"),
        ("in 2 years pay", "at most a year ahead"),
        ("tomorrow", "say what to remind you of"),
        ("every 1 minutes spam", "at most every 5 minutes"),
    ],
)
def test_times_that_cannot_be_used_are_refused_in_plain_words(text: str, why: str) -> None:
    with pytest.raises(WhenError, match=why):
        parse_reminder(text, BERLIN, NOW)


def test_a_cron_rule_keeps_its_local_time_across_a_daylight_saving_change() -> None:
    before = datetime(2027, 3, 27, 5, 0, tzinfo=UTC)  # Berlin moves to summer time on the 28th
    first = cron_next("30 8 * * *", BERLIN, before)
    second = cron_next("30 8 * * *", BERLIN, first)
    assert (first.hour, second.hour) == (7, 6)  # 08:30 local both days: 07:30 then 06:30 UTC


def test_an_interval_skips_the_times_missed_and_never_runs_twice() -> None:
    when = When(NOW, BERLIN, every=timedelta(hours=1))
    assert when.next_after(NOW - timedelta(minutes=5)) == NOW
    assert when.next_after(NOW) == NOW + timedelta(hours=1)
    assert when.next_after(NOW + timedelta(hours=5, minutes=1)) == NOW + timedelta(hours=6)
    assert When(NOW, BERLIN).next_after(NOW) is None  # a one-off is done


@given(st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2035, 1, 1), timezones=st.just(UTC)))
def test_the_next_due_time_is_always_later_than_now(now: datetime) -> None:
    for rule in ("*/5 * * * *", "30 8 * * 1-5", "0 0 1 * *"):
        assert cron_next(rule, BERLIN, now) > now


def test_cron_and_durations_are_checked_by_the_library_with_clear_words() -> None:
    assert check_cron("30  8 * * 1-5") == "30 8 * * 1-5"
    with pytest.raises(ValueError, match="five fields"):
        check_cron("30 8 * *")
    with pytest.raises(ValueError, match="not a valid cron expression"):
        check_cron("61 8 * * *")
    assert parse_duration("90s") == timedelta(seconds=90)
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("soon")
    assert describe_cron("30 8 * * 1") == "every Monday at 08:30"
    assert describe_cron("*/5 * * * *") == "cron '*/5 * * * *'"
    # How a repeating reminder's interval is shown (/reminders), not as 2:00:00.
    assert (span(timedelta(hours=2)), span(timedelta(minutes=1)), span(timedelta(seconds=90))) == (
        "2 hours",
        "minute",
        "90 seconds",
    )
