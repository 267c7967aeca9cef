"""The write-back filter (DESIGN §6): what may become a long-term memory.

Memory keeps compact operational knowledge: a decision, a preference, a lesson, a constraint, a
next step, a reference to an artifact. `check` refuses what must never be stored (secrets, raw
transcripts, reasoning traces and scratchpads, large code blocks, data dumps, overlong text) and
flags what may be stored only as evidence awaiting review (unsourced broad claims, text shaped like
an instruction to the assistant). Reasons are short sentences shown to the person.

The detectors are heuristics tuned to let ordinary facts through ("Deploys happen on Tuesdays");
each looks for several signs together (many lines, repeated speakers, two scratchpad keywords), so
one colon or one comma is never enough. Pure functions, no I/O.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

from memory.trust.redact import contains_secret

__all__ = ["MAX_CHARS", "Verdict", "check", "clean", "injection_shaped"]

MAX_CHARS = 1000  # one fact, decision or preference fits easily
MAX_CODE_LINES = 15
MAX_CODE_CHARS = 800

Action = Literal["ok", "flag", "refuse"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """`ok`: store it; `flag`: store it as evidence that needs review; `refuse`: store nothing."""

    action: Action
    reasons: tuple[str, ...] = ()

    @property
    def stored(self) -> bool:
        return self.action != "refuse"


# --- normalizing ---------------------------------------------------------------------------------

# Invisible characters that only hide text from a reader (and from the detectors below). Zero-width
# joiners stay in `clean`: they hold emoji sequences together.
_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u2060\ufeff\u00ad"))
_HSPACE = re.compile(r"[^\S\n]+")
_BLANK_RUNS = re.compile(r"\n{3,}")


def _clean_line(line: str) -> str:
    body = line.lstrip(" \t")
    indent = line[: len(line) - len(body)]
    return indent + _HSPACE.sub(" ", body).rstrip()


def clean(text: str) -> str:
    """`text` with normalized whitespace: Unix newlines, no invisible characters, single spaces
    inside lines (leading indentation kept), no trailing spaces, at most one blank line in a row,
    nothing blank around it."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").translate(_INVISIBLE)
    text = "".join(" " if c != "\n" and c.isspace() and c not in " \t" else c for c in text)
    lines = [_clean_line(line) for line in text.split("\n")]
    return _BLANK_RUNS.sub("\n\n", "\n".join(lines)).strip()


def _lines(text: str) -> list[str]:
    return [line for line in text.split("\n") if line.strip()]


# --- refusals ------------------------------------------------------------------------------------

_ROLE_LINE = re.compile(r"^\W{0,4}(?:user|assistant|system|human|ai|bot|model|tool|me|you)\W{0,4}:\s*\S", re.IGNORECASE)
# Chat-log stamps: "[12:01]", "[2024-05-01 12:01]", "2024-05-01 12:01:33", WhatsApp "5/1/24, 12:01 -".
_STAMP = (
    r"(?:\[[^\]\n]{0,12}\d{1,2}:\d{2}(?::\d{2})?(?:\s?[ap]m)?\]"
    r"|\d{4}-\d{2}-\d{2}[ T]\d{1,2}:\d{2}(?::\d{2})?"
    r"|\d{1,2}/\d{1,2}/\d{2,4},?\s+\d{1,2}:\d{2}(?:\s?[ap]m)?\s*[-\u2013])"
)
_STAMPED_SPEAKER = re.compile(rf"^\s*{_STAMP}\s*(?:-\s*)?(?:<[^>\n]{{1,32}}>|[^:\n]{{1,32}}:)\s", re.IGNORECASE)
_SPEAKER = re.compile(r"^\s*(?:<(?P<irc>[^>\s]{1,32})>|(?P<name>[A-Za-z@][\w.@' -]{0,31}?)\s*:)\s+\S")


def _speakers(lines: list[str]) -> list[str]:
    names: list[str] = []
    for line in lines:
        match = _SPEAKER.match(line)
        if match:
            names.append((match.group("irc") or match.group("name")).casefold())
    return names


