"""an index on memory_records.source: background work finds what one job wrote by its source

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_memory_records_source", "memory_records", ["source"])


def downgrade() -> None:
    op.drop_index("ix_memory_records_source", table_name="memory_records")
