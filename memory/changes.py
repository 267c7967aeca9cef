"""Statements of change in recall (DESIGN §7): "we moved from Porto to Lisbon" ranks above "I live in
Porto", whatever their scores say.

A memory that reports a change ("switched from vim to Helix", "no longer on the night shift",
"replaced the Pixel 7", "from September the window is …") is newer news about something an older
memory of the same scope still states as current. Both may be active: they were written before
anything adjudicated them (gateway/session/adjudicate.py makes the older one superseded when a new
statement arrives through the gateway), or they came in one import. Ranking alone would often put the
older one first: it says the subject plainly, while the change mentions it in passing ("what phone
have I got?" matches "My phone is a Pixel 7" better than "Replaced the Pixel 7 with a Fairphone 5").

`newer_first` moves each such change right above the highest-ranked older memory of its scope that
shares a subject word with it. It only reorders: nothing is added, dropped or rescored, so the trust
rules (held back, evidence floor, budget) decide as before, and a false alarm (a change about
something else that shares a word) costs one place in the order, never a memory. The cue words are
plain English, written from the language, not from an evaluation set; other languages get no cue
and keep their fused order.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from memory.archive.fulltext import STOP_WORDS
from memory.recall import Scored

# The cues, as words of a lowercase text: a verb of change, or a pair of words. A regular expression
# with every cue cost 70 us a text; two set lookups a word cost a few.
CHANGE_WORDS = frozenset(
    "moved moving switched switching changed migrated migrating relocated upgraded downgraded converted "
    "transferred swapped replaced replacing traded exchanged rescheduled postponed cancelled canceled retired "
    "abandoned ditched quit quitting stopped dropped sold ended left instead anymore now".split()
)
_WHEN = frozenset(
    "january february march april may june july august september october november december "
    "monday tuesday wednesday thursday friday saturday sunday next this last today tomorrow".split()
)
_PAIRS = frozenset(
    {
        ("no", "longer"),
        ("gave", "up"),
        ("given", "up"),
        ("pushed", "back"),
        ("brought", "forward"),
        ("used", "to"),
        ("any", "more"),
        ("as", "of"),
    }
)
_SINCE = frozenset({"from", "since", "starting", "effective"})  # + a date: "from September", "since 2025"
_WORD = re.compile(r"[^\W_]+")


def _cue(words: Sequence[str]) -> bool:
    for i, word in enumerate(words):
        if word in CHANGE_WORDS:
            return True
        if i + 1 < len(words):
            after = words[i + 1]
            if (word, after) in _PAIRS:
                return True
            if word in _SINCE and (after in _WHEN or (len(after) == 4 and after.isdigit())):
                return True
    return False


def says_change(text: str) -> bool:
    """Whether `text` reports that something changed (English cue words)."""
    return _cue(_WORD.findall(text.lower()))


def subject_words(text: str) -> frozenset[str]:
    """What a statement is about, as compared here: its lowercase words without stop words, numbers
    (a year or a count is not a subject) and the change verbs, a plural "s" dropped."""
    out = set()
    for word in _WORD.findall(text.lower()):
        if word in STOP_WORDS or word in CHANGE_WORDS or word.isdigit() or len(word) < 2:
            continue
        out.add(word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word)
    return frozenset(out)


# Only the top of a ranking is reordered: what a turn can choose (memory.recall.limit is 8 by default)
# and a margin. Checking every candidate (~40 a turn at 10,000 memories) cost 1.2 ms of a turn.
WINDOW = 20


def newer_first(ranked: Sequence[Scored], window: int = WINDOW) -> list[Scored]:
    """`ranked` with each record among the first `window` that reports a change moved right above
    the best-ranked older record of its scope that shares a subject word with it (see the module
    docstring); otherwise unchanged."""
    out = list(ranked)
    top = out[:window]
    changes = [s for s in top if s.candidate.kind == "record" and says_change(s.candidate.text)]
    if not changes:
        return out
    subjects = {id(s): subject_words(s.candidate.text) for s in top if s.candidate.kind == "record"}
    for s in changes:
        c, mine = s.candidate, subjects[id(s)]
        at = out.index(s)
        for j in range(at):
            o = out[j].candidate
            if (
                o.kind == "record"
                and o.scope == c.scope
                and o.created_at < c.created_at
                and mine & subjects[id(out[j])]
            ):
                out.insert(j, out.pop(at))
                break
    return out
