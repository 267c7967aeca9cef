"""The English words memory.when reads time in: month and weekday names, numbers, units, the parts of
a day, the past-tense verbs that say a question looks back, and the words that end an event's name."""

from __future__ import annotations

import re

MONTHS = {
    "january": 1,
    "jan": 1,
    "february": 2,
    "feb": 2,
    "march": 3,
    "mar": 3,
    "april": 4,
    "apr": 4,
    "may": 5,
    "june": 6,
    "jun": 6,
    "july": 7,
    "jul": 7,
    "august": 8,
    "aug": 8,
    "september": 9,
    "sept": 9,
    "sep": 9,
    "october": 10,
    "oct": 10,
    "november": 11,
    "nov": 11,
    "december": 12,
    "dec": 12,
}
# Month names that are also everyday words ("May I ask", "march on", "an august body"): a time only
# with a word that says so ("in May", "last March", "August 2025").
NEEDS_CONTEXT = frozenset({"may", "march", "august"})
MONTH = r"(?:" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"

WEEKDAYS = {"monday": 0, "tuesday": 1, "wednesday": 2, "thursday": 3, "friday": 4, "saturday": 5, "sunday": 6}
WEEKDAY = r"(?:" + "|".join(WEEKDAYS) + r")"

SEASONS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}  # the first month of each

# (hour it starts, hour it ends) from the day's midnight; night runs into the next morning.
PARTS_OF_DAY = {"morning": (4, 12), "afternoon": (12, 18), "evening": (17, 24), "night": (20, 30)}

# A number as said, and whether it is a rough one ("a few days ago": a soft window around it).
NUMBERS: dict[str, tuple[int, bool]] = {
    "a": (1, False),
    "an": (1, False),
    "one": (1, False),
    "two": (2, False),
    "three": (3, False),
    "four": (4, False),
    "five": (5, False),
    "six": (6, False),
    "seven": (7, False),
    "eight": (8, False),
    "nine": (9, False),
    "ten": (10, False),
    "eleven": (11, False),
    "twelve": (12, False),
    "a couple of": (2, True),
    "couple of": (2, True),
    "a couple": (2, True),
    "a few": (3, True),
    "few": (3, True),
    "several": (5, True),
}
NUM = r"\d{1,3}|" + "|".join(w.replace(" ", r"\s+") for w in sorted(NUMBERS, key=len, reverse=True))
UNIT = r"(?:minute|hour|day|night|week|fortnight|month|year)"
DAY = r"(?:3[01]|[12]\d|0?[1-9])"
YEAR = r"(?:19[7-9]\d|20\d\d)"

# After a number that could be a year, these make it a quantity: "in 2000 ms", "2048 users".
UNIT_AFTER_YEAR = re.compile(
    r"\s*(?:%|ms|s|sec|secs|seconds?|minutes?|hours?|days?|kb|mb|gb|tb|px|rows?|users?|items?|lines?|words?|bytes?"
    r"|requests?|times|euros?|dollars?|usd|eur|gbp|km|miles?|steps?|calories|kcal|people|points?)\b",
    re.IGNORECASE,
)

# Past-tense verbs that do not end in -ed (after "I", "we", …: "the race I ran in March").
PAST_VERBS = (
    r"(?:said|told|went|ran|wrote|made|got|gave|saw|met|took|bought|thought|felt|left|spent|paid|sent|found|came"
    r"|began|knew|heard|ate|drank|sold|chose|drove|flew|forgot|kept|lost|meant|slept|spoke|stood|taught"
    r"|understood|won|wore|broke|built|caught|fell|fought|held|hid|led|lent|rode|rang|rose|sang|shot"
    r"|shook|stole|stuck|swam|swore|threw|woke|moved|did|was|were|had|been|done|gone|seen|taken|given|written)"
)

# Words that end an event's name ("before the move is done" → "move"), or that no event starts with.
EVENT_STOP = frozenset(
    "is are was were be been am do does did will would can could should shall may might must have has had "
    "what when where which who whom why how and or but so if then than that this these those there here "
    "i me my we us our you your he him his she her they them their it its to of in on at for with about "
    "from by as into onto upon a an the something anything nothing everything during morning evening "
    "thing king ring spring string ceiling".split()
)

# What may follow "the 9th" for it to be a day: the end, punctuation, or one of these words.
AFTER_EVENT_OK = frozenset(
    "and or at in on when for to before after i we you he she they was did is what which until till "
    "please then so".split()
)

# A question without one of these names no time (checked first: most questions name none).
TRIGGER = re.compile(
    r"(?:day|hour|minute|ago\b|week|month|year|fortnight|morning|afternoon|evening|night"
    r"|recent|lately|of\s+late|these\s+days|other\s+day|while\s+(?:ago|back)|just\s+now|since|before|after"
    r"|until|till|prior\s+to|between|christmas|xmas|spring|summer|autumn|fall|winter|\d"
    r"|" + WEEKDAY + r"|" + MONTH + r")",
    re.IGNORECASE,
)
