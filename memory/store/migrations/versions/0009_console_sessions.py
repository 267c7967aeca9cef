"""web console sign-ins (one row per browser session, found by the digest of its cookie), and an
index for listing memories newest first

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

import memory.store.schema

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

UTC_TIME = memory.store.schema.UTCDateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("id_digest", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("token_digest", sa.String(64), nullable=False),
        sa.Column("csrf", sa.String(64), nullable=False),
        sa.Column("created_at", UTC_TIME, nullable=False),
        sa.Column("expires_at", UTC_TIME, nullable=False),
        sa.PrimaryKeyConstraint("id_digest", name=op.f("pk_console_sessions")),
    )
    op.create_index("ix_console_sessions_expires_at", "console_sessions", ["expires_at"])
    op.create_index("ix_memory_records_status_created", "memory_records", ["status", "created_at", "seq"])


def downgrade() -> None:
    op.drop_index("ix_memory_records_status_created", table_name="memory_records")
    op.drop_index("ix_console_sessions_expires_at", table_name="console_sessions")
    op.drop_table("console_sessions")
