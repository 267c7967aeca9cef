"""`clawgate migrate-storage`: a SQLite database filled by the real stores moves into a real, empty
PostgreSQL (tests/postgres.py) and reads there as it did, row for row; a target with data, a row
PostgreSQL cannot hold, a connection killed midway and a locked source each stop it with one clear
line, the target left as it was."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
import pytest
import yaml
from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import create_engine, insert, inspect, make_url, select, text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from gateway.cli import main as cli
from gateway.cli.migrate_ends import MigrateError
from gateway.cli.migrate_storage import Checksum, migrate
from memory.archive.daily import DailyFiles
from memory.archive.daily_index import DailyIndex
from memory.embed.vectors import VectorStore, text_hash
from memory.records.model import MemoryClass, Provenance, ReviewStatus, Scope, UsePolicy
from memory.records.revisions import Change
from memory.store import schema
from memory.store.db import MIGRATIONS, Database
from memory.store.presets import PresetStore
from memory.store.sessions import FlushRequest, Message
from memory.store.storage import Storage
from memory.store.traces import INJECTED, TraceItem, TraceStore, Written
from tests.postgres import fresh_database_url

MODEL = "test-model"
KEY = "telegram:dm:1"
GROUP = "slack:group:C1"
NUL_ROW = "a NUL \x00 in the middle"


@dataclass
class Source:
    url: str
    memory_root: Path
    user_id: str
    records: dict[str, str]  # name -> record id
    cookie: str
    link_code: str
    archived_top: int  # the highest message id: archived, so no longer in `messages`


def _write(path: Path, content: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content, encoding="utf-8")


def _vector(rng: np.random.Generator, dim: int = 8) -> np.ndarray[Any, Any]:
    v = rng.standard_normal(dim).astype(np.float32)
    return v / np.linalg.norm(v)


async def _fill(storage: Storage, root: Path, *, messages: int = 120, bad: bool = False) -> Source:
    """A little of everything, written through the stores as the gateway writes it."""
    rng = np.random.default_rng(7)
    user = await storage.identities.resolve("telegram:1", "Ann")
    await storage.identities.resolve("discord:2", "Bob")
    link_code = await storage.links.create(user.id, "telegram:1")
    await storage.pairing.request("discord:9", "discord", "Carol")

    dm = await storage.sessions.active(KEY, "main", user.id)
    calls = [{"id": "c1", "type": "function", "function": {"name": "memory_search", "arguments": '{"q": "x"}'}}]
    await storage.sessions.append(dm, [Message("user", "do you remember my coffee?", author="Ann", event_id="e1")])
    await storage.sessions.append(
        dm, [Message("assistant", "", tool_calls=calls), Message("tool", "{}", tool_call_id="c1")]
    )
    await storage.sessions.append(dm, [Message("assistant", "Black, no sugar ☕ — 我记得", event_id="e1")])
    lines = [Message("user" if i % 2 else "assistant", f"line {i} about the harbour") for i in range(messages)]
    await storage.sessions.append(dm, lines)  # enough to take several batches
    summary = "Ann likes black coffee."
    await storage.sessions.archive(
        dm, dm.recent[len(dm.recent) // 2].id or 0, "summarized", summary=summary, summary_tokens=6,
        flush=FlushRequest("user", user.id, "2026-11-30"),
    )  # fmt: skip
    await storage.sessions.reset("web:dm:ann", "main", user.id)  # an ended, empty session and a new one
    group = await storage.sessions.active(GROUP, "main", None, "team")
    await storage.sessions.append(group, [Message("user", "the release is on Friday", author="Bob")])
    last = [Message("assistant", NUL_ROW if bad else "noted: Friday")]
    await storage.sessions.append(group, last)
    await storage.sessions.archive(group, last[0].id or 0, "trimmed")  # the newest ids now live in the archive only

    await storage.journal.record("e1", "telegram", KEY, {"text": "do you remember my coffee?", "n": 1.5})
    await storage.journal.claim_send("out-e1", "telegram")
    await storage.journal.finish("e1", "done", sent=("out-e1", "m-77"))
    await storage.journal.record("e2", "telegram", KEY, {"text": "and tea?"})  # unfinished at the move

    r = storage.records
    evidence = UsePolicy(can_use_as_instruction=False, requires_user_confirmation=True)
    coffee = await r.create(
        "Ann drinks her coffee black", memory_class=MemoryClass.DURABLE_FACT, provenance=Provenance.USER_CONFIRMED,
        use_policy=UsePolicy(), scope=Scope.personal(user.id), author="telegram:1", review_status=ReviewStatus.NONE,
        source="session:telegram:dm:1#3", tags=("drink",),
    )  # fmt: skip
    tea = await r.create(
        "Ann sometimes drinks green tea", memory_class=MemoryClass.EVIDENCE, provenance=Provenance.INFERRED,
        use_policy=evidence, scope=Scope.personal(user.id), author="agent:main", review_status=ReviewStatus.PENDING,
    )  # fmt: skip
    tokyo = await r.create(
        "我住在东京", memory_class=MemoryClass.DURABLE_FACT, provenance=Provenance.INFERRED, use_policy=evidence,
        scope=Scope.personal(user.id), author="agent:main", review_status=ReviewStatus.PENDING,
    )  # fmt: skip
    release = await r.create(
        "The release is on Friday", memory_class=MemoryClass.EVIDENCE, provenance=Provenance.INFERRED,
        use_policy=evidence, scope=Scope.parse(f"channel:{GROUP}"), author="agent:main",
        review_status=ReviewStatus.PENDING, attribution="Bob", origin_audience="team", sensitivity="sensitive",
    )  # fmt: skip
    await r.update(tea.id, actor="telegram:1", action="edit", content="Ann drinks green tea in the afternoon")
    await storage.revisions.change_batch(
        [Change(coffee.id, "confirm", None, {"review_status": ReviewStatus.CONFIRMED}),
         Change(tokyo.id, "evidence", None, {"tags": ["place"]})],
        actor="admin",
    )  # fmt: skip
    await r.forget(release.id, "admin", note="wrong channel")

    vectors = VectorStore(storage.db)
    for kind in ("record", "archive", "daily"):
        todo = await vectors.missing(kind, MODEL, 1000)
        await vectors.upsert(kind, [(i, text_hash(t), _vector(rng)) for i, t in todo], MODEL)

    note = "# 2026-11-30\n- the standup moved to nine\n- 会议在九点\n"
    await asyncio.to_thread(_write, root / "2026-11-30.md", note)
    index = DailyIndex(storage.db, DailyFiles(root))
    await index.scan()
    for i, t in await vectors.missing("daily", MODEL, 100):
        await vectors.upsert("daily", [(i, text_hash(t), _vector(rng))], MODEL)

    job = await storage.jobs.enqueue("formation", KEY, {"first": 1, "last": 20}, dedupe="formation:1")
    await storage.jobs.enqueue("merge", "sys:merge", {}, dedupe="merge:2026-12-01")
    claimed = await storage.jobs.claim("worker-1", timedelta(seconds=60))
    assert claimed is not None and claimed.id == job
    await storage.jobs.done(claimed, {"written": [coffee.id], "score": 0.25})

    await TraceStore(storage.db).add(
        KEY, user.id, "e1", "what do I drink?", [TraceItem("record", coffee.id, 0.81, True, INJECTED)],
        [Written(tea.id, "edited")],
    )  # fmt: skip
    await PresetStore(storage.db).add(
        "memory_search", "drinks", {"query": "coffee", "limit": 3}, "a saved query", created_by="admin", approved=True
    )
    cookie, _ = await storage.console_sessions.create(user.id, "d" * 64)

    top = max(m.id or 0 for m in last)
    names = {"coffee": coffee.id, "tea": tea.id, "tokyo": tokyo.id, "release": release.id}
    return Source(storage.db.url, root, user.id, names, cookie, link_code, top)


async def _source(tmp_path: Path, **kw: Any) -> Source:
    storage = await Storage.open(f"sqlite:///{tmp_path / 'data' / 'clawgate.db'}")
    try:
        return await _fill(storage, tmp_path / "data" / "memory", **kw)
    finally:
        await storage.close()


async def _bare_source(tmp_path: Path) -> Path:
    """A database at the newest schema with one user in it, where the config expects it."""
    path = tmp_path / "data" / "clawgate.db"
    storage = await Storage.open(f"sqlite:///{path}")
    try:
        await storage.identities.resolve("telegram:1", "Ann")
    finally:
        await storage.close()
    return path


@pytest.fixture(scope="module")
def untouched() -> str:
    """An empty target that the tests of failures share: each checks that it is still empty."""
    return fresh_database_url()


def _canon(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    return value


async def _tables(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the schema, read through the schema's types, in a stable order."""

    def read(conn: Any) -> dict[str, list[tuple[Any, ...]]]:
        out = {}
        for t in schema.metadata.sorted_tables:
            rows = conn.execute(select(*t.columns, *[c.is_(None) for c in t.columns])).all()
            out[t.name] = sorted(tuple(repr(_canon(v)) for v in row) for row in rows)
        return out

    db = Database(url)
    try:
        return await db.read(read)
    finally:
        await db.close()


