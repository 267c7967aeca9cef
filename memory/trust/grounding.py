"""Grounding (DESIGN §6 "Attributed communication", §11): is a statement the formation model proposes
supported by the lines it cites, and which bounded excerpt of a line a record keeps. Pure.

A statement is grounded in its cited lines when
- every number in it occurs in them (a digit run, also inside a word: "7005", "v2"; with its dots
  and colons: "3.11", "15:30"; thousands commas dropped, leading zeros ignored), and
- enough of its content words occur in them: words that are not function words, not the framing of
  who said what to whom ("user", "team", "said", "mentioned" …) and not the cited speakers'
  own names or identities, nor the conversation's key. Words compare by a light stem, so plurals,
  past tenses and -ing forms match ("moved" ~ "move" ~ "moving", "services" ~ "service"). Text
  without spaces between words (Chinese, Japanese, Korean) compares by character pairs.

How many is "enough" depends on whose words they are (see OWNER_COVERAGE, ATTRIBUTED_COVERAGE).
Numbers and negations are never paraphrased: a number or a "not" the lines do not hold is made up,
whoever spoke.

The stem is a small suffix rule of our own: no stemmer library is a dependency of the project (a
Snowball stemmer is the better tool, and the rule below is kept small so that it can be swapped for
one). It only has to make two forms of one word compare equal, never to produce a real word.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from memory.archive.fulltext import CJK_CHARS

# A person's own DM lines may be paraphrased into a statement about them ("I moved to Lisbon" →
# "Lives in Lisbon"): half of the statement's content words must come from the lines.
OWNER_COVERAGE = 0.5
# What someone else said in a group is only kept verbatim, and the statement decides whether the
# line is worth keeping: it may add at most one word in three of its own ("Deploys happen on
# Fridays" from "We deploy on Fridays" passes; "Bob says the demo was cancelled" from "The Friday
# demo moved to 3pm" does not).
ATTRIBUTED_COVERAGE = 2 / 3
EXCERPT_CHARS = 280
ELLIPSIS = "…"

# Function words: they say nothing a line must support. Negations are deliberately absent: "not on
# Friday" must find its "not" in the line.
STOP_WORDS = frozenset(
    """
    a an the this that these those there here i me my mine myself we us our ours ourselves you your
    yours yourself yourselves he him his himself she her hers herself it its itself they them their
    theirs themselves who whom whose which what when where why how am is are was were be been being
    have has had having do does did doing done will would shall should can could may might must to
    of in on at by for with from into onto upon about above below over under between among through
    during before after since until till against within and or but so if then than else also too
    very just only even still yet as all any both each every few more most other some such own same
    up down out off again further once now currently already really actually let lets pm ok okay yes
    yeah please thanks thank hi hello hey
    """.split()
)
# How a statement frames who said what: words that a cited line need not contain.
FRAMING_WORDS = frozenset(
    """
    user users person people someone somebody everyone everybody member members participant
    participants speaker speakers owner team teams group groups channel channels chat chats
    conversation conversations message messages said say says saying mention mentions mentioned
    mentioning stated states noted told tell tells wrote asked asks reported reports explained
    explains claimed claims announced announces replied replies answered commented suggested
    suggests according apparently reportedly
    """.split()
)

_NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?!\d)|\d+(?:[.:]\d+)*")
_DIGITS = re.compile(r"\d+")
_CJK = f"[{CJK_CHARS}]"
# A CJK run, or a run of other letters with its apostrophe suffixes ("alice's", "doesn't").
_TOKEN = re.compile(rf"{_CJK}+|(?:(?!{_CJK})[^\W\d_])+(?:['\u2019](?:(?!{_CJK})[^\W\d_])+)*")
_CJK_RUN = re.compile(f"{_CJK}+")
_VOWELS = frozenset("aeiouy")
_CONTRACTIONS = {
    "can't": ("can", "not"),
    "cannot": ("can", "not"),
    "won't": ("will", "not"),
    "shan't": ("shall", "not"),
}
NEGATIONS = frozenset("not no never none nothing nobody nowhere neither nor without".split())


def stem(word: str) -> str:
    """A comparison key for a casefolded word: one inflectional suffix off (-ies/-ied, -ing, -ed,
    -es, -s), then a doubled final consonant and a final "e" off, so that "ship", "ships", "shipped"
    and "shipping" share one key, as do "use", "used", "uses" and "using". A suffix stays when too
    little would be left ("red", "bring", "gas")."""
    w = word
    if w.endswith(("ies", "ied")) and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith("ing") and _stem_left(w[:-3]):
        w = w[:-3]
    elif w.endswith("ed") and not w.endswith("eed") and _stem_left(w[:-2]):
        w = w[:-2]
    elif w.endswith("es") and w[:-2].endswith(("s", "x", "z", "ch", "sh")) and len(w) > 4:
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")) and len(w) > 3:
        w = w[:-1]
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in _VOWELS:
        w = w[:-1]
    if len(w) > 2 and w.endswith("e"):
        w = w[:-1]
    return w


def _stem_left(rest: str) -> bool:
    return len(rest) >= 2 and bool(_VOWELS & set(rest))


def numbers(text: str) -> frozenset[str]:
    """The numbers of `text`, normalized: "1,000" → "1000", "09:05" → "9:5", "3.11" stays."""
    out = set()
    for match in _NUMBER.finditer(text):
        out.add(_DIGITS.sub(lambda m: str(int(m.group())), match.group().replace(",", "")))
    return frozenset(out)


def _pieces(token: str) -> list[str]:
    """A casefolded token's words: CJK runs as character pairs (no spaces to split on), contractions
    spelled out ("doesn't" → does, not), other apostrophe endings ("alice's", "we're") dropped."""
    if _CJK_RUN.fullmatch(token):
        return [token] if len(token) == 1 else [token[i : i + 2] for i in range(len(token) - 1)]
    token = token.replace("\u2019", "'")
    if token in _CONTRACTIONS:
        return list(_CONTRACTIONS[token])
    if token.endswith("n't"):
        return [token[:-3], "not"]
    return [token.split("'", 1)[0]]


def words(text: str, skip: Iterable[str] = ()) -> frozenset[str]:
    """The content words of `text`, as stems: no function words, no single letters, nothing in
    `skip` (casefolded words, compared before stemming)."""
    skipped = STOP_WORDS | frozenset(skip)
    out = set()
    for token in _TOKEN.findall(text.casefold()):
        for piece in _pieces(token):
            if len(piece) > 1 and piece not in skipped:
                out.add(stem(piece))
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class Grounding:
    """What a statement needs from its cited lines and what they hold of it."""

    words: frozenset[str]  # the statement's content words (stems)
    numbers: frozenset[str]
    missing_words: frozenset[str]
    missing_numbers: frozenset[str]
    missing_negation: bool  # the statement negates and no cited line does
    supporting: tuple[bool, ...]  # per cited line: holds at least one of the statement's words or numbers

    @property
    def coverage(self) -> float:
        """The share of the statement's content words found in the lines (1.0 when it has none)."""
        if not self.words:
            return 1.0
        return 1 - len(self.missing_words) / len(self.words)

    def holds(self, coverage: float) -> bool:
        """Grounded: every number and negation found, at least `coverage` of the content words, and
        something to stand on (a statement of framing words only, "Bob said something", is not)."""
        if self.missing_numbers or self.missing_negation or not (self.words or self.numbers):
            return False
        return self.coverage >= coverage


