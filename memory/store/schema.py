"""Database tables (SQLAlchemy Core). Alembic migrations in memory/migrations create them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement


class UTCDateTime(TypeDecorator[datetime]):
    """Stores UTC; always returns timezone-aware datetimes (SQLite drops tzinfo)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: object) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the database")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: object) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class unindexed(FunctionElement[Any]):
    """`column`, in a condition SQLite's planner must not serve from an index on it (SQLite's
    unary `+`; the plain column elsewhere). Without statistics (no ANALYZE) SQLite takes any index
    with an equality for selective: `status = 'active' AND id IN (64 ids)` then walked every active
    record by ix_memory_records_status_created instead of looking up 64 keys."""

    name = "unindexed"
    inherit_cache = True

    def __init__(self, column: ColumnElement[Any]) -> None:
        super().__init__(column)
        self.type = column.type  # binds compared with it are processed as the column's


@compiles(unindexed)
def _plain(element: unindexed, compiler: SQLCompiler, **kw: Any) -> str:
    return compiler.process(element.clauses, **kw)


@compiles(unindexed, "sqlite")
def _unary_plus(element: unindexed, compiler: SQLCompiler, **kw: Any) -> str:
    return "+" + compiler.process(element.clauses, **kw)


metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

users = Table(
    "users",
    metadata,
    Column("id", String(128), primary_key=True),
    Column("roles", JSON, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("timezone", String(64)),  # what the person set with /timezone (reminders' times)
)

identities = Table(
    "identities",
    metadata,
    Column("identity", String(255), primary_key=True),
    Column("user_id", String(128), ForeignKey("users.id"), nullable=False, index=True),
    Column("display_name", String(255)),
    Column("created_at", UTCDateTime, nullable=False),
    # Given to its user by config.yaml's users: (not by first contact or a link code): taken out of
    # the config, the identity is released (see identities._sync_declared).
    Column("declared", Boolean, nullable=False, default=False, server_default="0"),
)

sessions = Table(
    "sessions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("key", String(512), nullable=False),
    Column("agent", String(64), nullable=False),
    Column("user_id", String(128)),
    Column("created_at", UTCDateTime, nullable=False),
    Column("ended_at", UTCDateTime),
    # Of the active context (the rows still in `messages`); archived messages are not counted.
    Column("message_count", Integer, nullable=False, default=0),
    Column("token_count", BigInteger, nullable=False, default=0),
    # The rolling summary of what was archived, injected after the instructions (DESIGN §4).
    Column("summary", Text),
    Column("summary_tokens", Integer, nullable=False, default=0, server_default="0"),
    Column("summaries", Integer, nullable=False, default=0, server_default="0"),
    Column("last_flush_at", UTCDateTime),
    Column("audience", String(16), nullable=False, default="personal", server_default="personal"),
    # Cleared with memory.session_memory.enabled false: never flushed, never found in the archive.
    Column("memory_excluded", Boolean, nullable=False, default=False, server_default="0"),
    Index("ix_sessions_key_active", "key", "ended_at"),
)


def _message_columns(autoincrement: bool) -> list[Column[Any]]:
    """The columns a message has wherever it is kept: in its session, or in the archive."""
    return [
        Column("id", Integer, primary_key=True, autoincrement=autoincrement),
        Column("session_id", Integer, ForeignKey("sessions.id"), nullable=False),
        Column("role", String(16), nullable=False),
        Column("content", Text, nullable=False),
        Column("tool_calls", JSON),
        Column("tool_call_id", String(128)),
        Column("author", String(255)),
        Column("event_id", String(255)),
        Column("tokens", Integer, nullable=False, default=0),
        Column("created_at", UTCDateTime, nullable=False),
    ]


messages = Table(
    "messages",
    metadata,
    *_message_columns(autoincrement=True),
    Index("ix_messages_session_id_id", "session_id", "id"),
    Index("ix_messages_event_id_role", "event_id", "role"),
    # Ids are never reused (SQLite would reuse them after the newest rows move to the archive): an
    # archived message keeps its id, and history orders active and archived messages by it.
    sqlite_autoincrement=True,
)

# Messages pruned from a session's active context, kept in full and searchable (DESIGN §4). Same ids
# as they had in `messages` (so the id is not generated here). On SQLite FTS5 indexes follow this
# table: archived_messages_fts (porter) and archived_messages_cjk (trigrams, only the texts with CJK).
archived_messages = Table(
    "archived_messages",
    metadata,
    *_message_columns(autoincrement=False),
    Column("archived_at", UTCDateTime, nullable=False),
    Column("reason", String(16), nullable=False),  # summarized | trimmed | flushed | reset
    Index("ix_archived_messages_session_id_id", "session_id", "id"),
)

# Distilling archived messages into a daily Markdown file, as a durable job: a crash or a failing
# model leaves it pending, to be retried (DESIGN §4-5).
session_flushes = Table(
    "session_flushes",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("session_id", Integer, ForeignKey("sessions.id"), nullable=False),
    Column("first_id", Integer, nullable=False),  # archived message ids first_id..last_id of the session
    Column("last_id", Integer, nullable=False),
    Column("scope", String(16), nullable=False),  # user | channel
    Column("owner", String(512), nullable=False),  # the user id, or the conversation
    Column("day", String(10), nullable=False),  # YYYY-MM-DD in the configured time zone
    Column("status", String(16), nullable=False),  # pending | done | failed
    Column("attempts", Integer, nullable=False, default=0),
    Column("error", String(255)),
    Column("created_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime),
    Index("ix_session_flushes_status", "status"),
)

inbound_events = Table(
    "inbound_events",
    metadata,
    Column("event_id", String(255), primary_key=True),
    Column("channel", String(64), nullable=False),
    Column("session_key", String(512), nullable=False),
    Column("payload", JSON, nullable=False),
    Column("status", String(16), nullable=False),  # received | done | failed
    Column("received_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime),
    Column("attempts", Integer, nullable=False, default=0),
    Index("ix_inbound_events_status", "status"),
)

outbound = Table(
    "outbound",
    metadata,
    Column("idempotency_key", String(255), primary_key=True),
    Column("channel", String(64), nullable=False),
    Column("message_id", String(255)),
    Column("status", String(16), nullable=False),  # sending | sent | failed
    Column("created_at", UTCDateTime, nullable=False),
)

link_codes = Table(
    "link_codes",
    metadata,
    Column("code_hash", String(64), primary_key=True),
    Column("user_id", String(128), ForeignKey("users.id"), nullable=False),
    Column("created_by", String(255), nullable=False),  # the identity that asked for the code
    Column("created_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    Column("used_at", UTCDateTime),
    Column("used_by", String(255)),
)

pairing_requests = Table(
    "pairing_requests",
    metadata,
    Column("identity", String(255), primary_key=True),
    Column("channel", String(64), nullable=False),
    Column("code", String(16), nullable=False, unique=True),
    Column("display_name", String(255)),
    Column("created_at", UTCDateTime, nullable=False),
    Column("approved_at", UTCDateTime),
    Column("approved_by", String(128)),
    # The DM the request came from (the approval notice goes there) and when that notice was sent
    # (claimed: gateway/pairing_notice.py), so that it is sent once whichever instance approves.
    Column("chat_id", String(512)),
    Column("notified_at", UTCDateTime),
)

# Long-term memory records (DESIGN §6). `id` (mem-…) is the stable name everything else uses; `seq`
# is an internal integer key for SQLite's FTS5 indexes (memory_records_fts and memory_records_cjk,
# content_rowid='seq'), which need an integer rowid that VACUUM never renumbers: an INTEGER PRIMARY
# KEY is exactly that, while a text primary key leaves the rowid implicit and unstable. A text
# primary key in SQLite is a unique index anyway, so lookups by id cost the same.
memory_records = Table(
    "memory_records",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("id", String(40), nullable=False, unique=True),
    Column("content", Text, nullable=False),  # "" once forgotten: the text lives on only in revisions
    Column("memory_class", String(16), nullable=False),  # durable_fact | evidence | trace
    Column("provenance", String(16), nullable=False),
    # The use policy, one column per flag so that recall can filter on them.
    Column("use_instruction", Boolean, nullable=False),
    Column("use_evidence", Boolean, nullable=False),
    Column("needs_confirmation", Boolean, nullable=False),
    Column("no_auto_inject", Boolean, nullable=False),
    Column("scope", String(512), nullable=False),  # personal:<user> | channel:<conv> | project:<name> | global
    Column("scope_kind", String(16), nullable=False),  # for "any project" filters
    Column("sensitivity", String(16), nullable=False),  # normal | sensitive
    Column("review_status", String(16), nullable=False),
    Column("status", String(16), nullable=False),  # active | superseded | deleted
    Column("author", String(255), nullable=False),
    Column("source", String(512)),  # the message or artifact it came from
    Column("attribution", String(255)),  # who said it, for attributed communication
    Column("origin_audience", String(16), nullable=False),  # personal | team | public
    Column("tags", JSON, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime),  # None: never (durable facts)
    Column("superseded_by", String(40)),  # no foreign key: purging the newer record must stay possible
    Column("revision", Integer, nullable=False),
    Index("ix_memory_records_scope_status", "scope", "status"),
    Index("ix_memory_records_scope_kind", "scope_kind"),
    Index("ix_memory_records_review_status", "review_status"),
    Index("ix_memory_records_expires_at", "expires_at"),
    Index("ix_memory_records_source", "source"),
    Index("ix_memory_records_status_created", "status", "created_at", "seq"),  # newest first (the console)
)

# Every change to a record, with the whole record before and after: inspectable and undoable.
memory_revisions = Table(
    "memory_revisions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("record_id", String(40), ForeignKey("memory_records.id"), nullable=False),
    Column("revision", Integer, nullable=False),
    Column("action", String(32), nullable=False),  # create | edit | confirm | … | forget | undo | import
    Column("actor", String(255), nullable=False),
    Column("at", UTCDateTime, nullable=False),
    Column("before", JSON),  # None for create and import
    Column("after", JSON, nullable=False),
    Column("note", String(255)),
    # Revisions written together by one change of several records (a merge) share a batch id, and
    # are undone together.
    Column("batch", String(40)),
    UniqueConstraint("record_id", "revision"),
    Index("ix_memory_revisions_batch", "batch"),
)

# One embedding per searchable item and embedding model (DESIGN §7): items are long-term records
# (`record`, id mem-…), archived messages (`archive`, the message id) and daily-file chunks
# (`daily`, the chunk id). Vectors of several models live side by side; recall uses the active one.
memory_vectors = Table(
    "memory_vectors",
    metadata,
    Column("item_kind", String(16), primary_key=True),
    Column("item_id", String(64), primary_key=True),
    Column("model_id", String(128), primary_key=True),
    Column("dim", Integer, nullable=False),
    Column("vector", LargeBinary, nullable=False),  # float32, L2-normalized, little-endian
    Column("text_hash", String(16), nullable=False),  # of the embedded text: a changed text is re-embedded
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_memory_vectors_model_id", "model_id", "item_kind"),
)

# Daily Markdown files cut into overlapping chunks for search (they are never injected whole).
# On SQLite FTS5 indexes follow this table: daily_chunks_fts (porter) and daily_chunks_cjk (trigrams,
# texts with CJK only).
daily_chunks = Table(
    "daily_chunks",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("path", String(1024), nullable=False),  # relative to the memory root
    Column("scope", String(512), nullable=False),  # personal:<user> | channel:<conversation> | global
    Column("day", String(10), nullable=False),
    Column("chunk_no", Integer, nullable=False),
    Column("content", Text, nullable=False),
    Column("file_mtime_ns", BigInteger, nullable=False),
    UniqueConstraint("path", "chunk_no"),
    Index("ix_daily_chunks_scope", "scope"),
)

# Background work (DESIGN §8): durable jobs, run one at a time per `key` (a session key, or a
# system key such as `sys:merge`), retried with backoff, dead-lettered after `max_attempts`. A job
# is claimed by setting `lease_until`; a lease that ran out (the process died) makes it claimable
# again, so handlers must be idempotent. `dedupe` makes enqueueing the same work twice a no-op.
jobs = Table(
    "jobs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("kind", String(64), nullable=False),  # formation | consolidate | merge | …
    Column("key", String(512), nullable=False),  # jobs of one key run one at a time, in id order
    Column("payload", JSON, nullable=False),
    Column("status", String(16), nullable=False),  # pending | running | done | dead
    Column("attempts", Integer, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("run_after", UTCDateTime, nullable=False),
    Column("lease_until", UTCDateTime),
    Column("claimed_by", String(128)),
    Column("last_error", String(512)),
    Column("result", JSON),
    Column("dedupe", String(255), unique=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime),
    Index("ix_jobs_status_run_after", "status", "run_after"),
    Index("ix_jobs_key_status", "key", "status"),
)

# One row per memory-backed turn (DESIGN §6, recall trace): what recall returned and what became of
# it. Later confirmations, edits, rejections and supersessions are read from the records' revisions.
recall_traces = Table(
    "recall_traces",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("session_key", String(512), nullable=False),
    Column("user_id", String(128)),
    Column("event_id", String(255)),
    Column("query", Text, nullable=False),
    Column("items", JSON, nullable=False),  # [{kind, id, score, used, reason, needs_confirmation}]
    Column("written", JSON, nullable=False),  # record ids written back during the turn (or formed from it later)
    Column("lookups", JSON),  # the model's find_memories / get_memories calls: [{tool, query, ids, found}]
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_recall_traces_session_key", "session_key", "id"),
    Index("ix_recall_traces_user_id", "user_id", "id"),
)

# Saved queries and tool presets admins approved (docs/memory.md, "Tool-failure hints and tool presets").
tool_presets = Table(
    "tool_presets",
    metadata,
    Column("id", String(40), primary_key=True),  # pre-…
    Column("tool", String(128), nullable=False),
    Column("name", String(255), nullable=False),
    Column("arguments", JSON, nullable=False),
    Column("note", Text),
    Column("approved", Boolean, nullable=False),
    Column("created_by", String(255), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_tool_presets_tool", "tool"),
)

# Web console sign-ins (docs/console.md). The cookie holds a random id; only its digest is stored. The
# digest of the token used to sign in is kept so that removing the token from config ends the session.
console_sessions = Table(
    "console_sessions",
    metadata,
    Column("id_digest", String(64), primary_key=True),
    Column("user_id", String(128), nullable=False),
    Column("token_digest", String(64), nullable=False),
    Column("csrf", String(64), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    Index("ix_console_sessions_expires_at", "expires_at"),
)

# One turn at a time per session across instances sharing a database (memory/store/leases.py). A row stays
# after its lease ends (holder NULL), naming the instance that last held it.
session_leases = Table(
    "session_leases",
    metadata,
    Column("session_key", String(512), primary_key=True),
    Column("holder", String(64)),
    Column("instance", String(128), nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
)

# Each instance's last proof that the database takes writes (Storage.check_writable): a row per
# instance, rewritten when /readyz asks, so a full disk is found before a person's message is.
write_checks = Table(
    "write_checks",
    metadata,
    Column("instance", String(128), primary_key=True),
    Column("checked_at", UTCDateTime, nullable=False),
)

# Recent group messages that were not addressed to the assistant (memory/store/platforms/group_history.py), per
# conversation (`session_key`, thread or topic included), pruned to the channel's group_history. Prompt
# context for that conversation only: never a session message, so never archived nor a source of memory.
group_messages = Table(
    "group_messages",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("conversation", String(512), nullable=False),
    Column("event_id", String(255), nullable=False, unique=True),
    Column("speaker", String(255), nullable=False),  # the identity, "telegram:123"
    Column("name", String(255)),  # the display name the platform gave
    Column("text", Text, nullable=False),  # redacted, capped
    Column("said_at", UTCDateTime, nullable=False),
    Index("ix_group_messages_conversation", "conversation", "id"),
)

# What a channel keeps about one platform conversation (memory/store/platforms/conversations.py): the
# address its service answers at, when its person last wrote. A small JSON object, written whole.
channel_conversations = Table(
    "channel_conversations",
    metadata,
    Column("channel", String(255), primary_key=True),
    Column("conversation", String(512), primary_key=True),
    Column("data", JSON, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)

# Reminders people set and the config's scheduled runs (memory/store/schedules.py): what runs, where
# it answers, and when it is next due. A due time is fired by one job (dedupe "schedule:<id>:<due>").
schedules = Table(
    "schedules",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("kind", String(16), nullable=False),  # "reminder" | "schedule"
    Column("name", String(128), unique=True),  # a config schedule's name; None for reminders
    Column("owner", String(128)),  # the user who set a reminder; None for the config's runs
    Column("channel", String(255), nullable=False),
    Column("chat_id", String(512), nullable=False),
    Column("thread_id", String(512)),
    Column("conv_kind", String(16), nullable=False),
    Column("text", Text, nullable=False),  # what the reminder says, or the run's prompt (redacted)
    Column("mode", String(16), nullable=False),  # "message" | "agent"
    Column("agent", String(128)),
    Column("cron", String(128)),
    Column("every_seconds", Integer),
    Column("zone", String(64), nullable=False),
    Column("first_due", UTCDateTime, nullable=False),
    Column("next_due", UTCDateTime),  # None once nothing is left to run
    Column("until", UTCDateTime),
    Column("status", String(16), nullable=False),  # active | paused | done | cancelled | removed
    Column("runs", Integer, nullable=False, default=0),
    Column("last_run_at", UTCDateTime),
    Column("last_outcome", String(32)),  # ok | late | failed | dead | skipped
    Column("last_error", Text),
    Column("source", String(255)),  # the event a reminder was set in, or "config"
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Index("ix_schedules_owner", "owner", "status"),
)
