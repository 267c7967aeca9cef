"""PostgreSQL: full-text search over long-term records (their words as a stored tsvector with a
GIN index), and a partial index of the records that hold CJK text

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01

SQLite searches records through FTS5 (migration 0004) and needs nothing here. On PostgreSQL the
column `words` is `to_tsvector('english', content)`, kept by PostgreSQL itself (a generated
column), so a search ranks stored vectors instead of parsing every matching text again. It is not
declared in memory/store/schema.py: SQLite has no such column, and memory/records/search.py (`search_pg`) names
it only on PostgreSQL. PostgreSQL's parser does not split CJK text into words (nor a Latin word
inside it): those records are searched by LIKE over the partial index of the records with CJK
letters only, as SQLite's trigram index holds only those (migration 0006). The character class is
memory.archive.fulltext.CJK_CHARS as of this migration.
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

CJK = "[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f]"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "ALTER TABLE memory_records ADD COLUMN words tsvector "
            "GENERATED ALWAYS AS (to_tsvector('english', content)) STORED"
        )
        op.execute("CREATE INDEX ix_memory_records_words ON memory_records USING gin (words)")
        op.execute(f"CREATE INDEX ix_memory_records_cjk ON memory_records (seq) WHERE content ~ '{CJK}'")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX IF EXISTS ix_memory_records_cjk")
        op.execute("DROP INDEX IF EXISTS ix_memory_records_words")
        op.execute("ALTER TABLE memory_records DROP COLUMN IF EXISTS words")
