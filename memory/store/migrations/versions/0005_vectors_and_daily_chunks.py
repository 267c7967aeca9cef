"""embeddings per item and model; daily files cut into searchable chunks (with FTS5 on SQLite)

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

import memory.store.schema

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_FTS = [
    "CREATE VIRTUAL TABLE daily_chunks_fts USING fts5("
    "content, content='daily_chunks', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')",
    "CREATE TRIGGER daily_chunks_ai AFTER INSERT ON daily_chunks BEGIN "
    "INSERT INTO daily_chunks_fts(rowid, content) VALUES (new.id, new.content); END",
    "CREATE TRIGGER daily_chunks_ad AFTER DELETE ON daily_chunks BEGIN "
    "INSERT INTO daily_chunks_fts(daily_chunks_fts, rowid, content) VALUES ('delete', old.id, old.content); END",
    "CREATE TRIGGER daily_chunks_au AFTER UPDATE OF content ON daily_chunks BEGIN "
    "INSERT INTO daily_chunks_fts(daily_chunks_fts, rowid, content) VALUES ('delete', old.id, old.content); "
    "INSERT INTO daily_chunks_fts(rowid, content) VALUES (new.id, new.content); END",
]


def upgrade() -> None:
    op.create_table(
        "memory_vectors",
        sa.Column("item_kind", sa.String(length=16), nullable=False),
        sa.Column("item_id", sa.String(length=64), nullable=False),
        sa.Column("model_id", sa.String(length=128), nullable=False),
        sa.Column("dim", sa.Integer(), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.Column("text_hash", sa.String(length=16), nullable=False),
        sa.Column("created_at", memory.store.schema.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("item_kind", "item_id", "model_id", name=op.f("pk_memory_vectors")),
    )
    op.create_index("ix_memory_vectors_model_id", "memory_vectors", ["model_id", "item_kind"])
    op.create_table(
        "daily_chunks",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("path", sa.String(length=1024), nullable=False),
        sa.Column("scope", sa.String(length=512), nullable=False),
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("chunk_no", sa.Integer(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("file_mtime_ns", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_daily_chunks")),
        sa.UniqueConstraint("path", "chunk_no", name=op.f("uq_daily_chunks_path_chunk_no")),
    )
    op.create_index("ix_daily_chunks_scope", "daily_chunks", ["scope"])
    if op.get_bind().dialect.name == "sqlite":
        for statement in _FTS:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TABLE IF EXISTS daily_chunks_fts")
    op.drop_index("ix_daily_chunks_scope", table_name="daily_chunks")
    op.drop_table("daily_chunks")
    op.drop_index("ix_memory_vectors_model_id", table_name="memory_vectors")
    op.drop_table("memory_vectors")