async def _table_names(url: str) -> list[str]:
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            return sorted(await conn.run_sync(lambda c: inspect(c).get_table_names()))
    finally:
        await engine.dispose()


async def test_everything_moves_and_reads_the_same_on_postgresql(tmp_path: Path) -> None:
    src = await _source(tmp_path)
    target = fresh_database_url()
    seen: dict[str, tuple[int, int]] = {}

    def progress(table: str, done: int, total: int) -> None:
        assert done <= total
        seen[table] = (done, total)

    summary = await migrate(src.url, target, batch=7, progress=progress)

    before, after = await _tables(src.url), await _tables(target)
    assert after == before  # every row of every table, SQL NULL and JSON null told apart
    assert {t.name: t.rows for t in summary.tables} == {n: len(rows) for n, rows in before.items()}
    assert all(done == total for done, total in seen.values()) and seen["messages"][1] > 7
    computed = {t.name: t.computed for t in summary.tables if t.computed}
    assert computed["memory_records"] == ("words",)  # PostgreSQL's own full text, not copied
    assert "memory_records_fts" in summary.full_text and summary.not_copied == ()
    assert "postgres:***@" in summary.target or "@" not in summary.target
    # Ready to serve at once: the HNSW graphs built (a record, an archive and a daily kind of one
    # model), the planner's statistics fresh.
    assert summary.vector_indexes == 3 and seen["vector indexes"] == (1, 1)
    db = Database(target)
    try:
        analyzed = "SELECT count(*) FROM pg_stats WHERE tablename = 'memory_vectors'"
        assert await db.read(lambda c: c.execute(text(analyzed)).scalar_one()) > 0
    finally:
        await db.close()

    old, new = await Storage.open(src.url), await Storage.open(target)
    try:
        await _same_answers(old, new, src)
        await _new_rows_get_fresh_ids(new, src)
    finally:
        await old.close()
        await new.close()


