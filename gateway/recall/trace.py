"""Recall traces of turns (DESIGN §6): built from what recall found and what reached the prompt,
written off the reply's path, and shown to the person (`/memory trace`) or the operator
(`clawgate memory trace SESSION`).

A trace is written after the reply was delivered, by a task of its own: a slow or failing database
delays no reply and loses none (a failed write is logged, `recall_trace_failed`). A turn is traced
when recall returned anything or a memory tool wrote something; a public audience or a public
person is never traced. A trace keeps ids, scores and reasons, never what a memory says (see
memory/store/traces.py), and the query redacted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from gateway.core.logs import event
from gateway.recall.engine import TurnMemory
from gateway.turn.context import Section
from memory.recall import CONFLICTING, NOTICE, SCREENED, WEAK_EVIDENCE
from memory.rerank import BEYOND_GATE, DROPPED_BY_GATE
from memory.store.traces import (
    BEYOND_LIMIT,
    CONTEXT_BUDGET,
    INJECTED,
    NEAR_REPEAT,
    OVER_BUDGET,
    POLICY,
    Lookup,
    TraceItem,
    TraceStore,
    TraceView,
    Written,
)
from memory.trust import policy
from memory.trust.policy import (
    HELD_DISPUTED,
    HELD_NOT_AUTOMATIC,
    HELD_PROPOSAL,
    HELD_REJECTED,
    HELD_SUPERSEDED,
    HELD_UNUSABLE,
)
from memory.trust.redact import redact

log = logging.getLogger("clawgate.trace")

SHOWN_PER_LIST = 5  # items per line of a chat trace; the rest are counted
QUERY_SHOWN = 60
LABELS = {
    BEYOND_LIMIT: "beyond the limit of items",
    OVER_BUDGET: "over the memory budget",
    NEAR_REPEAT: "near repeat",
    CONTEXT_BUDGET: "dropped by the context budget",
    HELD_SUPERSEDED: "superseded, never injected",
    HELD_DISPUTED: "disputed, never injected",
    HELD_REJECTED: "rejected in review",
    HELD_PROPOSAL: "a proposed change waiting for review",
    HELD_NOT_AUTOMATIC: "its policy says not to inject it automatically",
    HELD_UNUSABLE: "usable neither as instruction nor as evidence",
    WEAK_EVIDENCE: "evidence under the strong-match floor",
    CONFLICTING: "disagrees with a confirmed memory that did not fit",
    NOTICE: "a gateway notice",
    SCREENED + "secret": "screened out: holds a secret",
    SCREENED + "injection": "screened out: reads like an instruction to the assistant",
    SCREENED + "personal_data": "screened out: holds someone's contact details",
    SCREENED + "malformed": "screened out: malformed",
    POLICY: "left out by the read policy",
    DROPPED_BY_GATE: "the relevance gate found it off the question",
    BEYOND_GATE: "ranked past what the relevance gate reads",
}
CHANGE_WORDS = {
    "confirm": "confirmed",
    "edit": "edited",
    "evidence": "made evidence only",
    "scope": "rescoped",
    "stale": "marked stale",
    "merge": "merged",
    "reject": "rejected",
    "dispute": "disputed",
    "supersede": "superseded",
    "forget": "forgotten",
    "undo": "undone",
}


def _in(section: Section, line: str) -> bool:
    """Whether `line` is a whole line of `section` (the context budget may have cut its middle)."""
    return f"\n{line}\n" in f"\n{section.text}\n"


def build_items(turn: TurnMemory, kept: Sequence[Section]) -> list[TraceItem]:
    """What recall returned, in rank order, each used or not and why: select()'s decision, then
    whether its line survived the prompt's context budget (`kept`: the memory sections as the
    prompt carries them)."""
    by_title = {sec.title: sec for sec in kept}
    line_of = {scored.candidate.key: (title, line) for scored, title, line in turn.placed}
    items = []
    for scored, decision in zip(turn.ranked, turn.decisions, strict=True):
        c = scored.candidate
        reason = decision or INJECTED
        if reason == INJECTED:
            title, line = line_of.get(c.key, ("", ""))
            section = by_title.get(title)
            if section is None or not _in(section, line):
                reason = CONTEXT_BUDGET
        record = turn.records.get(c.id) if c.kind == "record" else None
        pending = record is not None and policy.needs_confirmation(record)
        detail = turn.gate.detail(c.key) if reason == DROPPED_BY_GATE and turn.gate is not None else ""
        items.append(TraceItem(c.kind, c.id, round(scored.score, 4), reason == INJECTED, reason, pending, detail))
    # Found in the person's own scopes, turned away by the read policy before ranking (rejected, say).
    items += [TraceItem("record", rid, 0.0, False, POLICY, detail=why) for rid, why in turn.refused.items()]
    return items


class TraceRecorder:
    def __init__(self, store: TraceStore, secrets: Sequence[str] = ()) -> None:
        self.store = store
        self._secrets = secrets  # the gateway's list, extended in place by a config reload
        self._pending: set[asyncio.Task[None]] = set()
        # Traces are written one at a time, in the order the turns finished: on PostgreSQL two
        # concurrent inserts may take their ids out of order, and "newest first" goes by id.
        self._writing = asyncio.Lock()

    def record(
        self,
        turn: TurnMemory | None,
        kept: Sequence[Section],
        written: Sequence[tuple[str, str]],
        *,
        session_key: str,
        user_id: str,
        event_id: str | None,
        query: str,
        audience: str,
        public_person: bool = False,
        lookups: Sequence[Lookup] = (),
    ) -> bool:
        """Trace a finished turn in the background; whether it was memory-backed (and is traced).
        `kept`: the memory sections as the prompt carried them; `lookups`: the model's own memory
        searches. Never raises: the reply is already out, a trace must not turn it into an apology."""
        if audience == "public" or public_person:
            return False
        try:
            items = build_items(turn, kept) if turn is not None and (turn.ranked or turn.refused) else []
            done = [Written(rid, action) for rid, action in dict.fromkeys(written)]
            if not items and not done and not lookups:
                return False
            query = redact(query, self._secrets)
            looked = [replace(x, query=redact(x.query, self._secrets)) for x in lookups]
        except Exception as exc:
            event(log, "recall_trace_failed", logging.WARNING, session=session_key, error=type(exc).__name__)
            return False
        task = asyncio.get_running_loop().create_task(
            self._write(session_key, user_id, event_id, query, items, done, looked)
        )
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return True

    async def _write(
        self,
        session_key: str,
        user_id: str,
        event_id: str | None,
        query: str,
        items: list[TraceItem],
        written: list[Written],
        lookups: list[Lookup],
    ) -> None:
        try:
            async with self._writing:
                await self.store.add(session_key, user_id, event_id, query, items, written, lookups=lookups)
        except Exception as exc:  # the reply is out; the trace is lost, and said so
            event(log, "recall_trace_failed", logging.WARNING, session=session_key, error=type(exc).__name__)
            return
        used = sum(1 for i in items if i.used)
        event(log, "recall_trace_written", session=session_key, items=len(items), used=used, written=len(written))

    async def settle(self, timeout: float = 10.0) -> None:
        """Wait for the traces being written (shutdown, tests)."""
        if self._pending:
            await asyncio.wait(set(self._pending), timeout=timeout)


# -- showing traces ---------------------------------------------------------------------------------


def _item_label(item: TraceItem) -> str:
    return item.id if item.kind == "record" else f"{item.kind} {item.id}"


def _listed(items: Sequence[TraceItem], detail: Any) -> str:
    shown = [f"{_item_label(i)} ({detail(i)})" for i in items[:SHOWN_PER_LIST]]
    more = len(items) - SHOWN_PER_LIST
    return ", ".join(shown) + (f", +{more} more" if more > 0 else "")


def _used_detail(item: TraceItem) -> str:
    return f"{item.score:.2f}" + (", needs confirmation" if item.needs_confirmation else "")


def _ignored_detail(item: TraceItem) -> str:
    label = LABELS.get(item.reason, item.reason) + (f": {item.detail}" if item.detail else "")
    return label + (", needs confirmation" if item.needs_confirmation else "")


def render(views: Sequence[TraceView], *, operator: bool = False) -> str:
    """Traces as lines of text, newest first. The operator's view names the user and event too."""
    lines = []
    for view in views:
        t = view.trace
        query = t.query if len(t.query) <= QUERY_SHOWN else t.query[: QUERY_SHOWN - 1] + "…"
        head = f"#{t.id} {t.created_at:%Y-%m-%d %H:%M} UTC · {query!r}"
        if operator:
            head += f" · user {t.user_id or '-'} · event {t.event_id or '-'}"
        lines.append(head)
        used = [i for i in t.items if i.used]
        ignored = [i for i in t.items if not i.used]
        if used:
            lines.append("  used: " + _listed(used, _used_detail))
        if ignored:
            lines.append("  ignored: " + _listed(ignored, _ignored_detail))
        for lookup in t.lookups:
            asked = repr(lookup.query) if lookup.tool == "find_memories" else ", ".join(lookup.asked)
            found = ", ".join(lookup.found[:SHOWN_PER_LIST]) or "nothing"
            more = len(lookup.found) - SHOWN_PER_LIST
            lines.append(f"  the model ran {lookup.tool} {asked}: {found}" + (f", +{more} more" if more > 0 else ""))
        if t.written:
            lines.append("  wrote: " + ", ".join(f"{w.id} ({w.action})" for w in t.written))
        if view.changes:
            later = []
            for c in view.changes:
                text = f"{c.record_id} {CHANGE_WORDS.get(c.action, c.action)}"
                if c.action == "supersede" and c.superseded_by:
                    text += f" by {c.superseded_by}"
                later.append(f"{text} {c.at:%Y-%m-%d %H:%M}")
            lines.append("  since: " + "; ".join(later))
    return "\n".join(lines)


def trace_json(view: TraceView) -> dict[str, Any]:
    t = view.trace
    return {
        "id": t.id,
        "session": t.session_key,
        "user": t.user_id,
        "event_id": t.event_id,
        "query": t.query,
        "created_at": t.created_at.isoformat(),
        "items": [i.to_json() for i in t.items],
        "written": [{"id": w.id, "action": w.action} for w in t.written],
        "lookups": [x.to_json() for x in t.lookups],
        "changes": [
            {
                "record_id": c.record_id,
                "revision": c.revision,
                "action": c.action,
                "actor": c.actor,
                "at": c.at.isoformat(),
                "superseded_by": c.superseded_by,
            }
            for c in view.changes
        ],
    }
