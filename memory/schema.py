"""Database tables (SQLAlchemy Core). Alembic migrations in memory/migrations create them."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
)


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
)

identities = Table(
    "identities",
    metadata,
    Column("identity", String(255), primary_key=True),
    Column("user_id", String(128), ForeignKey("users.id"), nullable=False, index=True),
    Column("display_name", String(255)),
    Column("created_at", UTCDateTime, nullable=False),
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
    Column("message_count", Integer, nullable=False, default=0),
    Column("token_count", BigInteger, nullable=False, default=0),
    Index("ix_sessions_key_active", "key", "ended_at"),
)

messages = Table(
    "messages",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("session_id", Integer, ForeignKey("sessions.id"), nullable=False),
    Column("role", String(16), nullable=False),
    Column("content", Text, nullable=False),
    Column("tool_calls", JSON),
    Column("tool_call_id", String(128)),
    Column("author", String(255)),
    Column("event_id", String(255)),
    Column("tokens", Integer, nullable=False, default=0),
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_messages_session_id_id", "session_id", "id"),
    Index("ix_messages_event_id_role", "event_id", "role"),
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
)