async def _same_answers(old: Storage, new: Storage, src: Source) -> None:
    scopes = [str(Scope.personal(src.user_id))]
    for query in ("coffee", "green tea", "东京"):
        a = [(m.id, m.content) for m, _ in await old.records.search(query, scopes=scopes)]
        b = [(m.id, m.content) for m, _ in await new.records.search(query, scopes=scopes)]
        assert sorted(a) == sorted(b) and a, query
    for rid in src.records.values():
        assert await new.records.get(rid, include_deleted=True) == await old.records.get(rid, include_deleted=True)
        assert await new.records.revisions(rid) == await old.records.revisions(rid)
    assert await new.revisions.list() == await old.revisions.list()

    assert await new.sessions.history(KEY) == await old.sessions.history(KEY)
    s_old = await old.sessions.active(KEY, "main", src.user_id)
    s_new = await new.sessions.active(KEY, "main", src.user_id)
    assert s_new == s_old and s_new.summary == "Ann likes black coffee."
    found = [sorted(h.id for h in await s.archive.search("harbour", user_id=src.user_id)) for s in (old, new)]
    assert found[0] == found[1] != []  # the scores differ: FTS5 against PostgreSQL's full text
    assert await new.archive.for_session(s_new.id) == await old.archive.for_session(s_old.id)
    assert await new.flushes.pending() == await old.flushes.pending() != []

    assert await new.identities.get_user(src.user_id) == await old.identities.get_user(src.user_id)
    assert await new.pairing.pending() == await old.pairing.pending()
    assert await new.journal.unfinished() == await old.journal.unfinished() != []
    assert await new.journal.outbound_status("out-e1") == "sent"
    assert await new.jobs.list() == await old.jobs.list()
    assert await new.console_sessions.get(src.cookie) == await old.console_sessions.get(src.cookie) is not None
    t_old = await TraceStore(old.db).recent(user_id=src.user_id)
    assert await TraceStore(new.db).recent(user_id=src.user_id) == t_old != []
    assert await PresetStore(new.db).list() == await PresetStore(old.db).list()

    v_old, v_new = VectorStore(old.db), VectorStore(new.db)
    assert await v_new.coverage(MODEL) == await v_old.coverage(MODEL)
    assert await v_new.prepare(MODEL) == 0  # no index left for the first start to build
    for kind in ("record", "archive", "daily"):
        assert await v_new.missing(kind, MODEL, 10) == [] == await v_old.missing(kind, MODEL, 10)
    filled = await new.db.read(lambda c: c.execute(text("SELECT count(*), count(embedding) FROM memory_vectors")).one())
    assert filled[0] == filled[1] > 0  # PostgreSQL computed pgvector's column from every copied blob

    files = DailyFiles(src.memory_root)
    a_hits = await DailyIndex(old.db, files).search("standup", scopes=["global"])
    assert (
        [h.content for h in await DailyIndex(new.db, files).search("standup", scopes=["global"])]
        == [h.content for h in a_hits]
        != []
    )


