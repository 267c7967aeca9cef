"""Token estimate used for session budgets (DESIGN §4).

A digit or a non-Latin letter (Cyrillic, Greek, CJK, kana, Arabic, ...) counts as one token;
everything else counts four characters a token, rounded up.
"""

from __future__ import annotations

import re

_DIGIT = re.compile(r"\d")
_LETTER = re.compile(r"[^\W\d_]")
_LATIN = re.compile(
    "[A-Za-z\u00aa\u00ba\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u1e00-\u1eff"
    "\u2c60-\u2c7f\ua720-\ua7ff\uab30-\uab6f\uff21-\uff3a\uff41-\uff5a]"
)


def estimate_tokens(text: str) -> int:
    if not text:
        return 0
    digits = len(_DIGIT.findall(text))
    if text.isascii():
        single = digits
    else:
        single = digits + len(_LETTER.findall(text)) - len(_LATIN.findall(text))
    rest = len(text) - single
    return single + (rest + 3) // 4
