"""redact secret-like strings already stored: session messages (tool-call arguments included), the
archive and with it its full-text indexes, session summaries, finished journaled events and
recall-trace queries

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01

From this revision on the gateway redacts chat text as it stores it (memory/store/sessions.py,
memory/store/platforms/journal.py; DESIGN §11). This migration brings what was stored before to the same state, each
text through memory.trust.redact once, messages exactly as the gateway now stores them
(memory.store.sessions.stored_copy, token estimates included; a session's running total follows its
active messages).

Pattern-based only: a migration has no config, so the operator's configured secret values (bot
tokens, API keys in config.yaml) are matched only where they have a secret-like shape. The gateway
redacts those verbatim from then on.

Left as they are: unfinished journaled events (a resumed turn needs what the person wrote; they are
redacted when they finish), memory records and their revisions (write-back has always refused
secret-like text, and a record changes only through a revision), daily files and their chunks
(redacted as they were written, and the files are not the database's), job errors (redacted when
recorded).

Indexes. SQLite's archived_messages_fts and archived_messages_cjk are external-content indexes kept
by triggers on archived_messages (migrations 0003, 0006) whose AFTER UPDATE triggers take out the
old text and add the new one: updating the row is all it takes. On PostgreSQL `words` is a
generated column (migration 0012), computed again by the UPDATE. memory/embed/vectors.py never looks at
an archived message's vector again (archived texts were never updated before this), so the vectors
of the messages changed here are deleted: the recall upkeep embeds the redacted text.

Speed: each table is read in primary-key order, a page at a time, only the columns redaction needs;
only rows whose text changed are written, a page's worth per statement (executemany).

Downgrade changes nothing: a redacted secret is gone.
"""

from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from memory.store.sessions import Message, stored_copy
from memory.trust.redact import redact

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

PAGE = 500


def _message_table(name: str) -> sa.TableClause:
    """The columns this migration reads and writes, which the two message tables share."""
    return sa.table(
        name,
        sa.column("id", sa.Integer),
        sa.column("session_id", sa.Integer),
        sa.column("role", sa.String),
        sa.column("content", sa.Text),
        sa.column("tool_calls", sa.JSON),
        sa.column("tokens", sa.Integer),
    )


_messages = _message_table("messages")
_archived = _message_table("archived_messages")
_sessions = sa.table(
    "sessions", sa.column("id", sa.Integer), sa.column("summary", sa.Text), sa.column("token_count", sa.BigInteger)
)
_events = sa.table(
    "inbound_events", sa.column("event_id", sa.String), sa.column("payload", sa.JSON), sa.column("status", sa.String)
)
_traces = sa.table("recall_traces", sa.column("id", sa.Integer), sa.column("query", sa.Text))
_vectors = sa.table("memory_vectors", sa.column("item_kind", sa.String), sa.column("item_id", sa.String))


def _pages(conn: sa.Connection, key: Any, columns: list[Any], *where: Any) -> Iterator[Sequence[Any]]:
    """The rows of a table in `key` order, PAGE at a time (keyset: no OFFSET rescans)."""
    last = None
    while True:
        stmt = sa.select(key, *columns).where(*where)
        if last is not None:
            stmt = stmt.where(key > last)
        rows = conn.execute(stmt.order_by(key).limit(PAGE)).all()
        if not rows:
            return
        yield rows
        last = rows[-1][0]


def _messages_of(conn: sa.Connection, table: Any) -> list[int]:
    """Redact one message table; the ids of the rows that changed. For `messages`, each session's
    running token count moves with its rows' estimates."""
    c = table.c
    with_calls = (
        sa.update(table)
        .where(c.id == sa.bindparam("b_id"))
        .values(content=sa.bindparam("b_content"), tool_calls=sa.bindparam("b_calls"), tokens=sa.bindparam("b_tokens"))
    )
    text_only = (
        sa.update(table)
        .where(c.id == sa.bindparam("b_id"))
        .values(content=sa.bindparam("b_content"), tokens=sa.bindparam("b_tokens"))
    )
    changed: list[int] = []
    moved: dict[int, int] = {}
    for rows in _pages(conn, c.id, [c.session_id, c.role, c.content, c.tool_calls, c.tokens]):
        calls_rows: list[dict[str, Any]] = []
        text_rows: list[dict[str, Any]] = []
        for row in rows:
            before = Message(row.role, row.content or "", tool_calls=row.tool_calls, tokens=int(row.tokens or 0))
            after = stored_copy(before, ())
            if after is before:
                continue
            values = {"b_id": row.id, "b_content": after.content, "b_tokens": after.tokens}
            if after.tool_calls is not before.tool_calls:
                calls_rows.append({**values, "b_calls": after.tool_calls})
            else:
                text_rows.append(values)
            moved[row.session_id] = moved.get(row.session_id, 0) + after.tokens - before.tokens
            changed.append(int(row.id))
        if calls_rows:
            conn.execute(with_calls, calls_rows)
        if text_rows:
            conn.execute(text_only, text_rows)
    deltas = [{"b_id": sid, "b_delta": delta} for sid, delta in moved.items() if delta]
    if table is _messages and deltas:
        conn.execute(
            sa.update(_sessions)
            .where(_sessions.c.id == sa.bindparam("b_id"))
            .values(token_count=_sessions.c.token_count + sa.bindparam("b_delta", type_=sa.BigInteger)),
            deltas,
        )
    return changed


def _texts_of(conn: sa.Connection, table: Any, key: Any, column: Any) -> None:
    update = sa.update(table).where(key == sa.bindparam("b_key")).values({column.name: sa.bindparam("b_text")})
    for rows in _pages(conn, key, [column], column.is_not(None)):
        batch = []
        for row_key, text in rows:
            hidden = redact(text)
            if hidden != text:
                batch.append({"b_key": row_key, "b_text": hidden})
        if batch:
            conn.execute(update, batch)


def _finished_events(conn: sa.Connection) -> None:
    c = _events.c
    update = sa.update(_events).where(c.event_id == sa.bindparam("b_key")).values(payload=sa.bindparam("b_payload"))
    for rows in _pages(conn, c.event_id, [c.payload], c.status != "received"):
        batch = []
        for event_id, payload in rows:
            text = payload.get("text") if isinstance(payload, dict) else None
            if isinstance(text, str) and text:
                hidden = redact(text)
                if hidden != text:
                    batch.append({"b_key": event_id, "b_payload": {**payload, "text": hidden}})
        if batch:
            conn.execute(update, batch)


def upgrade() -> None:
    conn = op.get_bind()
    _messages_of(conn, _messages)
    archived = _messages_of(conn, _archived)
    for start in range(0, len(archived), PAGE):
        ids = [str(i) for i in archived[start : start + PAGE]]
        conn.execute(sa.delete(_vectors).where(_vectors.c.item_kind == "archive", _vectors.c.item_id.in_(ids)))
    _texts_of(conn, _sessions, _sessions.c.id, _sessions.c.summary)
    _texts_of(conn, _traces, _traces.c.id, _traces.c.query)
    _finished_events(conn)


def downgrade() -> None:
    pass
