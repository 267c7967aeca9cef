"""Recall traces (DESIGN §6): one row per memory-backed turn saying what recall returned, which of it
reached the prompt and why the rest did not, what needed confirmation and what the turn wrote back.

A trace holds ids, scores and reasons, never memory content: what a memory said stays in the record
(and its revisions), under the record's own read policy. The only text kept is the turn's own query,
redacted by the caller. What happened to the records afterwards (confirmed, edited, rejected,
superseded, …) is not copied into the trace: it is read from `memory_revisions` when the trace is
shown, so it is always current and never duplicated.

Why a candidate was not selected is what memory.recall.selection decided (the same decision select()
takes). Traces are kept RETENTION (30 days) and pruned by the gateway's hourly maintenance.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, insert, select
from sqlalchemy.engine import Connection

from gateway.core.events import utcnow
from memory.recall import BEYOND_LIMIT, CONFLICTING, NEAR_REPEAT, NOTICE, OVER_BUDGET, SCREENED, SCREENS, WEAK_EVIDENCE
from memory.rerank import BEYOND_GATE, DROPPED_BY_GATE
from memory.store.db import Database
from memory.store.schema import memory_revisions, recall_traces
from memory.trust.policy import HELD

RETENTION = timedelta(days=30)
MAX_ITEMS = 30  # of what recall returned, per trace: every selected one, then the best of the rest
QUERY_CHARS = 300
MAX_LIMIT = 200
MAX_CHANGES = 20  # later revisions shown per trace
MAX_LOOKUPS = 20  # memory tool calls kept per trace
FORMED = "formed"  # a Written action: formation later wrote this record from the turn's messages

# Why a candidate recall returned did or did not reach the prompt: select()'s reasons, or these.
INJECTED = "injected"
CONTEXT_BUDGET = "dropped_by_context_budget"  # selected, but its section did not fit context_budget_chars
POLICY = "left_out_by_policy"  # found in the person's scopes, turned away by the read policy (detail: why)
REASONS = (
    INJECTED,
    BEYOND_LIMIT,
    OVER_BUDGET,
    NEAR_REPEAT,
    CONTEXT_BUDGET,
    *HELD,
    WEAK_EVIDENCE,
    CONFLICTING,
    NOTICE,
    *(SCREENED + screen for screen in SCREENS),
    POLICY,
    DROPPED_BY_GATE,
    BEYOND_GATE,
)

# Revisions that are not a later change of a record a trace names.
_NOT_CHANGES = ("create", "import")


@dataclass(frozen=True, slots=True)
class TraceItem:
    kind: str  # record | archive | daily
    id: str
    score: float
    used: bool
    reason: str  # one of REASONS
    needs_confirmation: bool = False  # a record waiting for the person's confirmation or review
    detail: str = ""  # for POLICY: the read policy's sentence; for DROPPED_BY_GATE: the gate's score

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "id": self.id,
            "score": self.score,
            "used": self.used,
            "reason": self.reason,
            "needs_confirmation": self.needs_confirmation,
        }
        if self.detail:
            out["detail"] = self.detail
        return out

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> TraceItem:
        return TraceItem(
            str(data["kind"]),
            str(data["id"]),
            float(data["score"]),
            bool(data["used"]),
            str(data["reason"]),
            bool(data.get("needs_confirmation", False)),
            str(data.get("detail", "")),
        )


@dataclass(frozen=True, slots=True)
class Written:
    """A record the turn's memory tools wrote (`action` stored | edited | superseded | forgotten |
    proposed), or that formation later wrote from the turn's messages (`formed`)."""

    id: str
    action: str


@dataclass(frozen=True, slots=True)
class Lookup:
    """One memory tool call the model made in a turn: `find_memories` (its query, redacted) or
    `get_memories` (the ids it asked for), and the ids that came back."""

    tool: str
    query: str
    found: tuple[str, ...]
    asked: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"tool": self.tool, "query": self.query, "asked": list(self.asked), "found": list(self.found)}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Lookup:
        return Lookup(
            str(data.get("tool", "")),
            str(data.get("query", "")),
            tuple(str(i) for i in data.get("found", ())),
            tuple(str(i) for i in data.get("asked", ())),
        )


@dataclass(frozen=True, slots=True)
class Trace:
    id: int
    session_key: str
    user_id: str | None
    event_id: str | None
    query: str
    items: tuple[TraceItem, ...]
    written: tuple[Written, ...]
    created_at: datetime
    lookups: tuple[Lookup, ...] = ()

    @property
    def record_ids(self) -> list[str]:
        """Every record the trace names, recalled, looked up or written, once, in order."""
        ids = [i.id for i in self.items if i.kind == "record"] + [w.id for w in self.written]
        ids += [rid for lookup in self.lookups for rid in lookup.found]
        return list(dict.fromkeys(ids))


@dataclass(frozen=True, slots=True)
class Change:
    """A revision of a traced record made after the trace."""

    record_id: str
    revision: int
    action: str  # confirm | edit | reject | supersede | stale | dispute | forget | undo | …
    actor: str
    at: datetime
    superseded_by: str | None = None


@dataclass(frozen=True, slots=True)
class TraceView:
    trace: Trace
    changes: tuple[Change, ...]


# --- pure ---------------------------------------------------------------------------------------


def keep(items: Sequence[TraceItem], limit: int = MAX_ITEMS) -> list[TraceItem]:
    """At most `limit` items in their order: every used one, then the best of the others."""
    used = sum(1 for i in items if i.used)
    room = max(0, limit - used)
    out = []
    for item in items:
        if item.used:
            out.append(item)
        elif room > 0:
            out.append(item)
            room -= 1
    return out


