"""`clawgate backup` and `clawgate restore`: the database and the memory files in one archive.

A backup is a gzipped tar of `manifest.json`, `database.sqlite` (a consistent snapshot taken with
SQLite's online backup, so the gateway may keep running) and `memory/` (Memory.md files, daily
notes, archived notes). Restoring checks the archive whole before it touches anything, then swaps
it in; whatever was there before is moved aside, never deleted, so a restore loses nothing either.

PostgreSQL databases are backed up with `pg_dump` for now: this module says so instead of
producing an archive without the database.
"""

from __future__ import annotations

import io
import json
import shutil
import sqlite3
import tarfile
import tempfile
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from sqlalchemy import make_url

from gateway import __version__
from gateway.config.model import Config
from memory.store.db import known_revisions

FORMAT = 1
MANIFEST = "manifest.json"
DATABASE = "database.sqlite"
MEMORY = "memory"


class BackupError(Exception):
    """A backup or restore that cannot be done; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class Summary:
    path: Path
    schema_revision: str | None
    memory_files: int
    database_bytes: int


def sqlite_path(config: Config) -> Path:
    """The SQLite database file of this config; BackupError for any other database."""
    url = make_url(config.storage.resolved_database_url)
    if url.get_backend_name() != "sqlite":
        raise BackupError(
            f"storage.database_url is a {url.get_backend_name()} database: back it up with its own tools "
            "(pg_dump for PostgreSQL); `clawgate backup` covers SQLite"
        )
    if not url.database or url.database == ":memory:":
        raise BackupError("the database is in memory: there is nothing on disk to back up")
    return Path(url.database)


def _revision(db: sqlite3.Connection) -> str | None:
    try:
        row = db.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.DatabaseError:
        return None
    return None if row is None else str(row[0])


def backup(config: Config, output: Path | None = None, *, now: datetime | None = None) -> Summary:
    """Write a backup archive (default: ./clawgate-backup-<UTC time>.tar.gz); what it holds."""
    source = sqlite_path(config)
    if not source.exists():
        raise BackupError(f"there is no database at {source}: start the gateway once, or check storage.data_dir")
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
    output = output or Path(f"clawgate-backup-{stamp}.tar.gz")
    if output.exists():
        raise BackupError(f"{output} exists already: choose another name with --output")
    memory_dir = config.storage.data_dir / MEMORY
    with tempfile.TemporaryDirectory(prefix="clawgate-backup-") as tmp:
        snapshot = Path(tmp) / DATABASE
        # SQLite's backup API copies a consistent state even while the gateway writes (WAL).
        live = sqlite3.connect(source.resolve().as_uri() + "?mode=ro", uri=True)
        with closing(live), closing(sqlite3.connect(snapshot)) as copy:
            live.backup(copy)
            revision = _revision(copy)
        files = sorted(p for p in memory_dir.rglob("*") if p.is_file()) if memory_dir.is_dir() else []
        manifest = {
            "format": FORMAT,
            "created_at": (now or datetime.now(UTC)).isoformat(),
            "clawgate_version": __version__,
            "database": "sqlite",
            "schema_revision": revision,
            "memory_files": len(files),
        }
        partial = output.with_name(output.name + ".partial")
        try:
            with tarfile.open(partial, "w:gz") as tar:
                _add_bytes(tar, MANIFEST, json.dumps(manifest, indent=2).encode())
                tar.add(snapshot, DATABASE)
                for f in files:
                    tar.add(f, f"{MEMORY}/{f.relative_to(memory_dir).as_posix()}")
            partial.replace(output)  # a backup cut short never looks like a finished one
        finally:
            partial.unlink(missing_ok=True)
        return Summary(output, revision, len(files), snapshot.stat().st_size)


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(datetime.now(UTC).timestamp())
    tar.addfile(info, io.BytesIO(data))


def _member_path(name: str) -> PurePosixPath:
    """A member's path when it is safe to extract: relative, no `..`, inside database or memory/."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise BackupError(f"the archive holds an unsafe path ({name!r}): it was not made by clawgate backup")
    if str(path) not in (MANIFEST, DATABASE) and path.parts[0] != MEMORY:
        raise BackupError(f"the archive holds an unexpected file ({name!r}): it was not made by clawgate backup")
    return path


def _unpack(archive: Path, into: Path) -> dict[str, Any]:
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()
            for m in members:
                _member_path(m.name)
                if not (m.isfile() or m.isdir()):
                    raise BackupError(f"the archive holds a link or device ({m.name!r}): refusing it")
            tar.extractall(into, members=members, filter="data")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise BackupError(f"{archive} is not a readable backup ({type(exc).__name__}: {exc})") from None
    try:
        manifest = json.loads((into / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise BackupError(f"{archive} has no valid {MANIFEST}: it was not made by clawgate backup") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupError(f"{archive} is a backup of another format ({manifest.get('format')!r}, expected {FORMAT})")
    if not (into / DATABASE).is_file():
        raise BackupError(f"{archive} holds no database")
    return manifest


def _check_database(path: Path, known: set[str]) -> str | None:
    try:
        with closing(sqlite3.connect(path)) as db:
            status = db.execute("PRAGMA integrity_check").fetchone()
            revision = _revision(db)
    except sqlite3.DatabaseError as exc:
        raise BackupError(f"the archived database is damaged ({exc})") from None
    if status is None or status[0] != "ok":
        raise BackupError(f"the archived database is damaged (integrity check: {status and status[0]})")
    if revision is not None and revision not in known:
        raise BackupError(
            f"the backup's database is at schema {revision}, which this clawgate ({__version__}) does not know: "
            "restore it with the newer clawgate that made it"
        )
    return revision


def restore(
    config: Config, archive: Path, *, force: bool = False, now: datetime | None = None
) -> tuple[Summary, Path | None]:
    """Put a backup in place of this config's database and memory files. Existing data is refused
    unless `force`, and then moved aside (the second value: where), never deleted. Stop the gateway
    first: a running one keeps writing to the files being replaced."""
    target_db = sqlite_path(config)
    memory_dir = config.storage.data_dir / MEMORY
    if not archive.is_file():
        raise BackupError(f"there is no backup at {archive}")
    existing = [p for p in (target_db, memory_dir) if p.exists()]
    if existing and not force:
        where = ", ".join(str(p) for p in existing)
        raise BackupError(f"{where} exists already: stop the gateway, then run restore with --force (it is kept aside)")
    target_db.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".restore-", dir=target_db.parent) as tmp:
        staged = Path(tmp)
        manifest = _unpack(archive, staged)
        revision = _check_database(staged / DATABASE, known_revisions())
        files = sum(1 for p in (staged / MEMORY).rglob("*") if p.is_file()) if (staged / MEMORY).is_dir() else 0
        if files != manifest.get("memory_files", files):
            raise BackupError(f"the archive lists {manifest.get('memory_files')} memory files but holds {files}")
        aside = None
        if existing:
            stamp = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
            aside = target_db.parent / f"before-restore-{stamp}"
            aside.mkdir()
            for p in existing:
                shutil.move(p, aside / p.name)
            for suffix in ("-wal", "-shm"):  # the old database's journal must not meet the new file
                journal = target_db.with_name(target_db.name + suffix)
                if journal.exists():
                    shutil.move(journal, aside / journal.name)
        (staged / DATABASE).replace(target_db)
        if (staged / MEMORY).is_dir():
            memory_dir.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(staged / MEMORY, memory_dir)
    return Summary(archive, revision, files, target_db.stat().st_size), aside
