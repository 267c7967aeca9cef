"""Markdown (as LLMs write it) -> Telegram HTML or MarkdownV2. Pure functions, no SDK.

Supported: fenced code blocks (with a language), headings (rendered bold), block quotes, bullet
lists (rendered as "•"), `code`, **bold** / __bold__, *italic* / _italic_, ***both***,
~~strike~~, [text](http(s)/tg/mailto url), and backslash escapes. Anything else is text, escaped
so Telegram never sees stray markup. Line structure is kept: one output line per input line,
except that fence lines disappear into the code block.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Literal

ParseMode = Literal["HTML", "MarkdownV2"]

_ASCII_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_V2_RESERVED = frozenset("_*[]()~`>#+-=|{}.!\\")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_QUOTE = re.compile(r"^ {0,3}> ?(.*)$")
_BULLET = re.compile(r"^([ \t]*)[-*+][ \t]+(?=\S)")
_URL = re.compile(r"^(?:https?://|tg://|mailto:)[^\s<>\"]+$", re.IGNORECASE)
_LANG_CHARS = re.compile(r"[^A-Za-z0-9_+#.\-]")


# -- inline AST -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Text:
    text: str


@dataclass(frozen=True, slots=True)
class Code:
    text: str


@dataclass(frozen=True, slots=True)
class Styled:
    style: Literal["b", "i", "s"]
    children: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Link:
    url: str
    children: tuple[Node, ...]


Node = Text | Code | Styled | Link


def _run_length(s: str, i: int, ch: str) -> int:
    j = i
    while j < len(s) and s[j] == ch:
        j += 1
    return j - i


def _code_close(s: str, start: int, n: int, hi: int) -> int | None:
    """Index of the next run of exactly `n` backticks in s[start:hi]."""
    i = start
    while True:
        i = s.find("`", i, hi)
        if i < 0:
            return None
        m = min(_run_length(s, i, "`"), hi - i)
        if m == n:
            return i
        i += m


def _can_open(s: str, i: int, n: int, ch: str) -> bool:
    after = s[i + n] if i + n < len(s) else ""
    if not after or after.isspace():
        return False
    if ch == "~":
        return n == 2
    # Underscores inside words (snake_case) never emphasize, as in CommonMark.
    return not (ch == "_" and i > 0 and s[i - 1].isalnum())


def _can_close(s: str, i: int, n: int, ch: str, start: int) -> bool:
    if i <= start or s[i - 1].isspace():
        return False
    return not (ch == "_" and i + n < len(s) and s[i + n].isalnum())


class _InlineParser:
    """Delimiter matching with a per-string memo so unclosed markers cost O(n), not O(n²) each."""

    def __init__(self, s: str) -> None:
        self.s = s
        self.no_closer_from: dict[tuple[str, int], int] = {}

    def closer(self, start: int, ch: str, n: int) -> int | None:
        key = (ch, n)
        if start >= self.no_closer_from.get(key, len(self.s) + 1):
            return None
        s, i = self.s, start
        while i < len(s):
            c = s[i]
            if c == "\\" and i + 1 < len(s) and s[i + 1] in _ASCII_PUNCT:
                i += 2
            elif c == "`":
                m = _run_length(s, i, "`")
                end = _code_close(s, i + m, m, len(s))
                i = end + m if end is not None else i + m
            elif c == ch:
                m = _run_length(s, i, ch)
                if m == n and _can_close(s, i, n, ch, start):
                    return i
                i += m
            else:
                i += 1
        self.no_closer_from[key] = min(start, self.no_closer_from.get(key, start))
        return None

    def parse(self, lo: int, hi: int) -> tuple[Node, ...]:
        s = self.s
        nodes: list[Node] = []
        buf: list[str] = []

        def flush() -> None:
            if buf:
                nodes.append(Text("".join(buf)))
                buf.clear()

        i = lo
        while i < hi:
            c = s[i]
            if c == "\\" and i + 1 < hi and s[i + 1] in _ASCII_PUNCT:
                buf.append(s[i + 1])
                i += 2
                continue
            if c == "`":
                n = min(_run_length(s, i, "`"), hi - i)
                end = _code_close(s, i + n, n, hi)
                if end is not None:
                    flush()
                    nodes.append(Code(_strip_code_padding(s[i + n : end])))
                    i = end + n
                else:
                    buf.append("`" * n)
                    i += n
                continue
            if c == "[":
                link = self.link(i, hi)
                if link is not None:
                    node, i = link
                    flush()
                    nodes.append(node)
                    continue
            if c in "*_~":
                n = min(_run_length(s, i, c), hi - i)
                if n <= 3 and _can_open(s, i, n, c):
                    end = self.closer(i + n, c, n)
                    if end is not None and end + n <= hi:
                        flush()
                        nodes.append(_emphasis(c, n, self.parse(i + n, end)))
                        i = end + n
                        continue
                buf.append(c * n)
                i += n
                continue
            buf.append(c)
            i += 1
        flush()
        return tuple(nodes)

    def link(self, i: int, hi: int) -> tuple[Node, int] | None:
        """`[text](url)` starting at i: the node and the index after it, or None."""
        s = self.s
        depth, j = 0, i
        while j < hi:
            if s[j] == "\\":
                j += 2
                continue
            if s[j] == "[":
                depth += 1
            elif s[j] == "]":
                depth -= 1
                if depth == 0:
                    break
            elif s[j] == "\n":
                return None
            j += 1
        if j >= hi or j + 1 >= hi or s[j + 1] != "(":
            return None
        close, depth = j + 2, 0  # balanced parentheses may appear in the URL (Wikipedia links)
        while close < hi and not s[close].isspace():
            if s[close] == "(":
                depth += 1
            elif s[close] == ")":
                if depth == 0:
                    break
                depth -= 1
            close += 1
        if close >= hi or s[close] != ")":
            return None
        url = s[j + 2 : close]
        if not _URL.match(url) or j == i + 1:
            return None
        return Link(url, self.parse(i + 1, j)), close + 1


def _strip_code_padding(text: str) -> str:
    if len(text) >= 2 and text[0] == " " and text[-1] == " " and text.strip():
        return text[1:-1]
    return text


def _emphasis(ch: str, n: int, inner: tuple[Node, ...]) -> Node:
    if ch == "~":
        return Styled("s", inner)
    if n == 1:
        return Styled("i", inner)
    if n == 2:
        return Styled("b", inner)
    return Styled("b", (Styled("i", inner),))


def parse_inline(text: str) -> tuple[Node, ...]:
    return _InlineParser(text).parse(0, len(text))


# -- blocks -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Para:
    text: str


@dataclass(frozen=True, slots=True)
class Heading:
    text: str


@dataclass(frozen=True, slots=True)
class Quote:
    text: str


@dataclass(frozen=True, slots=True)
class CodeBlock:
    lang: str
    code: str


@dataclass(frozen=True, slots=True)
class Blank:
    text: str  # the whitespace of the line, kept as written


Block = Para | Heading | Quote | CodeBlock | Blank


def _opens_fence(line: str) -> tuple[str, str] | None:
    """(marker, info) when `line` opens a fenced block; "```x```" on one line is inline code."""
    m = _FENCE.match(line)
    if not m or (m.group(1)[0] == "`" and "`" in m.group(2)):
        return None
    return m.group(1), m.group(2).strip()


def _closes_fence(line: str, marker: str) -> bool:
    m = _FENCE.match(line)
    return bool(m and m.group(1)[0] == marker[0] and len(m.group(1)) >= len(marker) and not m.group(2).strip())


def parse_blocks(markdown: str) -> list[Block]:
    lines = markdown.split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _opens_fence(line)
        if fence is not None:
            marker, info = fence
            body: list[str] = []
            i += 1
            while i < len(lines) and not _closes_fence(lines[i], marker):
                body.append(lines[i])
                i += 1
            i += 1  # the closing fence (or the end of an unclosed block)
            lang = _LANG_CHARS.sub("", info.split()[0]) if info else ""
            blocks.append(CodeBlock(lang, "\n".join(body)))
        elif not line.strip():
            blocks.append(Blank(line))
            i += 1
        elif heading := _HEADING.match(line):
            blocks.append(Heading(heading.group(1)))
            i += 1
        elif _QUOTE.match(line):
            quoted: list[str] = []
            while i < len(lines) and (m := _QUOTE.match(lines[i])):
                quoted.append(m.group(1))
                i += 1
            blocks.append(Quote("\n".join(quoted)))
        else:
            para = [line]
            i += 1
            while i < len(lines) and _is_para_line(lines[i]):
                para.append(lines[i])
                i += 1
            blocks.append(Para("\n".join(_BULLET.sub(r"\1• ", p) for p in para)))
    return blocks


def _is_para_line(line: str) -> bool:
    return bool(line.strip()) and not (_opens_fence(line) or _HEADING.match(line) or _QUOTE.match(line))


# -- HTML -------------------------------------------------------------------------------------------

# Telegram cannot nest an entity inside one of the same kind (MarkdownV2 cannot even express it):
# an inner style or link that is already active renders as its children only.
_Active = frozenset[str]


def _esc(text: str) -> str:
    return html.escape(text, quote=False)


def _html_inline(nodes: tuple[Node, ...], active: _Active = frozenset()) -> str:
    out: list[str] = []
    for node in nodes:
        if isinstance(node, Text):
            out.append(_esc(node.text))
        elif isinstance(node, Code):
            out.append(f"<code>{_esc(node.text)}</code>")
        elif isinstance(node, Styled):
            inner = _html_inline(node.children, active | {node.style})
            out.append(inner if node.style in active else f"<{node.style}>{inner}</{node.style}>")
        else:
            inner = _html_inline(node.children, active | {"a"})
            out.append(inner if "a" in active else f'<a href="{html.escape(node.url, quote=True)}">{inner}</a>')
    return "".join(out)


def _html_block(block: Block) -> str:
    if isinstance(block, Blank):
        return block.text
    if isinstance(block, Para):
        return _html_inline(parse_inline(block.text))
    if isinstance(block, Heading):
        return f"<b>{_html_inline(parse_inline(block.text), frozenset({'b'}))}</b>"
    if isinstance(block, Quote):
        return f"<blockquote>{_html_inline(parse_inline(block.text))}</blockquote>"
    if block.lang:
        return f'<pre><code class="language-{block.lang}">{_esc(block.code)}</code></pre>'
    return f"<pre>{_esc(block.code)}</pre>"


def render_html(markdown: str) -> str:
    """Telegram HTML (parse_mode=HTML)."""
    return "\n".join(_html_block(b) for b in parse_blocks(markdown))


# -- MarkdownV2 -------------------------------------------------------------------------------------


def escape_markdown_v2(text: str) -> str:
    """Escape every character MarkdownV2 reserves, so the text shows exactly as given."""
    return "".join("\\" + c if c in _V2_RESERVED else c for c in text)


def _v2_code(text: str) -> str:
    return text.replace("\\", "\\\\").replace("`", "\\`")


_V2_MARK = {"b": "*", "i": "_", "s": "~"}


def _v2_inline(nodes: tuple[Node, ...], active: _Active = frozenset()) -> str:
    out: list[str] = []
    for node in nodes:
        if isinstance(node, Text):
            piece = escape_markdown_v2(node.text)
        elif isinstance(node, Code):
            piece = f"`{_v2_code(node.text)}`"
        elif isinstance(node, Styled):
            inner = _v2_inline(node.children, active | {node.style})
            mark = "" if node.style in active else _V2_MARK[node.style]
            piece = f"{mark}{inner}{mark}"
        else:
            inner = _v2_inline(node.children, active | {"a"})
            url = node.url.replace("\\", "\\\\").replace(")", "\\)")
            piece = inner if "a" in active else f"[{inner}]({url})"
        # "__" means underline in MarkdownV2: Telegram ignores "\r", which keeps two underscores apart.
        if out and out[-1].endswith("_") and piece.startswith("_"):
            out.append("\r")
        out.append(piece)
    return "".join(out)


def _v2_block(block: Block) -> str:
    if isinstance(block, Blank):
        return block.text
    if isinstance(block, Para):
        return _v2_inline(parse_inline(block.text))
    if isinstance(block, Heading):
        return f"*{_v2_inline(parse_inline(block.text), frozenset({'b'}))}*"
    if isinstance(block, Quote):
        # Each quoted line is parsed on its own so no entity spans a ">" line start.
        return "\n".join(">" + _v2_inline(parse_inline(line)) for line in block.text.split("\n"))
    return f"```{block.lang}\n{_v2_code(block.code)}\n```"


def render_markdown_v2(markdown: str) -> str:
    """Telegram MarkdownV2 (parse_mode=MarkdownV2)."""
    return "\n".join(_v2_block(b) for b in parse_blocks(markdown))


def render(markdown: str, parse_mode: ParseMode) -> str:
    return render_html(markdown) if parse_mode == "HTML" else render_markdown_v2(markdown)
