"""Markdown (what the model writes) -> Slack mrkdwn. Pure.

Slack's mrkdwn is not Markdown: bold is `*x*`, italic `_x_`, strike `~x~`, links `<url|text>`,
no headings, and `&`, `<`, `>` must be escaped everywhere, code included (Slack decodes the
entities inside code too). Code spans and fenced blocks keep their content verbatim apart from
that escaping; fences lose their info string because Slack would show it as a line of code.
"""

from __future__ import annotations

import re

from gateway.core.splitting import fence_after

_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_RULE = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_BULLET = re.compile(r"^([ \t]*)[-*+][ \t]+(.*)$")
_QUOTE = re.compile(r"^(?:[ \t]{0,3}>[ \t]?)+(.*)$")  # Slack has one quote level: nested ones fold
_INLINE = re.compile(
    r"(?P<code>`+)(?P<code_body>.+?)(?P=code)"
    r"|<(?P<auto>(?:https?|mailto):[^\s<>]+)>"
    r"|\[(?P<link_text>[^\]\n]+)\]\((?P<link_url>(?:https?://|mailto:)[^)\s]+)(?:[ \t]+\"[^\"\n]*\")?\)"
    r"|\*\*\*(?=\S)(?P<bold_ital>.+?)(?<=\S)\*\*\*"
    r"|\*\*(?=\S)(?P<bold>.+?)(?<=\S)\*\*"
    r"|(?<!\w)__(?=\S)(?P<ubold>.+?)(?<=\S)__(?!\w)"
    r"|~~(?=\S)(?P<strike>.+?)(?<=\S)~~"
    r"|(?<![\w*])\*(?=[^\s*])(?P<ital>.+?)(?<=[^\s*])\*(?![\w*])"
    r"|(?<!\w)_(?=[^\s_])(?P<uital>.+?)(?<=[^\s_])_(?!\w)"
)
_EMPHASIS_MARKERS = re.compile(r"\*\*|__")


def escape(text: str) -> str:
    """Slack's three control characters (https://docs.slack.dev/messaging/formatting-message-text)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _link(url: str, label: str) -> str:
    # A `|` in the label would end it early; `>` in either part would end the link.
    return f"<{escape(url)}|{escape(label.replace('|', '/'))}>"


def _inline(text: str) -> str:
    out: list[str] = []
    pos = 0
    for m in _INLINE.finditer(text):
        out.append(escape(text[pos : m.start()]))
        pos = m.end()
        if m.group("code") is not None:
            out.append(f"`{escape(m.group('code_body'))}`")
        elif m.group("auto") is not None:
            out.append(f"<{escape(m.group('auto'))}>")
        elif m.group("link_text") is not None:
            out.append(_link(m.group("link_url"), m.group("link_text")))
        elif m.group("bold_ital") is not None:
            out.append(f"*_{_inline(m.group('bold_ital'))}_*")
        else:
            kind = m.lastgroup or ""
            wrap = {"bold": "*", "ubold": "*", "strike": "~"}.get(kind, "_")  # ital / uital -> _
            out.append(f"{wrap}{_inline(m.group(kind))}{wrap}")
    out.append(escape(text[pos:]))
    return "".join(out)


def _line(line: str) -> str:
    if m := _HEADING.match(line):
        # Slack has no headings: a bold line reads as one. Bold inside it would nest `*`.
        return f"*{_inline(_EMPHASIS_MARKERS.sub('', m.group(1)))}*" if m.group(1) else ""
    if _RULE.match(line):
        return "──────────"
    if m := _QUOTE.match(line):
        # Slack quotes need a literal `>` at the start of the line, so it is not escaped here.
        return f"> {_line(m.group(1))}".rstrip()
    if m := _BULLET.match(line):
        # `* item` would read as an unclosed bold marker in Slack; a bullet character reads as a list.
        return f"{m.group(1)}• {_inline(m.group(2))}"
    return _inline(line)


def to_mrkdwn(markdown: str) -> str:
    """Render Markdown for Slack's `mrkdwn` text field."""
    out: list[str] = []
    fence: tuple[str, str] | None = None
    for line in markdown.split("\n"):
        after = fence_after(fence, line)
        if fence is None and after is not None:
            out.append("```")
        elif fence is not None and after is None:
            out.append("```")
        elif fence is not None:
            out.append(escape(line))
        else:
            out.append(_line(line))
        fence = after
    if fence is not None:
        out.append("```")  # a streamed partial reply may stop inside a block: keep the rest readable
    return "\n".join(out)