_NEGATION_STEMS = frozenset(stem(w) for w in NEGATIONS)


def _without(text: str, phrases: Iterable[str]) -> str:
    for phrase in sorted({p.strip() for p in phrases if p and p.strip()}, key=len, reverse=True):
        text = re.sub(rf"(?<!\w){re.escape(phrase)}(?!\w)", " ", text, flags=re.IGNORECASE)
    return text


def ground(statement: str, lines: Sequence[str], framing: Iterable[str] = ()) -> Grounding:
    """How far `lines` support `statement`. `framing`: who and where, as the statement may name
    them (the cited speakers' names, identities and user ids, the conversation's key): removed from
    the statement before it is checked, their words never counted as content."""
    phrases = list(framing)
    text = _without(statement, phrases)
    skip = {w for phrase in phrases for token in _TOKEN.findall(phrase.casefold()) for w in _pieces(token)}
    need_words = words(text, FRAMING_WORDS | skip)
    need_numbers = numbers(text)
    per_line = [(words(line), numbers(line)) for line in lines]
    have_words = frozenset().union(*(w for w, _ in per_line))
    have_numbers = frozenset().union(*(n for _, n in per_line))
    missing = need_words - have_words
    return Grounding(
        need_words,
        need_numbers,
        missing,
        need_numbers - have_numbers,
        # "does not deploy" and "deploy" share all but one word and mean the opposite: a negation
        # is never made up, like a number.
        bool(missing & _NEGATION_STEMS) and not (have_words & _NEGATION_STEMS),
        tuple(bool(need_words & w or need_numbers & n) for w, n in per_line),
    )


def excerpt(text: str, focus: str = "", limit: int = EXCERPT_CHARS) -> str:
    """`text` on one line, whole when it fits in `limit` characters; otherwise a run of whole words
    that fits, with an ellipsis where it was cut: the earliest run holding most of `focus`'s content
    words and numbers, grown around them evenly. Deterministic: the same text and focus give the
    same excerpt."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    spans = [(m.start(), m.end()) for m in re.finditer(r"\S+", flat)]
    want_words, want_numbers = words(focus), numbers(focus)
    weight = [int(bool(words(flat[s:e]) & want_words or numbers(flat[s:e]) & want_numbers)) for s, e in spans]
    best = (-1, 0, 0)  # (weight, first word, last word)
    j = 0
    for i in range(len(spans)):
        budget = limit - (1 if i == 0 else 2)  # room for the ellipses the run will need
        j = max(j, i)
        while j < len(spans) and spans[j][1] - spans[i][0] <= budget:
            j += 1
        held = sum(weight[i:j])
        if j > i and held > best[0]:
            best = (held, i, j - 1)
    if best[0] < 0:  # every word is longer than the limit: cut inside the first
        return flat[: limit - 1] + ELLIPSIS
    _, first, last = best
    if best[0] > 0:  # what the statement drew on, with as much context on either side as fits
        marked = [k for k in range(first, last + 1) if weight[k]]
        first, last = marked[0], marked[-1]
        grew = True
        while grew:
            grew = False
            if first > 0 and _fits(spans, first - 1, last, limit):
                first, grew = first - 1, True
            if last < len(spans) - 1 and _fits(spans, first, last + 1, limit):
                last, grew = last + 1, True
    start, end = spans[first][0], spans[last][1]
    return (ELLIPSIS if start > 0 else "") + flat[start:end] + (ELLIPSIS if end < len(flat) else "")


def _fits(spans: Sequence[tuple[int, int]], first: int, last: int, limit: int) -> bool:
    ellipses = (first > 0) + (last < len(spans) - 1)
    return spans[last][1] - spans[first][0] + ellipses <= limit