async def _new_rows_get_fresh_ids(new: Storage, src: Source) -> None:
    """Sequences were moved past the copied ids: new rows insert, and message ids are never reused."""
    group = await new.sessions.active(GROUP, "main", None, "team")
    fresh = [Message("user", "after the move")]
    await new.sessions.append(group, fresh)
    assert (fresh[0].id or 0) > src.archived_top
    assert await new.sessions.archive(group, fresh[0].id or 0, "trimmed") is not None  # no id clash in the archive
    undone = await new.records.undo(src.records["tea"], "admin")  # a revision insert, on the copied history
    assert undone.content == "Ann sometimes drinks green tea"
    made = await new.records.create(
        "Ann cycles to work", memory_class=MemoryClass.EVIDENCE, provenance=Provenance.INFERRED, use_policy=UsePolicy(),
        scope=Scope.personal(src.user_id), author="agent:main", review_status=ReviewStatus.PENDING,
    )  # fmt: skip
    assert [m.id for m, _ in await new.records.search("cycles", scopes=[str(made.scope)])] == [made.id]
    assert await new.jobs.enqueue("formation", KEY, {}) is not None
    assert await new.identities.resolve("web:zed") is not None
    assert await new.links.redeem(src.link_code, "discord:2") == src.user_id  # a code made before the move


async def test_a_row_postgresql_cannot_hold_stops_it_and_leaves_the_target_as_it_was(
    tmp_path: Path, untouched: str
) -> None:
    src = await _source(tmp_path, messages=30, bad=True)
    target = untouched
    with pytest.raises(MigrateError, match=r"archived_messages \(id=\d+\): content holds a NUL character") as caught:
        await migrate(src.url, target, batch=5)
    assert "nothing was committed" in str(caught.value) and NUL_ROW not in str(caught.value)
    assert await _table_names(target) == []  # not even the schema: the migrations ran in the same transaction


def _terminate_other_backends(url: str) -> None:
    """Kill every other connection to the target's database, from another thread and event loop
    (the copy runs on this one, blocked in its progress callback)."""
    parsed = make_url(url)

    async def kill() -> None:
        conn = await asyncpg.connect(user=parsed.username, database=parsed.database, host=str(parsed.query["host"]))
        try:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        finally:
            await conn.close()

    worker = threading.Thread(target=asyncio.run, args=(kill(),))
    worker.start()
    worker.join(timeout=20)


async def test_a_connection_killed_midway_leaves_the_target_as_it_was(tmp_path: Path, untouched: str) -> None:
    src = await _source(tmp_path, messages=30)
    target = untouched
    killed: list[str] = []

    def progress(table: str, done: int, total: int) -> None:
        if table == "messages" and done > 0 and not killed:  # tables before it are copied already
            killed.append(table)
            _terminate_other_backends(target)

    with pytest.raises(
        MigrateError, match=r"connection to the target was lost while copying messages: .*nothing was committed"
    ):
        await migrate(src.url, target, batch=5, progress=progress)
    assert killed and await _table_names(target) == []


