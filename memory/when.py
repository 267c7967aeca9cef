"""Time in a question (docs/recall.md, "Time in questions"): "what did I decide yesterday", "in March",
"since September", "between May and July", "over the summer", "recently", "before the move".

`find(query, now, zone)` reads English time expressions out of a question and gives the window they
name: start and end in UTC (end exclusive, either may be open), resolved in the person's time zone
from `now`, whether it is a hard window (a day, a week, a month named) or a soft one ("recently",
"a few days ago", an event's date), the expressions as written and the question without them. A
question that says "before" or "after" an event ("before the move", "since I switched to Helix")
gets the event's words instead of a window: the caller dates the event (recall looks it up among the
person's own memories) and resolves it with `TimeHint.anchored`.

Hand-written: the libraries measured (benchmarks/time_expressions.py) either cost over half a
millisecond on every question, found no windows (a point in time, not "March" as a month), or turned
"May I ask", "a second opinion" or "march on" into dates. Pure and total: any text gives a hint or
None, never an error.

Conventions: a week starts on Monday; seasons are the northern meteorological ones (spring March to
May, summer June to August, autumn September to November, winter December to February); morning is
04:00-12:00, afternoon 12:00-18:00, evening 17:00-24:00, night 20:00-06:00. A name that recurs
("March", "Monday", "the 9th", "summer") is the latest one begun when the question speaks of the past
("what did I note in March"), else the next one not yet over ("what trip do I have in March").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, tzinfo
from functools import lru_cache
from typing import Literal
from zoneinfo import ZoneInfo

from memory.when_rules import Atom, Now, Tense, Win, atoms
from memory.when_words import EVENT_STOP, PAST_VERBS, TRIGGER

Relation = Literal["before", "after"]
# Only the start of a long message is read for time: a question is short, and what follows a long
# paste is the paste's own dates. It also bounds the work on any input (10,000 characters of "may").
MAX_CHARS = 1_000


@dataclass(frozen=True, slots=True)
class TimeHint:
    """What a question says about when: a window in UTC (start inclusive, end exclusive, None: open)."""

    start: datetime | None
    end: datetime | None
    soft: bool  # "recently", "a few days ago", an event's date: a leaning, not a boundary
    phrase: str  # the expressions, as written
    rest: str  # the question without them (the question itself for an event, whose words say what)
    event: str | None = None  # before/after an event: its words, for the caller to date (anchored)
    relation: Relation | None = None

    def contains(self, at: datetime) -> bool:
        return (self.start is None or at >= self.start) and (self.end is None or at < self.end)

    def overlaps(self, start: datetime, end: datetime) -> bool:
        """Whether [start, end) meets the window (a day's notes, dated by their day)."""
        return (self.start is None or end > self.start) and (self.end is None or start < self.end)

    def anchored(self, at: datetime) -> TimeHint:
        """An event's hint resolved with the event's date: before it, or from it on."""
        if self.relation == "before":
            return replace(self, start=None, end=at)
        return replace(self, start=at, end=None)

    def bounded(self, now: datetime) -> tuple[datetime | None, datetime] | None:
        """The part of the window that is past at `now` (what can hold memories), or None if none is."""
        end = now if self.end is None or self.end > now else self.end
        if self.start is not None and self.start >= end:
            return None
        return self.start, end


# --- the question's tense ---------------------------------------------------------------------------

_PAST = re.compile(
    r"\b(?:did|didn't|was|wasn't|were|weren't|had|hadn't|ago|used\s+to|back\s+then|previously|"
    r"(?:have|has|'ve)\s+(?:i|we|you|they|he|she)?\s*(?:\w+ed|" + PAST_VERBS + r")|"
    r"(?:what|who|which)\s+(?!(?:scheduled|planned|booked)\b)(?:\w+ed|" + PAST_VERBS + r")|"  # "what happened"
    r"(?:i|we|you|he|she|they|it)\s+(?:(?!need|feed|seed|speed|breed|bleed|proceed|succeed|exceed)\w+ed|"
    + PAST_VERBS
    + r"))\b",
    re.IGNORECASE,
)


def _tense(text: str) -> Tense:
    """Past when the question speaks of the past ("what did I", "I ran"), else future: a person asks
    an assistant what they have on in March for the March ahead."""
    return "past" if _PAST.search(text) else "future"


_EVENT = re.compile(
    r"\b(?P<rel>before|after|since|prior\s+to|until|till)\s+(?P<event>[^,.;:?!()\[\]{}\n]+)", re.IGNORECASE
)
_JOINS = re.compile(r"\s*(?:and|to|until|till|through|thru|-|\u2013|\u2014)\s*", re.IGNORECASE)


def _with_relations(found: list[Atom], text: str, now: Now) -> list[Atom]:
    """Ranges ("between May and July", "from Monday to Wednesday") joined, relations applied."""
    out: list[Atom] = []
    i = 0
    while i < len(found):
        a = found[i]
        b = found[i + 1] if i + 1 < len(found) else None
        joined = b is not None and (
            (b.rel is None and _JOINS.fullmatch(text[a.hi : b.lo]) is not None)
            or (b.rel in ("until", "till", "up to") and not text[a.hi : b.lo].strip())
        )
        if a.rel in ("between", "from") and b is not None and joined:
            end = b.win
            if b.choices and a.win[0] is not None:  # "between November and February": the February after
                later = [w for w in b.choices if w[0] is not None and w[0] >= a.win[0]]
                end = later[0] if later else b.win
            out.append(Atom(a.lo, b.hi, _hull(a.win, end), a.soft and b.soft, None))
            i += 2
            continue
        lo, hi = a.win
        if a.rel in ("since", "as of"):  # until now; from then on, for a time ahead
            a = replace(a, win=(lo, now.utc if lo is None or lo <= now.utc else None))
        elif a.rel == "after":
            a = replace(a, win=(hi, None))
        elif a.rel in ("before", "prior to"):
            a = replace(a, win=(None, lo))
        elif a.rel in ("until", "till", "up to"):
            a = replace(a, win=(None, hi))
        out.append(a)
        i += 1
    return out


def _hull(a: Win, b: Win) -> Win:
    """Both windows and what lies between ("between 2027 and 2025" too)."""
    starts, ends = [t for t in (a[0], b[0]) if t is not None], [t for t in (a[1], b[1]) if t is not None]
    return (min(starts) if len(starts) == 2 else None), (max(ends) if len(ends) == 2 else None)


def _event(text: str) -> tuple[str, Relation, str] | None:
    """The event a question asks before or after ("before the move", "since I switched to Helix",
    "after moving"): its words, the relation, and the phrase. An event is a noun phrase ("the move", "my
    surgery"), a past clause ("I switched to Helix") or a gerund ("moving to Lisbon"): not "since
    you asked" or "before I go"."""
    for m in _EVENT.finditer(text):
        words = re.findall(r"[^\W_][\w'-]*", m.group("event"))
        if not words:
            continue
        head = words[0].lower()
        if head in ("the", "my", "our", "his", "her", "their", "that"):
            kept = []
            for w in words[1:5]:
                if w.lower() in EVENT_STOP:
                    break
                kept.append(w)
        elif head in ("i", "we", "he", "she", "they") and len(words) > 1 and _PAST.match(f"{head} {words[1]}"):
            kept = [w for w in words[1:7] if w.lower() not in EVENT_STOP]
        elif head.endswith("ing") and len(head) > 4 and head not in EVENT_STOP:
            kept = [w for w in words[:6] if w.lower() not in EVENT_STOP]
        else:
            continue
        if kept:
            rel: Relation = "before" if m.group("rel").lower() in ("before", "prior to", "until", "till") else "after"
            return " ".join(kept), rel, m.group(0)
    return None


def _without(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """The question without the expressions, spaces and stray punctuation tidied ("decide ?" → "decide?")."""
    out, at = [], 0
    for lo, hi in spans:
        out.append(text[at:lo])
        at = hi
    out.append(text[at:])
    rest = " ".join("".join(out).split())
    rest = re.sub(r"\s*\b(?:and|or)\s*(?=[?!.]?$)", "", rest)  # "what did I do (last week) and (yesterday)?"
    rest = re.sub(r"\s+([?!.,;:])", r"\1", rest)
    rest = re.sub(r"(?:^[\s,;:]+|[\s,;:]+$)", "", rest)
    return rest if re.search(r"[^\W_]", rest) else text


@lru_cache(maxsize=64)
def _zone(name: str) -> tzinfo:
    return UTC if name.upper() == "UTC" else ZoneInfo(name)


def find(query: str, now: datetime, zone: str | tzinfo = "UTC") -> TimeHint | None:
    """The time `query` speaks of, resolved at `now` in the person's time zone `zone` (an IANA name
    or a tzinfo); None when it names none. Windows of several expressions are joined into one."""
    head = query[:MAX_CHARS]
    if not TRIGGER.search(head):
        return None
    tz = _zone(zone) if isinstance(zone, str) else zone
    utc = now.replace(tzinfo=UTC) if now.tzinfo is None else now.astimezone(UTC)
    local = utc.astimezone(tz).replace(tzinfo=None)
    at = Now(utc, local, local.date(), _tense(head), tz)
    try:
        found = _with_relations(atoms(head, at), head, at)
    except (OverflowError, ValueError):  # a date past the calendar's ends: no time, then
        return None
    if not found:
        event = _event(head)
        if event is None:
            return None
        words, relation, phrase = event
        return TimeHint(None, None, True, phrase.strip(), query, words, relation)
    start, end = found[0].win
    for a in found[1:]:
        start, end = _hull((start, end), a.win)
    phrase = " ".join(" ".join(query[a.lo : a.hi].split()) for a in found)
    rest = _without(query, [(a.lo, a.hi) for a in found])
    # A question that does not look back, about a time not yet over ("am I on call this week?"), or
    # any about a time ahead ("what did I book for March") asks about events: when its memories were
    # written is only a leaning.
    ahead = (at.tense == "future" and (end is None or end > utc)) or (start is not None and start >= utc)
    return TimeHint(start, end, ahead or all(a.soft for a in found), phrase, rest)
