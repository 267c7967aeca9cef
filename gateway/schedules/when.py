"""When a reminder or a scheduled run is due: times people write ("in 20 minutes", "tomorrow 9:00",
"every monday 8:30") and cron expressions, in a person's time zone (docs/schedules.md).

Dates and relative times ("friday", "dec 24", "in 2 hours") are dateparser's; the time of day ("9",
"9:30", "9pm", "noon") is read here, because dateparser drops it after a date ("tomorrow at 9" is
08:40 tomorrow when asked at 08:40) and moves a bare "9:00" to the next day in a time zone east of
UTC. Repeating rules ("every weekday 8:30") become cron expressions that croniter evaluates; a few
words of grammar are read here, since no library reads them. Everything is pure: `now` is given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from gateway.config.fields import parse_duration

MAX_AHEAD = timedelta(days=366)  # a reminder further away than this is refused
DEFAULT_TIME = time(9, 0)  # "friday", "every monday": at 09:00
_PARTS_OF_DAY = {"morning": time(8, 0), "noon": time(12, 0), "afternoon": time(15, 0), "evening": time(18, 0)}
_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_CRON_DAY = {name: str((i + 1) % 7) for i, name in enumerate(_DAYS)}  # cron: 0 is Sunday

_CLOCK = r"(?:(?P<h>\d{1,2})(?:[:.](?P<m>\d{2}))?\s*(?P<ampm>am|pm|a\.m\.|p\.m\.)?|(?P<named>noon|midnight))"
_TIME = re.compile(rf"(?:^|\s)(?P<at>at\s+)?{_CLOCK}(?=\s|$)", re.IGNORECASE)
_RELATIVE = re.compile(
    r"^in\s+(?P<span>(?:(?:\d+|an?|one)\s*"
    r"(?:seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h|days?|d|weeks?|w)(?![a-z])\s*)+)"
    r"(?P<rest>.*)$",
    re.IGNORECASE,
)
_EVERY = re.compile(
    r"^every\s+(?:(?P<n>\d+)\s*(?P<unit>minutes?|mins?|hours?|hrs?|days?|weeks?)"
    r"|(?P<unit1>hour|minute)"
    r"|(?P<day>day|weekday|weekdays|weekend|morning|afternoon|evening|night|" + "|".join(_DAYS) + r")s?)\b"
    rf"(?:\s+(?P<at>at\s+)?{_CLOCK}(?=\s|$))?\s*(?P<rest>.*)$",
    re.IGNORECASE,
)
_UNIT = {"min": "m", "minute": "m", "hour": "h", "hr": "h", "day": "d", "week": "w"}


class WhenError(ValueError):
    """A time that cannot be used, in plain words for the person who wrote it."""


@dataclass(frozen=True, slots=True)
class When:
    """The first due time (UTC) and, for a repeating rule, a cron expression or an interval."""

    first: datetime
    zone: str
    cron: str | None = None
    every: timedelta | None = None

    @property
    def repeats(self) -> bool:
        return self.cron is not None or self.every is not None

    def next_after(self, after: datetime) -> datetime | None:
        """The first due time strictly after `after` (UTC); None for a one-off."""
        if self.cron is not None:
            return cron_next(self.cron, self.zone, after)
        if self.every is not None:
            if after < self.first:
                return self.first
            steps = (after - self.first) // self.every + 1
            return self.first + steps * self.every
        return None


def cron_next(expr: str, zone: str, after: datetime) -> datetime:
    """The first time `expr` (read in `zone`) matches strictly after `after`, in UTC."""
    from croniter import croniter

    local = after.astimezone(ZoneInfo(zone))
    nxt = croniter(expr, local).get_next(datetime)
    return nxt.astimezone(UTC)


def describe_cron(expr: str) -> str:
    """A cron expression in words, for the rules this module writes; the expression itself otherwise."""
    minute, hour, dom, month, dow = expr.split()
    if minute.isdigit() and hour.isdigit() and dom == "*" and month == "*":
        at = f"{int(hour):02d}:{int(minute):02d}"
        days = {"*": "every day", "1-5": "every weekday", "6,0": "every weekend day"}
        if dow in days:
            return f"{days[dow]} at {at}"
        if dow.isdigit():
            return f"every {_DAYS[(int(dow) - 1) % 7].capitalize()} at {at}"
    return f"cron {expr!r}"


def span(d: timedelta) -> str:
    """A duration in words: "2 hours", "minute", "90 seconds"."""
    seconds = int(d.total_seconds())
    for unit, size in (("week", 604800), ("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            n = seconds // size
            return f"{n} {unit}{'s' if n != 1 else ''}" if n != 1 else unit
    return f"{seconds} seconds"


def _clock(m: re.Match[str]) -> time | None:
    """The time of day a _CLOCK match names; None when it is no time (25:00, 9:75)."""
    named = m.group("named")
    if named:
        return time(12, 0) if named.lower() == "noon" else time(0, 0)
    if m.group("h") is None:
        return None
    hour, minute = int(m.group("h")), int(m.group("m") or 0)
    ampm = (m.group("ampm") or "").lower().replace(".", "")
    if ampm:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if ampm == "pm" else 0)
    elif m.group("m") is None and not m.group("at"):
        return None  # a bare number ("5 pushups") is no time; "at 5" and "5:00" are
    if hour > 23 or minute > 59:
        return None
    return time(hour, minute)


def _day(words: str, local_now: datetime) -> date | None:
    """The date `words` name ("tomorrow", "friday", "dec 24", "2026-12-24"), or None."""
    import dateparser

    if not words:
        return None
    if not re.search(r"[a-z]", words, re.IGNORECASE) and not re.search(r"\d[-/.]\d", words):
        return None  # "5" alone is no date
    settings = {"PREFER_DATES_FROM": "future", "RELATIVE_BASE": local_now.replace(tzinfo=None)}
    found = dateparser.parse(words, languages=["en"], settings=settings)
    return found.date() if found is not None else None


def _at(day: date, clock: time, zone: ZoneInfo) -> datetime:
    return datetime.combine(day, clock, tzinfo=zone).astimezone(UTC)


def _one_off(head: str, zone: ZoneInfo, now: datetime) -> datetime | None:
    """The moment `head` names ("tomorrow 9:00", "at 17:30", "friday", "dec 24 10am"), or None."""
    local_now = now.astimezone(zone)
    clock: time | None = None
    for m in _TIME.finditer(head):  # the first that is a time: "dec 24 10am" is 10:00, not 24
        clock = _clock(m)
        if clock is not None:
            head = (head[: m.start()] + " " + head[m.end() :]).strip()
            break
    if head.lower() in _PARTS_OF_DAY and clock is None:
        clock, head = _PARTS_OF_DAY[head.lower()], ""
    if not head:
        if clock is None:
            return None
        at = _at(local_now.date(), clock, zone)  # today at that time, or tomorrow once it has passed
        return at if at > now else _at(local_now.date() + timedelta(days=1), clock, zone)
    words = head.lower().removesuffix(" at").strip()
    day: date | None
    if words in ("today", "tonight"):
        day = local_now.date()
        clock = clock or (time(20, 0) if words == "tonight" else None)
    else:
        day = _day(words, local_now)
    if day is None or (clock is None and day == local_now.date() and words == "today"):
        return None
    return _at(day, clock or DEFAULT_TIME, zone)


def _relative(span: str, now: datetime) -> datetime | None:
    import dateparser

    settings = {"PREFER_DATES_FROM": "future", "RELATIVE_BASE": now.astimezone(UTC).replace(tzinfo=None)}
    found = dateparser.parse(f"in {span}", languages=["en"], settings=settings)
    return found.replace(tzinfo=UTC) if found is not None else None


def _every(m: re.Match[str], zone: str, now: datetime, min_interval: timedelta) -> When:
    clock = _clock(m) if (m.group("h") or m.group("named")) else None
    if m.group("n") or m.group("unit1"):
        unit = (m.group("unit") or m.group("unit1")).lower().rstrip("s")
        every = parse_duration(f"{m.group('n') or 1}{_UNIT[unit]}")
        if every < min_interval:
            raise WhenError(f"a reminder repeats at most every {span(min_interval)}")
        if clock is not None:
            first = _one_off(f"at {clock:%H:%M}", ZoneInfo(zone), now)
            assert first is not None
        else:
            first = now + every
        return When(first, zone, every=every)
    day = m.group("day").lower()
    part = _PARTS_OF_DAY.get(day) or (time(21, 0) if day == "night" else None)
    clock = clock or part or DEFAULT_TIME
    dow = {"day": "*", "weekday": "1-5", "weekdays": "1-5", "weekend": "6,0"}.get(day, "*")
    dow = _CRON_DAY.get(day, dow)
    expr = f"{clock.minute} {clock.hour} * * {dow}"
    return When(cron_next(expr, zone, now), zone, cron=expr)


def parse_reminder(
    text: str, zone: str, now: datetime, *, min_interval: timedelta = timedelta(minutes=5)
) -> tuple[When, str]:
    """`/remind`'s argument split into when it is due and what to say: "in 20m stretch",
    "tomorrow 9:00 call the bank", "every monday 8:30 standup notes", "me at 5pm to leave".
    WhenError, in words for the person, when no time is found, it has passed or is too far."""
    text = re.sub(r"^\s*me\s+", "", text.strip(), flags=re.IGNORECASE)
    if not text:
        raise WhenError("say when and what, e.g. /remind in 20m stretch, or /remind tomorrow 9:00 call the bank")
    tz = ZoneInfo(zone)
    when: When | None = None
    rest = ""
    if (m := _EVERY.match(text)) is not None:
        when, rest = _every(m, zone, now, min_interval), m.group("rest")
    elif (m := _RELATIVE.match(text)) is not None:
        at = _relative(m.group("span").strip(), now)
        if at is not None:
            when, rest = When(at, zone), m.group("rest")
    else:
        words = text.split()
        for k in range(min(6, len(words)), 0, -1):  # the longest start of the text that is a time
            at = _one_off(" ".join(words[:k]), tz, now)
            if at is not None:
                when, rest = When(at, zone), " ".join(words[k:])
                break
    if when is None:
        raise WhenError(
            "I could not find a time at the start: try 'in 20m', 'tomorrow 9:00', 'friday 17:30', "
            "'dec 24 10am' or 'every monday 8:30'"
        )
    what = re.sub(r"^(?:to|that|:|-)\s+", "", rest.strip(), flags=re.IGNORECASE).strip()
    if not what:
        raise WhenError("say what to remind you of after the time, e.g. /remind in 20m stretch")
    check_due(when.first, now)
    return when, what


def check_due(at: datetime, now: datetime) -> None:
    """WhenError when `at` has passed or is more than a year away."""
    if at <= now:
        raise WhenError(f"that time has passed ({at:%Y-%m-%d %H:%M} UTC); give a time in the future")
    if at - now > MAX_AHEAD:
        raise WhenError("reminders can be set at most a year ahead")
