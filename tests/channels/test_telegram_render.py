"""Markdown -> Telegram HTML / MarkdownV2: table tests, and properties checked with the fake's strict
parsers (what Telegram would accept and show)."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from channels.telegram.render import escape_markdown_v2, render, render_html, render_markdown_v2
from tests.fakes.telegram import EntityParseError, parse_html, parse_markdown_v2

HTML_CASES = [
    ("plain text", "plain text"),
    ("a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"),
    ("**bold** and __also bold__", "<b>bold</b> and <b>also bold</b>"),
    ("*italic* and _italic_", "<i>italic</i> and <i>italic</i>"),
    ("***both***", "<b><i>both</i></b>"),
    ("~~gone~~", "<s>gone</s>"),
    ("use `x < 1` here", "use <code>x &lt; 1</code> here"),
    ("``a ` b``", "<code>a ` b</code>"),
    ("```python\nif a < b:\n    print('&')\n```",
     "<pre><code class=\"language-python\">if a &lt; b:\n    print('&amp;')</code></pre>"),
    ("```\nno language\n```", "<pre>no language</pre>"),
    ("see [the docs](https://example.org/a?b=1&c=2)", 'see <a href="https://example.org/a?b=1&amp;c=2">the docs</a>'),
    ("[**bold link**](https://x.io)", '<a href="https://x.io"><b>bold link</b></a>'),
    ("[not a link](javascript:alert(1))", "[not a link](javascript:alert(1))"),
    ("# Title\n## Sub *it*", "<b>Title</b>\n<b>Sub <i>it</i></b>"),
    ("- one\n- two\n  * nested", "• one\n• two\n  • nested"),
    ("> quoted **text**\n> more", "<blockquote>quoted <b>text</b>\nmore</blockquote>"),
    ("snake_case_name and 2*3*4", "snake_case_name and 2<i>3</i>4"),
    ("**unclosed and *half", "**unclosed and *half"),
    ("\\*not italic\\*", "*not italic*"),
    ("* not a bullet*", "• not a bullet*"),
    ("para one\n\npara two", "para one\n\npara two"),
    ("*a **b** c*", "<i>a <b>b</b> c</i>"),
    ("**a *b* c**", "<b>a <i>b</i> c</b>"),
    ("**a **b** c**", "<b>a **b</b> c**"),
    ("1. first\n2. second", "1. first\n2. second"),
]  # fmt: skip

V2_CASES = [
    ("plain text", "plain text"),
    ("Hello. (v1.2) - done!", "Hello\\. \\(v1\\.2\\) \\- done\\!"),
    ("**bold**", "*bold*"),
    ("*italic*", "_italic_"),
    ("~~gone~~", "~gone~"),
    ("`a\\b`c`", "`a\\\\b`c\\`"),
    ("```js\nlet a = `x`;\n```", "```js\nlet a = \\`x\\`;\n```"),
    ("[docs](https://example.org/a_(b))", "[docs](https://example.org/a_(b\\))"),
    ("[x](https://x.io/a\\b) end.", "[x](https://x.io/a\\\\b) end\\."),
    ("# Title!", "*Title\\!*"),
    ("> quote.\n> two", ">quote\\.\n>two"),
    ("- item", "• item"),
    ("*a* *b*", "_a_ _b_"),
    ("*a*_b_", "_a_\r_b_"),
    ("#tag 1+1=2 {x|y}", "\\#tag 1\\+1\\=2 \\{x\\|y\\}"),
    ("snake_case", "snake\\_case"),
]  # fmt: skip


@pytest.mark.parametrize(("markdown", "expected"), HTML_CASES)
def test_html_table(markdown: str, expected: str) -> None:
    out = render_html(markdown)
    assert out == expected
    parse_html(out)  # Telegram would accept it


@pytest.mark.parametrize(("markdown", "expected"), V2_CASES)
def test_markdown_v2_table(markdown: str, expected: str) -> None:
    out = render_markdown_v2(markdown)
    assert out == expected
    parse_markdown_v2(out)


def test_render_dispatches_on_parse_mode() -> None:
    assert render("**x**", "HTML") == "<b>x</b>"
    assert render("**x**", "MarkdownV2") == "*x*"


def test_fake_parsers_are_strict() -> None:
    """The checks below are only worth something if the fake refuses what Telegram refuses."""
    for bad in ("a < b", "<b>x", "<x>y</x>", "a & b", "<b><i>x</b></i>", '<a href="javascript:x">y</a>'):
        with pytest.raises(EntityParseError):
            parse_html(bad)
    for bad in ("a.b", "*open", "_a__b_", "`code", "(x)", "[x](y"):
        with pytest.raises(EntityParseError):
            parse_markdown_v2(bad)


MARKDOWNISH = st.lists(
    st.sampled_from([*list("ab \n*_~`[]()#>-+=|{}.!\\<&\"'"), "https://x.io", "é", "🎉", "```", "**", "\n> "]),
    max_size=60,
).map("".join)
PLAIN = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="*_~`[\\#>-+\r"),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(MARKDOWNISH)
@example("*a*_b_")
@example("```\n`\n```")
@example("> **a\n> b**")
@example("[a](https://x.io) [b](https://y.io)")
def test_any_markdown_renders_to_valid_telegram_markup(markdown: str) -> None:
    parse_html(render_html(markdown))
    parse_markdown_v2(render_markdown_v2(markdown))


@settings(max_examples=300, deadline=None)
@given(PLAIN)
def test_text_without_markdown_shows_unchanged(text: str) -> None:
    """No Markdown syntax in, exactly the same characters shown out (escaping is invisible)."""
    assert parse_html(render_html(text)) == text
    assert parse_markdown_v2(render_markdown_v2(text)) == text


@given(st.text(max_size=50))
def test_escape_markdown_v2_round_trips(text: str) -> None:
    assert parse_markdown_v2(escape_markdown_v2(text.replace("\r", ""))) == text.replace("\r", "")


def test_long_unclosed_markers_render_fast() -> None:
    """Thousands of unmatched delimiters must not make rendering quadratic in practice."""
    text = "*a _b ~~c `d " * 1000
    assert render_html(text).startswith("*a _b ~~c")
    parse_markdown_v2(render_markdown_v2(text))
