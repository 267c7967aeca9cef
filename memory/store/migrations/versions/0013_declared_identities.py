"""declared identities: which identities config.yaml gave their user, so that one taken out of
the config is released instead of staying that user's for good; and the conversations of accounts
joined with /link belong to the person they joined (a direct conversation now shows only its own
person's archive)

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def _first_contact_id(identity: str) -> str:  # memory.store.identities.first_contact_id, as of this revision
    return identity.replace(":", "-").replace("/", "-")[:128]


def upgrade() -> None:
    with op.batch_alter_table("identities") as batch:
        batch.add_column(sa.Column("declared", sa.Boolean(), nullable=False, server_default="0"))
    conn = op.get_bind()
    links = conn.execute(
        sa.text("SELECT used_by, user_id FROM link_codes WHERE used_at IS NOT NULL ORDER BY used_at")
    ).all()
    for used_by, target in links:
        stub = _first_contact_id(str(used_by))
        left = conn.execute(sa.text("SELECT 1 FROM identities WHERE user_id = :u LIMIT 1"), {"u": stub}).first()
        if left is None and stub != target:
            conn.execute(sa.text("UPDATE sessions SET user_id = :t WHERE user_id = :u"), {"t": target, "u": stub})


def downgrade() -> None:
    with op.batch_alter_table("identities") as batch:
        batch.drop_column("declared")
