"""session memory: summaries, archive (with FTS5 on SQLite), flush jobs

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

import memory.store.schema

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# SQLite: an external-content FTS5 index over archived_messages.content, kept in step by triggers.
# Porter stemming over unicode61 (diacritics folded). Other databases search without it for now.
_FTS = [
    "CREATE VIRTUAL TABLE archived_messages_fts USING fts5("
    "content, content='archived_messages', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')",
    "CREATE TRIGGER archived_messages_ai AFTER INSERT ON archived_messages BEGIN "
    "INSERT INTO archived_messages_fts(rowid, content) VALUES (new.id, new.content); END",
    "CREATE TRIGGER archived_messages_ad AFTER DELETE ON archived_messages BEGIN "
    "INSERT INTO archived_messages_fts(archived_messages_fts, rowid, content) "
    "VALUES ('delete', old.id, old.content); END",
    "CREATE TRIGGER archived_messages_au AFTER UPDATE ON archived_messages BEGIN "
    "INSERT INTO archived_messages_fts(archived_messages_fts, rowid, content) "
    "VALUES ('delete', old.id, old.content); "
    "INSERT INTO archived_messages_fts(rowid, content) VALUES (new.id, new.content); END",
]


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        # AUTOINCREMENT: message ids must never be reused once messages move to the archive.
        with op.batch_alter_table("messages", recreate="always", table_kwargs={"sqlite_autoincrement": True}):
            pass
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("summary", sa.Text(), nullable=True))
        batch.add_column(sa.Column("summary_tokens", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("summaries", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("last_flush_at", memory.store.schema.UTCDateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("audience", sa.String(length=16), nullable=False, server_default="personal"))
        batch.add_column(sa.Column("memory_excluded", sa.Boolean(), nullable=False, server_default="0"))
    op.create_table(
        "archived_messages",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("tool_calls", sa.JSON(), nullable=True),
        sa.Column("tool_call_id", sa.String(length=128), nullable=True),
        sa.Column("author", sa.String(length=255), nullable=True),
        sa.Column("event_id", sa.String(length=255), nullable=True),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("created_at", memory.store.schema.UTCDateTime(timezone=True), nullable=False),
        sa.Column("archived_at", memory.store.schema.UTCDateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.String(length=16), nullable=False),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"], name=op.f("fk_archived_messages_session_id_sessions")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_archived_messages")),
    )
    op.create_index("ix_archived_messages_session_id_id", "archived_messages", ["session_id", "id"])
    op.create_table(
        "session_flushes",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("first_id", sa.Integer(), nullable=False),
        sa.Column("last_id", sa.Integer(), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("owner", sa.String(length=512), nullable=False),
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", sa.String(length=255), nullable=True),
        sa.Column("created_at", memory.store.schema.UTCDateTime(timezone=True), nullable=False),
        sa.Column("finished_at", memory.store.schema.UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"], name=op.f("fk_session_flushes_session_id_sessions")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_session_flushes")),
    )
    op.create_index("ix_session_flushes_status", "session_flushes", ["status"])
    if op.get_bind().dialect.name == "sqlite":
        for statement in _FTS:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TABLE IF EXISTS archived_messages_fts")
    op.drop_index("ix_session_flushes_status", table_name="session_flushes")
    op.drop_table("session_flushes")
    op.drop_index("ix_archived_messages_session_id_id", table_name="archived_messages")
    op.drop_table("archived_messages")
    with op.batch_alter_table("sessions") as batch:
        for column in ("memory_excluded", "audience", "last_flush_at", "summaries", "summary_tokens", "summary"):
            batch.drop_column(column)
