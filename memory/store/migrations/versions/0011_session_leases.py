"""session leases: one turn at a time per session across gateway instances sharing a database

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

import memory.store.schema

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

UTC_TIME = memory.store.schema.UTCDateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "session_leases",
        sa.Column("session_key", sa.String(512), nullable=False),
        sa.Column("holder", sa.String(64)),
        sa.Column("instance", sa.String(128), nullable=False),
        sa.Column("expires_at", UTC_TIME, nullable=False),
        sa.PrimaryKeyConstraint("session_key", name=op.f("pk_session_leases")),
    )


def downgrade() -> None:
    op.drop_table("session_leases")
