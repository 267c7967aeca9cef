"""The files consolidation touches (DESIGN §5): old daily files found under the memory root, a
Memory.md replaced atomically, daily files moved to `archived/<same relative path>`.

Blocking file work: the gateway calls these in a worker thread.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from memory.archive.daily import make_dirs, write_atomic
from memory.archive.daily_index import scope_of

ARCHIVED = "archived"
CORE_NAME = "Memory.md"
_DAY_FILE = re.compile(r"(\d{4}-\d{2}-\d{2})\.md")


@dataclass(frozen=True, slots=True)
class DailyFile:
    path: Path
    day: date
    scope: str | None  # global, personal:<user>, channel:<conversation>; None when the owner is unknown


def _day(name: str) -> date | None:
    match = _DAY_FILE.fullmatch(name)
    if match is None:
        return None
    try:
        return date.fromisoformat(match.group(1))
    except ValueError:
        return None


def daily_files_before(root: Path, cutoff: date) -> list[DailyFile]:
    """Daily files of the global, personal and channel directories dated before `cutoff`, by path
    (archived ones are not looked at)."""
    found: list[DailyFile] = []
    candidates = [root] + [d for kind in ("users", "channels") for d in _subdirs(root / kind)]
    for directory in candidates:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except FileNotFoundError:
            continue
        for entry in entries:
            day = _day(entry.name)
            if day is not None and day < cutoff and entry.is_file():
                path = Path(entry.path)
                found.append(DailyFile(path, day, scope_of(root, path)))
    return sorted(found, key=lambda f: f.path)


def _subdirs(parent: Path) -> list[Path]:
    try:
        return sorted(Path(e.path) for e in os.scandir(parent) if e.is_dir())
    except FileNotFoundError:
        return []


def archive_path(root: Path, path: Path, taken: set[Path] | None = None) -> Path:
    """Where `path` goes: `<root>/archived/<its path under root>`, or with `.1`, `.2`… before `.md`
    when that name is already used (on disk or in `taken`): an archive never overwrites."""
    target = root / ARCHIVED / path.relative_to(root)
    n = 0
    candidate = target
    while candidate.exists() or (taken is not None and candidate in taken):
        n += 1
        candidate = target.with_name(f"{target.stem}.{n}{target.suffix}")
    return candidate


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


def write_core(path: Path, text: str) -> None:
    """Replace a Memory.md atomically (temp file, fsync, rename): a crash leaves the old or the new."""
    make_dirs(path.parent)
    write_atomic(path, text)


def move(source: Path, target: Path) -> bool:
    """Move a daily file into the archive (never over an existing file); False when it is gone."""
    if not source.exists():
        return False
    make_dirs(target.parent)
    if target.exists():
        raise FileExistsError(f"{target} already exists")
    os.replace(source, target)
    return True
