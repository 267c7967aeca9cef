"""A text-like file's text (docs/media.md): notes, CSV, JSON, source code. Which files are text is
decided by their bytes (gateway/media/kinds.py, looks_like_text); this decodes at most a budget of
characters, so a 20 MB log costs what the budget does. Pure.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Text:
    text: str
    cut: bool  # the file has more than the budget allowed


def decode(data: bytes, max_chars: int) -> Text:
    """At most `max_chars` characters of `data`: UTF-8 or UTF-16 by their byte-order mark, UTF-8
    without one, and Windows-1252 (which decodes every byte) when it is not UTF-8."""
    if data.startswith(codecs.BOM_UTF8):
        encoding, body = "utf-8", data[len(codecs.BOM_UTF8) :]
    elif data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding, body = "utf-16", data
    else:
        encoding, body = "utf-8", data
    # At most four bytes a character: no more than that is decoded.
    head = body[: max_chars * 4 + 4]
    try:
        text = codecs.getincrementaldecoder(encoding)().decode(head, final=len(head) == len(body))
    except UnicodeDecodeError:
        text = head.decode("cp1252", errors="replace")
    text = text.replace("\r\n", "\n").replace("\x00", "")
    cut = len(head) < len(body) or len(text) > max_chars
    return Text(text[:max_chars], cut)
