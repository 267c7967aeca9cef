"""identity links and pairing requests

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

import memory.store.schema

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pairing_requests",
        sa.Column("identity", sa.String(length=255), nullable=False),
        sa.Column("channel", sa.String(length=64), nullable=False),
        sa.Column("code", sa.String(length=16), nullable=False),
        sa.Column("display_name", sa.String(length=255), nullable=True),
        sa.Column("created_at", memory.store.schema.UTCDateTime(timezone=True), nullable=False),
        sa.Column("approved_at", memory.store.schema.UTCDateTime(timezone=True), nullable=True),
        sa.Column("approved_by", sa.String(length=128), nullable=True),
        sa.PrimaryKeyConstraint("identity", name=op.f("pk_pairing_requests")),
        sa.UniqueConstraint("code", name=op.f("uq_pairing_requests_code")),
    )
    op.create_table(
        "link_codes",
        sa.Column("code_hash", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("created_by", sa.String(length=255), nullable=False),
        sa.Column("created_at", memory.store.schema.UTCDateTime(timezone=True), nullable=False),
        sa.Column("expires_at", memory.store.schema.UTCDateTime(timezone=True), nullable=False),
        sa.Column("used_at", memory.store.schema.UTCDateTime(timezone=True), nullable=True),
        sa.Column("used_by", sa.String(length=255), nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_link_codes_user_id_users")),
        sa.PrimaryKeyConstraint("code_hash", name=op.f("pk_link_codes")),
    )


def downgrade() -> None:
    op.drop_table("link_codes")
    op.drop_table("pairing_requests")
