"""Time in questions (memory/when.py): English expressions and the windows they name, at a fixed
moment and in a given time zone, across a daylight-saving change and a year's end; words that only
look like times; event anchors; and that no text makes it raise."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory.when import MAX_CHARS, TimeHint, find

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)  # a Monday, noon
OPEN = None


def at(text: str) -> datetime:
    """'2026-11-29' or '2026-11-29 20:00', UTC."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def window(query: str, now: datetime = NOW, zone: str = "UTC") -> tuple[datetime | None, datetime | None, str]:
    hint = find(query, now, zone)
    assert hint is not None, query
    return hint.start, hint.end, "soft" if hint.soft else "hard"


# (question, start, end, hard or soft): UTC, now Monday 2026-11-30 12:00. A question that looks back
# takes the latest March begun; one that does not, the next one (its time is an event's), and a window
# not yet over in such a question is soft: the memory may have been written any time before.
TABLE = [
    ("what did I decide yesterday", "2026-11-29", "2026-11-30", "hard"),
    ("what did I write the day before yesterday", "2026-11-28", "2026-11-29", "hard"),
    ("what did I say two days ago", "2026-11-28", "2026-11-29", "hard"),
    ("what did I eat this morning", "2026-11-30 04:00", "2026-11-30 12:00", "hard"),
    ("what did I do last night", "2026-11-29 20:00", "2026-11-30 06:00", "hard"),
    ("what did I say 3 hours ago", "2026-11-30 08:30", "2026-11-30 09:30", "hard"),
    ("what did I do a few days ago", "2026-11-25", "2026-11-29", "soft"),
    ("what happened last week", "2026-11-23", "2026-11-30", "hard"),
    ("what did I do the week before last", "2026-11-16", "2026-11-23", "hard"),
    ("what happened earlier this week", "2026-11-30", "2026-11-30 12:00", "hard"),
    ("what did I note this week", "2026-11-30", "2026-12-07", "hard"),
    ("anything from last weekend?", "2026-11-28", "2026-11-30", "hard"),
    ("what happened last month", "2026-10-01", "2026-11-01", "hard"),
    ("what did I plan last year", "2025-01-01", "2026-01-01", "hard"),
    ("what did I say in the last three days", "2026-11-27 12:00", "2026-11-30 12:00", "hard"),
    ("what did I learn in the past few weeks", "2026-11-09 12:00", "2026-11-30 12:00", "soft"),
    ("what did I do on Monday", "2026-11-23", "2026-11-24", "hard"),
    ("what did I do on Tuesday evening", "2026-11-24 17:00", "2026-11-25", "hard"),
    ("what did I do from Monday to Wednesday", "2026-11-23", "2026-11-26", "hard"),
    ("what did I note in March", "2026-03-01", "2026-04-01", "hard"),
    ("what happened in March", "2026-03-01", "2026-04-01", "hard"),
    ("what did I note about the autoscaler in May?", "2026-05-01", "2026-06-01", "hard"),
    ("what did we migrate last June?", "2026-06-01", "2026-07-01", "hard"),
    ("what did I settle back in April?", "2026-04-01", "2026-05-01", "hard"),
    ("what was my time in the race I ran in March?", "2026-03-01", "2026-04-01", "hard"),
    ("what did I read between May and July", "2026-05-01", "2026-08-01", "hard"),
    ("what changed since September", "2026-09-01", "2026-11-30 12:00", "hard"),
    ("what changed before March", OPEN, "2026-03-01", "hard"),
    ("what did I use after March", "2026-04-01", OPEN, "hard"),
    ("what did I do in 2025", "2025-01-01", "2026-01-01", "hard"),
    ("what happened in early 2025", "2025-01-01", "2025-05-01", "hard"),
    ("what did I do over the summer", "2026-06-01", "2026-09-01", "hard"),
    ("what did I do last summer", "2026-06-01", "2026-09-01", "hard"),
    ("what did I note on 7 December 2025", "2025-12-07", "2025-12-08", "hard"),
    ("what did I say on December 7th, 2025?", "2025-12-07", "2025-12-08", "hard"),
    ("notes from 2026-03-15", "2026-03-15", "2026-03-16", "hard"),
    ("what did I mention recently", "2026-10-31 12:00", "2026-11-30 12:00", "soft"),
    ("which editor do I use these days?", "2026-10-31 12:00", "2026-11-30 12:00", "soft"),
    # Not looking back: the time is an event's, ahead.
    ("what trip do I have in March?", "2027-03-01", "2027-04-01", "soft"),
    ("where am I travelling in April?", "2027-04-01", "2027-05-01", "soft"),
    ("what did I book for March", "2027-03-01", "2027-04-01", "soft"),
    ("am I on call this week?", "2026-11-30", "2026-12-07", "soft"),
    ("what do I have on the week of 7 December?", "2026-12-07", "2026-12-14", "soft"),
    ("which big event do I have at the start of December?", "2026-12-01", "2026-12-11", "soft"),
    ("what are Lena and I doing in late February?", "2027-02-20", "2027-03-01", "soft"),
    ("what is happening at work in the second half of January?", "2027-01-17", "2027-02-01", "soft"),
    ("where will I be over the new year?", "2026-12-28", "2027-01-04", "soft"),
    ("what changes after the review on the 9th?", "2026-12-09", "2026-12-10", "soft"),
    ("remind me in 2 weeks", "2026-12-14", "2026-12-21", "soft"),
]


