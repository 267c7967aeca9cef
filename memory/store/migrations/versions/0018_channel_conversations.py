"""channel conversations: each platform conversation's own state (Teams' address, Messenger's window)

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

import memory.store.schema

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "channel_conversations",
        sa.Column("channel", sa.String(255), nullable=False),
        sa.Column("conversation", sa.String(512), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("updated_at", memory.store.schema.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("channel", "conversation", name=op.f("pk_channel_conversations")),
    )


def downgrade() -> None:
    op.drop_table("channel_conversations")
