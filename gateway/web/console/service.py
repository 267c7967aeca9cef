"""What the web console shows and does (docs/console.md), role-aware, for both the JSON API and the pages.

Everything goes through the same rules as chat commands: reading and reviewing records is
MemoryService and memory.trust.policy, so the console cannot show or change more than `/memory` could.
A person sees their own memory, global and project memory, and their own recall traces;
administrators (`admin`, and `system`, the console's administrator) also see channel and project
memory, the review queue, users, pairing requests, jobs and health. Nobody sees another person's
personal memory, administrators neither. A record someone may not open answers exactly like one
that does not exist.

Answers are plain JSON-ready dicts: the API returns them as they are and the pages render them.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from gateway.config.model import Config
from gateway.core.events import utcnow
from gateway.recall.engine import TurnRecall
from gateway.session.memory_service import MemoryRefused, MemoryService
from gateway.turn.context import CoreFiles, keep_ends
from memory.archive.daily import write_atomic
from memory.records.model import MemoryClass, MemoryRecord, Provenance, RecordStatus, ReviewStatus, Scope, ScopeKind
from memory.records.reads import Browse
from memory.records.rows import Revision, snapshot
from memory.records.store import RecordError
from memory.store.jobs import STATUSES
from memory.store.storage import Storage
from memory.store.traces import TraceStore
from memory.trust import policy, redact
from memory.trust.policy import Actor

ADMIN_ROLES = frozenset({"admin", "system"})
REVIEW_ACTIONS = ("confirm", "edit", "evidence", "scope", "stale", "merge", "reject", "dispute", "supersede", "undo")
# The actions that need a second value: the new text, the narrower scope, the other record's id.
ACTION_ARGUMENT = {"edit": "text", "supersede": "text", "scope": "scope", "merge": "record id"}
EXPIRING_SOON = timedelta(days=7)
MAX_CORE_CHARS = 200_000
_RECORD_ID = re.compile(r"mem-[A-Za-z0-9]{1,64}")


class ConsoleError(Exception):
    status = 400


class Invalid(ConsoleError):
    status = 400


class Forbidden(ConsoleError):
    status = 403


class NotFound(ConsoleError):
    status = 404


class Conflict(ConsoleError):
    status = 409


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who is signed in to the console, and how: `csrf` is the cookie session's form token (None
    when the request carries a bearer token, which a browser never sends by itself)."""

    user_id: str
    roles: frozenset[str]
    csrf: str | None = None

    @property
    def is_admin(self) -> bool:
        return bool(self.roles & ADMIN_ROLES)

    @property
    def actor(self) -> Actor:
        # `system` administers memory from the console exactly as `admin` does in chat.
        roles = self.roles | {policy.ADMIN} if self.is_admin else self.roles
        return Actor(self.user_id, frozenset(roles), "console")

    def json(self) -> dict[str, Any]:
        return {"user_id": self.user_id, "roles": sorted(self.roles), "admin": self.is_admin}


@dataclass(frozen=True, slots=True)
class MemoryQuery:
    """The memory browser's filters; every one optional."""

    q: str = ""
    scope: str = ""  # a scope kind (personal, channel, project, global) or one exact scope
    memory_class: str = ""
    provenance: str = ""
    review_status: str = ""
    status: str = "active"  # active | superseded | any
    expiring: bool = False  # expires within EXPIRING_SOON
    limit: int = 50
    offset: int = 0


def record_json(record: MemoryRecord) -> dict[str, Any]:
    data = snapshot(record)
    data["grade"] = "instruction" if policy.instruction_grade(record) else "evidence"
    return data