@pytest.mark.parametrize(("query", "start", "end", "kind"), TABLE)
def test_expressions_and_their_windows(query: str, start: str | None, end: str | None, kind: str) -> None:
    expected = (at(start) if start else None, at(end) if end else None, kind)
    assert window(query) == expected


@pytest.mark.parametrize(
    ("query", "rest", "phrase"),
    [
        ("what did I decide yesterday", "what did I decide", "yesterday"),
        ("what did I decide yesterday?", "what did I decide?", "yesterday"),
        ("Yesterday, what did I decide?", "what did I decide?", "Yesterday"),
        ("what did I note about the autoscaler in May?", "what did I note about the autoscaler?", "in May"),
        ("what did I read between May and July", "what did I read", "between May and July"),
        ("what did I do last week and yesterday?", "what did I do?", "last week yesterday"),
        ("yesterday", "yesterday", "yesterday"),  # nothing else to search: the question itself
    ],
)
def test_the_question_without_its_time(query: str, rest: str, phrase: str) -> None:
    hint = find(query, NOW)
    assert hint is not None and hint.rest == rest and hint.phrase == phrase


NOT_TIMES = [
    "May I ask you something",
    "a second opinion",
    "march on",
    "last resort",
    "I will be there in 5",
    "what is my favourite coffee",
    "what did Jan say about the deploy",
    "April said she likes tea",
    "an august institution",
    "set the timeout in 2000 ms",
    "we need 2025 users",
    "what's my Tuesday routine?",
    "what sport do I do on Wednesday evenings?",
    "every Monday I swim",
    "the office is on the 2nd floor",
    "when is Tomás's birthday?",
    "since you asked, what is it?",
    "before I go, what's the plan?",
    "my winter coat is blue",
    "I fall asleep easily",
    "the last time I checked",
    "at last",
    "what is my last name",
    "one day I will learn Rust",
    "",
    "   ",
]


@pytest.mark.parametrize("query", NOT_TIMES)
def test_words_that_only_look_like_times(query: str) -> None:
    assert find(query, NOW) is None


@pytest.mark.parametrize(
    ("query", "event", "relation"),
    [
        ("what did I use before the move", "move", "before"),
        ("since I switched to Helix, what broke?", "switched Helix", "after"),
        ("what did I eat after moving to Lisbon", "moving Lisbon", "after"),
        ("how was work prior to my surgery?", "surgery", "before"),
        ("what did I use before the move is done", "move", "before"),
    ],
)
def test_an_event_is_left_for_the_caller_to_date(query: str, event: str, relation: str) -> None:
    hint = find(query, NOW)
    assert hint is not None and hint.event == event and hint.relation == relation
    assert hint.soft and hint.rest == query  # the event's words say what the question is about
    moved = at("2026-05-10")
    dated = hint.anchored(moved)
    assert (dated.start, dated.end) == ((None, moved) if relation == "before" else (moved, None))


def test_a_named_time_wins_over_an_event() -> None:
    hint = find("what did I do after the review on the 9th?", NOW)
    assert hint is not None and hint.event is None and hint.start == at("2026-11-09")


# --- time zones ----------------------------------------------------------------------------------


def test_the_window_is_the_persons_day() -> None:
    # 23:30 UTC on 31 December is already New Year's morning in Tokyo (UTC+9).
    now = at("2026-12-31 23:30")
    assert window("what did I do yesterday", now, "Asia/Tokyo") == (
        at("2026-12-30 15:00"),
        at("2026-12-31 15:00"),
        "hard",
    )
    assert window("what did I do yesterday", now) == (at("2026-12-30"), at("2026-12-31"), "hard")


