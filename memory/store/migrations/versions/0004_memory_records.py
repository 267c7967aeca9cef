"""long-term memory records and their revisions (with FTS5 on SQLite)

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

import memory.store.schema

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# SQLite: an external-content FTS5 index over memory_records.content, keyed by the integer `seq`
# (records are named by a text id, and FTS5 rowids must be integers that never change). Triggers keep
# it in step; an update reindexes only when the content changes. Other databases search without it.
_FTS = [
    "CREATE VIRTUAL TABLE memory_records_fts USING fts5("
    "content, content='memory_records', content_rowid='seq', tokenize='porter unicode61 remove_diacritics 2')",
    "CREATE TRIGGER memory_records_ai AFTER INSERT ON memory_records BEGIN "
    "INSERT INTO memory_records_fts(rowid, content) VALUES (new.seq, new.content); END",
    "CREATE TRIGGER memory_records_ad AFTER DELETE ON memory_records BEGIN "
    "INSERT INTO memory_records_fts(memory_records_fts, rowid, content) VALUES ('delete', old.seq, old.content); END",
    "CREATE TRIGGER memory_records_au AFTER UPDATE OF content ON memory_records BEGIN "
    "INSERT INTO memory_records_fts(memory_records_fts, rowid, content) VALUES ('delete', old.seq, old.content); "
    "INSERT INTO memory_records_fts(rowid, content) VALUES (new.seq, new.content); END",
]


def upgrade() -> None:
    op.create_table(
        "memory_records",
        sa.Column("seq", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("memory_class", sa.String(length=16), nullable=False),
        sa.Column("provenance", sa.String(length=16), nullable=False),
        sa.Column("use_instruction", sa.Boolean(), nullable=False),
        sa.Column("use_evidence", sa.Boolean(), nullable=False),
        sa.Column("needs_confirmation", sa.Boolean(), nullable=False),
        sa.Column("no_auto_inject", sa.Boolean(), nullable=False),
        sa.Column("scope", sa.String(length=512), nullable=False),
        sa.Column("scope_kind", sa.String(length=16), nullable=False),
        sa.Column("sensitivity", sa.String(length=16), nullable=False),
        sa.Column("review_status", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("author", sa.String(length=255), nullable=False),
        sa.Column("source", sa.String(length=512), nullable=True),
        sa.Column("attribution", sa.String(length=255), nullable=True),
        sa.Column("origin_audience", sa.String(length=16), nullable=False),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("created_at", memory.store.schema.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", memory.store.schema.UTCDateTime(timezone=True), nullable=False),
        sa.Column("expires_at", memory.store.schema.UTCDateTime(timezone=True), nullable=True),
        sa.Column("superseded_by", sa.String(length=40), nullable=True),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_memory_records")),
        sa.UniqueConstraint("id", name=op.f("uq_memory_records_id")),
    )
    op.create_index("ix_memory_records_scope_status", "memory_records", ["scope", "status"])
    op.create_index("ix_memory_records_scope_kind", "memory_records", ["scope_kind"])
    op.create_index("ix_memory_records_review_status", "memory_records", ["review_status"])
    op.create_index("ix_memory_records_expires_at", "memory_records", ["expires_at"])
    op.create_table(
        "memory_revisions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("record_id", sa.String(length=40), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("actor", sa.String(length=255), nullable=False),
        sa.Column("at", memory.store.schema.UTCDateTime(timezone=True), nullable=False),
        sa.Column("before", sa.JSON(), nullable=True),
        sa.Column("after", sa.JSON(), nullable=False),
        sa.Column("note", sa.String(length=255), nullable=True),
        sa.ForeignKeyConstraint(
            ["record_id"], ["memory_records.id"], name=op.f("fk_memory_revisions_record_id_memory_records")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memory_revisions")),
        sa.UniqueConstraint("record_id", "revision", name=op.f("uq_memory_revisions_record_id_revision")),
    )
    if op.get_bind().dialect.name == "sqlite":
        for statement in _FTS:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        # Dropping the table drops its triggers too.
        op.execute("DROP TABLE IF EXISTS memory_records_fts")
    op.drop_table("memory_revisions")
    for index in ("expires_at", "review_status", "scope_kind", "scope_status"):
        op.drop_index(f"ix_memory_records_{index}", table_name="memory_records")
    op.drop_table("memory_records")
