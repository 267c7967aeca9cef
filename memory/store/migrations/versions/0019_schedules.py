"""schedules: reminders people set and the config's scheduled runs; a person's time zone

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

import memory.store.schema

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    at = memory.store.schema.UTCDateTime(timezone=True)
    op.create_table(
        "schedules",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("name", sa.String(128), nullable=True),
        sa.Column("owner", sa.String(128), nullable=True),
        sa.Column("channel", sa.String(255), nullable=False),
        sa.Column("chat_id", sa.String(512), nullable=False),
        sa.Column("thread_id", sa.String(512), nullable=True),
        sa.Column("conv_kind", sa.String(16), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("agent", sa.String(128), nullable=True),
        sa.Column("cron", sa.String(128), nullable=True),
        sa.Column("every_seconds", sa.Integer(), nullable=True),
        sa.Column("zone", sa.String(64), nullable=False),
        sa.Column("first_due", at, nullable=False),
        sa.Column("next_due", at, nullable=True),
        sa.Column("until", at, nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("last_run_at", at, nullable=True),
        sa.Column("last_outcome", sa.String(32), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("source", sa.String(255), nullable=True),
        sa.Column("created_at", at, nullable=False),
        sa.Column("updated_at", at, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_schedules")),
        sa.UniqueConstraint("name", name=op.f("uq_schedules_name")),
    )
    op.create_index("ix_schedules_owner", "schedules", ["owner", "status"])
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("timezone", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_column("timezone")
    op.drop_index("ix_schedules_owner", table_name="schedules")
    op.drop_table("schedules")
