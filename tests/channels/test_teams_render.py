"""Markdown -> what a Teams text message shows: a table, and properties for breaks, escapes and code."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from channels.teams.render import RULE_LINE, escape, render, rendered_length
from gateway.core.splitting import split_message, utf16_len


@pytest.mark.parametrize(
    ("markdown", "shown"),
    [
        ("plain text", "plain text"),
        ("", ""),
        # Teams drops a single line break: lines of prose are kept apart by a blank line.
        ("one\ntwo", "one\n\ntwo"),
        ("one\n\ntwo", "one\n\ntwo"),
        ("one\n\n\ntwo", "one\n\n\ntwo"),
        ("- a\n- b", "- a\n\n- b"),
        # Anything that looks like a tag would vanish: entities outside code, never inside it.
        ("a <b> c", "a &lt;b&gt; c"),
        ("if a < b && c > d", "if a &lt; b && c &gt; d"),
        ("AT&T and R&D", "AT&T and R&D"),
        ("&lt; is how you write <", "&amp;lt; is how you write &lt;"),
        ("`a < b` and <c>", "`a < b` and &lt;c&gt;"),
        ("``code with ` tick`` <x>", "``code with ` tick`` &lt;x&gt;"),
        # What Teams renders stays Markdown.
        (
            "**bold** *it* _it_ ~~gone~~ [docs](https://x.y/a?b=1&c=2)",
            "**bold** *it* _it_ ~~gone~~ [docs](https://x.y/a?b=1&c=2)",
        ),
        ("> quoted <tag>\n> more", "> quoted &lt;tag&gt;\n\n> more"),
        # What it does not: headings, rules, tables.
        ("# Title", "**Title**"),
        ("### **Bold** title ###", "**Bold title**"),
        ("#", "#"),
        ("***", RULE_LINE),
        ("a\n---\nb", f"a\n\n{RULE_LINE}\n\nb"),
        ("| a | b |\n|---|:-:|\n| 1 | 2 |", "| a | b |\n\n| 1 | 2 |"),
        # Code blocks keep their lines as written (no blank lines, no entities), without the info string.
        ("```python\nif a < b:\n    x = 1\n```", "```\nif a < b:\n    x = 1\n```"),
        ("text\n```\ncode\n```\nmore", "text\n\n```\ncode\n```\nmore"),
        ("~~~\n<keep>\n~~~", "~~~\n<keep>\n~~~"),
        ("```\nunclosed <block>", "```\nunclosed <block>\n```"),  # a streamed reply cut inside a block
    ],
)
def test_table(markdown: str, shown: str) -> None:
    assert render(markdown) == shown


def test_escape_leaves_no_tag_behind() -> None:
    assert escape("<at>Bob</at> & &amp; &#60;") == "&lt;at&gt;Bob&lt;/at&gt; & &amp;amp; &amp;#60;"


def test_the_length_is_the_rendered_length_in_utf16() -> None:
    assert rendered_length("a\nb") == 4
    assert rendered_length("😀") == 2  # one code point, two UTF-16 units
    assert rendered_length("<") == 4


_QUOTE_MARKERS = re.compile(r"^[ \t]{0,3}(?:>[ \t]?)+")
_PROSE = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")) | st.just("\n"), max_size=200)


@given(_PROSE)
@settings(max_examples=200, deadline=None)
def test_no_raw_angle_bracket_outside_code(text: str) -> None:
    for line in render(text.replace("`", "").replace("~", "")).split("\n"):
        body = _QUOTE_MARKERS.sub("", line)  # a quote's own `>` stays a `>`
        assert "<" not in body and ">" not in body


@given(_PROSE)
@settings(max_examples=200, deadline=None)
def test_fences_are_always_balanced(text: str) -> None:
    shown = render(text + "\n```\n" + text)
    assert len(re.findall(r"^ {0,3}```", shown, re.MULTILINE)) % 2 == 0


@given(st.lists(st.text(alphabet="abc <>&*_\n", max_size=80), min_size=1, max_size=60))
@settings(max_examples=100, deadline=None)
def test_split_chunks_fit_teams_once_rendered(paragraphs: list[str]) -> None:
    """The gateway splits with `rendered_length`: every chunk it sends fits once rendered."""
    text = "\n".join(paragraphs)
    limit = 200
    for chunk in split_message(text, limit, rendered_length):
        assert utf16_len(render(chunk)) <= limit
