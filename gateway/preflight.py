"""Before the gateway starts: can it write where it keeps its data?

`clawgate run` checks storage.data_dir, the memory folder in it and the SQLite database file with
its folder (SQLite writes its write-ahead log and shared-memory files beside the database) before
anything starts. Each problem is one line, as config errors are, with what to do about it, and the
command exits with 2. `clawgate doctor` runs the same checks without creating anything. What these
checks cannot see (a PostgreSQL server that refuses the connection, a database that turns read-only
meanwhile) surfaces when the storage opens; `storage_failure` words that the same way.

A folder counts as writable when a file can be created in it and deleted again: the only test that
sees read-only mounts, permissions, ACLs and sandboxes alike."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from gateway.config.model import Config
from gateway.core.probe import mask_userinfo
from memory.store.db import OS_UNWRITABLE
from memory.store.write_check import write_probe

_CAUSES = {
    **OS_UNWRITABLE,
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.ECONNREFUSED: "the connection was refused",
    errno.EHOSTUNREACH: "the host cannot be reached",
    errno.ETIMEDOUT: "the connection timed out",
}


@dataclass(frozen=True)
class StorageProblem:
    key: str  # the config key that decides the place: storage.data_dir or storage.database_url
    reason: str  # what is wrong, naming the place in full, then what to do about it

    def render(self) -> str:
        return f"{self.key}: {self.reason}"


def nearest_existing(path: Path) -> Path:
    """`path`, or its nearest parent that exists (what a folder not created yet will be made in)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def cause(exc: OSError) -> str:
    """Why the operating system refused, in plain words."""
    known = _CAUSES.get(exc.errno) if exc.errno is not None else None
    return known or (exc.strerror or type(exc).__name__).lower()


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):
        return f"uid {os.geteuid()}" if hasattr(os, "geteuid") else "the current user"


def _fix(code: int | None, key: str) -> str:
    if code == errno.EROFS:
        return f"mount it read-write, or set {key} to a folder on a writable disk"
    if code in (errno.EACCES, errno.EPERM):
        return f"let the user the gateway runs as ({_user()}) write there, or set {key} to a folder it can write"
    if code in (errno.ENOSPC, errno.EDQUOT):
        return f"free space on that disk, or set {key} to a folder on another one"
    if code == errno.ENOTDIR:
        return f"move that file away, or set {key} to a folder"
    if code == errno.EISDIR:
        return f"move that folder away, or set {key} to another place"
    return f"check that place, or set {key} to another folder"


def _folder(folder: Path, create: bool) -> tuple[str, int | None] | None:
    """What keeps the gateway from writing in `folder`, and the errno behind it; None when nothing
    does. `create`: make it when it is missing (as the gateway would); else only check that it
    could be made."""
    try:
        return _writable_folder(folder, create)
    except OSError as exc:  # a folder on the way cannot even be looked into
        return f"cannot be reached ({cause(exc)})", exc.errno


def _writable_folder(folder: Path, create: bool) -> tuple[str, int | None] | None:
    if folder.exists():
        if not folder.is_dir():
            return "is a file, not a folder", errno.ENOTDIR
        where = folder
    else:
        where = nearest_existing(folder)
        if not where.is_dir():
            return f"cannot be created: {where} is a file, not a folder", errno.ENOTDIR
        if create:
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                return f"cannot be created ({cause(exc)})", exc.errno
            where = folder
    try:
        write_probe(where)
    except OSError as exc:
        if where == folder:
            return f"cannot be written ({cause(exc)})", exc.errno
        return f"cannot be created in {where} ({cause(exc)})", exc.errno
    return None


def _file(path: Path) -> tuple[str, int | None] | None:
    """What keeps the gateway from writing the existing file `path`; opening it for writing
    changes nothing in it."""
    try:
        if path.is_dir():
            return "is a folder, not a file", errno.EISDIR
        os.close(os.open(path, os.O_RDWR))
    except FileNotFoundError:
        return None  # created when the database opens: its folder was checked
    except OSError as exc:
        return f"cannot be written ({cause(exc)})", exc.errno
    return None


