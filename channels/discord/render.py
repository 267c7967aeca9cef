"""Markdown -> Discord message text. Pure.

Discord already speaks Markdown, so the work is defensive: the model must never mass-ping. Outside
code, `@everyone`, `@here` and user/role mention markup get a zero-width space after the `@`
(the same escape as discord.py's `utils.escape_mentions`); code spans and fenced blocks are left
byte for byte (Discord does not ping from code). The adapter also sends with
`AllowedMentions.none()`, so this is the visible half of a belt-and-braces rule.
Headings deeper than `###` (which Discord shows literally) become bold lines.
"""

from __future__ import annotations

import re

from gateway.core.splitting import fence_after

ZWSP = "\u200b"
_PING = re.compile(r"@(everyone|here|[!&]?[0-9]{17,20})")
_CODE_SPAN = re.compile(r"(`+)(?:.+?)\1")
_DEEP_HEADING = re.compile(r"^ {0,3}#{4,6}[ \t]+(.+?)[ \t#]*$")


def render(markdown: str) -> str:
    out: list[str] = []
    fence: tuple[str, str] | None = None
    for line in markdown.split("\n"):
        after = fence_after(fence, line)
        if fence is not None or after is not None:
            out.append(line)  # inside, opening or closing a fenced block: verbatim
        else:
            out.append(_prose_line(line))
        fence = after
    return "\n".join(out)


def rendered_length(markdown: str) -> int:
    """Length Discord counts (code points, its API is Python) of the text as it will be sent."""
    return len(render(markdown))


def escape_pings(text: str) -> str:
    return _PING.sub(f"@{ZWSP}\\1", text)


def _prose_line(line: str) -> str:
    heading = _DEEP_HEADING.match(line)
    if heading:
        line = f"**{heading.group(1)}**"
    parts: list[str] = []
    last = 0
    for span in _CODE_SPAN.finditer(line):
        parts.append(escape_pings(line[last : span.start()]))
        parts.append(span.group(0))
        last = span.end()
    parts.append(escape_pings(line[last:]))
    return "".join(parts)
