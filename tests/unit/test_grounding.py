"""The grounding check of formation (DESIGN §6, §11) as tables: which statements their cited lines
support, for an owner's own lines (paraphrase allowed) and for what someone else said (stricter);
the numbers and stems it compares; and the bounded excerpt a record keeps."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory.trust.grounding import (
    ATTRIBUTED_COVERAGE,
    ELLIPSIS,
    EXCERPT_CHARS,
    OWNER_COVERAGE,
    excerpt,
    ground,
    numbers,
    stem,
)

BOB = ["Bob", "telegram:1002", "1002", "bob", "telegram:group:-100"]  # how a statement may name him and where

# (what, statement, cited lines, framing, grounded for an owner, grounded as attributed communication)
CASES = [
    # the two examples of the reproduction
    ("a hostname nobody said", "Alice's laptop hostname is crow", ["The Friday demo moved to 3pm"], BOB, False, False),
    (
        "a service on a port the line never named",
        "Service X listens on port 7005",
        ["the new services listen on ports 7001 to 7032"],
        (),
        False,
        False,
    ),
    (
        "a port the line did name",
        "Service X listens on port 7001",
        ["the services listen on ports 7001 to 7032"],
        (),
        True,
        True,
    ),
    # what a line does support
    ("the line itself", "The Friday demo moved to 3pm", ["The Friday demo moved to 3pm"], BOB, True, True),
    (
        "framed as speech",
        "Bob (telegram:1002) said the Friday demo moved to 3pm",
        ["The Friday demo moved to 3pm"],
        BOB,
        True,
        True,
    ),
    (
        "framed by the channel",
        "In telegram:group:-100 the team mentioned the demo moved",
        ["The Friday demo moved to 3pm"],
        BOB,
        True,
        True,
    ),
    ("other inflections", "Deploys happen on Fridays.", ["We deploy on Fridays."], (), True, True),
    ("past and -ing", "The team is shipping the beta on Friday", ["we shipped the beta friday"], (), True, True),
    (
        "one word of its own in three",
        "Bob says the Friday demo now starts at 3pm",
        ["The Friday demo moved to 3pm"],
        BOB,
        True,
        True,
    ),
    ("a version", "Staging runs Postgres 16.2", ["the staging server runs Postgres 16.2"], (), True, True),
    ("a time with minutes", "Standup is at 09:30", ["standup moves to 9:30 tomorrow"], (), True, True),
    ("thousands", "The table holds 1,000 rows", ["the table holds 1000 rows now"], (), True, True),
    (
        "several lines together",
        "Staging runs Postgres 16 and deploys are on Fridays",
        ["We deploy on Fridays.", "Staging runs Postgres 16."],
        (),
        True,
        True,
    ),
    # what it does not
    ("another time", "The Friday demo moved to 4pm", ["The Friday demo moved to 3pm"], BOB, False, False),
    ("24-hour rewrite of a time", "The demo moved to 15:00", ["The Friday demo moved to 3pm"], BOB, False, False),
    ("a digit inside a word", "Runs on ipv6", ["it runs on ipv4"], (), False, False),
    ("a date the line lacks", "The release is on 2024-05-02", ["the release is on 2024-05-01"], (), False, False),
    ("a negation made up", "Bob doesn't deploy on Fridays", ["We deploy on Fridays."], BOB, False, False),
    ("half its words made up", "Bob says the demo was cancelled", ["The Friday demo moved to 3pm"], BOB, True, False),
    ("framing only", "Bob said something", ["The Friday demo moved to 3pm"], BOB, False, False),
    ("nothing at all", "", ["The Friday demo moved to 3pm"], BOB, False, False),
    (
        "the speaker's id is not a number of the line",
        "1002 moved the demo",
        ["The Friday demo moved to 3pm"],
        (),
        False,
        False,
    ),
    # an owner's own lines, paraphrased
    ("moved → lives", "Lives in Lisbon", ["I moved to Lisbon"], (), True, False),
    ("prefers", "Prefers green tea over coffee.", ["I prefer green tea over coffee."], (), True, True),
    (
        "the person framed",
        "The user's build machine runs Debian 12",
        ["my build box runs Debian 12"],
        ["alice"],
        True,
        True,  # one word of its own in four
    ),
    ("another city", "Lives in Porto", ["I moved to Lisbon"], (), False, False),
    ("another release", "Build box runs Debian 13", ["my build box runs Debian 12"], (), False, False),
    ("a negation kept", "Does not drink coffee", ["I never drink coffee"], (), True, True),
    # other scripts
    ("CJK words", "我在东京工作", ["我现在在东京工作"], (), True, True),
    ("CJK made up", "我在大阪工作", ["我现在在东京工作"], (), False, False),
]


@pytest.mark.parametrize(
    ("what", "statement", "lines", "framing", "owner", "attributed"), CASES, ids=[c[0] for c in CASES]
)
def test_grounding_table(
    what: str, statement: str, lines: list[str], framing: list[str], owner: bool, attributed: bool
) -> None:
    found = ground(statement, lines, framing)
    assert (found.holds(OWNER_COVERAGE), found.holds(ATTRIBUTED_COVERAGE)) == (owner, attributed), (what, found)


def test_which_cited_lines_support_a_statement() -> None:
    found = ground("Staging runs Postgres 16", ["We deploy on Fridays.", "Staging runs Postgres 16.", "ok 16"])
    assert found.supporting == (False, True, True)


@pytest.mark.parametrize(
    ("words", "key"),
    [
        (["ship", "ships", "shipped", "shipping"], "ship"),
        (["move", "moved", "moves", "moving"], "mov"),
        (["use", "used", "uses", "using"], "us"),
        (["service", "services"], "servic"),
        (["city", "cities"], "city"),
        (["study", "studied", "studies"], "study"),
        (["box", "boxes"], "box"),
        (["plan", "planned", "planning", "plans"], "plan"),
        (["need", "needs"], "need"),
    ],
)
def test_stems_of_one_word_agree(words: list[str], key: str) -> None:
    assert {stem(w) for w in words} == {key}


def test_short_words_keep_their_ending() -> None:
    assert [stem(w) for w in ("red", "bring", "string", "gas", "bus", "status")] == [
        "red",
        "bring",
        "string",
        "gas",
        "bus",
        "status",
    ]


def test_numbers() -> None:
    assert numbers("port 7005, at 3pm or 15:30 on 2024-05-01, v3.11.4, 1,000 users, 09:05, x86_64") == {
        "7005",
        "3",
        "15:30",
        "2024",
        "5",
        "1",
        "3.11.4",
        "1000",
        "9:5",
        "86",
        "64",
    }
    assert numbers("Postgres 16.") == {"16"} and numbers("no digits") == frozenset()


# --- excerpts -------------------------------------------------------------------------------------


def test_a_short_line_is_kept_whole_on_one_line() -> None:
    assert excerpt("The Friday demo\n\nmoved   to 3pm ") == "The Friday demo moved to 3pm"


def test_a_long_line_is_cut_at_word_boundaries_around_the_focus() -> None:
    text = " ".join(f"word{n}" for n in range(200)) + " the deploy freeze starts on 2024-06-01 " + "tail " * 100
    cut = excerpt(text, "Deploy freeze from 2024-06-01")
    assert len(cut) <= EXCERPT_CHARS and cut.startswith(ELLIPSIS) and cut.endswith(ELLIPSIS)
    assert "the deploy freeze starts on 2024-06-01" in cut
    assert set(cut.strip(ELLIPSIS).split()) <= set(text.split())  # whole words only
    assert excerpt(text, "Deploy freeze from 2024-06-01") == cut  # deterministic
    plain = excerpt(text)
    assert plain.startswith("word0 ") and plain.endswith(ELLIPSIS) and len(plain) <= EXCERPT_CHARS


def test_a_single_overlong_word_is_cut_inside() -> None:
    cut = excerpt("x" * 1000)
    assert cut == "x" * (EXCERPT_CHARS - 1) + ELLIPSIS


@settings(max_examples=200, deadline=None)
@given(st.text(st.sampled_from("ab cd\n.7"), max_size=900), st.text(st.sampled_from("ab cd7"), max_size=30))
def test_an_excerpt_is_bounded_and_verbatim(text: str, focus: str) -> None:
    cut = excerpt(text, focus, limit=60)
    flat = " ".join(text.split())
    assert len(cut) <= 60 and "\n" not in cut
    assert cut.strip(ELLIPSIS) in flat
    assert (cut == flat) == (len(flat) <= 60)


VOCABULARY = ["deploy", "deploys", "Friday", "not", "3pm", "15:30", "v3.11", "1,000", "东京工作", "the", "is", "Bob's"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=12), st.data())
def test_a_statement_in_the_lines_own_words_is_always_grounded(line: list[str], data: st.DataObject) -> None:
    picked = data.draw(st.lists(st.sampled_from(line), min_size=1, max_size=8))
    found = ground(" ".join(picked), [" ".join(line)])
    assert not found.missing_words and not found.missing_numbers and not found.missing_negation
    assert found.holds(ATTRIBUTED_COVERAGE) == bool(found.words or found.numbers)
