"""group messages: recent unaddressed group messages, the context of the next addressed turn

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-09
"""

import sqlalchemy as sa
from alembic import op

import memory.store.schema

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "group_messages",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("conversation", sa.String(512), nullable=False),
        sa.Column("event_id", sa.String(255), nullable=False),
        sa.Column("speaker", sa.String(255), nullable=False),
        sa.Column("name", sa.String(255), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("said_at", memory.store.schema.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_group_messages")),
        sa.UniqueConstraint("event_id", name=op.f("uq_group_messages_event_id")),
    )
    op.create_index("ix_group_messages_conversation", "group_messages", ["conversation", "id"])


def downgrade() -> None:
    op.drop_index("ix_group_messages_conversation", table_name="group_messages")
    op.drop_table("group_messages")
