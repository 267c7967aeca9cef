"""recall traces say what the model looked up: each find_memories and get_memories call of a turn
(the query or the ids asked, and the ids that came back)

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("recall_traces") as batch:
        batch.add_column(sa.Column("lookups", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("recall_traces") as batch:
        batch.drop_column("lookups")
