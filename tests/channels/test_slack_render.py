"""Markdown -> Slack mrkdwn: a table, a golden file, and a property for the escaping."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from channels.slack.render import escape, to_mrkdwn

PAYLOADS = Path(__file__).parent.parent / "payloads" / "slack"


@pytest.mark.parametrize(
    ("markdown", "mrkdwn"),
    [
        ("plain text", "plain text"),
        ("a < b & c > d", "a &lt; b &amp; c &gt; d"),
        ("**bold**", "*bold*"),
        ("__bold__", "*bold*"),
        ("*italic* and _italic_", "_italic_ and _italic_"),
        ("***both***", "*_both_*"),
        ("**bold with _italic_ inside**", "*bold with _italic_ inside*"),
        ("~~gone~~", "~gone~"),
        ("[docs](https://x.y/a?b=1&c=2)", "<https://x.y/a?b=1&amp;c=2|docs>"),
        ('[docs](https://x.y "title")', "<https://x.y|docs>"),
        ("[a|b](https://x.y)", "<https://x.y|a/b>"),
        ("<https://x.y>", "<https://x.y>"),
        ("[relative](docs/a.md)", "[relative](docs/a.md)"),  # Slack links need an absolute URL
        ("# Title", "*Title*"),
        ("### **Bold** title ###", "*Bold title*"),
        ("- one\n* two\n+ three", "• one\n• two\n• three"),
        ("> quoted **text**", "> quoted *text*"),
        ("> > nested\n>>also", "> nested\n> also"),
        ("***", "──────────"),
        ("`a < b` and `**x**`", "`a &lt; b` and `**x**`"),
        ("``code with ` tick``", "`code with ` tick`"),
        ("snake_case_name 2 * 3 * 4", "snake_case_name 2 * 3 * 4"),
        ("```js\nif (a < b) { **x** }\n```", "```\nif (a &lt; b) { **x** }\n```"),
        ("~~~\nindented\n    keeps   spaces\n~~~", "```\nindented\n    keeps   spaces\n```"),
        ("text\n```\nunclosed <block>", "text\n```\nunclosed &lt;block&gt;\n```"),
        ("", ""),
    ],
)
def test_table(markdown: str, mrkdwn: str) -> None:
    assert to_mrkdwn(markdown) == mrkdwn


def test_golden() -> None:
    rendered = to_mrkdwn((PAYLOADS / "render_input.md").read_text())
    assert rendered == (PAYLOADS / "render_expected.txt").read_text()


_OUR_LINK = re.compile(r"<(?:https?|mailto):[^<>\s]*>")
_QUOTE_START = re.compile(r"^> ?", re.MULTILINE)


@given(st.text(alphabet=st.sampled_from(list("ab <>&*_~`[]()#->|\n :/htps.")), max_size=80))
def test_control_characters_are_always_escaped(markdown: str) -> None:
    # Outside the links we build and quote markers, Slack must never see a raw `<`, `>` or a
    # bare `&` (it would read them as markup or entities).
    out = _QUOTE_START.sub("", _OUR_LINK.sub("", to_mrkdwn(markdown)))
    assert "<" not in out and ">" not in out
    assert re.fullmatch(r"(?:[^&]|&(?:amp|lt|gt);)*", out, re.DOTALL)


@given(st.text(alphabet=st.characters(blacklist_characters="*_~`[]<>#->+|\n"), max_size=60))
def test_text_without_markup_is_only_escaped(text: str) -> None:
    assert to_mrkdwn(text) == escape(text)
