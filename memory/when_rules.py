"""The rules memory.when reads time expressions by: a pattern for each kind of expression ("yesterday",
"two days ago", "last week", "in the last three days", "on Monday", "7 December", "the 9th", "in
March", "in 2025", "over the summer", "at Christmas", "recently"), what each match means at a given
moment, and the arithmetic of windows in local wall time (a day, a week from Monday, a month, a
season, part of one: "early March", "the second half of January").

Every pattern may be led by a relation ("since", "before", "between"), a preposition ("in", "back
in", "over") and a part ("the start of", "late"): they belong to the expression, so the question
without it reads well, and they say what the window is (since September: from its start until now).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from functools import partial
from typing import Literal

from memory.when_words import (
    AFTER_EVENT_OK,
    DAY,
    MONTH,
    MONTHS,
    NUM,
    NUMBERS,
    PARTS_OF_DAY,
    SEASONS,
    UNIT,
    UNIT_AFTER_YEAR,
    WEEKDAY,
    WEEKDAYS,
    YEAR,
)

Tense = Literal["past", "future"]
# A window, start inclusive and end exclusive (None: open). The rules work in naive local wall time
# (or aware, for spans counted from now); an Atom's window is in UTC.
Win = tuple[datetime | None, datetime | None]
RECENT_DAYS = 30  # "recently", "lately": the last month, as recall's recency half-life


@dataclass(frozen=True, slots=True)
class Atom:
    """One time expression found: where it is, the window it names (UTC) and how it is led."""

    lo: int  # the span in the question, relation and preposition included
    hi: int
    win: Win
    soft: bool
    rel: str | None  # since, before, after, until, from, between
    choices: tuple[Win, ...] = ()  # a recurring name's occurrences, for a range's second end


@dataclass(frozen=True, slots=True)
class Now:
    """The moment a question is read at, in the person's time zone, and whether the question looks back."""

    utc: datetime
    local: datetime  # naive
    today: date
    tense: Tense
    zone: tzinfo

    def utc_window(self, win: Win) -> Win:
        """A window in local wall time (or already absolute) in UTC."""
        return _to_utc(win[0], self.zone), _to_utc(win[1], self.zone)


def _to_utc(t: datetime | None, zone: tzinfo) -> datetime | None:
    if t is None or t.tzinfo is not None:
        return t
    return t.replace(tzinfo=zone).astimezone(UTC)


# --- windows in local wall time -------------------------------------------------------------------


def _mid(d: date) -> datetime:
    return datetime(d.year, d.month, d.day)


def _day(d: date) -> Win:
    return _mid(d), _mid(d + timedelta(days=1))


def _week(d: date) -> Win:
    monday = d - timedelta(days=d.weekday())
    return _mid(monday), _mid(monday + timedelta(days=7))


def _month(y: int, m: int, k: int = 0) -> Win:
    y, m = divmod(y * 12 + m - 1 + k, 12)
    first = datetime(y, m + 1, 1)
    y2, m2 = divmod(y * 12 + m + 1, 12)
    return first, datetime(y2, m2 + 1, 1)


def _year(y: int) -> Win:
    return datetime(y, 1, 1), datetime(y + 1, 1, 1)


def _season(name: str, y: int) -> Win:
    first = SEASONS[name]
    return _month(y, first)[0], _month(y, first, 3)[0]


def _part_of_day(win: Win, part: str) -> Win:
    start = win[0]
    assert start is not None
    h1, h2 = PARTS_OF_DAY[part]
    return start + timedelta(hours=h1), start + timedelta(hours=h2)


_PARTS = {
    "early": (0.0, 1 / 3),
    "start": (0.0, 1 / 3),
    "beginning": (0.0, 1 / 3),
    "mid": (1 / 3, 2 / 3),
    "middle": (1 / 3, 2 / 3),
    "late": (2 / 3, 1.0),
    "end": (2 / 3, 1.0),
    "first half": (0.0, 0.5),
    "second half": (0.5, 1.0),
}


