"""Markdown (what the model writes) -> plain text as Messenger shows it. Pure.

Messenger shows a message's text as it is: no bold, no links behind words, no headings. So the
markers that would show as stray asterisks go, and what they meant stays readable:
- **bold**, *italic*, ~~strike~~ lose their markers; a heading keeps its words on their own line;
- [text](url) becomes "text (url)" (the address alone when it is the text), images likewise;
- bullets become "•", quote marks "│", a rule "———";
- code is kept as written, backticks and fences included: they set code apart on every client,
  and nothing inside code is touched (an asterisk there is part of the code).

Rendering never makes a text longer (in UTF-16 units, what the gateway splits by), so a piece split
to Messenger's 2,000 characters still fits once rendered.
"""

from __future__ import annotations

import re

from gateway.core.splitting import fence_after

_HEADING = re.compile(r"^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_RULE = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_BULLET = re.compile(r"^([ \t]*)[-*+]([ \t]+)(.*)$")
_QUOTE = re.compile(r"^([ \t]{0,3})((?:>[ \t]?)+)(.*)$")
_URL = r"(?:https?://|mailto:)[^\s()<>]+(?:\([^\s()<>]*\)[^\s()<>]*)*"
_INLINE = re.compile(
    r"(?P<code>`+)(?P<code_body>.+?)(?P=code)"
    rf"|<(?P<auto>{_URL})>"
    rf"|(?P<image>!)?\[(?P<link_text>[^\]\n]*)\]\((?P<link_url>{_URL})(?:[ \t]+\"[^\"\n]*\")?\)"
    r"|\*\*\*(?=\S)(?P<bold_ital>.+?)(?<=\S)\*\*\*"
    r"|\*\*(?=\S)(?P<bold>.+?)(?<=\S)\*\*"
    r"|(?<!\w)__(?=\S)(?P<ubold>.+?)(?<=\S)__(?!\w)"
    r"|~~(?=\S)(?P<strike>.+?)(?<=\S)~~"
    r"|(?<![\w*])\*(?=[^\s*])(?P<ital>.+?)(?<=[^\s*])\*(?![\w*])"
    r"|(?<!\w)_(?=[^\s_])(?P<uital>.+?)(?<=[^\s_])_(?!\w)"
    r"|\\(?P<escaped>[!-/:-@\[-`{-~])"
)
_EMPHASIS = ("bold_ital", "bold", "ubold", "strike", "ital", "uital")
RULE = "———"


def _link(text: str, url: str) -> str:
    label = _inline(text).strip()
    bare = url.split("://", 1)[-1].removeprefix("mailto:")
    if not label or label in (url, bare):
        return url
    return f"{label} ({url})"


def _inline(text: str) -> str:
    out: list[str] = []
    pos = 0
    for m in _INLINE.finditer(text):
        out.append(text[pos : m.start()])
        pos = m.end()
        if m.group("code") is not None:
            out.append(m.group(0))  # code stays as written
        elif m.group("auto") is not None:
            out.append(m.group("auto"))
        elif m.group("link_url") is not None:
            out.append(_link(m.group("link_text"), m.group("link_url")))
        elif m.group("escaped") is not None:
            out.append(m.group("escaped"))
        else:
            kind = next(k for k in _EMPHASIS if m.group(k) is not None)
            out.append(_inline(m.group(kind)))
    out.append(text[pos:])
    return "".join(out)


def _line(line: str) -> str:
    if m := _HEADING.match(line):
        return _inline(m.group(1) or "")
    if _RULE.match(line):
        return RULE
    if m := _QUOTE.match(line):
        # Each ">" becomes a bar where it stands: the quote keeps its nesting and its length.
        return m.group(1) + m.group(2).replace(">", "│") + _line(m.group(3))
    if m := _BULLET.match(line):
        return f"{m.group(1)}•{m.group(2)}{_inline(m.group(3))}"
    return _inline(line)


def render(markdown: str) -> str:
    """The plain text Messenger is sent for `markdown`."""
    out: list[str] = []
    fence: tuple[str, str] | None = None
    for line in markdown.split("\n"):
        after = fence_after(fence, line)
        out.append(line if fence is not None or after is not None else _line(line))
        fence = after
    return "\n".join(out)
