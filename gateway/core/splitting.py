"""Split a Markdown reply into platform-sized messages without breaking code blocks.

Lines are never re-indented or stripped. A split inside a fenced code block closes the fence at
the end of one message and reopens it (same fence and info string) at the start of the next.
Lengths are measured by the platform's own function (Telegram counts UTF-16 code units).
"""

from __future__ import annotations

import re
from collections.abc import Callable

Length = Callable[[str], int]
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def fence_after(fence: tuple[str, str] | None, line: str) -> tuple[str, str] | None:
    """The open fence (marker, info) after `line`, given the one open before it."""
    m = _FENCE.match(line)
    if not m:
        return fence
    marker, info = m.group(1), m.group(2).strip()
    if fence is None:
        if marker[0] == "`" and "`" in info:
            return None  # inline code like ```x``` is not a fence opener
        return marker, info
    if marker[0] == fence[0][0] and len(marker) >= len(fence[0]) and not info:
        return None
    return fence


def _prefix_fitting(text: str, room: int, length: Length) -> int:
    """Code points of the longest prefix of `text` whose length is at most `room` (at least 1)."""
    lo, hi = 1, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if length(text[:mid]) <= room:
            lo = mid
        else:
            hi = mid - 1
    return lo


def split_message(text: str, limit: int, length: Length = len) -> list[str]:
    """Chunks of at most `limit` (by `length`), each with balanced code fences."""
    if limit < 32:
        raise ValueError("limit too small to split safely")
    if length(text) <= limit:
        return [text] if text.strip() else []
    chunks: list[str] = []
    cur: list[str] = []
    header = 0  # 1 when cur starts with a reopened fence line
    fence: tuple[str, str] | None = None

    def cost(lines: list[str], open_fence: tuple[str, str] | None) -> int:
        return length("\n".join(lines + ([open_fence[0]] if open_fence else [])))

    def emit() -> None:
        nonlocal cur, header
        if any(line.strip() for line in cur[header:]):
            chunks.append("\n".join(cur + ([fence[0]] if fence else [])))
        cur = [fence[0] + fence[1]] if fence else []
        header = len(cur)

    for line in text.split("\n"):
        after = fence_after(fence, line)
        if cost([*cur, line], after) <= limit:
            cur.append(line)
            fence = after
            continue
        if len(cur) > header:
            emit()
            if cost([*cur, line], after) <= limit:
                cur.append(line)
                fence = after
                continue
        # One line longer than a whole message: cut it, preferring spaces.
        rest = line
        while rest:
            base = length("\n".join(cur)) + (1 if cur else 0)
            room = limit - base - (length("\n" + fence[0]) if fence else 0)
            if length(rest) <= room:
                cur.append(rest)
                break
            cut = _prefix_fitting(rest, max(room, 1), length)
            space = rest.rfind(" ", 0, cut)
            if space > cut // 2:
                cut = space + 1
            cur.append(rest[:cut])
            rest = rest[cut:]
            emit()
        fence = after
    if len(cur) > header:
        emit()
    return chunks
