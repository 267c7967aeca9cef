"""Golden and property tests of channels.discord.render (pure)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from channels.discord.render import ZWSP, render, rendered_length

Z = ZWSP


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("plain **bold** _it_ ~~gone~~ [link](https://x.org)", "plain **bold** _it_ ~~gone~~ [link](https://x.org)"),
        ("hey @everyone and @here!", f"hey @{Z}everyone and @{Z}here!"),
        (
            "ask <@123456789012345678> or <@!123456789012345678>",
            f"ask <@{Z}123456789012345678> or <@{Z}!123456789012345678>",
        ),
        ("role <@&123456789012345678>", f"role <@{Z}&123456789012345678>"),
        ("short ids like @2024 stay", "short ids like @2024 stay"),
        ("inline `@everyone` stays, @here not", f"inline `@everyone` stays, @{Z}here not"),
        ("``code with ` inside @here`` then @here", f"``code with ` inside @here`` then @{Z}here"),
        ("# Title\n### Small\n#### Deeper ####\n###### Deepest", "# Title\n### Small\n**Deeper**\n**Deepest**"),
        ("- item\n  - nested @everyone", f"- item\n  - nested @{Z}everyone"),
        ("", ""),
    ],
)
def test_golden(markdown: str, expected: str) -> None:
    assert render(markdown) == expected


def test_code_fences_are_kept_byte_for_byte() -> None:
    fenced = "```python\n#### not a heading\nping('@everyone')  # <@123456789012345678>\n    indented\n```"
    text = f"before @here\n{fenced}\nafter @here\n~~~\n@everyone\n~~~"
    assert render(text) == f"before @{Z}here\n{fenced}\nafter @{Z}here\n~~~\n@everyone\n~~~"


def test_unclosed_fence_protects_the_rest() -> None:
    text = "```\n@everyone\nstill code"
    assert render(text) == text


def test_length_counts_the_escapes() -> None:
    assert rendered_length("@everyone") == len("@everyone") + 1
    assert rendered_length("#### Heading") == len("**Heading**")
    assert rendered_length("é🙂") == 2  # Discord counts code points


# Prose without backticks (code is verbatim by design), built from the pieces pings are made of.
pieces = st.sampled_from([*"ab @#&!<>\n", "everyone", "here", "123456789012345678", "#### "])
prose = st.lists(pieces, max_size=40).map("".join)


@settings(max_examples=200, deadline=None)
@given(prose)
def test_no_ping_survives_outside_code(text: str) -> None:
    out = render(text)
    assert not re.search(r"@(everyone|here)", out)
    assert not re.search(r"<@[!&]?\d{17,20}>", out)
    assert out.replace(Z, "").count("\n") == text.count("\n")


@settings(max_examples=200, deadline=None)
@given(prose)
def test_render_is_idempotent(text: str) -> None:
    assert render(render(text)) == render(text)
