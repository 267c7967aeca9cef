"""pairing notices: when an approved person was told, and the DM their request came from

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

import memory.store.schema

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pairing_requests") as batch:
        batch.add_column(sa.Column("chat_id", sa.String(512), nullable=True))
        batch.add_column(sa.Column("notified_at", memory.store.schema.UTCDateTime(timezone=True), nullable=True))
    # Approvals made before this schema were never announced, and announcing them now (perhaps
    # months later) would surprise people: they count as told.
    op.execute("UPDATE pairing_requests SET notified_at = approved_at WHERE approved_at IS NOT NULL")


def downgrade() -> None:
    with op.batch_alter_table("pairing_requests") as batch:
        batch.drop_column("notified_at")
        batch.drop_column("chat_id")
