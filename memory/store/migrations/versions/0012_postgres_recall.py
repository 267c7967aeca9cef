"""PostgreSQL: full-text search over archived messages and daily chunks (as migration 0010 made it
for records), and pgvector for the stored embeddings

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01

SQLite needs nothing here: FTS5 (migrations 0003, 0005, 0006) and vectors searched in process.

Full text. `archived_messages.words` and `daily_chunks.words` are `to_tsvector('english', ...)` of
the content, kept by PostgreSQL itself (generated columns), each with a GIN index, and a partial
index of the rows holding CJK letters (searched by LIKE: PostgreSQL's parser does not split CJK
text into words). Only user and assistant messages get words: nothing else of the archive is ever
searched, and tool output can be long. The text is cut at TSV_CHARS characters before parsing: a
tsvector holds at most 1 MB, and a longer text would make the insert fail; the LIKE leg for CJK
still reads the whole text. The character class is memory.archive.fulltext.CJK_CHARS as of this migration.

Vectors. `memory_vectors.embedding` is the stored blob (`vector`: little-endian float32, what
SQLite keeps) as a pgvector `vector`, computed by PostgreSQL from the blob (a generated column, via
`clawgate_f4_vector`), so every writer, a copy from SQLite included, fills it by writing the blob
alone. The column has no fixed dimension (models differ); memory/embed/pgvector.py builds one HNSW index
per model and kind, on `embedding::vector(<dim>)`, when it first stores such vectors. Its storage
is MAIN, so that on a row too long for a page the blob moves out of line, not the vector.

pgvector must be installed on the server: the migration creates the extension when it is missing
and says what to do when it cannot.
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

CJK = "[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f]"
TSV_CHARS = 100_000
_WORDS = f"to_tsvector('english', left(content, {TSV_CHARS}))"

# Little-endian IEEE 754 float32s to a vector, exactly (each float rebuilt from its sign, exponent
# and mantissa in double precision, then narrowed without loss). About 0.1 ms for 384 floats.
_F4_VECTOR = """
CREATE OR REPLACE FUNCTION clawgate_f4_vector(blob bytea) RETURNS vector
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  n int := length(blob) / 4;
  out real[] := array_fill(0::real, ARRAY[n]);
  w bigint;
  e int;
BEGIN
  IF length(blob) % 4 <> 0 THEN
    RAISE EXCEPTION 'a stored vector of % bytes is not float32s', length(blob);
  END IF;
  FOR i IN 0 .. n - 1 LOOP
    w := get_byte(blob, 4 * i) | (get_byte(blob, 4 * i + 1) << 8) | (get_byte(blob, 4 * i + 2) << 16)
      | (get_byte(blob, 4 * i + 3)::bigint << 24);
    e := (w >> 23) & 255;
    IF e = 0 THEN
      out[i + 1] := ((w & 8388607) * 2.0::float8 ^ -149 * (1 - 2 * (w >> 31)))::real;
    ELSE
      out[i + 1] := (((w & 8388607) | 8388608) * 2.0::float8 ^ (e - 150) * (1 - 2 * (w >> 31)))::real;
    END IF;
  END LOOP;
  RETURN out::vector;
END
$$
"""


def _create_pgvector() -> None:
    bind = op.get_bind()
    if bind.execute(sa.text("SELECT 1 FROM pg_extension WHERE extname = 'vector'")).first():
        return
    available = bind.execute(sa.text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")).first()
    if not available:
        raise RuntimeError(
            "PostgreSQL has no pgvector extension: install pgvector on the database server "
            "(https://github.com/pgvector/pgvector, e.g. the postgresql-NN-pgvector package), then start again"
        )
    try:
        op.execute("CREATE EXTENSION vector")
    except sa.exc.DBAPIError as exc:
        raise RuntimeError(
            "could not create the pgvector extension (it needs a superuser): have one run "
            f"`CREATE EXTENSION vector;` in database {bind.engine.url.database!r}, then start again"
        ) from exc


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    _create_pgvector()
    searched = "role IN ('user', 'assistant')"  # memory.archive.visibility.SEARCHED_ROLES
    op.execute(
        "ALTER TABLE archived_messages ADD COLUMN words tsvector "
        f"GENERATED ALWAYS AS (CASE WHEN {searched} THEN {_WORDS} END) STORED"
    )
    op.execute("CREATE INDEX ix_archived_messages_words ON archived_messages USING gin (words)")
    op.execute(f"CREATE INDEX ix_archived_messages_cjk ON archived_messages (id) WHERE content ~ '{CJK}'")
    op.execute(f"ALTER TABLE daily_chunks ADD COLUMN words tsvector GENERATED ALWAYS AS ({_WORDS}) STORED")
    op.execute("CREATE INDEX ix_daily_chunks_words ON daily_chunks USING gin (words)")
    op.execute(f"CREATE INDEX ix_daily_chunks_cjk ON daily_chunks (id) WHERE content ~ '{CJK}'")
    op.execute(_F4_VECTOR)
    op.execute(
        "ALTER TABLE memory_vectors ADD COLUMN embedding vector GENERATED ALWAYS AS (clawgate_f4_vector(vector)) STORED"
    )
    op.execute("ALTER TABLE memory_vectors ALTER COLUMN embedding SET STORAGE MAIN")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    # The HNSW indexes memory/embed/pgvector.py built are on `embedding`: they go with the column.
    op.execute("ALTER TABLE memory_vectors DROP COLUMN IF EXISTS embedding")
    op.execute("DROP FUNCTION IF EXISTS clawgate_f4_vector(bytea)")
    for table in ("daily_chunks", "archived_messages"):
        op.execute(f"DROP INDEX IF EXISTS ix_{table}_cjk")
        op.execute(f"DROP INDEX IF EXISTS ix_{table}_words")
        op.execute(f"ALTER TABLE {table} DROP COLUMN IF EXISTS words")
    # The extension stays: other databases' objects or the operator's may use it.