def _part(win: Win, part: str | None) -> Win:
    """Part of a window ("early March", "the second half of January", "late 2025"), in days; in months
    for a year (early 2025 is January to April)."""
    lo, hi = win
    if not part or lo is None or hi is None or hi - lo < timedelta(days=2):
        return win
    part = " ".join(w for w in part.lower().split() if w not in ("the", "of", "very"))
    if part in ("first week", "last week"):
        return (lo, lo + timedelta(days=7)) if part == "first week" else (hi - timedelta(days=7), hi)
    f0, f1 = _PARTS.get(part, (0.0, 1.0))
    if lo.month == hi.month == 1 and lo.day == hi.day == 1 and hi.year == lo.year + 1:
        return _month(lo.year, 1, round(12 * f0))[0], _month(lo.year, 1, round(12 * f1))[0]
    days = (hi - lo).days
    return lo + timedelta(days=round(days * f0)), lo + timedelta(days=round(days * f1))


def _pick(choices: Sequence[Win], how: str, t: datetime) -> Win | None:
    """The occurrence of a recurring name: `past` the latest begun, `future` the next not over, `last`
    the latest over, `next` the next not begun, `this` the one under way (else `future`'s)."""
    if how == "this":
        under = [w for w in choices if w[0] is not None and w[1] is not None and w[0] <= t < w[1]]
        if under:
            return under[0]
        how = "future"
    if how in ("past", "last"):
        fit = [w for w in choices if w[0] is not None and (w[0] <= t if how == "past" else w[1] and w[1] <= t)]
        return fit[-1] if fit else None
    fit = [w for w in choices if w[1] is not None and (w[1] > t if how == "future" else w[0] and w[0] > t)]
    return fit[0] if fit else None


def _yearly(period: Callable[[int], Win], y: int) -> tuple[Win, ...]:
    out = []
    for year in range(y - 2, y + 2):
        try:
            out.append(period(year))
        except ValueError:  # the 29th of February, the 31st of a short month
            continue
    return tuple(out)


# --- the rules ----------------------------------------------------------------------------------

# What may stand before an expression and is part of it: a relation, a preposition, a part of it.
_REL = r"(?:(?P<rel>since|from|before|after|until|till|up\s+to|prior\s+to|between|as\s+of)\s+)?"
_PREP = r"(?:(?P<prep>in|on|at|during|over|within|throughout|around|for|of|back\s+in|sometime\s+in|earlier\s+in)\s+)?"
_PART = (
    r"(?:(?:the\s+)?(?P<part>(?:very\s+)?(?:start|beginning|end|middle|first\s+half|second\s+half|first\s+week"
    r"|last\s+week)\s+of|early|mid|late)[\s-]+)?"
)
_LEAD = r"\b" + _REL + _PREP + r"(?:the\s+)?" + _PART + r"(?:the\s+)?"


@dataclass(frozen=True, slots=True)
class _Rule:
    """A pattern, tried only on a text that holds one of its gate's words (lowercase substrings): most
    questions name no time, and a pattern led by _LEAD costs a try at every word."""

    pattern: re.Pattern[str]
    gate: tuple[str, ...]

    def scan(self, text: str, low: str) -> Iterator[re.Match[str]]:
        if any(word in low for word in self.gate):
            yield from self.pattern.finditer(text)


def _rx(body: str, gate: tuple[str, ...]) -> _Rule:
    return _Rule(re.compile(_LEAD + r"(?:" + body + r")(?![\w'])", re.IGNORECASE), gate)


_DIGITS = tuple("0123456789")
_UNITS = ("minute", "hour", "day", "night", "week", "fortnight", "month", "year")
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")


