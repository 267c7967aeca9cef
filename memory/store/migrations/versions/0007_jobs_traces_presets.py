"""background jobs, recall traces, tool presets; revision batches (merges undone together)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

import memory.store.schema

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

UTC_TIME = memory.store.schema.UTCDateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("key", sa.String(length=512), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("run_after", UTC_TIME, nullable=False),
        sa.Column("lease_until", UTC_TIME, nullable=True),
        sa.Column("claimed_by", sa.String(length=128), nullable=True),
        sa.Column("last_error", sa.String(length=512), nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("dedupe", sa.String(length=255), nullable=True),
        sa.Column("created_at", UTC_TIME, nullable=False),
        sa.Column("updated_at", UTC_TIME, nullable=False),
        sa.Column("finished_at", UTC_TIME, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint("dedupe", name=op.f("uq_jobs_dedupe")),
    )
    op.create_index("ix_jobs_status_run_after", "jobs", ["status", "run_after"])
    op.create_index("ix_jobs_key_status", "jobs", ["key", "status"])
    op.create_table(
        "recall_traces",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("session_key", sa.String(length=512), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=True),
        sa.Column("event_id", sa.String(length=255), nullable=True),
        sa.Column("query", sa.Text(), nullable=False),
        sa.Column("items", sa.JSON(), nullable=False),
        sa.Column("written", sa.JSON(), nullable=False),
        sa.Column("created_at", UTC_TIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_recall_traces")),
    )
    op.create_index("ix_recall_traces_session_key", "recall_traces", ["session_key", "id"])
    op.create_index("ix_recall_traces_user_id", "recall_traces", ["user_id", "id"])
    op.create_table(
        "tool_presets",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tool", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("arguments", sa.JSON(), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("approved", sa.Boolean(), nullable=False),
        sa.Column("created_by", sa.String(length=255), nullable=False),
        sa.Column("created_at", UTC_TIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tool_presets")),
    )
    op.create_index("ix_tool_presets_tool", "tool_presets", ["tool"])
    with op.batch_alter_table("memory_revisions") as batch:
        batch.add_column(sa.Column("batch", sa.String(length=40), nullable=True))
        batch.create_index("ix_memory_revisions_batch", ["batch"])


def downgrade() -> None:
    with op.batch_alter_table("memory_revisions") as batch:
        batch.drop_index("ix_memory_revisions_batch")
        batch.drop_column("batch")
    op.drop_table("tool_presets")
    op.drop_table("recall_traces")
    op.drop_table("jobs")