def word_diff(before: str, after: str) -> list[dict[str, str]]:
    """`before` → `after` as runs of equal, deleted and inserted text, split at word boundaries."""
    a, b = re.findall(r"\S+|\s+", before), re.findall(r"\S+|\s+", after)
    out: list[dict[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op in ("delete", "replace"):
            out.append({"op": "delete", "text": "".join(a[i1:i2])})
        if op in ("insert", "replace"):
            out.append({"op": "insert", "text": "".join(b[j1:j2])})
        if op == "equal":
            out.append({"op": "equal", "text": "".join(a[i1:i2])})
    return out


def revision_json(rev: Revision) -> dict[str, Any]:
    """A revision with what it changed: each changed field, and a word diff of the content."""
    before, after = rev.before or {}, rev.after
    skip = {"updated_at", "revision"}
    fields = [
        {"field": k, "before": before.get(k), "after": after.get(k)}
        for k in after
        if k not in skip and rev.before is not None and before.get(k) != after.get(k)
    ]
    return {
        **rev.to_json(),
        "changes": fields,
        "content_diff": word_diff(str(before.get("content", "")), str(after.get("content", "")))
        if rev.before is not None and before.get("content") != after.get("content")
        else [],
    }


def _choice(value: str, allowed: type[Any], what: str) -> Any:
    if not value:
        return None
    try:
        return allowed(value)
    except ValueError:
        choices = ", ".join(m.value for m in allowed)
        raise Invalid(f"{what} must be one of {choices}, not {value!r}") from None


def etag(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


class ConsoleService:
    def __init__(
        self,
        config: Config,
        storage: Storage,
        memory: MemoryService,
        core: CoreFiles,
        recall: TurnRecall | None,
        trace_store: TraceStore,
        status: Callable[[], Awaitable[dict[str, Any]]],
        secrets: list[str],
    ) -> None:
        self.config = config
        self.storage = storage
        self.memory = memory
        self.core = core
        self.recall = recall
        self.trace_store = trace_store
        self._status = status
        self._secrets = secrets
        self.where = memory.where("personal", None)

    @staticmethod
    def require_admin(viewer: Viewer) -> None:
        if not viewer.is_admin:
            raise Forbidden("only administrators may open this")

    # -- memory ------------------------------------------------------------------------------------

    async def memories(self, viewer: Viewer, query: MemoryQuery) -> dict[str, Any]:
        """The memory browser: hybrid search when there is a query, else the newest records; the
        filters narrow either. Only records the viewer may open by id."""
        browse = self._browse(viewer, query)
        status = {"active": RecordStatus.ACTIVE, "superseded": RecordStatus.SUPERSEDED, "any": None}.get(query.status)
        if query.status not in ("active", "superseded", "any"):
            raise Invalid("status must be one of active, superseded, any")
        review = _choice(query.review_status, ReviewStatus, "review_status")
        limit = max(1, min(200, query.limit))
        if query.q.strip():
            found = await self._search(viewer, query.q, limit=200)
            rows = [(r, s) for r, s in found if self._matches(r, browse, status, review)]
            total = len(rows)
            rows = rows[query.offset : query.offset + limit]
            return {"total": total, "items": [{**record_json(r), "score": round(s, 4)} for r, s in rows]}
        records, total = await self.storage.records.browse(
            browse, review_status=review, status=status, limit=limit, offset=max(0, query.offset)
        )
        now = utcnow()
        items = [record_json(r) for r in records if policy.can_read(viewer.actor, r, self.where, now, by_id=True)]
        return {"total": total, "items": items}

    def _browse(self, viewer: Viewer, query: MemoryQuery) -> Browse:
        kind, exact = None, None
        if query.scope and ":" not in query.scope:
            kind = _choice(query.scope, ScopeKind, "scope")
        elif query.scope:
            try:
                exact = Scope.parse(query.scope)
            except ValueError as exc:
                raise Invalid(str(exc)) from None
            kind = exact.kind
            if exact.kind == ScopeKind.PERSONAL and exact.name != viewer.user_id:
                raise Forbidden("a user never sees another user's personal memory")
        if kind == ScopeKind.CHANNEL and not viewer.is_admin:
            raise Forbidden("only administrators browse conversations' memory")
        return Browse(
            personal_of=viewer.user_id,
            channels=viewer.is_admin,
            scope=exact,
            scope_kind=kind,
            memory_class=_choice(query.memory_class, MemoryClass, "memory_class"),
            provenance=_choice(query.provenance, Provenance, "provenance"),
            expires_before=utcnow() + EXPIRING_SOON if query.expiring else None,
        )

    async def _search(self, viewer: Viewer, text: str, limit: int) -> list[tuple[MemoryRecord, float]]:
        if self.recall is not None:
            ranked = await self.recall.search_records(viewer.actor, self.where, text, limit)
            return [(f.record, f.score) for f in ranked]
        return [(f.record, f.score) for f in await self.memory.search(viewer.actor, self.where, text, limit)]

    @staticmethod
    def _matches(r: MemoryRecord, browse: Browse, status: RecordStatus | None, review: ReviewStatus | None) -> bool:
        kind = browse.scope_kind
        return (
            (kind is None or r.scope.kind == kind)
            and (browse.scope is None or r.scope == browse.scope)
            and (browse.memory_class is None or r.memory_class == browse.memory_class)
            and (browse.provenance is None or r.provenance == browse.provenance)
            and (review is None or r.review_status == review)
            and (status is None or r.status == status)
            and (browse.expires_before is None or (r.expires_at is not None and r.expires_at <= browse.expires_before))
        )

    async def record(self, viewer: Viewer, record_id: str) -> dict[str, Any]:
        """One record with its revisions (newest first, each with its diff) and what may be done."""
        record = await self._readable(viewer, record_id)
        revisions = await self.storage.records.revisions(record.id)
        reviewable = bool(policy.can_review(viewer.actor, record))
        newest = max((r.revision for r in revisions), default=0)
        return {
            "record": record_json(record),
            "revisions": [
                {
                    **revision_json(r),
                    "undoable": reviewable and r.revision == newest and r.action not in ("create", "import"),
                }
                for r in sorted(revisions, key=lambda r: r.revision, reverse=True)
            ],
            "actions": list(REVIEW_ACTIONS) if reviewable else [],
        }

    async def _readable(self, viewer: Viewer, record_id: str) -> MemoryRecord:
        """The record when the viewer may open it. Otherwise 403, whether it is someone else's or
        does not exist at all, so the answer tells nothing about other people's ids."""
        record_id = record_id.strip()
        refused = Forbidden(f"you cannot open memory {record_id[:80]!r}: it is not yours, or it does not exist")
        if not _RECORD_ID.fullmatch(record_id):
            raise refused
        record = await self.memory.openable(viewer.actor, self.where, record_id)
        if record is None:
            raise refused
        return record

    async def review_queue(self, viewer: Viewer, limit: int = 50, offset: int = 0) -> dict[str, Any]:
        """Pending records the viewer may review, newest first, and how many there are: their own
        personal ones; for administrators every shared one too (never other people's personal ones)."""
        scopes = None if viewer.is_admin else [Scope.personal(viewer.user_id)]
        pending, total = await self.storage.records.browse(
            Browse(personal_of=viewer.user_id, channels=viewer.is_admin),
            scopes=scopes,
            review_status=ReviewStatus.PENDING,
            limit=max(1, min(200, limit)),
            offset=max(0, offset),
        )
        items = [await self._queued(viewer, r) for r in pending if policy.can_review(viewer.actor, r)]
        return {"total": total, "items": items}

    async def _queued(self, viewer: Viewer, record: MemoryRecord) -> dict[str, Any]:
        """A queue item; a proposed change also says what it would change, as a word diff against the
        record as it is now (None when that record is gone)."""
        data = record_json(record)
        change = policy.proposal_of(record)
        if change is not None:
            target = await self.memory.target_of(viewer.actor, self.where, record)
            after = "" if change[0] == "forget" else record.content
            data["proposal"] = {
                "action": change[0],
                "target": change[1],
                "current": target.content if target is not None else None,
                "diff": word_diff(target.content, after) if target is not None else None,
            }
        return data

    async def review(self, viewer: Viewer, record_id: str, action: str, arg: str = "") -> dict[str, Any]:
        """One review action (DESIGN §6); the record as it is afterwards (for supersede, the new one)."""
        if action not in REVIEW_ACTIONS:
            raise Invalid(f"action must be one of {', '.join(REVIEW_ACTIONS)}")
        if action in ACTION_ARGUMENT and not arg.strip():
            raise Invalid(f"{action} needs a {ACTION_ARGUMENT[action]}")
        await self._readable(viewer, record_id)  # the same 404 for "not yours" as for "not there"
        try:
            done = await self.memory.review(viewer.actor, self.where, action, record_id, arg)
        except MemoryRefused as exc:
            raise Forbidden(str(exc)) from None
        return {"record": record_json(done)}

    async def undo_revision(self, viewer: Viewer, revision_id: int) -> dict[str, Any]:
        """Undo one revision (and the rest of its batch, for a merge) when the viewer may review
        every record it touched."""
        rev = await self.storage.revisions.get(revision_id)
        if rev is None:
            raise Forbidden(f"you cannot undo revision {revision_id}: it is not yours, or it does not exist")
        touched = [rev] if rev.batch is None else await self.storage.revisions.list(batch=rev.batch)
        for r in touched:
            record = await self.memory.openable(viewer.actor, self.where, r.record_id)
            if record is None:
                raise Forbidden(f"you cannot undo revision {revision_id}: it is not yours, or it does not exist")
            allowed = policy.can_review(viewer.actor, record)
            if record.status != RecordStatus.DELETED and not allowed:
                raise Forbidden(allowed.reason)
        try:
            undone = await self.storage.revisions.undo(revision_id, viewer.user_id)
        except RecordError as exc:
            raise Conflict(str(exc) or "this revision cannot be undone") from None
        self.memory.changed()
        return {"records": [record_json(r) for r in undone.records], "batch": undone.batch}

    # -- traces ------------------------------------------------------------------------------------

    async def traces(self, viewer: Viewer, session: str = "", limit: int = 20) -> dict[str, Any]:
        """The viewer's own recall traces (of one session when given), newest first."""
        views = await self.trace_store.recent(
            user_id=viewer.user_id, session_key=session or None, limit=max(1, min(50, limit))
        )
        return {
            "items": [
                {
                    "id": v.trace.id,
                    "session": v.trace.session_key,
                    "query": v.trace.query,
                    "at": v.trace.created_at.isoformat(),
                    "items": [i.to_json() for i in v.trace.items],
                    "written": [{"id": w.id, "action": w.action} for w in v.trace.written],
                    "lookups": [x.to_json() for x in v.trace.lookups],
                    "changes": [
                        {"record_id": c.record_id, "action": c.action, "actor": c.actor, "at": c.at.isoformat()}
                        for c in v.changes
                    ],
                }
                for v in views
            ]
        }

    # -- Memory.md ---------------------------------------------------------------------------------

    def _core_path(self, viewer: Viewer, which: str) -> Path:
        if which == "global":
            return self.core.global_path()
        if which == "personal":
            return self.core.personal_path(viewer.user_id)
        raise Invalid("which must be global or personal")

    def core_file(self, viewer: Viewer, which: str) -> dict[str, Any]:
        """A Memory.md as it is on disk, and how much of it a prompt carries."""
        path = self._core_path(viewer, which)
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            text = ""
        limit = self.config.memory.bootstrap_max_chars
        injected = len(keep_ends(text.strip(), limit)) if text.strip() else 0
        return {
            "which": which,
            "text": text,
            "etag": etag(text),
            "chars": len(text),
            "injected_chars": injected,
            "max_chars": limit,
            "truncated": len(text.strip()) > limit,
            "editable": which == "personal" or viewer.is_admin,
        }

    def save_core(self, viewer: Viewer, which: str, text: str, expected_etag: str) -> dict[str, Any]:
        """Replace a Memory.md when nobody changed it since `expected_etag` was read."""
        if which == "global" and not viewer.is_admin:
            raise Forbidden("only administrators edit the global Memory.md")
        if len(text) > MAX_CORE_CHARS:
            raise Invalid(f"Memory.md is limited to {MAX_CORE_CHARS:,} characters here")
        if redact.contains_secret(text, self._secrets):
            raise Invalid("Memory.md would hold something that looks like a secret: it is injected into every prompt")
        current = self.core_file(viewer, which)
        if current["etag"] != expected_etag:
            raise Conflict("Memory.md changed since you opened it: reload it and make your edit again")
        path = self._core_path(viewer, which)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text if text.endswith("\n") or not text else text + "\n")
        self.core.forget(path)
        return self.core_file(viewer, which)

    # -- administration ----------------------------------------------------------------------------

    async def status(self, viewer: Viewer) -> dict[str, Any]:
        self.require_admin(viewer)
        data = await self._status()
        data["review_backlog"] = await self.storage.records.count(review_status=ReviewStatus.PENDING)
        return data

    async def users(self, viewer: Viewer, limit: int = 200) -> dict[str, Any]:
        self.require_admin(viewer)
        users = await self.storage.identities.users(limit=max(1, min(1000, limit)))
        return {"items": [{"id": u.id, "roles": list(u.roles), "identities": list(u.identities)} for u in users]}

    async def pairing(self, viewer: Viewer) -> dict[str, Any]:
        self.require_admin(viewer)
        pending = await self.storage.pairing.pending()
        return {
            "items": [
                {
                    "code": p.code,
                    "identity": p.identity,
                    "display_name": p.display_name,
                    "channel": p.channel,
                    "created_at": p.created_at.isoformat(),
                }
                for p in pending
            ]
        }

    async def approve_pairing(self, viewer: Viewer, code: str) -> dict[str, Any]:
        self.require_admin(viewer)
        req = await self.storage.pairing.approve(code[:64], viewer.user_id)
        if req is None:
            raise NotFound("no pending pairing request has that code")
        return {"identity": req.identity, "channel": req.channel, "approved": True}

    async def jobs(self, viewer: Viewer, status: str = "", kind: str = "", limit: int = 50) -> dict[str, Any]:
        self.require_admin(viewer)
        if status and status not in STATUSES:
            raise Invalid(f"status must be one of {', '.join(STATUSES)}")
        found = await self.storage.jobs.list(status or None, kind[:64] or None, max(1, min(200, limit)))
        # The config's scheduled runs, never people's reminders (what those say is theirs alone).
        runs = await self.storage.schedules.list(kind="schedule", statuses=("active", "paused", "disabled"))
        return {
            "counts": await self.storage.jobs.counts(),
            "items": [j.to_json() for j in found],
            "schedules": [s.to_json() for s in runs],
        }

    async def retry_job(self, viewer: Viewer, job_id: int) -> dict[str, Any]:
        self.require_admin(viewer)
        if await self.storage.jobs.retry(job_id):
            return {"id": job_id, "status": "queued"}
        job = await self.storage.jobs.get(job_id)
        if job is None:
            raise NotFound(f"no job {job_id}")
        raise Conflict(f"job {job_id} is {job.status}; only dead jobs are retried")