class _Rules:
    """Each rule: a pattern and what its match means at `now` (None: not a time, after all)."""

    def __init__(self, now: Now) -> None:
        self.now = now

    def how(self, m: re.Match[str], mod: str | None) -> str:
        if mod:
            mod = mod.lower()
            if mod in ("last", "past", "previous"):
                return "last"
            if mod in ("next", "coming"):
                return "next"
            if mod in ("this", "current"):
                return "this"
        rel, prep = (m.group("rel") or "").lower(), (m.group("prep") or "").lower()
        if rel in ("since", "after", "as of") or prep.startswith("back"):
            return "past"
        if prep == "for":  # "what did I book for March": the March it is for
            return "future"
        return self.now.tense

    def relative_day(self, m: re.Match[str]) -> Win | None:
        word = " ".join(m.group("rd").lower().split())
        today = self.now.today
        offsets = {"yesterday": -1, "today": 0, "tonight": 0, "tomorrow": 1, "earlier today": 0, "last night": -1}
        if "before yesterday" in word:
            win = _day(today - timedelta(days=2))
        elif "after tomorrow" in word:
            win = _day(today + timedelta(days=2))
        elif word.startswith("this "):
            return _part_of_day(_day(today), word.split()[1])
        else:
            win = _day(today + timedelta(days=offsets[word]))
        if word in ("tonight", "last night"):
            return _part_of_day(win, "night")
        if word == "earlier today":
            return win[0], self.now.utc
        part = m.group("dp")
        return _part_of_day(win, part.lower()) if part else win

    def ago(self, m: re.Match[str]) -> tuple[Win, bool] | None:
        n, approx = NUMBERS.get(" ".join(m.group("n").lower().split()), (0, False))
        if not n and m.group("n").isdigit():
            n = int(m.group("n"))
        unit = m.group("unit").lower()
        if n <= 0:
            return None
        future = m.group("fut") is not None
        sign = 1 if future else -1
        if unit in ("minute", "hour"):
            step = timedelta(minutes=n) if unit == "minute" else timedelta(hours=n)
            at = self.now.utc + sign * step
            margin = step / 2 if approx else min(step, timedelta(hours=1)) / 2
            return (at - margin, at + margin), approx
        if approx:  # "a few days ago": from one less to two more than said
            lo, hi = self.unit(unit, sign * (n + 2)), self.unit(unit, sign * max(1, n - 1))
            return (min(lo[0], hi[0]), max(lo[1], hi[1])), True  # type: ignore[type-var]
        return self.unit(unit, sign * n), False

    def unit(self, unit: str, k: int) -> Win:
        today = self.now.today
        if unit in ("day", "night"):
            return _day(today + timedelta(days=k))
        if unit in ("week", "fortnight"):
            return _week(today + timedelta(days=7 * k * (2 if unit == "fortnight" else 1)))
        if unit == "month":
            return _month(today.year, today.month, k)
        return _year(today.year + k)

    def calendar(self, m: re.Match[str]) -> Win:
        """A calendar week, weekend, month or year: "last week", "earlier this week", "the week before last"."""
        if m.group("blast"):
            return self.unit(m.group("unit2").lower(), -2)
        mod, unit = " ".join((m.group("mod") or "").lower().split()), m.group("unit").lower()
        step = {"last": -1, "previous": -1, "this past": -1, "next": 1, "coming": 1}.get(mod, 0)
        if unit == "weekend":
            monday = self.now.today - timedelta(days=self.now.today.weekday())
            start = _mid(monday + timedelta(days=5 + 7 * step))
            return start, start + timedelta(days=2)
        if unit == "fortnight":
            span = timedelta(days=14)
            return (self.now.utc - span, self.now.utc) if step <= 0 else (self.now.utc, self.now.utc + span)
        win = self.unit(unit, step)
        if mod == "earlier this":
            return win[0], self.now.local
        if mod == "later this":
            return self.now.local, win[1]
        return win

    def rolling(self, m: re.Match[str]) -> tuple[Win, bool] | None:
        """A span back or on from now: "in the last three days", "over the past few weeks", "the next two months"."""
        n, approx = NUMBERS.get(" ".join((m.group("n") or "one").lower().split()), (0, False))
        if m.group("n") and m.group("n").isdigit():
            n = int(m.group("n"))
        if n <= 0:
            return None
        days = {"minute": 0, "hour": 0, "day": 1, "night": 1, "week": 7, "fortnight": 14, "month": 30, "year": 365}
        unit = m.group("unit").lower()
        span = timedelta(days=days[unit] * n) if days[unit] else timedelta(hours=n if unit == "hour" else n / 60)
        sign = 1 if m.group("mod").lower() == "next" else -1
        win = (self.now.utc - span, self.now.utc) if sign < 0 else (self.now.utc, self.now.utc + span)
        return win, approx

    def weekday(self, m: re.Match[str]) -> tuple[Win, tuple[Win, ...]] | None:
        today = self.now.today
        wd = WEEKDAYS[m.group("wd").lower()]
        this_week = today - timedelta(days=today.weekday()) + timedelta(days=wd)
        choices = tuple(_day(this_week + timedelta(days=7 * k)) for k in (-2, -1, 0, 1, 2))
        how = self.how(m, m.group("mod"))
        if how == "this":
            win: Win | None = _day(this_week)
        else:  # a weekday named without "this" is another day than today
            start, end = _day(today)
            others = tuple(w for w in choices if w != (start, end))
            win = _pick(others, {"past": "last", "future": "next"}.get(how, how), self.now.local)
        if win is None:
            return None
        part = m.group("dp")
        return (_part_of_day(win, part.lower()) if part else win), choices

    def dated(self, m: re.Match[str]) -> tuple[Win, tuple[Win, ...]] | None:
        """A day of a month: "7 December", "December 7th, 2026", "the 9th" (of this month, the last or the next)."""
        mon = m.group("mon")
        month = MONTHS[mon.lower().rstrip(".")] if mon else None
        day = int(m.group("day"))
        year = int(m.group("year")) if m.group("year") else None
        if month is None:  # "the 9th": a day of this month, the last or the next
            today = self.now.today
            periods = []
            for k in (-2, -1, 0, 1, 2):
                first = _month(today.year, today.month, k)[0]
                assert first is not None
                try:
                    periods.append(_day(date(first.year, first.month, day)))
                except ValueError:
                    continue
            choices: tuple[Win, ...] = tuple(periods)
        elif year is not None:
            try:
                return _day(date(year, month, day)), ()
            except ValueError:
                return None
        else:
            choices = _yearly(lambda y: _day(date(y, month, day)), self.now.today.year)
        win = _pick(choices, self.how(m, None), self.now.local)
        return (win, choices) if win is not None else None

    def named(self, m: re.Match[str], period: Callable[[int], Win], mod: str | None) -> tuple[Win, tuple[Win, ...]]:
        year = m.group("year")
        if year:
            win = period(int(year))
            return win, (win,)
        choices = _yearly(period, self.now.today.year)
        how = self.how(m, mod)
        if how == "this" and not any(w[0] and w[1] and w[0] <= self.now.local < w[1] for w in choices):
            this_year = [w for w in choices if w[0] is not None and w[0].year == self.now.today.year]
            return (this_year[0] if this_year else choices[0]), choices
        picked = _pick(choices, how, self.now.local)
        return (picked if picked is not None else choices[-1]), choices