def _transcript(lines: list[str]) -> bool:
    """Two lines spoken by user/assistant roles or stamped like a chat log, or a conversation:
    three or more `name: text` lines, at least half the text, where the speaker changes twice."""
    if sum(1 for line in lines if _ROLE_LINE.match(line)) >= 2:
        return True
    if sum(1 for line in lines if _STAMPED_SPEAKER.match(line)) >= 2:
        return True
    names = _speakers(lines)
    if len(names) < 3 or 2 * len(names) < len(lines):
        return False
    turns = sum(1 for a, b in pairwise(names) if a != b)
    return turns >= 2 and len(set(names)) < len(names)


_THINK_TAG = re.compile(r"<\s*/?\s*(?:think|thinking|reasoning|scratchpad|inner_monologue)\s*>", re.IGNORECASE)
_STEP_BY_STEP = re.compile(
    r"\b(?:let(?:['\u2019]s|\s+me|\s+us)\s+)?(?:think|reason)(?:ing)?(?:\s+(?:(?:this|it)(?:\s+through)?|about\s+(?:this|it)|through\s+(?:this|it)))?"
    r",?\s+step[- ]by[- ]step\b",
    re.IGNORECASE,
)
_MONOLOGUE = re.compile(
    r"^\s*(?:okay|ok|alright|hmm+)\b[,.]?\s+(?:so\s+)?(?:let\s+me|let's|i\s+need\s+to|i\s+should|the\s+user)\b",
    re.IGNORECASE,
)
_SCRATCH_LINE = re.compile(
    r"^\W{0,4}(thought|action input|action|observation|final answer|scratchpad)\s*\d*\W{0,4}:", re.IGNORECASE
)


def _reasoning(text: str, lines: list[str]) -> bool:
    """A thinking block, a "think step by step" monologue, or a ReAct scratchpad: a `Thought:` or
    `Observation:` line together with another scratchpad keyword (one `Action:` line is an action
    item, not a scratchpad)."""
    if _THINK_TAG.search(text) or _STEP_BY_STEP.search(text) or _MONOLOGUE.match(text):
        return True
    kinds = {m.group(1).casefold() for line in lines if (m := _SCRATCH_LINE.match(line))}
    return "scratchpad" in kinds or (len(kinds) >= 2 and bool(kinds & {"thought", "observation"}))


_FENCE = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})[^\n]*\n(?P<body>.*?)(?:^[ \t]*(?P=fence)[ \t]*$|\Z)", re.M | re.S)
_CODE_LINE = re.compile(
    r"^\s*(?:def |class |import |from \S+ import |function |const |let |var |return\b|#include|"
    r"(?:public|private|static) |if\s*\(|for\s*\(|while\s*\(|[{}]\s*$)|[;{}]\s*$"
)


def _fenced_blocks(text: str) -> Iterator[str]:
    for match in _FENCE.finditer(text):
        yield match.group("body")


def _large_code(text: str, lines: list[str]) -> bool:
    for body in _fenced_blocks(text):
        if len(_lines(body)) > MAX_CODE_LINES or len(body) > MAX_CODE_CHARS:
            return True
    return sum(1 for line in lines if _CODE_LINE.search(line)) > MAX_CODE_LINES


_BLOB = re.compile(r"(?<![\w+/=-])[A-Za-z0-9+/_-]{120,}={0,2}")
_HEX_BLOB = re.compile(r"\b[0-9a-fA-F]{128,}\b")
_DATA_URI = re.compile(r"\bdata:[\w.+-]+/[\w.+-]+;base64,", re.IGNORECASE)
_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
_PHONE = re.compile(r"(?<![\w+])\+?\d[\d ()-]{7,}\d(?!\w)")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_LOG_LINE = re.compile(r"^\s*\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")
_JSON_KEY_LINE = re.compile(r"^\s*\"[^\"\n]+\"\s*:")
_TABLE_LINE = re.compile(r"^\s*\|.*\|.*\|\s*$")
_DELIMITERS = (",", ";", "\t", "|")
_MAX_JSON_LEAVES = 12
_MAX_JSON_CHARS = 400
_MIN_DUMP_LINES = 5


def _leaves(value: object) -> int:
    if isinstance(value, dict):
        return sum(_leaves(v) for v in value.values()) or 1
    if isinstance(value, list):
        return sum(_leaves(v) for v in value) or 1
    return 1


