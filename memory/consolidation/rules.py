"""Consolidation into Memory.md (DESIGN §5, §8), the pure parts: which records may go, what the model
is asked and what its answer may do to a Memory.md.

The model answers with JSON: `{"entries": ["…", …]}`, entries to append, or `{"memory_md": "…"}`, the
whole new file (when it merges or reorders what is there). An answer without JSON is read as its
Markdown bullets, to append. Whatever it returns:

- an entry is one line, at most ENTRY_CHARS long, secrets redacted (memory.trust.redact), and dropped when it
  reads like an instruction to the assistant (memory.trust.writeback.injection_shaped): Memory.md is the
  core of every prompt;
- an entry already in the file (same words, case and final punctuation aside) is not added again;
- a rewrite keeps every line it shares with the old file as it was and redacts only the lines it
  adds; it is refused when it drops more than a quarter of the old file's entries (MAX_DROPPED).

An entry of a Memory.md is any line that is not blank, not a heading and not an HTML comment, its
list marker aside: people write Memory.md by hand, in bullets or in prose lines.

A section written by a run ends with a marker comment naming the run, so that a consolidation job
cut off after writing Memory.md and run again can tell that this file is done and only finish
forgetting and archiving what it consolidated.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime

from memory.archive.daily import normalize_bullet
from memory.records.model import MemoryClass, MemoryRecord, Provenance, ReviewStatus
from memory.trust.redact import redact
from memory.trust.writeback import injection_shaped

MAX_DROPPED = 0.25
ENTRY_CHARS = 600
PROMPT_CHARS = 24_000  # notes per model call; a long run asks several times
CORE_HEADER = "# Memory\n"
_LIST_MARKER = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+")
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+(.*\S)")
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

INSTRUCTIONS = (
    "You curate Memory.md, the long-term memory core of an assistant: short, durable, self-contained "
    "Markdown entries that stay true for months (facts about the person or team and their environment, "
    "preferences, decisions, constraints, lessons). Below is the current Memory.md, then older notes and "
    "memories that are being retired. Extract only what is still worth knowing; skip chatter, one-off "
    "events, anything already in Memory.md, and anything a later note overrode. Never copy passwords, keys, "
    "tokens or other secrets. Answer with JSON only: "
    '{"entries": ["one entry per string", ...]} to append entries (an empty list when nothing is worth '
    'keeping), or, only when existing entries must be merged or corrected, {"memory_md": "the complete new '
    'file"}, which must keep every existing entry that is still true.'
)


class UnusableAnswer(ValueError):
    """The model answered something that is neither entries nor a Memory.md."""


@dataclass(frozen=True, slots=True)
class Answer:
    entries: tuple[str, ...] = ()
    rewrite: str | None = None  # the whole new Memory.md


@dataclass(frozen=True, slots=True)
class Applied:
    text: str  # the Memory.md after the answer
    added: int  # entries appended, or lines a rewrite added
    dropped: int  # entries a rewrite removed
    refused: int  # entries left out as instructions to the assistant


class RewriteRefused(Exception):
    """A rewrite of Memory.md that would drop more than MAX_DROPPED of its entries."""

    def __init__(self, dropped: int, total: int) -> None:
        super().__init__(
            f"the model's rewrite would drop {dropped} of the {total} existing entries (more than {MAX_DROPPED:.0%})"
        )
        self.dropped = dropped
        self.total = total


# -- which records -------------------------------------------------------------------------------


def skip_reason(record: MemoryRecord, now: datetime) -> str | None:
    """Why `record` stays out of Memory.md (None: it may go). Memory.md is injected into every prompt
    as curated memory, so only what a person stands behind goes there: nothing waiting for review or
    confirmation, rejected, disputed, stale, sensitive, expired or a trace. Those keep their own life
    cycle (review, expiry) instead."""
    if record.memory_class == MemoryClass.TRACE:
        return "trace"
    if record.expired(now):
        return "expired"
    if record.provenance in (Provenance.DISPUTED, Provenance.SUPERSEDED):
        return record.provenance.value
    if record.review_status not in (ReviewStatus.NONE, ReviewStatus.CONFIRMED):
        return record.review_status.value
    if record.sensitivity != "normal":
        return "sensitive"
    if record.use_policy.requires_user_confirmation:
        return "unconfirmed"
    return None


# -- entries of a Memory.md ----------------------------------------------------------------------


def _is_entry(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith(("#", "<!--"))


def entry_key(line: str) -> str:
    return normalize_bullet(_LIST_MARKER.sub("", line))


def entries(text: str) -> list[str]:
    """The entries of a Memory.md (see the module doc), normalized, in order, repeats once."""
    seen: dict[str, None] = {}
    for line in text.splitlines():
        if _is_entry(line):
            key = entry_key(line)
            if key:
                seen.setdefault(key, None)
    return list(seen)


def dropped(old: str, new: str) -> tuple[int, int]:
    """(entries of `old` that `new` no longer has, entries of `old`)."""
    before = entries(old)
    kept = set(entries(new))
    return sum(1 for e in before if e not in kept), len(before)


def check_rewrite(old: str, new: str) -> int:
    """How many entries `new` drops from `old`; RewriteRefused when more than MAX_DROPPED of them."""
    lost, total = dropped(old, new)
    if total and lost / total > MAX_DROPPED:
        raise RewriteRefused(lost, total)
    return lost


# -- the model's answer ----------------------------------------------------------------------------


def _one_line(text: str) -> str:
    return " ".join(_CONTROL.sub(" ", text).split())


def parse_answer(text: str) -> Answer:
    """The model's answer (see the module doc); UnusableAnswer when it is neither."""
    raw = text.strip()
    fenced = _FENCE.search(raw)
    candidate = fenced.group(1).strip() if fenced else raw
    if candidate.startswith("{"):
        try:
            data = json.loads(candidate)
        except json.JSONDecodeError as exc:
            raise UnusableAnswer(f"the answer is not valid JSON ({exc.msg})") from None
        if not isinstance(data, dict):
            raise UnusableAnswer("the answer is not a JSON object")
        rewrite = data.get("memory_md")
        if isinstance(rewrite, str) and rewrite.strip():
            return Answer(rewrite=rewrite)
        found = data.get("entries")
        if isinstance(found, list) and all(isinstance(e, str) for e in found):
            return Answer(entries=tuple(found))
        raise UnusableAnswer('the JSON answer has neither "entries" (a list of text) nor "memory_md" (text)')
    if raw.upper().rstrip(".") == "NONE":
        return Answer()
    bullets = [m.group(1) for m in map(_BULLET.match, raw.splitlines()) if m]
    if not bullets:
        raise UnusableAnswer("the answer holds neither JSON nor Markdown bullets")
    return Answer(entries=tuple(bullets))


