"""trigram FTS5 indexes for CJK text beside the porter ones (SQLite only)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# unicode61 keeps a run of CJK letters ("我住在东京") as one token, so a word inside it is never
# found. A second external-content index per table, tokenized by trigrams, holds only the texts
# with CJK characters in them: CJK radicals to the end of the unified ideographs (kana, Hangul
# jamo, Bopomofo and CJK punctuation included), Hangul syllables, compatibility ideographs and
# half-width katakana. The same ranges are memory.archive.fulltext.CJK_CHARS (the query side).
CJK_GLOB = "*[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f]*"

# (content table, its integer key = the FTS rowid, whether its porter trigger fires on any update)
_TABLES = [
    ("archived_messages", "id", True),
    ("memory_records", "seq", False),
    ("daily_chunks", "id", False),
]


def _statements(name: str, key: str, any_update: bool) -> list[str]:
    fts = f"{name}_cjk"
    cjk = f"GLOB '{CJK_GLOB}'"
    # An external-content 'delete' of a text the index never held corrupts it: every trigger asks
    # the same deterministic question of the text it removes as was asked of the text it added.
    remove = (
        f"INSERT INTO {fts}({fts}, rowid, content) SELECT 'delete', old.{key}, old.content WHERE old.content {cjk};"
    )
    add = f"INSERT INTO {fts}(rowid, content) SELECT new.{key}, new.content WHERE new.content {cjk};"
    updated = "UPDATE" if any_update else "UPDATE OF content"
    return [
        f"CREATE VIRTUAL TABLE {fts} USING fts5(content, content='{name}', content_rowid='{key}', tokenize='trigram')",
        f"CREATE TRIGGER {fts}_ai AFTER INSERT ON {name} BEGIN {add} END",
        f"CREATE TRIGGER {fts}_ad AFTER DELETE ON {name} BEGIN {remove} END",
        f"CREATE TRIGGER {fts}_au AFTER {updated} ON {name} BEGIN {remove} {add} END",
        f"INSERT INTO {fts}(rowid, content) SELECT {key}, content FROM {name} WHERE content {cjk}",
    ]


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for name, key, any_update in _TABLES:
            for statement in _statements(name, key, any_update):
                op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for name, _, _ in _TABLES:
            # The triggers live on the content table: dropping the index alone would leave them.
            for suffix in ("ai", "ad", "au"):
                op.execute(f"DROP TRIGGER IF EXISTS {name}_cjk_{suffix}")
            op.execute(f"DROP TABLE IF EXISTS {name}_cjk")