def _context(m: re.Match[str], *more: str) -> bool:
    """A word that says a name is a time ("in May", "last March", "summer 2025"), not "May I" or "march on"."""
    return any(m.group(g) for g in ("rel", "prep", "part", *more))


_RELATIVE_DAY = _rx(
    r"(?P<rd>(?:the\s+)?day\s+before\s+yesterday|(?:the\s+)?day\s+after\s+tomorrow|yesterday|today|tonight|tomorrow"
    r"|this\s+(?:morning|afternoon|evening)|last\s+night|earlier\s+today)(?:\s+(?P<dp>morning|afternoon|evening|night))?",
    ("yesterday", "today", "tonight", "tomorrow", "morning", "afternoon", "evening", "night"),
)
_AGO = _rx(
    r"(?:(?P<fut>in)\s+(?:about\s+)?)?(?:about\s+|around\s+)?(?P<n>" + NUM + r")\s+(?P<unit>" + UNIT + r")s?"
    r"(?(fut)(?:\s+time)?|\s+(?:ago|back))",
    _UNITS,
)
_CALENDAR = _rx(
    r"(?:(?P<mod>last|previous|this|current|next|coming|earlier\s+this|later\s+this|this\s+past)\s+"
    r"(?P<unit>week|weekend|month|year|fortnight)|(?P<blast>(?P<unit2>week|month|year)\s+before\s+last))",
    ("week", "month", "year", "fortnight"),
)
_ROLLING = _rx(
    r"(?P<mod>last|past|previous|next)\s+(?:(?P<n>" + NUM + r")\s+)?(?P<unit>" + UNIT + r")(?P<pl>s)?", _UNITS
)
_WEEKDAY = _rx(
    r"(?<!\bmy\s)(?<!\bour\s)(?<!\bevery\s)(?<!\beach\s)(?<!\ba\s)"  # "my Tuesday routine": any Tuesday
    r"(?:(?P<mod>last|this|next|past|coming)\s+)?(?P<wd>" + WEEKDAY + r")(?!s\b)(?:'s)?"
    r"(?!\s+(?:morning|afternoon|evening|night)s\b)"  # "on Friday nights": every Friday
    r"(?:\s+(?P<dp>morning|afternoon|evening|night))?",
    ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"),
)
_DATED = [
    _rx(
        r"(?P<day>" + DAY + r")(?:st|nd|rd|th)?(?:\s+of)?\s+(?P<mon>" + MONTH + r")(?:,?\s+(?P<year>" + YEAR + r"))?",
        _DIGITS,
    ),
    _rx(
        r"(?P<mon>"
        + MONTH
        + r")\s+(?:the\s+)?(?P<day>"
        + DAY
        + r")(?:st|nd|rd|th)?(?!\d)(?:,?\s+(?P<year>"
        + YEAR
        + r"))?",
        _DIGITS,
    ),
    _rx(r"(?P<mon>)(?P<day>" + DAY + r")(?:st|nd|rd|th)(?P<year>)", _DIGITS),
]
_WEEK_OF = re.compile(r"\b(?:(?:in|on|during|for)\s+)?the\s+week\s+(?:of\s+)?$", re.IGNORECASE)
_ISO = _rx(r"(?P<y>" + YEAR + r")-(?P<m>0[1-9]|1[0-2])(?:-(?P<d>0[1-9]|[12]\d|3[01]))?(?!-)", _DIGITS)
_MONTH = _rx(
    r"(?:(?P<mod>last|this|next|coming|past)\s+)?(?P<mon>" + MONTH + r")(?:,?\s+(?:of\s+)?(?P<year>" + YEAR + r"))?",
    _MONTHS,
)
_YEAR = _rx(r"(?P<year>" + YEAR + r")", ("19", "20"))
_SEASON = _rx(
    r"(?:(?P<mod>last|this|next|past|coming)\s+)?(?P<season>spring|summer|autumn|fall|winter)"
    r"(?:\s+(?:of\s+)?(?P<year>" + YEAR + r"))?(?:\s+(?:holidays?|break|vacation|months))?",
    ("spring", "summer", "autumn", "fall", "winter"),
)
_HOLIDAY = _rx(
    r"(?:(?P<mod>last|this|next|past|coming)\s+)?(?P<hol>christmas|xmas|new\s+year(?:'s|s)?)"
    r"(?:\s+(?:eve|day|holidays?|break))?(?:\s+(?P<year>" + YEAR + r"))?",
    ("christmas", "xmas", "new year"),
)
_SOFT = _rx(
    r"(?P<soft>recently|lately|of\s+late|these\s+days|the\s+other\s+day|not\s+long\s+ago|just\s+now|a\s+while\s+(?:ago|back)"
    r"|some\s+time\s+ago|(?:most\s+)?recent)",
    ("recent", "late", "days", "other day", "long ago", "just now", "while", "time ago"),
)
_RANGE_END = re.compile(
    r"\b(?:between|from)\s+[^,.;:?!]{1,40}?\s*(?:\s(?:and|to|through|thru|until|till)\s|[-\u2013])\s*$", re.I
)


