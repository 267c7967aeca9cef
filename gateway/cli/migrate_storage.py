"""`clawgate migrate-storage --to URL`: move the database from SQLite to PostgreSQL, losing nothing.

In order:
1. The target is checked: reachable, the credentials accepted, no clawgate rows in it, no schema
   this clawgate does not know. A target with data is refused, never emptied.
2. The source is brought to the newest schema (as the gateway does at start), then held in one
   SQLite write transaction (BEGIN IMMEDIATE) for the rest: a snapshot nobody can change while it
   is copied. A gateway still writing makes the command stop with "locked" instead.
3. In ONE transaction on the target: the schema is created by the same Alembic migrations as
   `Database.migrate`; every table of memory/store/schema.py is copied in foreign-key order, in batches;
   the id sequences are moved past the copied ids; everything is verified (row counts, and a
   checksum of every row read back through the same column types); only then is it committed.
   PostgreSQL's DDL is transactional, so any failure (a row PostgreSQL refuses, a lost connection,
   a mismatch) rolls back the lot and the target is left as it was.

The copy follows the target's tables as reflected after migrating, not a fixed list of columns:
columns PostgreSQL computes itself (the generated `words` tsvectors of migrations 0010 and 0012, and
pgvector's `embedding`, computed from the copied blob) are skipped; SQLite's FTS5 tables are not in
the schema and are not copied. The memory Markdown files are files, not rows: they stay in
storage.data_dir/memory.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Integer,
    MetaData,
    String,
    Table,
    bindparam,
    exc,
    func,
    insert,
    inspect,
    select,
    text,
)
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool
from sqlalchemy.types import NullType, TypeEngine

from gateway.cli.migrate_ends import (
    CONNECT_TIMEOUT_S,
    LOCK_TIMEOUT_S,
    UNCHANGED,
    USAGE,
    MigrateError,
    Refused,
    bring_up_to_date,
    check_empty,
    detail,
    is_locked,
    locked,
    root_cause,
    source_engine,
    source_extras,
    source_file,
    target_error,
    target_state,
    target_url,
)
from gateway.doctor.checks import mask_url
from memory.embed.pgvector import prepare_indexes
from memory.store import schema
from memory.store.db import migrate_in

BATCH = 1000  # rows per read and per INSERT

Progress = Callable[[str, int, int], None]  # (table, rows copied, rows in all)


@dataclass(frozen=True, slots=True)
class TableCopy:
    name: str
    rows: int
    computed: tuple[str, ...] = ()  # target columns PostgreSQL fills itself
    defaulted: tuple[str, ...] = ()  # target columns outside clawgate's schema, left to their default


@dataclass(frozen=True, slots=True)
class Summary:
    source: str  # URLs with the password masked
    target: str
    revision: str
    source_was: str | None  # the source's revision before it was brought up to date; None: it was
    tables: tuple[TableCopy, ...]
    sequences: int
    full_text: tuple[str, ...]  # SQLite's FTS5 indexes: not copied, the target indexes the text itself
    not_copied: tuple[str, ...]  # any other source table outside the schema
    seconds: float
    vector_indexes: int = 0  # HNSW indexes built for the copied vectors

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables)


@dataclass(slots=True)
class _Plan:
    """How one table is copied: which columns, as which types on the target, checked how."""

    table: Table  # from memory/store/schema.py: the types the source is read with
    target: Table  # the copied columns with the types values are written (and read back) with
    columns: list[str]
    json_columns: list[str]
    text_limits: dict[str, int | None]  # text columns and their varchar(n) length on the target
    key: list[str]
    result: TableCopy

    def select(self, table: Table) -> Any:
        """Every copied column and, per JSON column, whether it is SQL NULL (a JSON `null` reads as
        None too, and each must stay what it was). In primary-key order."""
        flags = [table.c[n].is_(None) for n in self.json_columns]
        return select(*[table.c[n] for n in self.columns], *flags).order_by(*[table.c[k] for k in self.key])

    def params(self, row: Sequence[Any]) -> dict[str, Any]:
        """A row's values for the INSERT; MigrateError, naming the row, for one PostgreSQL cannot hold
        (SQLite keeps NUL characters and longer strings than a column declares, PostgreSQL does not)."""
        values = dict(zip(self.columns, row, strict=False))
        for name, sql_null in zip(self.json_columns, row[len(self.columns) :], strict=True):
            if values[name] is None and not sql_null:
                values[name] = JSON.NULL
        for name, limit in self.text_limits.items():
            value = values[name]
            if not isinstance(value, str):
                continue
            if "\x00" in value:
                raise MigrateError(self._refused(values, name, "holds a NUL character, which PostgreSQL cannot store"))
            if limit is not None and len(value) > limit:
                raise MigrateError(
                    self._refused(values, name, f"has {len(value)} characters, the column holds {limit}")
                )
        return values

    def _refused(self, values: Mapping[str, Any], column: str, why: str) -> str:
        key = ", ".join(f"{k}={values[k]!r}" for k in self.key)
        return (
            f"{self.table.name} ({key}): {column} {why}: fix or delete that row in the SQLite database, then run again"
        )


def _plan(conn: Connection, table: Table) -> _Plan:
    """The copy of `table` into the target's table of that name as reflected."""
    columns, json_columns, computed, defaulted = [], [], [], []
    text_limits: dict[str, int | None] = {}
    target_columns: list[Column[Any]] = []
    with warnings.catch_warnings():  # "did not recognize type 'vector'": pgvector's computed column, skipped
        warnings.simplefilter("ignore", exc.SAWarning)
        reflected = inspect(conn).get_columns(table.name)
    for col in reflected:
        name = col["name"]
        if col.get("computed"):
            computed.append(name)
            continue
        if name not in table.c:
            if col["nullable"] or col.get("default") is not None or col.get("identity"):
                defaulted.append(name)
                continue
            raise MigrateError(
                f"the target's {table.name}.{name} is required, but clawgate's schema has no such column"
            )
        kind: TypeEngine[Any] = table.c[name].type
        if isinstance(col["type"], NullType):
            raise MigrateError(f"the target's {table.name}.{name} has a type this clawgate cannot write")
        if isinstance(kind, JSON):
            kind = JSON(none_as_null=True)  # None is SQL NULL, JSON.NULL is JSON's null
            json_columns.append(name)
        elif isinstance(kind, String):
            text_limits[name] = getattr(col["type"], "length", None)
        columns.append(name)
        target_columns.append(Column(name, kind, primary_key=table.c[name].primary_key))
    missing = [c.name for c in table.columns if c.name not in columns]
    if missing:
        raise MigrateError(f"the target's {table.name} lacks {', '.join(missing)}: it is not at this clawgate's schema")
    return _Plan(
        table,
        Table(table.name, MetaData(), *target_columns),
        columns,
        json_columns,
        text_limits,
        [c.name for c in table.primary_key.columns],
        TableCopy(table.name, 0, tuple(computed), tuple(defaulted)),
    )


