"""write checks: each instance proves the database takes writes (readiness on a full disk)

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

import memory.store.schema

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "write_checks",
        sa.Column("instance", sa.String(128), primary_key=True),
        sa.Column("checked_at", memory.store.schema.UTCDateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("write_checks")