def sqlite_file(url: str) -> Path | None:
    """The database file of an SQLite URL; None for another database or an in-memory one."""
    from sqlalchemy import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return None
    name = parsed.database
    if parsed.get_backend_name() != "sqlite" or not name or name == ":memory:" or name.startswith("file:"):
        return None
    return Path(name)


def _database_key(config: Config) -> str:
    """The config key that places the database."""
    return "storage.database_url" if config.storage.database_url else "storage.data_dir"


def storage_problems(config: Config, *, create: bool = True) -> list[StorageProblem]:
    """Every place the gateway writes that it cannot write, one problem each, with its fix. With
    `create` (the gateway's start) a missing folder is made, as the gateway would make it."""
    data_dir = config.storage.data_dir
    key = "storage.data_dir"
    found = _folder(data_dir, create)
    if found is not None:  # nothing inside it can work: one line says so
        what, code = found
        return [StorageProblem(key, f"{data_dir} {what}; {_fix(code, key)}")]
    problems: list[StorageProblem] = []
    memory = data_dir / "memory"
    found = _folder(memory, create)
    if found is not None:
        what, code = found
        problems.append(StorageProblem(key, f"the memory folder {memory} {what}; {_fix(code, key)}"))
    database = sqlite_file(config.storage.resolved_database_url)
    if database is None:
        return problems
    db_key = _database_key(config)
    if database.parent != data_dir:
        found = _folder(database.parent, create)
        if found is not None:
            what, code = found
            text = f"the database's folder {database.parent} {what}; {_fix(code, db_key)}"
            return [*problems, StorageProblem(db_key, text)]
    # A read-only log or shared-memory file stops SQLite as surely as a read-only database.
    for file in (database, database.with_name(database.name + "-wal"), database.with_name(database.name + "-shm")):
        found = _file(file)
        if found is not None:
            what, code = found
            problems.append(StorageProblem(db_key, f"the database file {file} {what}; {_fix(code, db_key)}"))
    return problems


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not seen for seen in out):
        out.append(current)
        current = getattr(current, "orig", None) or current.__cause__ or current.__context__
    return out


def storage_failure(exc: BaseException, config: Config, *, opening: bool) -> StorageProblem | None:
    """`exc`, which stopped the gateway's start, as one problem with its fix when the storage
    caused it; None otherwise. `opening`: it was raised before the database was open, so an
    OS-level error (a refused connection) is the database's too."""
    import sqlite3

    from sqlalchemy.exc import DBAPIError

    from memory.store.db import unwritable_reason

    key = _database_key(config)
    url = config.storage.resolved_database_url
    file = sqlite_file(url)
    database = f"the database {file}" if file is not None else f"the database at {mask_userinfo(url)}"
    where = f"{file} and its folder" if file is not None else "the database"
    reason = unwritable_reason(exc)
    if reason is not None:
        fix = f"make {where} writable for the user the gateway runs as ({_user()}), or set {key} to a place that is"
        return StorageProblem(key, f"{database} cannot be written ({reason}); {fix}")
    chain = _chain(exc)
    for err in chain:
        if isinstance(err, sqlite3.Error):  # SQLite's messages name no credential
            return StorageProblem(key, f"{database} did not open ({err}); check {where}, or set {key}")
    for err in chain:
        if isinstance(err, DBAPIError):  # its driver's name of the error: the message may repeat the URL
            driver = type(err.orig).__name__ if err.orig is not None else type(err).__name__
            return StorageProblem(key, f"{database} did not open ({driver}); check {key} and that its server runs")
    if opening and isinstance(exc, OSError):
        fix = _fix(exc.errno, key) if file is not None else f"start its server, or fix the host and port in {key}"
        return StorageProblem(key, f"{database} cannot be reached ({cause(exc)}); {fix}")
    return None