def _canon(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return value


@dataclass(slots=True)
class Checksum:
    """A sum of 128-bit row digests: independent of row order (PostgreSQL sorts text keys by its
    collation, SQLite by bytes), changed by any changed, missing or extra row."""

    rows: int = 0
    total: int = 0

    def add(self, row: Sequence[Any]) -> None:
        data = json.dumps([_canon(v) for v in row], sort_keys=True, ensure_ascii=False, default=str)
        digest = hashlib.blake2b(data.encode("utf-8"), digest_size=16).digest()
        self.total = (self.total + int.from_bytes(digest, "big")) % (1 << 128)
        self.rows += 1


def _batches(conn: Connection, statement: Any, size: int) -> Iterator[Sequence[Any]]:
    yield from conn.execution_options(yield_per=size).execute(statement).partitions(size)


# --- the copy ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Job:
    """Everything done on the target, as one sync function in the target's transaction."""

    src: Connection
    url: URL
    batch: int
    progress: Progress
    totals: dict[str, int]
    marks: dict[str, int]
    revision: str
    doing: str = "checking the target"
    plans: list[_Plan] = field(default_factory=list)
    sequences: int = 0
    vector_indexes: int = 0

    def run(self, dst: Connection) -> None:
        check_empty(target_state(dst), self.url)
        self.doing = "creating the schema"
        try:
            migrate_in(dst)
        except exc.DBAPIError:
            raise
        except Exception as error:  # a migration's own message (e.g. pgvector missing from the server)
            raise MigrateError(f"the schema could not be created on the target: {error}") from None
        revision = dst.execute(text("SELECT version_num FROM alembic_version")).scalar()
        if revision != self.revision:
            raise MigrateError(f"the target came to schema {revision}, the source is at {self.revision}")
        self.plans = [_plan(dst, table) for table in schema.metadata.sorted_tables]
        sums = [self._copy(dst, plan) for plan in self.plans]
        self.doing = "resetting the id sequences"
        self.sequences = sum(self._reset_sequences(dst, plan) for plan in self.plans)
        # What the gateway would otherwise do at its first start, in the background: the HNSW
        # graphs of the copied vectors (about a minute per 100,000), and fresh planner statistics.
        # Before the verification: its server-side cursors keep each table in use until the
        # transaction ends, and PostgreSQL builds no index on a table in use.
        self.doing = "building the vector indexes"
        models = dst.execute(select(schema.memory_vectors.c.model_id).distinct()).scalars().all()
        for n, model_id in enumerate(models):
            self.progress("vector indexes", n, len(models))
            self.vector_indexes += prepare_indexes(dst, model_id)
        self.progress("vector indexes", len(models), len(models))
        self.doing = "updating the planner's statistics"
        dst.exec_driver_sql("ANALYZE")
        for plan, expected in zip(self.plans, sums, strict=True):
            self._verify(dst, plan, expected)

    def _copy(self, dst: Connection, plan: _Plan) -> Checksum:
        name, total = plan.table.name, self.totals[plan.table.name]
        self.doing = f"copying {name}"
        checksum = Checksum()
        statement = insert(plan.target)
        self.progress(name, 0, total)
        for rows in _batches(self.src, plan.select(plan.table), self.batch):
            dst.execute(statement, [plan.params(row) for row in rows])
            for row in rows:
                checksum.add(row)
            self.progress(name, checksum.rows, total)
        plan.result = TableCopy(name, checksum.rows, plan.result.computed, plan.result.defaulted)
        return checksum

    def _reset_sequences(self, dst: Connection, plan: _Plan) -> int:
        """Move each serial or identity sequence past the highest id copied and past SQLite's
        AUTOINCREMENT mark: message ids stay unused even when the newest messages were archived."""
        done = 0
        for col in plan.table.primary_key.columns:
            if not isinstance(col.type, Integer):
                continue
            sequence = dst.execute(_SERIAL, {"t": plan.table.name, "c": col.name}).scalar()
            if sequence is None:
                continue
            top = int(dst.execute(select(func.coalesce(func.max(plan.target.c[col.name]), 0))).scalar_one())
            top = max(top, self.marks.get(plan.table.name, 0))
            dst.execute(_SETVAL, {"s": sequence, "v": max(top, 1), "called": top > 0})
            done += 1
        return done

    def _verify(self, dst: Connection, plan: _Plan, expected: Checksum) -> None:
        name = plan.table.name
        self.doing = f"verifying {name}"
        count = int(dst.execute(select(func.count()).select_from(plan.target)).scalar_one())
        if count != expected.rows or expected.rows != self.totals[name]:
            raise MigrateError(
                f"verification failed: {name} has {count} rows on the target, {self.totals[name]} in SQLite"
            )
        found = Checksum()
        for rows in _batches(dst, plan.select(plan.target), self.batch):
            for row in rows:
                found.add(row)
        if found.total != expected.total:
            raise MigrateError(f"verification failed: the rows of {name} differ on the target")


_SERIAL = text("SELECT pg_get_serial_sequence(:t, :c)").bindparams(
    bindparam("t", type_=String), bindparam("c", type_=String)
)
_SETVAL = text("SELECT setval(CAST(:s AS regclass), :v, :called)").bindparams(
    bindparam("s", type_=String), bindparam("v", type_=Integer), bindparam("called", type_=Boolean)
)


def _target_engine(url: URL) -> AsyncEngine:
    args = {"timeout": CONNECT_TIMEOUT_S} if url.get_driver_name() == "asyncpg" else {}
    try:
        return create_async_engine(url, poolclass=NullPool, connect_args=args)
    except Exception as error:  # no such driver, or one that is not async
        raise MigrateError(f"cannot use --to {mask_url(url.render_as_string())}: {detail(error, url)}", USAGE) from None


async def migrate(
    source: str,
    target: str,
    *,
    batch: int = BATCH,
    lock_timeout: float = LOCK_TIMEOUT_S,
    progress: Progress | None = None,
) -> Summary:
    """Copy the SQLite database at `source` into the empty PostgreSQL database at `target`; what was
    copied. MigrateError when it did not happen (the target is then as it was)."""
    started = time.monotonic()
    path = source_file(source)
    url = target_url(target)
    if batch < 1:
        raise MigrateError("--batch-size must be at least 1", USAGE)
    engine = _target_engine(url)
    try:
        try:  # before the source is touched: is the target usable at all?
            async with engine.connect() as conn:
                check_empty(await conn.run_sync(target_state), url)
        except (exc.DBAPIError, OSError) as error:
            raise target_error(error, url, "connect") from None
        revision, source_was = await bring_up_to_date(source, path)
        job, full_text, not_copied = await _copy(path, url, engine, revision, batch, lock_timeout, progress)
    finally:
        await engine.dispose()
    tables = tuple(plan.result for plan in job.plans)
    return Summary(
        mask_url(source),
        mask_url(target),
        revision,
        source_was,
        tables,
        job.sequences,
        full_text,
        not_copied,
        time.monotonic() - started,
        job.vector_indexes,
    )


async def _copy(
    path: Path,
    url: URL,
    engine: AsyncEngine,
    revision: str,
    batch: int,
    lock_timeout: float,
    progress: Progress | None,
) -> tuple[_Job, tuple[str, ...], tuple[str, ...]]:
    source = source_engine(path, lock_timeout)
    try:
        with source.connect() as src, src.begin():
            totals = {
                t.name: int(src.execute(select(func.count()).select_from(t)).scalar_one())
                for t in schema.metadata.sorted_tables
            }
            marks, full_text, not_copied = source_extras(src)
            job = _Job(src, url, batch, progress or (lambda *_: None), totals, marks, revision)
            try:
                async with engine.begin() as dst:
                    await dst.run_sync(job.run)
            except Refused:
                raise
            except MigrateError as error:
                raise MigrateError(f"{error}; {UNCHANGED}", error.exit_code) from None
            except (exc.DBAPIError, OSError) as error:
                if isinstance(root_cause(error), sqlite3.Error):
                    raise MigrateError(f"reading {path} failed: {root_cause(error)}; {UNCHANGED}") from None
                raise target_error(error, url, job.doing) from None
    except exc.OperationalError as error:  # BEGIN IMMEDIATE, or the first reads
        if is_locked(error):
            raise locked(path) from None
        raise MigrateError(f"cannot read {path}: {root_cause(error)}") from None
    finally:
        source.dispose()
    return job, full_text, not_copied