def _clean_entry(text: str, secrets: Sequence[str]) -> str | None:
    """The entry as it may be written: one line, bounded, redacted; None when empty or instructive."""
    line = _one_line(_LIST_MARKER.sub("", text.strip()))
    if len(line) > ENTRY_CHARS:
        line = line[: ENTRY_CHARS - 1].rstrip() + "…"
    if not entry_key(line) or injection_shaped(line):
        return None
    return redact(line, secrets)


def marker(run_id: str) -> str:
    return f"<!-- clawgate consolidation {run_id} -->"


def has_marker(text: str, run_id: str) -> bool:
    return marker(run_id) in text


def apply_answer(current: str, answer: Answer, day: date, run_id: str, secrets: Sequence[str] = ()) -> Applied:
    """`current` Memory.md with the answer applied; RewriteRefused for a rewrite that drops too much.
    Nothing new: the text comes back unchanged (no marker either)."""
    if answer.rewrite is not None:
        return _rewrite(current, answer.rewrite, run_id, secrets)
    known = set(entries(current))
    fresh: list[str] = []
    refused = 0
    for item in answer.entries:
        line = _clean_entry(item, secrets)
        if line is None:
            refused += item.strip() != ""
            continue
        key = entry_key(line)
        if key and key not in known:
            known.add(key)
            fresh.append(line)
    if not fresh:
        return Applied(current, 0, 0, refused)
    base = current if current.strip() else CORE_HEADER
    if not base.endswith("\n"):
        base += "\n"
    section = f"\n## Consolidated {day.isoformat()}\n\n" + "".join(f"- {e}\n" for e in fresh) + marker(run_id) + "\n"
    return Applied(base + section, len(fresh), 0, refused)


def _rewrite(current: str, new: str, run_id: str, secrets: Sequence[str]) -> Applied:
    old_lines = {line.rstrip() for line in current.splitlines()}
    lines: list[str] = []
    added = refused = 0
    for line in new.strip("\n").splitlines():
        line = line.rstrip()
        if line in old_lines or not line.strip():
            lines.append(line)  # what the file already said stays as it was: only new text is cleaned
            continue
        if not _is_entry(line):  # a new heading or comment
            lines.append(redact(_one_line(line), secrets))
            continue
        marker_match = _LIST_MARKER.match(line)
        prefix = marker_match.group(0) if marker_match else ""
        cleaned = _clean_entry(line, secrets)
        if cleaned is None:
            refused += 1
            continue
        lines.append(prefix + cleaned)
        added += 1
    text = "\n".join(lines).rstrip("\n") + "\n"
    lost = check_rewrite(current, text)
    if text == (current if current.endswith("\n") else current + "\n"):
        return Applied(current, 0, 0, refused)
    return Applied(text + marker(run_id) + "\n", added, lost, refused)


# -- what the model is shown ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Note:
    """One piece of material: a record (`mem-…: text`) or a daily file (its name and text)."""

    label: str
    text: str


def record_note(record: MemoryRecord) -> Note:
    return Note(record.id, _one_line(record.content))


def parts(notes: Iterable[Note], limit: int = PROMPT_CHARS) -> list[str]:
    """The notes as text, cut into parts of at most about `limit` characters (a long daily file is
    cut between lines), each sent to the model in one call."""
    out: list[str] = []
    current: list[str] = []
    size = 0

    def flush() -> None:
        nonlocal current, size
        if current:
            out.append("\n".join(current))
        current, size = [], 0

    for note in notes:
        pieces = _split(f"### {note.label}\n{note.text.strip()}", limit)
        for piece in pieces:
            if size and size + len(piece) > limit:
                flush()
            current.append(piece)
            size += len(piece) + 1
    flush()
    return out


def _split(text: str, limit: int) -> list[str]:
    if len(text) <= limit:
        return [text]
    pieces: list[str] = []
    chunk: list[str] = []
    size = 0
    for line in text.splitlines():
        line = line[:limit]
        if size and size + len(line) > limit:
            pieces.append("\n".join(chunk))
            chunk, size = [], 0
        chunk.append(line)
        size += len(line) + 1
    if chunk:
        pieces.append("\n".join(chunk))
    return pieces


def prompt(current: str, part: str) -> str:
    core = current.strip() or "(Memory.md is empty)"
    return f"Current Memory.md:\n\n{core}\n\nNotes and memories being retired:\n\n{part}"
