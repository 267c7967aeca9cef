"""Markdown (what the model writes) -> the Markdown a Teams text message shows. Pure.

A message sent with `textFormat: markdown` is shown through Teams' own, smaller Markdown ("Format
your bot messages", Microsoft Teams platform docs): bold, italic, strikethrough, inline code, code
blocks, block quotes, links and images render; headings, horizontal rules and tables do not, so a
heading becomes a bold line, a rule a line of box-drawing characters, and a table keeps its rows as
text without the `|---|` line. Two more differences from CommonMark:

- A single line break is dropped (Teams joins the lines); only a blank line breaks. Lines outside
  code blocks are therefore separated by a blank line; code blocks keep their lines as written.
- Text that looks like an HTML tag is taken as one and disappears (`a <b> c` shows `a  c`), so `<`
  and `>` outside code become entities; an `&` only where it would start an entity.
"""

from __future__ import annotations

import functools
import re

from gateway.core.splitting import fence_after, utf16_len

_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_RULE = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_TABLE_RULE = re.compile(r"^ {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")
_QUOTE = re.compile(r"^([ \t]{0,3}(?:>[ \t]?)+)(.*)$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_ENTITY_LIKE = re.compile(r"&(?=#?\w+;)")
_BOLD_MARKERS = re.compile(r"\*\*|__")
RULE_LINE = "──────────"


def escape(text: str) -> str:
    """Angle brackets as entities, and an `&` that would otherwise start one."""
    return _ENTITY_LIKE.sub("&amp;", text).replace("<", "&lt;").replace(">", "&gt;")


def _inline(text: str) -> str:
    """Escape everything but the contents of code spans (Teams shows those as written)."""
    out: list[str] = []
    pos = 0
    for m in _CODE_SPAN.finditer(text):
        out.append(escape(text[pos : m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(escape(text[pos:]))
    return "".join(out)


@functools.lru_cache(maxsize=4096)
def _line(line: str) -> str:
    """One line of prose. Cached: the splitter measures a growing chunk again for every line it adds,
    so the same lines are rendered many times over for one long reply."""
    if m := _HEADING.match(line):
        title = _BOLD_MARKERS.sub("", m.group(1)).strip()
        return f"**{_inline(title)}**" if title else ""
    if _RULE.match(line):
        return RULE_LINE
    if m := _QUOTE.match(line):
        # The `>` that makes a quote must stay a `>`; what follows it is text like any other.
        return m.group(1) + _inline(m.group(2))
    return _inline(line)


def render(markdown: str) -> str:
    """Render Markdown for a Teams message sent with textFormat "markdown"."""
    out: list[str] = []
    fence: tuple[str, str] | None = None
    prose = False  # the line before was text outside a code block (so a break must be a blank line)
    for line in markdown.split("\n"):
        after = fence_after(fence, line)
        if fence is None and after is not None:  # a block opens: the info string would show as code
            if prose:
                out.append("")
            out.append(line[: len(line) - len(line.lstrip())] + after[0])
            prose = False
        elif fence is not None:  # inside a block, or its closing line: as written
            out.append(line)
            prose = False
        elif not line.strip():
            out.append("")
            prose = False
        elif _TABLE_RULE.match(line) and "-" in line and "|" in line:
            continue  # a table's header rule: Teams shows no tables, the rows read as text
        else:
            if prose:
                out.append("")
            out.append(_line(line))
            prose = True
        fence = after
    if fence is not None:
        out.append(fence[0])  # a streamed partial reply may stop inside a block: close it
    return "\n".join(out)


def rendered_length(markdown: str) -> int:
    """How long `markdown` is once rendered, in UTF-16 code units: Teams measures a message's size
    in UTF-16, and rendering adds blank lines and entities, so the limit is checked after it."""
    return utf16_len(render(markdown))
