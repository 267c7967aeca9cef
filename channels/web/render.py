"""Markdown replies as HTML the chat page may show (docs/chat.md, "Markdown safety").

Two layers, each from a well-kept library: markdown-it-py parses CommonMark with raw HTML off (a
`<script>` in a reply is text, escaped), and nh3 (Ammonia) cleans what it produced against a small
allow-list, so a link to `javascript:` or an attribute the parser let through never reaches the page.
The page sets innerHTML only from this module's output; a person's own words stay plain text."""

from __future__ import annotations

import asyncio
import importlib.util
from functools import lru_cache

import nh3
from markdown_it import MarkdownIt

_TAGS = {
    "p",
    "br",
    "strong",
    "em",
    "del",
    "s",
    "code",
    "pre",
    "ul",
    "ol",
    "li",
    "blockquote",
    "a",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "hr",
}
# `start` keeps an ordered list's first number; `class` on code carries the fence's language
# (language-python), which the page shows on its copy button; `style` is never allowed.
_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "code": {"class"}, "th": {"align"}, "td": {"align"}}
_SCHEMES = {"http", "https", "mailto"}
_LINK_REL = "noopener noreferrer nofollow"
# Past this many characters a reply renders in a thread, so other sockets get their turns
# (rendering dense Markdown costs a few ms per KB).
_LARGE_REPLY = 4 * 1024


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    """CommonMark with tables and strikethrough, line breaks kept; raw HTML escaped. Bare URLs become links only when
    linkify-it-py is installed (markdown-it-py's optional dependency)."""
    linkify = importlib.util.find_spec("linkify_it") is not None
    # `breaks`: a line break in a reply is one on the page, as people expect in a chat (command
    # answers and notices are plain lines of text).
    md = MarkdownIt("commonmark", {"html": False, "linkify": linkify, "typographer": False, "breaks": True})
    md.enable(["table", "strikethrough"])
    if linkify:
        md.enable("linkify")
    return md


def render(markdown: str) -> str:
    """`markdown` (a model's reply) as sanitised HTML: inert whatever the text holds."""
    html = _parser().render(markdown)
    return nh3.clean(
        html,
        tags=_TAGS,
        attributes=_ATTRIBUTES,
        url_schemes=_SCHEMES,
        link_rel=_LINK_REL,
        set_tag_attribute_values={"a": {"target": "_blank"}},
        strip_comments=True,
    )


async def rendered(text: str) -> str:
    """`render(text)`, off the event loop when the text is long."""
    if len(text) < _LARGE_REPLY:
        return render(text)
    return await asyncio.to_thread(render, text)