def test_a_day_that_lost_an_hour_to_daylight_saving() -> None:
    # Berlin went to summer time at 01:00 UTC on Sunday 29 March 2026: that day has 23 hours.
    now = at("2026-03-30 10:00")
    start, end, _ = window("what did I do yesterday", now, "Europe/Berlin")
    assert (start, end) == (at("2026-03-28 23:00"), at("2026-03-29 22:00"))
    assert end - start == timedelta(hours=23)
    assert window("what happened last week", now, "Europe/Berlin")[:2] == (
        at("2026-03-22 23:00"),
        at("2026-03-29 22:00"),
    )


def test_a_day_that_gained_an_hour() -> None:
    # New York left summer time at 06:00 UTC on Sunday 1 November 2026: that day has 25 hours.
    start, end, _ = window("what did I do yesterday", at("2026-11-02 15:00"), "America/New_York")
    assert (start, end) == (at("2026-11-01 04:00"), at("2026-11-02 05:00"))
    assert end - start == timedelta(hours=25)


def test_a_month_named_across_daylight_saving_is_midnight_to_midnight_local() -> None:
    start, end, _ = window("what did I note in March", NOW, "Europe/Berlin")
    assert (start, end) == (at("2026-02-28 23:00"), at("2026-03-31 22:00"))  # CET in, CEST out


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("what did I note in December", "2026-12-01", "2027-01-01"),
        ("what happened last month", "2026-12-01", "2027-01-01"),
        ("what happened last week", "2026-12-21", "2026-12-28"),
        ("what did I do last year", "2026-01-01", "2027-01-01"),
        ("what did I plan this year", "2027-01-01", "2028-01-01"),
        ("what did I do last winter", "2025-12-01", "2026-03-01"),
        ("what did I do on Monday", "2026-12-28", "2026-12-29"),
        ("what did I say the day before yesterday", "2026-12-31", "2027-01-01"),
    ],
)
def test_across_a_years_end(query: str, start: str, end: str) -> None:
    # Saturday 2 January 2027.
    assert window(query, at("2027-01-02 12:00"))[:2] == (at(start), at(end))


def test_a_naive_now_is_utc_and_a_zone_may_be_a_tzinfo() -> None:
    naive = find("what did I decide yesterday", datetime(2026, 11, 30, 12, 0))
    zoned = find("what did I decide yesterday", NOW, ZoneInfo("UTC"))
    assert naive is not None and naive == zoned


# --- the hint itself ------------------------------------------------------------------------------


def test_only_the_past_part_of_a_window_can_hold_memories() -> None:
    this_week = find("what did I note this week", NOW)
    assert this_week is not None and this_week.bounded(NOW) == (at("2026-11-30"), NOW)
    ahead = find("what trip do I have in March?", NOW)
    assert ahead is not None and ahead.bounded(NOW) is None
    hint = TimeHint(at("2026-03-01"), at("2026-04-01"), False, "in March", "q")
    assert hint.contains(at("2026-03-01")) and not hint.contains(at("2026-04-01"))
    assert hint.overlaps(at("2026-03-31 23:00"), at("2026-04-01 23:00"))
    assert not hint.overlaps(at("2026-04-01"), at("2026-04-02"))


ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo", "Australia/Lord_Howe", "Pacific/Kiritimati"]
WORDS = ["in", "last", "since", "between", "and", "May", "March", "the", "9th", "2025", "ago", "two", "days", "week"]


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(st.text(max_size=300), st.lists(st.sampled_from(WORDS), max_size=12).map(" ".join)),
    st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2098, 12, 31), timezones=st.just(UTC)),
    st.sampled_from(ZONES),
)
def test_any_text_gives_a_hint_or_none_never_an_error(text: str, now: datetime, zone: str) -> None:
    hint = find(text, now, zone)
    if hint is not None and hint.start is not None and hint.end is not None:
        assert hint.start <= hint.end
        assert hint.start.tzinfo is UTC and hint.end.tzinfo is UTC


def test_a_very_long_question() -> None:
    text = "what did I note in May about the deploy " * 250  # 10,000 characters
    hint = find(text, NOW)
    assert hint is not None and hint.start == at("2026-05-01") and hint.rest.startswith("what did I note about")
    assert find(" ".join(["word"] * 300) + " yesterday", NOW) is None  # past MAX_CHARS: a paste's own dates
    assert MAX_CHARS == 1_000