async def test_a_locked_source_is_reported_and_nothing_happens(tmp_path: Path, untouched: str) -> None:
    path = await _bare_source(tmp_path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # a writer in the middle of a transaction, as a running gateway
    try:
        with pytest.raises(MigrateError, match="is locked by another process: stop the gateway"):
            await migrate(f"sqlite:///{path}", untouched, lock_timeout=0.1)
    finally:
        holder.rollback()
        holder.close()
    assert await _table_names(untouched) == []


async def test_a_source_behind_is_brought_up_to_date_first(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        cfg = AlembicConfig()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0005")
        conn.execute(insert(schema.users).values(id="u1", roles=["user"], created_at=datetime.now(UTC)))
    engine.dispose()
    summary = await migrate(f"sqlite:///{path}", fresh_database_url())
    assert summary.source_was == "0005" and summary.revision != "0005"
    assert {t.name: t.rows for t in summary.tables}["users"] == 1


async def test_a_source_from_a_newer_clawgate_is_refused(tmp_path: Path, untouched: str) -> None:
    path = await _bare_source(tmp_path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(MigrateError, match="schema 9999, which this clawgate does not know"):
        await migrate(f"sqlite:///{path}", untouched)
    assert await _table_names(untouched) == []


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda u: u.set(username="nobody"), "refused the user name or password"),
        (lambda u: u.set(database="nosuchdb"), "database nosuchdb does not exist: create it"),
        (lambda u: u.set(host="127.0.0.1", port=1, password="s3cret-pw", query={}), "cannot reach the target"),
    ],
)
async def test_a_target_it_cannot_use_is_one_clear_line(
    tmp_path: Path, untouched: str, change: Callable[[Any], Any], why: str
) -> None:
    path = await _bare_source(tmp_path)
    url = change(make_url(untouched)).render_as_string(hide_password=False)
    with pytest.raises(MigrateError, match=why) as caught:
        await migrate(f"sqlite:///{path}", url)
    message = str(caught.value)
    assert caught.value.exit_code == 1 and "\n" not in message and "s3cret-pw" not in message


def _config(tmp_path: Path, database_url: str | None = None) -> Path:
    storage: dict[str, str] = {"data_dir": str(tmp_path / "data")}
    if database_url:
        storage["database_url"] = database_url
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"storage": storage}), encoding="utf-8")
    return path


def test_the_command_prints_what_moved_what_stays_and_the_next_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(_source(tmp_path, messages=2))
    url = fresh_database_url()
    target = make_url(url).set(password="s3cret-pw").render_as_string(hide_password=False)  # trusted: not asked
    config = _config(tmp_path)

    assert cli.main(["--config", str(config), "migrate-storage", "--to", target]) == 0
    out, err = capsys.readouterr()
    assert "s3cret-pw" not in out + err
    assert "  messages " in err and " rows" in err  # progress per table
    assert "verified" in out and "memory files stay where they are" in out and str(tmp_path / "data" / "memory") in out
    assert 'storage.database_url: "postgresql+asyncpg://postgres:***@' in out

    before = asyncio.run(_tables(url))
    assert cli.main(["--config", str(config), "migrate-storage", "--to", target]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "s3cret-pw" not in err
    assert err.startswith("clawgate migrate-storage: the target database") and "already holds clawgate rows" in err
    assert "already holds clawgate rows (1 in console_sessions," in err and "dropdb" in err
    assert asyncio.run(_tables(url)) == before  # refused: nothing changed


@pytest.mark.parametrize(
    ("database_url", "to", "why"),
    [
        (None, "sqlite:///elsewhere.db", "--to must be a PostgreSQL URL"),
        (None, "postgresql://u@h/db", "names no driver"),
        (None, "not a url", "--to is not a database URL"),
        ("postgresql+asyncpg://u:pw@h/db", "postgresql+asyncpg://u@h/db2", "already a postgresql database"),
        ("sqlite:///{tmp}/none.db", "postgresql+asyncpg://u@h/db", "there is no database at"),
    ],
)
def test_usage_and_config_problems_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], database_url: str | None, to: str, why: str
) -> None:
    config = _config(tmp_path, database_url and database_url.format(tmp=tmp_path))
    if database_url is None:
        asyncio.run(_bare_source(tmp_path))
    assert cli.main(["--config", str(config), "migrate-storage", "--to", to]) == 2
    err = capsys.readouterr().err
    assert why in err and "pw@" not in err


def test_a_config_that_does_not_load_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("storage: [not, a, mapping]\n", encoding="utf-8")
    assert cli.main(["--config", str(path), "migrate-storage", "--to", "postgresql+asyncpg://u@h/db"]) == 2
    assert "storage" in capsys.readouterr().err


# --- the pieces --------------------------------------------------------------------------------------


def test_the_checksum_ignores_order_and_sees_any_change() -> None:
    rows = [(1, "a", None), (2, "b", datetime(2026, 1, 1, tzinfo=UTC)), (3, "c", b"\x00\x01")]
    a, b, c = Checksum(), Checksum(), Checksum()
    for row in rows:
        a.add(row)
    for row in reversed(rows):
        b.add(row)
    for row in [*rows[:2], (3, "c", b"\x00\x02")]:
        c.add(row)
    assert a == b and a.total != c.total and a.rows == c.rows == 3