# --- transactions -------------------------------------------------------------------------------


def _trace(row: Any) -> Trace:
    return Trace(
        row.id,
        row.session_key,
        row.user_id,
        row.event_id,
        row.query,
        tuple(TraceItem.from_json(i) for i in row.items),
        tuple(Written(str(w["id"]), str(w["action"])) for w in row.written),
        row.created_at,
        tuple(Lookup.from_json(x) for x in row.lookups or ()),
    )


def _changes(conn: Connection, traces: Sequence[Trace]) -> dict[int, tuple[Change, ...]]:
    """Per trace, the revisions of the records it names made after it, oldest first."""
    ids = list(dict.fromkeys(rid for t in traces for rid in t.record_ids))
    if not ids:
        return {}
    since = min(t.created_at for t in traces)
    found: dict[str, builtins.list[Change]] = {}
    for start in range(0, len(ids), 500):
        rows = conn.execute(
            select(
                memory_revisions.c.record_id,
                memory_revisions.c.revision,
                memory_revisions.c.action,
                memory_revisions.c.actor,
                memory_revisions.c.at,
                memory_revisions.c.after,
            )
            .where(
                memory_revisions.c.record_id.in_(ids[start : start + 500]),
                memory_revisions.c.at > since,
                memory_revisions.c.action.not_in(_NOT_CHANGES),
            )
            .order_by(memory_revisions.c.at, memory_revisions.c.id)
        )
        for r in rows:
            after = r.after if isinstance(r.after, dict) else {}
            change = Change(r.record_id, r.revision, r.action, r.actor, r.at, after.get("superseded_by"))
            found.setdefault(r.record_id, []).append(change)
    out: dict[int, tuple[Change, ...]] = {}
    for t in traces:
        later = [c for rid in t.record_ids for c in found.get(rid, ()) if c.at > t.created_at]
        later.sort(key=lambda c: (c.at, c.record_id, c.revision))
        out[t.id] = tuple(later[:MAX_CHANGES])
    return out


def _recent(conn: Connection, user_id: str | None, session_key: str | None, limit: int) -> list[TraceView]:
    where = []
    if user_id is not None:
        where.append(recall_traces.c.user_id == user_id)
    if session_key is not None:
        where.append(recall_traces.c.session_key == session_key)
    rows = conn.execute(select(recall_traces).where(and_(*where)).order_by(recall_traces.c.id.desc()).limit(limit))
    traces = [_trace(r) for r in rows]
    changes = _changes(conn, traces)
    return [TraceView(t, changes.get(t.id, ())) for t in traces]


class TraceStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def add(
        self,
        session_key: str,
        user_id: str | None,
        event_id: str | None,
        query: str,
        items: Sequence[TraceItem],
        written: Sequence[Written] = (),
        *,
        lookups: Sequence[Lookup] = (),
        now: datetime | None = None,
    ) -> int:
        """Store one turn's trace (the query cut to QUERY_CHARS, items to MAX_ITEMS); its id."""
        values = {
            "session_key": session_key,
            "user_id": user_id,
            "event_id": event_id,
            "query": query[:QUERY_CHARS],
            "items": [i.to_json() for i in keep(items)],
            "written": [{"id": w.id, "action": w.action} for w in written],
            "lookups": [x.to_json() for x in lookups[:MAX_LOOKUPS]] or None,
            "created_at": now or utcnow(),
        }

        def run(conn: Connection) -> int:
            key = conn.execute(insert(recall_traces).values(**values)).inserted_primary_key
            assert key is not None
            return int(key[0])

        return await self._db.write(run)

    async def formed(self, session_key: str, by_event: Mapping[str, Sequence[str]]) -> int:
        """Record that background formation wrote records from the messages of these turns:
        `by_event` maps a turn's event id to the ids of the records formed from its messages. Each
        is added to that turn's trace as written ("formed"); how many traces changed."""
        if not by_event:
            return 0

        def run(conn: Connection) -> int:
            rows = conn.execute(
                select(recall_traces.c.id, recall_traces.c.event_id, recall_traces.c.written).where(
                    recall_traces.c.session_key == session_key,
                    recall_traces.c.event_id.in_(builtins.list(by_event)),
                )
            ).all()
            for row in rows:
                known = {(w["id"], w["action"]) for w in row.written}
                added = [{"id": rid, "action": FORMED} for rid in by_event[row.event_id] if (rid, FORMED) not in known]
                if added:
                    change = recall_traces.update().where(recall_traces.c.id == row.id)
                    conn.execute(change.values(written=[*row.written, *added]))
            return len(rows)

        return await self._db.write(run)

    async def recent(
        self, *, user_id: str | None = None, session_key: str | None = None, limit: int = 3
    ) -> list[TraceView]:
        """The newest traces of a user, of a session, or of a user in a session, newest first, each
        with the later changes of the records it names. One of the two is required: nobody lists
        every trace."""
        if user_id is None and session_key is None:
            raise ValueError("a user or a session is required")
        return await self._db.read(_recent, user_id, session_key, max(1, min(MAX_LIMIT, limit)))

    async def prune(self, now: datetime | None = None, retention: timedelta = RETENTION) -> int:
        """Delete traces older than `retention`; how many went."""
        cutoff = (now or utcnow()) - retention

        def run(conn: Connection) -> int:
            return int(conn.execute(delete(recall_traces).where(recall_traces.c.created_at < cutoff)).rowcount or 0)

        return await self._db.write(run)