def atoms(text: str, now: Now) -> list[Atom]:
    rules = _Rules(now)
    found: list[Atom] = []
    low = text.lower()

    def add(m: re.Match[str], win: Win | None, soft: bool = False, choices: tuple[Win, ...] = ()) -> None:
        if win is None:
            return
        rel = m.group("rel")
        found.append(
            Atom(
                m.start(),
                m.end(),
                now.utc_window(_part(win, m.group("part"))),
                soft,
                " ".join(rel.lower().split()) if rel else None,
                tuple(now.utc_window(w) for w in choices),
            )
        )

    for m in _RELATIVE_DAY.scan(text, low):
        add(m, rules.relative_day(m))
    for m in _AGO.scan(text, low):
        ago = rules.ago(m)
        if ago is not None:
            add(m, ago[0], ago[1])
    for m in _CALENDAR.scan(text, low):
        add(m, rules.calendar(m))
    for m in _ROLLING.scan(text, low):
        if m.group("n") or m.group("pl") or m.group("mod").lower() == "past":
            rolled = rules.rolling(m)
            if rolled is not None:
                add(m, rolled[0], rolled[1])
    for m in _WEEKDAY.scan(text, low):
        picked = rules.weekday(m)
        if picked is not None:
            add(m, picked[0], choices=picked[1])
    for i, pattern in enumerate(_DATED):
        for m in pattern.scan(text, low):
            if i == 2 and not _day_alone(m, text):
                continue
            picked = rules.dated(m)
            if picked is None:
                continue
            week_of = _WEEK_OF.search(text, 0, m.start())
            if week_of is not None and picked[0][0] is not None:  # "the week of 7 December"
                found.append(Atom(week_of.start(), m.end(), now.utc_window(_week(picked[0][0].date())), False, None))
            else:
                add(m, picked[0], choices=picked[1])
    for m in _ISO.scan(text, low):
        y, mo, d = int(m.group("y")), int(m.group("m")), m.group("d")
        try:
            add(m, _day(date(y, mo, int(d))) if d else _month(y, mo))
        except ValueError:  # the 31st of a short month
            continue
    for m in _MONTH.scan(text, low):
        # "in May", "last March", "August 2025", "between May and July"; not "May I", "April said"
        if _context(m, "mod", "year") or _RANGE_END.search(text, max(0, m.start() - 64), m.start()):
            month = MONTHS[m.group("mon").lower().rstrip(".")]
            win, choices = rules.named(m, partial(_month, m=month), m.group("mod"))
            add(m, win, choices=choices)
    for m in _YEAR.scan(text, low):
        if _context(m) and (m.group("prep") or "").lower() != "at" and not UNIT_AFTER_YEAR.match(text, m.end()):
            add(m, _year(int(m.group("year"))))  # "in 2025"; not "at 2030" (a time), "in 2000 ms"
    for m in _SEASON.scan(text, low):
        if _context(m, "mod", "year"):  # "over the summer", "last winter"; not "summer clothes"
            win, choices = rules.named(m, partial(_season, m.group("season").lower()), m.group("mod"))
            add(m, win, choices=choices)
    for m in _HOLIDAY.scan(text, low):
        period = _new_year if m.group("hol").lower().startswith("new") else _christmas
        win, choices = rules.named(m, period, m.group("mod"))
        add(m, win, choices=choices)
    for m in _SOFT.scan(text, low):
        add(m, _soft(" ".join(m.group("soft").lower().split()), now), True)
    return _non_overlapping(found)


