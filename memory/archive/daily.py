"""Daily Markdown memory files (DESIGN §4 auto-flush, §5 files of memory).

```
<root>/YYYY-MM-DD.md                          global daily notes
<root>/users/<user>/YYYY-MM-DD.md             personal daily notes (DM flushes)
<root>/channels/<conversation>/YYYY-MM-DD.md  team daily notes (group flushes)
```

A flush appends one section (``## heading`` and its bullets). Files are appended to, never
rewritten: a bullet already present anywhere in the file is skipped, so a second flush on the same
day adds only what is new. Each append replaces the file atomically (temp file in the same
directory, fsync, rename, fsync of the directory), so a crash leaves the old or the new file,
never a torn one. Every bullet goes through `redact` first: nothing secret reaches the disk.

Writers of one path are serialized within the process; the gateway calls `append` from worker
threads (asyncio.to_thread), hence threading locks. Separate processes sharing a data directory
are not coordinated (one gateway owns its data directory).
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import unicodedata
import uuid
from collections.abc import Iterable, Sequence
from datetime import date
from pathlib import Path
from typing import Literal

from memory.trust.redact import redact

__all__ = ["DailyFiles", "Scope", "normalize_bullet", "safe_component"]

Scope = Literal["global", "user", "channel"]

_SCOPE_DIRS: dict[str, str] = {"user": "users", "channel": "channels"}
_DAY_FILE = re.compile(r"(\d{4}-\d{2}-\d{2})\.md")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_MAX_COMPONENT = 120
_BULLET_LINE = re.compile(r"^[-*] (.*)$", re.MULTILINE)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Temp files start with "." and end in ".tmp": never taken for a daily file by `days` or by an
# indexer that looks for "*.md".
_TEMP_SUFFIX = ".tmp"
# One lock per path would grow with every day and owner ever written; a fixed stripe of locks
# keyed by the path bounds memory, and the same path always maps to the same lock.
_LOCKS = tuple(threading.Lock() for _ in range(64))


def safe_component(owner: str) -> str:
    """Turn a user id or conversation key into one path component that cannot escape its parent.

    Keeps ``[A-Za-z0-9._-]`` and maps anything else to ``_``; a leading dot becomes ``_`` (no
    ``.``, ``..`` or hidden names); at most 120 characters. When anything was changed or cut, a
    hash of the original follows after ``~``, a character the kept part never contains, so
    ``a:b`` and ``a_b`` (or a name that spells out another's hash) can never collide.
    """
    cleaned = _UNSAFE.sub("_", owner)
    if cleaned.startswith("."):
        cleaned = "_" + cleaned[1:]
    cleaned = cleaned[:_MAX_COMPONENT]
    if cleaned == owner and owner:
        return owner
    digest = hashlib.sha256(owner.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{cleaned or '_'}~{digest}"


def normalize_bullet(text: str) -> str:
    """The identity of a bullet for "already written": case, spacing and final punctuation aside."""
    folded = " ".join(text.casefold().split())
    end = len(folded)
    while end and (folded[end - 1] == " " or unicodedata.category(folded[end - 1]).startswith("P")):
        end -= 1
    return folded[:end]


def _fold(text: str) -> str:
    """One bullet is one line: newlines and runs of whitespace become one space."""
    text = text.encode("utf-8", "replace").decode("utf-8")  # lone surrogates cannot be written
    return " ".join(_CONTROL.sub("", text).split())


def _day_of(path: Path) -> date:
    match = _DAY_FILE.fullmatch(path.name)
    if match is None:
        raise ValueError(f"not a daily memory file name: {path.name!r}")
    return date.fromisoformat(match.group(1))


def _lock_for(path: Path) -> threading.Lock:
    return _LOCKS[hash(os.path.abspath(path)) % len(_LOCKS)]


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(directory: Path) -> None:
    """Create missing directories and fsync each new entry's parent, so a crash right after the
    first write of the day cannot lose the directory holding it."""
    missing: list[Path] = []
    current = directory
    while not current.exists():
        missing.append(current)
        current = current.parent
    for new in reversed(missing):
        try:
            new.mkdir(mode=0o700)
        except FileExistsError:
            continue
        _fsync_dir(new.parent)


def write_atomic(path: Path, content: str) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}{_TEMP_SUFFIX}")
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = 0o600  # memory is personal: readable by the gateway's user only
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _existing_bullets(content: str) -> set[str]:
    return {normalize_bullet(m.group(1)) for m in _BULLET_LINE.finditer(content)}


def _new_bullets(bullets: Iterable[str], seen: set[str], secrets: Sequence[str]) -> list[str]:
    fresh: list[str] = []
    for bullet in bullets:
        text = redact(_fold(bullet), secrets)
        key = normalize_bullet(text)
        if not key or key in seen:
            continue
        seen.add(key)
        fresh.append(text)
    return fresh


class DailyFiles:
    """The daily notes under one memory root."""

    def __init__(self, root: Path, secrets: Sequence[str] = ()) -> None:
        self.root = Path(root)
        # The gateway's configured secrets (bot tokens, API keys): redacted verbatim too.
        self.secrets = tuple(secrets)

    def directory(self, scope: Scope, owner: str | None) -> Path:
        if scope == "global":
            if owner is not None:
                raise ValueError("global daily notes have no owner")
            return self.root
        if scope not in _SCOPE_DIRS:
            raise ValueError(f"unknown memory scope: {scope!r}")
        if owner is None:
            raise ValueError(f"{scope} daily notes need an owner")
        return self.root / _SCOPE_DIRS[scope] / safe_component(owner)

    def path(self, scope: Scope, owner: str | None, day: date) -> Path:
        return self.directory(scope, owner) / f"{day.isoformat()}.md"

    def append(self, path: Path, heading: str, bullets: Sequence[str]) -> list[str]:
        """Append a ``## heading`` section holding the bullets not yet in the file; return them.

        Creates the file (``# YYYY-MM-DD`` from its name) and its directories when missing. When
        no bullet is new the file is not touched at all and ``[]`` is returned.
        """
        day = _day_of(path)
        with _lock_for(path):
            content = self.read(path)
            fresh = _new_bullets(bullets, _existing_bullets(content), self.secrets)
            if not fresh:
                return []
            if not content:
                make_dirs(path.parent)
                content = f"# {day.isoformat()}\n"
            elif not content.endswith("\n"):
                content += "\n"  # a hand edit without a final newline; existing text kept as is
            title = redact(_fold(heading), self.secrets)
            section = f"\n## {title}\n\n" + "".join(f"- {b}\n" for b in fresh)
            write_atomic(path, content + section)
            return fresh

    def read(self, path: Path) -> str:
        """The file's text, "" when it does not exist (files are replaced atomically: no lock)."""
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return ""

    def days(self, scope: Scope, owner: str | None) -> list[date]:
        """Days that have a daily file for this scope and owner, oldest first."""
        directory = self.directory(scope, owner)
        found: list[date] = []
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            return []
        for entry in entries:
            match = _DAY_FILE.fullmatch(entry.name)
            if match is None or not entry.is_file():
                continue
            try:
                found.append(date.fromisoformat(match.group(1)))
            except ValueError:
                continue  # 2024-13-45.md: not ours
        return sorted(found)
