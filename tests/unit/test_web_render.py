"""channels/web/render.py: Markdown replies become HTML the chat page may set as innerHTML. Whatever a reply
holds (a model can be talked into writing anything), the result is inert: no script, no event handler, no
link that runs code or loads a document, nothing outside the allow-list."""

from __future__ import annotations

import re
import time
from html.parser import HTMLParser

import pytest

from channels.web.render import render

ALLOWED = {
    "p", "br", "strong", "em", "del", "s", "code", "pre", "ul", "ol", "li", "blockquote", "a",
    "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td", "hr",
}  # fmt: skip


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, dict(attrs)))


def tags(html: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(html)
    return parser.found


def assert_inert(html: str) -> None:
    for tag, attrs in tags(html):
        assert tag in ALLOWED, (tag, html)
        for name, value in attrs.items():
            assert not name.startswith("on"), (name, html)
            assert name not in ("style", "src", "srcdoc", "formaction"), (name, html)
            if name == "href":
                assert value is not None and re.match(r"^(https?:|mailto:)", value), html
        if tag == "a" and "href" in attrs:
            assert attrs.get("rel") == "noopener noreferrer nofollow" and attrs.get("target") == "_blank", html


ATTACKS = [
    "<script>alert(1)</script>",
    "hi <img src=x onerror=alert(1)> there",
    '<a href="javascript:alert(1)">click</a>',
    "[click](javascript:alert(1))",
    "[click](JaVaScRiPt:alert(1))",
    "[click](java\tscript:alert(1))",
    "[data](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "![pic](data:image/svg+xml,<svg onload=alert(1)>)",
    "![pic](https://tracker.example/pixel.png)",
    '[quote](https://example.com" onmouseover="alert(1))',
    "[t](https://example.com 'x\" onclick=\"alert(1)')",
    '<div style="position:fixed" onclick="alert(1)">overlay</div>',
    "<iframe src=https://example.com></iframe>",
    "```html\n<script>alert(1)</script>\n<img src=x onerror=alert(1)>\n```",
    "`<svg/onload=alert(1)>`",
    "<!-- comment --><style>body{display:none}</style>",
    "<details open ontoggle=alert(1)>x</details>",
    "[x](vbscript:msgbox(1))",
    "<form action=https://evil.example><button>go</button></form>",
    "| a |\n|---|\n| <img src=x onerror=alert(1)> |",
]


@pytest.mark.parametrize("text", ATTACKS)
def test_attacks_render_inert(text: str) -> None:
    html = render(text)
    assert_inert(html)
    assert "<script" not in html and "<img" not in html and "<iframe" not in html and "<style" not in html


def test_html_in_a_code_fence_is_shown_as_text() -> None:
    html = render("```html\n<b onclick=x>hi</b>\n```")
    assert html == '<pre><code class="language-html">&lt;b onclick=x&gt;hi&lt;/b&gt;\n</code></pre>\n'


def test_markdown_renders() -> None:
    html = render(
        "# Title\n\n**bold** *em* ~~gone~~ `code`\n\n- one\n- two\n\n3. three\n\n> quoted\n\n"
        "| a | b |\n|---|---|\n| 1 | 2 |\n\n---\n\n[site](https://example.com) <https://example.org> "
        "[mail](mailto:a@example.com)"
    )
    assert_inert(html)
    for part in (
        "<h1>Title</h1>",
        "<strong>bold</strong>",
        "<em>em</em>",
        "<s>gone</s>",
        "<code>code</code>",
        "<li>one</li>",
        '<ol start="3">',
        "<blockquote>",
        "<td>1</td>",
        "<hr>",
        'href="https://example.com"',
        'href="https://example.org"',
        'href="mailto:a@example.com"',
    ):
        assert part in html, (part, html)


def test_a_long_reply_renders_quickly_enough() -> None:
    """The adapter renders every streamed update up to 4 KB, and each final reply: 8 KB stays well under a second."""
    text = ("Some **bold** prose with `code`, a [link](https://example.com) and more words.\n\n" * 120)[:8192]
    render(text)  # the parser is built once
    started = time.perf_counter()
    render(text)
    assert time.perf_counter() - started < 1.0