def _json_dump(candidate: str) -> bool:
    candidate = candidate.strip()
    if not candidate.startswith(("{", "[")):
        return False
    try:
        value = json.loads(candidate)
    except (ValueError, RecursionError):
        return sum(1 for line in candidate.split("\n") if _JSON_KEY_LINE.match(line)) >= 8
    return _leaves(value) > _MAX_JSON_LEAVES or len(candidate) > _MAX_JSON_CHARS


def _delimited(lines: list[str]) -> bool:
    """CSV-like rows: five or more lines carrying the same number (two or more) of one delimiter."""
    for delimiter in _DELIMITERS:
        counts = Counter(line.count(delimiter) for line in lines if line.count(delimiter) >= 2)
        if counts and counts.most_common(1)[0][1] >= _MIN_DUMP_LINES:
            return True
    return False


def _symbol_heavy(line: str) -> bool:
    stripped = line.strip()
    symbols = sum(1 for c in stripped if not c.isalnum() and not c.isspace())
    return len(stripped) >= 20 and symbols > 0.35 * len(stripped)


def _dump(text: str, lines: list[str]) -> str | None:
    """What kind of data dump `text` is, if it is one."""
    if _json_dump(text) or any(_json_dump(body) for body in _fenced_blocks(text)):
        return "a JSON document"
    if sum(1 for line in lines if _TABLE_LINE.match(line)) >= 4:
        return "a table"
    if _delimited(lines):
        return "rows of delimited data"
    if (
        _DATA_URI.search(text)
        or any(_hex(m.group()) for m in _HEX_BLOB.finditer(text))
        or any(_encoded(m.group()) for m in _BLOB.finditer(text))
    ):
        return "an encoded blob"
    phones = {p for p in _PHONE.findall(text) if _phone(p)}
    if len(set(_EMAIL.findall(text)) | phones) >= _MIN_DUMP_LINES:
        return "a list of contact details"
    if sum(1 for line in lines if _LOG_LINE.match(line)) >= _MIN_DUMP_LINES:
        return "log lines"
    if sum(1 for line in lines if _symbol_heavy(line)) >= _MIN_DUMP_LINES:
        return "symbol-heavy data"
    return None


def _encoded(value: str) -> bool:
    """Encoded data mixes cases and digits and has few slashes; a long word or file path does not."""
    mixed = any(c.isdigit() for c in value) and any(c.isupper() for c in value) and any(c.islower() for c in value)
    return mixed and value.count("/") * 20 < len(value)


def _hex(value: str) -> bool:
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _phone(value: str) -> bool:
    """A phone number has 9 to 15 digits; a date ("2024-05-01 12") is not one."""
    return 9 <= sum(c.isdigit() for c in value) <= 15 and not _DATE.search(value)


# --- flags ---------------------------------------------------------------------------------------

# Claims about other people, whoever makes them ("everyone on the team…").
_ABOUT_OTHERS = re.compile(
    r"\b(?:everyone|everybody|nobody|no\s+one|every\s+(?:user|person|one|single\s+(?:user|person))|"
    r"all\s+(?:users|people|of\s+(?:us|them)|the\s+users))\b",
    re.IGNORECASE,
)
# Sweeping frequency claims: fine about oneself ("I always take the 8:15"), broad about anything else.
_SWEEPING = re.compile(
    r"\b(?:always|never|without\s+exception|every\s+(?:time|single\s+time|case)|all\s+(?:cases|the\s+time))\b",
    re.IGNORECASE,
)
# A statement whose subject is the speaker: "I …", "I'm …", "My …", "Me: …".
_ABOUT_ME = re.compile(r"^\W*(?:i|i['\u2019](?:m|ve|d|ll)|i\s+am|my|me|mine)\b", re.IGNORECASE)


def broad_claim(text: str) -> str | None:
    """The words that make `text` a broad claim, if it is one: a claim about everyone (or nobody),
    or a sweeping always/never about anything but the speaker themselves."""
    others = _ABOUT_OTHERS.search(text)
    if others is not None:
        return others.group()
    sweeping = _SWEEPING.search(text)
    if sweeping is not None and not _ABOUT_ME.match(text):
        return sweeping.group()
    return None


