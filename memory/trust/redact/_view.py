"""The text being scanned, the gates that spare a detector its regex, and what a value must look
like to count as a secret (memory.trust.redact's detectors share them)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from detect_secrets.plugins.high_entropy_strings import HexHighEntropyString

Span = tuple[int, int]


# --- the text being scanned, with what the gates need ------------------------------------------

# Nearly every token shape is a run of at least this many token characters; prose seldom has one.
_MIN_RUN = 20
_RUN = re.compile(r"[A-Za-z0-9_-]{20,}")


class _View:
    __slots__ = ("_longest_run", "lower", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        lower = text.lower()
        if len(lower) != len(text):  # "İ" lowers to two characters: keep offsets aligned
            lower = "".join(c.lower() if len(c.lower()) == 1 else c for c in text)
        self.lower = lower
        self._longest_run: int | None = None

    @property
    def longest_run(self) -> int:
        """The longest run of token characters, or 0 when none reaches `_MIN_RUN`."""
        if self._longest_run is None:
            # Runs never span whitespace, and splitting first spares the scan of every short word.
            self._longest_run = max(
                (
                    m.end() - m.start()
                    for chunk in self.text.split()
                    if len(chunk) >= _MIN_RUN
                    for m in _RUN.finditer(chunk)
                ),
                default=0,
            )
        return self._longest_run


@dataclass(frozen=True, slots=True)
class _Gate:
    """Necessary for a detector to match: one of the literals (as written, or in the lowered text)
    when any are given, a run of at least `run` token characters, and a hit for `probe`, a cheap
    expression starting with a literal (sre finds those fast; most detectors start with a class)."""

    cased: tuple[str, ...] = ()
    folded: tuple[str, ...] = ()
    run: int = 0
    probe: re.Pattern[str] | None = None

    def opens(self, view: _View) -> bool:
        # Plain loops: this runs some forty times per message, generator overhead would dominate.
        if self.cased or self.folded:
            for literal in self.cased:
                if literal in view.text:
                    break
            else:
                for literal in self.folded:
                    if literal in view.lower:
                        break
                else:
                    return False
        if self.run and view.longest_run < max(self.run, _MIN_RUN):
            return False
        return self.probe is None or self.probe.search(view.text) is not None


# <digits>:<secret> (Telegram) and <id>.<stamp>.<hmac> (Discord), found from their separators.
_COLON_RUN = re.compile(r":[A-Za-z0-9_-]{30}")
_DOTTED_RUN = re.compile(r"\.[A-Za-z0-9_-]{4,10}\.[A-Za-z0-9_-]{20}")


# --- what a value looks like -------------------------------------------------------------------

_DETECT_HEX = HexHighEntropyString()
_HEX_VALUE = re.compile(r"[0-9a-fA-F]{16,}")
# Symbols people put in passwords; "-", "_", "." and "/" also join words in names and paths.
_SYMBOLS = frozenset("!@#$%^&*+=?~|\\")
_PLACEHOLDER = re.compile(
    r"""(?ix)
    (?:none|null|nil|true|false|yes|no|undefined|empty|unset|n/?a|tbd|todo|redacted|hidden|masked
      |example|placeholder|dummy|value|password|passwd|pass|pwd|secret|token|key)
    | [*x#.•?-]{3,}                                  # ****, xxxx, ...
    | .*\$[({].* | %\w+% | \{\{.*?\}\}? | <[^>\n]*>?          # ${X}, sk-$(openssl …), {{ x }}, <x>
    | \$(?-i:[A-Z_][A-Z0-9_]*)                      # $API_KEY ($ecret1 may be a password)
    | (?:your|my|some|the)[_-]?\w*?(?:password|passwd|pass|pwd|secret|token|key)s? | (?:your|my|some)[_-][\w-]*
    | (?-i:[A-Z][A-Z0-9_]*_(?:PASSWORD|PASSWD|PASS|PWD|SECRET|TOKEN|KEY))   # an env variable's name
    """
)
_CODE_PATH = re.compile(r"[A-Za-z_]+(?:\.[A-Za-z_]+)+")  # os.environ, self.token
_ROOTED_PATH = re.compile(r"(?:~|\.{1,2})?(?:/[A-Za-z0-9._@+-]+)+/?|[A-Za-z]:\\\S*")
# Shapes that are never the secret itself, whatever word precedes them.
_NOT_SECRET_SHAPE = re.compile(
    r"""(?ix)
    [a-z][a-z0-9+.-]*://\S*                                                   # a URL
    | [\w.+-]+@[\w-]+(?:\.[\w-]+)+                                            # an address
    | v?\d+(?:\.\d+)+(?:[-+][\w.]+)?                                          # 2.14.3, v1.2-rc1
    | \d{4}-\d{2}-\d{2}(?:[t\x20]\d{1,2}:\d{2}(?::\d{2})?(?:\.\d+)?(?:z|[+-]\d{2}:?\d{2})?)?
    | \d{1,2}:\d{2}(?::\d{2})?(?:am|pm)?                                      # 10:30
    | [+-]?\d+(?:[.,]\d+)+%? | \d+(?:%|k|kb|mb|gb|ms|s|m|h|d|x|px|days?)       # 1,234.56, 90d
    | (?-i:[A-Z][A-Z0-9]+-\d+)                                                # JIRA-1234
    | \#[0-9a-f]{3,8}                                                         # a colour
    """
)
_BRACKETS = frozenset("()[]{}<>")  # (blah|fake), [link](…), summary[1]: expressions and markup
_WORDS = re.compile(r"[^\W\d_]+(?:[- ][^\W\d_]+)*")
_TOKEN_LIKE = re.compile(r"[A-Za-z0-9._~+/=:-]{16,}")
_TRAILING = ".,;:)]}>\"'`\u201d\u2019"  # sentence punctuation and closing quotes after a bare value


def _has_digit(value: str) -> bool:
    return any(c.isdigit() for c in value)


def _has_letter(value: str) -> bool:
    return any(c.isalpha() for c in value)


def _has_symbol(value: str) -> bool:
    return any(c in _SYMBOLS for c in value)


def _inner_capitals(value: str) -> bool:
    """CorrectHorse, not Monday."""
    return any(c.isupper() for c in value[1:]) and any(c.islower() for c in value)


def _mixed(value: str) -> bool:
    """Random tokens mix cases and digits; dotted code paths and host names rarely do."""
    return _has_digit(value) and any(c.isupper() for c in value) and any(c.islower() for c in value)


def _reference(value: str) -> bool:
    """Something that names or points at a secret rather than being one."""
    return bool(_PLACEHOLDER.fullmatch(value) or _CODE_PATH.fullmatch(value) or _ROOTED_PATH.fullmatch(value))


def _looks_secret(value: str) -> bool:
    """For 'Password: hunter2' written with a space: the value must look like one."""
    if _reference(value) or _NOT_SECRET_SHAPE.fullmatch(value):
        return False
    return _has_digit(value) or _has_symbol(value) or len(value) >= 16  # "token: SecretStr" is a type


def _strong(value: str, *, digits: bool, words: bool = True) -> bool:
    """For prose ('my password is X'): stricter than `_looks_secret`, since "is" is followed by
    ordinary words far more often than by a password. `digits`: a number of four or more digits
    counts (a password or passcode can be one; a token or key that is a number is a count).
    `words`: letters alone count when long (after "is"; after "=" they are a class name)."""
    if len(value) < 4 or _BRACKETS & set(value) or _reference(value) or _NOT_SECRET_SHAPE.fullmatch(value):
        return False
    if value.isdigit():
        return digits
    if _HEX_VALUE.fullmatch(value):
        return _DETECT_HEX.calculate_shannon_entropy(value) > _DETECT_HEX.entropy_limit
    letters, digit, symbol = _has_letter(value), _has_digit(value), _has_symbol(value)
    if (digit and letters) or (symbol and (letters or digit)):
        return len(value) >= 6
    if words and _WORDS.fullmatch(value):  # correct-horse-battery-staple, CorrectHorseBattery
        return len(value) >= (12 if _inner_capitals(value) else 20)
    return False


def _trim(start: int, value: str) -> Span:
    stripped = value.rstrip(_TRAILING)
    return start, start + len(stripped)