def _christmas(y: int) -> Win:
    return datetime(y, 12, 20), datetime(y, 12, 28)


def _new_year(y: int) -> Win:
    return datetime(y - 1, 12, 28), datetime(y, 1, 4)


def _soft(word: str, now: Now) -> Win:
    if word.startswith("a while") or word == "some time ago":  # not lately
        return None, now.utc - timedelta(days=RECENT_DAYS)
    if word == "just now":
        return now.utc - timedelta(hours=2), now.utc
    if word == "the other day":
        return _mid(now.today - timedelta(days=10)), _mid(now.today)
    return now.utc - timedelta(days=RECENT_DAYS), now.utc


def _day_alone(m: re.Match[str], text: str) -> bool:
    """Whether "the 9th" is a day ("on the 9th", "after the review on the 9th?"), not "the 9th floor"."""
    if not re.search(r"\bthe\s+" + re.escape(m.group("day")), text[max(0, m.start()) : m.end()], re.IGNORECASE):
        return False
    nxt = re.match(r"\s*([^\W\d_]+)", text[m.end() : m.end() + 20])
    return nxt is None or nxt.group(1).lower() in AFTER_EVENT_OK


def _non_overlapping(found: list[Atom]) -> list[Atom]:
    """The longest expression wins where two overlap ("the last week of May" over "last week")."""
    found.sort(key=lambda a: (a.lo, -(a.hi - a.lo)))
    out: list[Atom] = []
    for a in sorted(found, key=lambda a: (-(a.hi - a.lo), a.lo)):
        if all(a.hi <= b.lo or a.lo >= b.hi for b in out):
            out.append(a)
    return sorted(out, key=lambda a: a.lo)