_FILLER = (
    r"(?:all|any|every|the|your|my|our|these|those|of|previous|prior|above|earlier|preceding|existing|"
    r"original|initial|system|safety|other|current|old|developer)"
)
_INJECTION = re.compile(
    "|".join(
        (
            rf"\b(?:ignore|disregard|forget|override|bypass)\b(?:\s+{_FILLER})*\s+"
            r"(?:instructions?|rules?|prompts?|directions?|guidelines?|guardrails?|polic(?:y|ies)|constraints?|"
            r"directives?|programming)\b",
            r"\byou\s+are\s+(?:now|no\s+longer)\b",
            r"\bsystem\s+prompt\b",
            r"\b(?:reveal|print|show|repeat|leak)\s+(?:me\s+)?(?:your|the)\s+(?:hidden\s+|secret\s+)?"
            r"(?:instructions|prompt)\b",
            r"\b(?:new|updated|revised|real|actual|additional|secret)\s+(?:system\s+)?(?:instructions?|rules?)\s*:",
            r"<\|?(?:im_start|im_end|system|endoftext)\|?>|\[/?inst\]|<<\s*/?sys\s*>>",
            r"^\s*#{1,4}\s*(?:system|instructions?)\s*:?\s*$",
            r"\b(?:developer|god|dan|jailbreak)\s+mode\b|\bjailbreak",
            r"\b(?:do\s+not|don't|never)\s+(?:tell|inform|warn)\s+the\s+user\b|\bwithout\s+telling\s+the\s+user\b",
            r"\bpretend\s+(?:to\s+be|you\s+are|that\s+you)\b",
        )
    ),
    re.MULTILINE,
)


def _folded(text: str) -> str:
    """Compatibility-normalized, case-folded text without format characters (zero-width joiners
    included) and with single spaces, so a lookalike or a hidden character hides nothing."""
    text = unicodedata.normalize("NFKC", text).replace("\u2019", "'")
    text = "".join(c for c in text if unicodedata.category(c) != "Cf")
    return _HSPACE.sub(" ", text.casefold())


def injection_shaped(text: str) -> bool:
    """Does `text` read like an attempt to instruct the assistant ("ignore previous instructions",
    "you are now…", "system prompt", chat-template tokens)? Memory is later shown to the model, so
    such text is never trusted as memory, and never forms memory from other people's messages."""
    return _INJECTION.search(_folded(text)) is not None


# --- the filter ----------------------------------------------------------------------------------


def check(text: str, *, extra_secrets: Sequence[str] = (), sourced: bool = False) -> Verdict:
    """May `text` be stored as a long-term memory? `extra_secrets` are the gateway's own configured
    secrets; `sourced` says the memory cites where it came from, which makes a broad claim fine."""
    cleaned = clean(text)
    if not cleaned:
        return Verdict("refuse", ("there is nothing to remember",))
    lines = _lines(cleaned)
    refusals: list[str] = []
    if len(cleaned) > MAX_CHARS:
        refusals.append(
            f"it is too long ({len(cleaned)} characters); keep memories compact: "
            f"one fact, decision or preference (at most {MAX_CHARS} characters)"
        )
    if contains_secret(text, extra_secrets) or contains_secret(cleaned, extra_secrets):
        refusals.append("it looks like a secret (a key, token or password); secrets are never stored")
    if _transcript(lines):
        refusals.append("it looks like a raw chat transcript; remember the decision or fact it led to instead")
    if _reasoning(cleaned, lines):
        refusals.append("it looks like a reasoning trace or scratchpad; remember the conclusion instead")
    if _large_code(cleaned, lines):
        refusals.append("it contains a large code block; remember a reference to the file or commit instead")
    dump = _dump(cleaned, lines)
    if dump is not None:
        refusals.append(f"it looks like a data dump ({dump}); remember what the data means, not the data")
    if refusals:
        return Verdict("refuse", tuple(refusals))
    flags: list[str] = []
    broad = None if sourced else broad_claim(cleaned)
    if broad is not None:
        word = _HSPACE.sub(" ", broad.casefold())
        flags.append(f'it makes a broad claim ("{word}") without a source; it is kept as evidence until confirmed')
    if injection_shaped(cleaned):
        flags.append("it reads like an instruction to the assistant; it is kept as evidence for review")
    return Verdict("flag", tuple(flags)) if flags else Verdict("ok")
