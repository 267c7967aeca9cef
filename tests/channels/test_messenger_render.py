"""Markdown -> the plain text Messenger shows: a table, and properties: no words lost, code as
written, and never longer than the Markdown (so a 2,000-character piece still fits once rendered)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from channels.messenger.render import render
from gateway.core.splitting import split_message, utf16_len


@pytest.mark.parametrize(
    ("markdown", "text"),
    [
        ("plain text", "plain text"),
        ("**bold** and __bold__", "bold and bold"),
        ("*italic* and _italic_", "italic and italic"),
        ("***both*** and ~~gone~~", "both and gone"),
        ("**bold with _italic_ inside**", "bold with italic inside"),
        ("snake_case_name 2 * 3 * 4", "snake_case_name 2 * 3 * 4"),
        ("[docs](https://x.y/a?b=1&c=2)", "docs (https://x.y/a?b=1&c=2)"),
        ('[docs](https://x.y "title")', "docs (https://x.y)"),
        ("[**docs**](https://x.y)", "docs (https://x.y)"),
        ("[https://x.y](https://x.y)", "https://x.y"),
        ("[x.y](https://x.y)", "https://x.y"),
        ("[](https://x.y)", "https://x.y"),
        ("![a cat](https://x.y/cat.png)", "a cat (https://x.y/cat.png)"),
        ("[wiki](https://en.wikipedia.org/wiki/C_(language))", "wiki (https://en.wikipedia.org/wiki/C_(language))"),
        ("[relative](docs/a.md)", "[relative](docs/a.md)"),
        ("<https://x.y>", "https://x.y"),
        ("# Title", "Title"),
        ("### **Bold** title ###", "Bold title"),
        ("#hashtag", "#hashtag"),
        ("- one\n* two\n+ three\n  - nested", "• one\n• two\n• three\n  • nested"),
        ("1. first\n2. second", "1. first\n2. second"),
        ("> quoted **text**", "│ quoted text"),
        ("> > nested\n>>also", "│ │ nested\n││also"),
        ("***", "———"),
        ("- - -", "———"),
        (r"\*not italic\* and \_x\_", "*not italic* and _x_"),
        ("`a * b` and `**x**`", "`a * b` and `**x**`"),
        ("``code with ` tick``", "``code with ` tick``"),
        ("```python\nif a < b:\n    **x** = [y](z)\n```", "```python\nif a < b:\n    **x** = [y](z)\n```"),
        ("~~~\n# not a heading\n~~~", "~~~\n# not a heading\n~~~"),
        ("text\n```\nunclosed **block**", "text\n```\nunclosed **block**"),
        ("| a | b |\n|---|---|\n| 1 | 2 |", "| a | b |\n|---|---|\n| 1 | 2 |"),
        ("", ""),
    ],
)
def test_table(markdown: str, text: str) -> None:
    assert render(markdown) == text


def alnum(text: str) -> str:
    return "".join(c for c in text if c.isalnum())


# Markdown's own characters and words, weighted in: the cases where rendering does something.
TOKENS = [*"ab1 \n\t*_~`#>-+!()<>\\:/.|é😀", "https://", "```", "**", "\n- ", "\n> ", "\n# "]
MARKDOWNISH = st.lists(st.sampled_from(TOKENS), max_size=80).map("".join)


@settings(max_examples=300, deadline=None)
@given(MARKDOWNISH)
def test_no_character_of_the_words_is_lost(markdown: str) -> None:
    # Without "[" no link can form (a link's address is the one thing shown twice or once): every
    # letter and digit stays, in order.
    assert alnum(render(markdown)) == alnum(markdown)


@settings(max_examples=300, deadline=None)
@given(
    st.text(max_size=300) | st.lists(st.sampled_from([*TOKENS, "[", "](https://a.b/", ")"]), max_size=80).map("".join)
)
def test_rendering_never_makes_a_text_longer(markdown: str) -> None:
    assert utf16_len(render(markdown)) <= utf16_len(markdown)


WORD = st.from_regex(r"[a-z]{1,8}", fullmatch=True)


@st.composite
def documents(draw: st.DrawFn) -> tuple[str, list[str]]:
    """Markdown made of words in every construct, and its words in order."""
    parts: list[str] = []
    words: list[str] = []
    for _ in range(draw(st.integers(1, 12))):
        w = draw(WORD)
        kind = draw(st.sampled_from(["plain", "bold", "ital", "link", "code", "heading", "bullet", "quote", "fence"]))
        words.append(w)
        if kind == "link":
            target = draw(WORD)
            words.append(target)
            parts.append(f"[{w}](https://example.com/{target})")
        else:
            parts.append(
                {
                    "plain": w,
                    "bold": f"**{w}**",
                    "ital": f"*{w}*",
                    "code": f"`{w}`",
                    "heading": f"\n## {w}\n",
                    "bullet": f"\n- {w}\n",
                    "quote": f"\n> {w}\n",
                    "fence": f"\n```\n{w}\n```\n",
                }[kind]
            )
    return " ".join(parts), words


@settings(max_examples=300, deadline=None)
@given(documents())
def test_every_word_survives_in_order(doc: tuple[str, list[str]]) -> None:
    markdown, words = doc
    shown = render(markdown)
    pos = 0
    for w in words:
        found = re.search(rf"\b{w}\b", shown[pos:])
        assert found, (w, shown)
        pos += found.end()


@settings(max_examples=15, deadline=None)
@given(st.lists(documents(), min_size=30, max_size=40))
def test_pieces_split_for_messenger_still_fit_once_rendered(docs: list[tuple[str, list[str]]]) -> None:
    markdown = "\n\n".join(d[0] for d in docs) * 3
    for piece in split_message(markdown, 2000, utf16_len):
        assert utf16_len(render(piece)) <= 2000
