"""Long-term memory as people and the model reach it (DESIGN §6): one place that applies the policy,
the write-back filter and the trust defaults in front of the record store, so chat commands, model
tools and the CLI cannot differ on who may see or change what.

Answers are short texts for people; refusals say why. A record someone may not read is reported
exactly like a record that does not exist, so ids cannot be probed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from gateway.config.model import Config
from gateway.core.events import utcnow
from gateway.core.logs import event
from memory.records.duplicates import Settled
from memory.records.model import (
    MemoryClass,
    MemoryRecord,
    Provenance,
    RecordStatus,
    ReviewStatus,
    Scope,
    ScopeKind,
    UsePolicy,
)
from memory.records.revisions import RevisionLog
from memory.records.store import RecordError, RecordStore, undo_target
from memory.trust import policy, writeback
from memory.trust.policy import Actor, Where

log = logging.getLogger("clawgate.memory")

NOT_FOUND = "No memory {id} that you can see."
COMPANION_TAG = "with:"  # a proposal's new record that its confirmation folds into the change
AGENT_PREFIX = "agent:"
INSTRUCTION = UsePolicy(can_use_as_instruction=True, can_use_as_evidence=True, requires_user_confirmation=False)
# A person at a keyboard: what they store or edit is confirmed by their typing it.
HUMAN_RUNS = frozenset({"chat", "cli", "console", "import"})
EVIDENCE_ONLY = UsePolicy(can_use_as_instruction=False, can_use_as_evidence=True, requires_user_confirmation=True)
# A proposed change is not memory yet: never used, never injected, until a person confirms it.
PROPOSED = UsePolicy(
    can_use_as_instruction=False,
    can_use_as_evidence=False,
    requires_user_confirmation=True,
    do_not_inject_automatically=True,
)


class MemoryRefused(Exception):
    """A request the policy or the write-back filter refused; the message says why."""


@dataclass(frozen=True, slots=True)
class Found:
    record: MemoryRecord
    score: float


def describe(record: MemoryRecord, *, long: bool = False, target: MemoryRecord | None = None) -> str:
    """One record for people: a head of labels, then its text. A proposed change shows as a diff
    against `target`, the record it would change (as it is now), when given."""
    proposal = policy.proposal_of(record)
    if proposal is not None:
        action, target_id = proposal
        head = f"{record.id} [proposal: {action} {target_id} · {record.scope} · review {record.review_status.value}]"
        lines = [head, *proposal_diff(action, target, record)]
        if long:
            lines.append(f"proposed by {_author(record.author)} on {record.created_at:%Y-%m-%d %H:%M} UTC")
        return "\n".join(lines)
    grade = "instruction" if policy.instruction_grade(record) else "evidence"
    review = f", review {record.review_status.value}" if record.review_status != ReviewStatus.NONE else ""
    head = f"{record.id} [{record.scope} · {record.memory_class.value} · {record.provenance.value} · {grade}{review}]"
    if not long:
        return f"{head} {record.content}"
    lines = [head, record.content, f"written by {_author(record.author)} on {record.created_at:%Y-%m-%d %H:%M} UTC"]
    if record.expires_at:
        lines.append(f"expires {record.expires_at:%Y-%m-%d %H:%M} UTC")
    if record.superseded_by:
        lines.append(f"superseded by {record.superseded_by}")
    lines.append(f"revision {record.revision}")
    return "\n".join(lines)


def _author(author: str) -> str:
    if author.startswith(AGENT_PREFIX):
        return f"the assistant ({author})"
    return f"the gateway's background work ({author})" if author.startswith("system") else author


def proposal_diff(action: str, target: MemoryRecord | None, proposal: MemoryRecord) -> list[str]:
    """What a proposed change would do, as diff lines: the current text (-) and the proposed one (+)."""
    current = target.content if target is not None else "(the memory it would change is gone)"
    if action == "forget":
        return [f"- {current}", "+ (forgotten)"]
    return [f"- {current}", f"+ {proposal.content}"]


def agent_author(agent: str) -> str:
    """How a record the model wrote names its author (never the person it was talking to)."""
    return f"{AGENT_PREFIX}{agent or 'assistant'}"


def write_access(config: Config) -> policy.WriteAccess:
    """`memory.write_access` as the policy reads it."""
    wa = config.memory.write_access
    return policy.WriteAccess(
        enabled=wa.enabled, allowed_roles=frozenset(wa.allowed_roles), allowed_users=frozenset(wa.allowed_users)
    )


class MemoryService:
    def __init__(self, config: Config, records: RecordStore, secrets: list[str]) -> None:
        self.config = config
        self.records = records
        self._secrets = secrets
        # Called after any record changed (the recall upkeep embeds what is new).
        self.on_change: Callable[[], None] | None = None
        self.access = write_access(config)
        # Set by the gateway: compares a new record with its scope's near-duplicates
        # (gateway/session/adjudicate.py), and the revision log an undo of a batch goes through.
        self.dedupe: Callable[[Actor, Where, MemoryRecord, str | None], Awaitable[Settled]] | None = None
        self.revisions: RevisionLog | None = None

    def use_config(self, config: Config) -> None:
        """Settings from a config reload (memory.write_access among them)."""
        self.config = config
        self.access = write_access(config)

    @property
    def enabled(self) -> bool:
        return self.config.memory.enabled

    def where(self, audience: str, conversation: str | None) -> Where:
        return Where(audience, conversation, self.enabled, self.config.projects_of(conversation))  # type: ignore[arg-type]

    # -- reading -----------------------------------------------------------------------------------

    def visible(self, actor: Actor, where: Where) -> policy.Visibility:
        """The scopes `actor` may search from `where`."""
        seen = policy.visible_scopes(actor, where)
        if where.audience == "team":
            # In a group, others read the replies: nobody's personal memory is searched there.
            return policy.Visibility([s for s in seen.scopes if s.kind != ScopeKind.PERSONAL], seen.include_projects)
        return seen

    async def search(self, actor: Actor, where: Where, query: str, limit: int = 10) -> list[Found]:
        visible = self.visible(actor, where)
        if not visible.scopes and not visible.include_projects:
            return []
        now = utcnow()
        hits = await self.records.search(
            query, scopes=visible.scopes, include_projects=visible.include_projects, limit=limit, now=now
        )
        return [Found(r, s) for r, s in hits if policy.can_read(actor, r, where, now)]

    async def get(self, actor: Actor, where: Where, record_id: str) -> MemoryRecord | None:
        """The record when `actor` may read it from `where`; None otherwise (not found or not theirs)."""
        record = await self.records.get(record_id.strip())
        if record is None:
            return None
        if not policy.can_read(actor, record, where, utcnow(), by_id=True):
            return None
        if where.audience == "team" and record.scope.kind == ScopeKind.PERSONAL:
            return None
        return record

    async def listing(self, actor: Actor, where: Where, limit: int = 20) -> list[MemoryRecord]:
        visible = self.visible(actor, where)
        scopes: list[Scope | str] = list(visible.scopes)
        records = await self.records.list(scopes=scopes, limit=limit) if scopes else []
        now = utcnow()
        return [r for r in records if policy.can_read(actor, r, where, now)]

    async def pending(self, actor: Actor, where: Where, limit: int = 20) -> list[MemoryRecord]:
        """Pending records `actor` may review: their own personal ones; for admins also global,
        project and channel ones."""
        scopes: list[Scope | str] | None = (
            None if actor.is_admin else ([Scope.personal(actor.user_id)] if actor.user_id else [])
        )
        if scopes == []:
            return []
        records = await self.records.list(scopes=scopes, review_status=ReviewStatus.PENDING, limit=200)
        return [r for r in records if policy.can_review(actor, r)][:limit]

    # -- writing -----------------------------------------------------------------------------------

    async def remember(
        self,
        actor: Actor,
        where: Where,
        text: str,
        *,
        flag: str | None = None,
        scope: Scope | None = None,
        source: str | None = None,
        author: str | None = None,
    ) -> MemoryRecord:
        """Store a new memory; MemoryRefused with the reason when it may not be stored.

        A person typing it (`actor.run == "chat"`) confirms it for their own memory; shared memory
        (a conversation's, a project's, global) a person writes is instruction-grade only when an
        administrator (or the console's `system` role) writes it, and otherwise pending evidence
        for an administrator to confirm. The model storing it (`tool`) makes agent-written evidence
        in the person's review queue, authored by `author` (agent_author), inheriting the turn's
        scope (it may narrow, never widen)."""
        if not self.enabled:
            raise MemoryRefused("memory is turned off on this gateway (memory.enabled)")
        try:
            target = scope or policy.default_scope(
                actor.user_id,
                where.audience,
                where.conversation,
                flag,  # type: ignore[arg-type]
                where.projects,
            )
        except ValueError as exc:
            raise MemoryRefused(str(exc)) from None
        allowed = policy.can_write(actor, target, where, self.access)
        if not allowed:
            raise MemoryRefused(allowed.reason)
        # A chat message is where a statement was made, not evidence for it: only an imported
        # document cites a source that can stand behind a broad claim.
        cited = source is not None and actor.run == "import"
        verdict = writeback.check(text, extra_secrets=self._secrets, sourced=cited)
        if verdict.action == "refuse":
            event(log, "memory_write_refused", actor=actor.user_id, run=actor.run, reasons=len(verdict.reasons))
            raise MemoryRefused("; ".join(verdict.reasons))
        human = actor.run in HUMAN_RUNS
        trusted = target.kind == ScopeKind.PERSONAL or actor.is_admin or policy.SYSTEM in actor.roles
        if not human:
            provenance = Provenance.INFERRED
        else:
            provenance = Provenance.USER_CONFIRMED if trusted else Provenance.OBSERVED
        sensitive = verdict.action == "flag"
        use, review, memory_class = policy.trust_defaults(provenance, human, target, sensitive)
        if verdict.action == "flag":
            # Injection-shaped or sweeping text stays evidence until someone confirms it.
            use, review = EVIDENCE_ONLY, ReviewStatus.PENDING
        record = await self.records.create(
            writeback.clean(text),
            memory_class=memory_class,
            provenance=provenance,
            use_policy=use,
            scope=target,
            author=(author or agent_author("")) if not human else (actor.user_id or f"{actor.run}"),
            review_status=review,
            sensitivity="sensitive" if sensitive else "normal",
            source=source,
            origin_audience=where.audience,
        )
        event(log, "memory_stored", id=record.id, scope=str(target), run=actor.run, flagged=sensitive)
        self.changed()
        return record

    async def remember_checked(self, actor: Actor, where: Where, text: str, **how: Any) -> Settled:
        """`remember`, then the new record compared with its scope's near-duplicates (skipped,
        replacing, merged, proposed, or queued for a background comparison): what became of it."""
        record = await self.remember(actor, where, text, **how)
        if self.dedupe is None:
            return Settled("created", record)
        return await self.dedupe(actor, where, record, how.get("author"))

    async def propose(
        self, actor: Actor, where: Where, action: str, record_id: str, text: str = "", *, author: str | None = None
    ) -> MemoryRecord:
        """A change the model may not make itself, waiting in the review queue of whoever reviews
        the record (its owner, or an administrator for shared memory): confirming it applies it,
        rejecting it drops it. `action` is edit, supersede or forget."""
        record = await self.get(actor, where, record_id)
        if record is None:
            raise MemoryRefused(NOT_FOUND.format(id=record_id.strip()))
        return await self.propose_for(record, action, text, author=author or agent_author(""), audience=where.audience)

    async def propose_for(
        self, record: MemoryRecord, action: str, text: str, *, author: str, audience: str, companion: str | None = None
    ) -> MemoryRecord:
        """The proposal itself, for a record the caller may see. `companion`: a new record the change
        came with (a near-duplicate's comparison): confirming the proposal supersedes it too."""
        if policy.is_proposal(record):
            raise MemoryRefused("that is a proposed change itself; propose a change of the memory it names")
        content = record.content
        if action != "forget":
            self._screened(text)
            content = writeback.clean(text)
        tags = policy.proposal_tags(action, record.id) + ((COMPANION_TAG + companion,) if companion else ())
        proposal = await self.records.create(
            content,
            memory_class=MemoryClass.EVIDENCE,  # unreviewed, it expires with the evidence it is
            provenance=Provenance.INFERRED,
            use_policy=PROPOSED,
            scope=record.scope,
            author=author,
            review_status=ReviewStatus.PENDING,
            sensitivity=record.sensitivity,
            source=record.id,
            origin_audience=audience,
            tags=tags,
        )
        event(log, "memory_change_proposed", id=proposal.id, target=record.id, action=action, companion=bool(companion))
        return proposal

    async def change_by_model(
        self, actor: Actor, where: Where, action: str, record_id: str, text: str = "", *, author: str | None = None
    ) -> tuple[str, MemoryRecord]:
        """The model's edit, supersede or forget of a record: made when the model may make it
        (policy.model_may_change), proposed for review otherwise. ("edited" | "superseded" |
        "forgotten" | "proposed", the changed record, the replacement or the proposal.)"""
        record = await self.get(actor, where, record_id)
        if record is None:
            raise MemoryRefused(NOT_FOUND.format(id=record_id.strip()))
        if not policy.model_may_change(record):
            return "proposed", await self.propose(actor, where, action, record.id, text, author=author)
        if action == "forget":
            return "forgotten", await self.forget(actor, where, record.id)
        return ("superseded" if action == "supersede" else "edited"), await self.review(
            actor, where, action, record.id, text, author=author
        )

    def _screened(self, text: str) -> writeback.Verdict:
        """The write-back filter's verdict on `text`; MemoryRefused with its reasons when it refuses."""
        verdict = writeback.check(text, extra_secrets=self._secrets)
        if verdict.action == "refuse":
            raise MemoryRefused("; ".join(verdict.reasons))
        return verdict

    def changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    async def _writable(self, actor: Actor, where: Where, record_id: str) -> MemoryRecord:
        record = await self.get(actor, where, record_id)
        if record is None:
            raise MemoryRefused(NOT_FOUND.format(id=record_id.strip()))
        _model_guard(actor, record)
        allowed = policy.can_write(actor, record.scope, where, self.access)
        if not allowed and not policy.can_review(actor, record):
            raise MemoryRefused(allowed.reason)
        return record

    async def openable(self, actor: Actor, where: Where, record_id: str) -> MemoryRecord | None:
        """A record as `get` sees it, or a forgotten one its owner (or reviewer) may bring back."""
        found = await self.get(actor, where, record_id)
        if found is not None:
            return found
        raw = await self.records.get(record_id.strip(), include_deleted=True)
        if raw is None or raw.status != RecordStatus.DELETED:
            return None
        revived = replace(raw, status=RecordStatus.ACTIVE)
        if not policy.can_read(actor, revived, where, utcnow(), by_id=True):
            return None
        return raw if policy.can_review(actor, revived) else None

    async def forget(self, actor: Actor, where: Where, record_id: str) -> MemoryRecord:
        record = await self._writable(actor, where, record_id)
        done = await self.records.forget(record.id, actor.user_id or actor.run)
        event(log, "memory_forgotten", id=record.id, run=actor.run)
        return done

    async def review(
        self, actor: Actor, where: Where, action: str, record_id: str, arg: str = "", *, author: str | None = None
    ) -> MemoryRecord:
        """One review action of DESIGN §6 on a record the actor may review (undo also brings back a
        forgotten record). Confirming a proposed change applies it. The model (`tool`) may only
        edit or supersede what policy.model_may_change allows; it proposes everything else."""
        who = actor.user_id or actor.run
        if action == "undo":
            gone = await self.openable(actor, where, record_id)
            if gone is None:
                raise MemoryRefused(NOT_FOUND.format(id=record_id.strip()))
            _model_guard(actor, gone)
            try:
                undone = await self._undo_batch(actor, where, gone, who) or await self.records.undo(gone.id, who)
                self.changed()
                return undone
            except RecordError as exc:
                raise MemoryRefused(str(exc) or "nothing to undo") from None
        record = await self.get(actor, where, record_id)
        if record is None:
            raise MemoryRefused(NOT_FOUND.format(id=record_id.strip()))
        if actor.run == "tool" and action not in ("edit", "supersede"):
            raise MemoryRefused("reviewing memory is for people; the assistant may only propose a change")
        _model_guard(actor, record)
        allowed = policy.can_review(actor, record)
        if not allowed:
            raise MemoryRefused(allowed.reason)
        if policy.is_proposal(record):
            return await self._review_proposal(actor, where, action, record, arg)
        if action == "confirm":
            # Confirmed evidence is no longer an inference that may go stale: it stops expiring.
            lasting = {"memory_class": MemoryClass.DURABLE_FACT} if record.memory_class == MemoryClass.EVIDENCE else {}
            return await self._update(
                record, who, "confirm", review_status=ReviewStatus.CONFIRMED, use_policy=INSTRUCTION, **lasting
            )
        if action == "edit":
            verdict = self._screened(arg)
            # A person's edit confirms the memory; the model's correction stays evidence.
            confirmed = verdict.action == "ok" and actor.run in ("chat", "cli", "console")
            return await self._update(
                record,
                who,
                "edit",
                content=writeback.clean(arg),
                review_status=ReviewStatus.CONFIRMED if confirmed else ReviewStatus.PENDING,
                use_policy=INSTRUCTION if confirmed else EVIDENCE_ONLY,
            )
        if action == "evidence":
            return await self._update(record, who, "evidence", use_policy=EVIDENCE_ONLY)
        if action == "scope":
            try:
                new_scope = Scope.parse(arg)
            except ValueError as exc:
                raise MemoryRefused(str(exc)) from None
            if not policy.may_narrow(record.scope, new_scope):
                raise MemoryRefused(f"a scope may only narrow: {record.scope} cannot become {new_scope}")
            return await self._update(record, who, "scope", scope=new_scope)
        if action == "stale":
            return await self._update(record, who, "stale", review_status=ReviewStatus.STALE)
        if action == "reject":
            return await self._update(record, who, "reject", review_status=ReviewStatus.REJECTED)
        if action == "dispute":
            # Disputed memory is never injected on its own (DESIGN §11): the use policy says so too.
            return await self._update(
                record,
                who,
                "dispute",
                review_status=ReviewStatus.DISPUTED,
                provenance=Provenance.DISPUTED,
                use_policy=policy.DISPUTED_USE,
            )
        if action == "supersede":
            replacement = await self._replacement(actor, where, record, arg, author)
            await self._update(record, who, "supersede", status=RecordStatus.SUPERSEDED, superseded_by=replacement.id)
            return replacement
        if action == "merge":
            other = await self.get(actor, where, arg)
            if other is None or not policy.can_review(actor, other):
                raise MemoryRefused(NOT_FOUND.format(id=arg.strip()))
            if other.id == record.id:  # it would take its own text twice, then fail to supersede itself
                raise MemoryRefused("a memory cannot be merged with itself")
            if other.scope != record.scope:
                raise MemoryRefused("only memories of the same scope can be merged")
            if policy.is_proposal(other):
                raise MemoryRefused("a proposed change cannot be merged; confirm or reject it")
            merged = await self._update(record, who, "merge", content=f"{record.content} {other.content}".strip())
            await self._update(other, who, "merge", status=RecordStatus.SUPERSEDED, superseded_by=record.id)
            return merged
        raise MemoryRefused(f"unknown review action {action!r}")

    async def _undo_batch(self, actor: Actor, where: Where, record: MemoryRecord, who: str) -> MemoryRecord | None:
        """When the change an undo of `record` would revert was one batch with other records (a
        supersession, a merge), undo the whole batch, if `actor` may undo each of them; None when it
        was a change of this record alone."""
        if self.revisions is None:
            return None
        history = await self.records.revisions(record.id)
        newest = undo_target((r.revision, r.action) for r in reversed(history))
        change = next((r for r in history if r.revision == newest), None)
        if change is None or change.batch is None:
            return None
        for member in await self.revisions.list(batch=change.batch):
            other = await self.openable(actor, where, member.record_id)
            if other is None or not policy.can_review(actor, other):
                raise MemoryRefused(f"that change also changed {member.record_id}, which you cannot change")
            _model_guard(actor, other)
        done = await self.revisions.undo(change.id, who)
        return next(r for r in done.records if r.id == record.id)

    async def _replacement(
        self, actor: Actor, where: Where, record: MemoryRecord, text: str, author: str | None
    ) -> MemoryRecord:
        """The record that supersedes `record`, in its scope: confirmed when a reviewer typed it (the
        owner, an administrator for shared memory, the operator), agent-written evidence when the
        model wrote it."""
        if actor.run == "tool":
            return await self.remember(actor, where, text, scope=record.scope, author=author)
        verdict = self._screened(text)
        use, review, memory_class = policy.trust_defaults(Provenance.USER_CONFIRMED, True, record.scope, False)
        if verdict.action == "flag":
            use, review = EVIDENCE_ONLY, ReviewStatus.PENDING
        replacement = await self.records.create(
            writeback.clean(text),
            memory_class=memory_class,
            provenance=Provenance.USER_CONFIRMED,
            use_policy=use,
            scope=record.scope,
            author=actor.user_id or actor.run,
            review_status=review,
            sensitivity="sensitive" if verdict.action == "flag" else record.sensitivity,
            source=record.id,
            origin_audience=where.audience,
        )
        self.changed()
        return replacement

    async def _review_proposal(
        self, actor: Actor, where: Where, action: str, proposal: MemoryRecord, arg: str
    ) -> MemoryRecord:
        """Confirm applies a proposed change to the record it names (as the confirming person's own
        change) and closes the proposal; reject drops it; edit changes what it proposes."""
        who = actor.user_id or actor.run
        if action == "reject":
            return await self._update(proposal, who, "reject", review_status=ReviewStatus.REJECTED)
        if action == "edit":
            self._screened(arg)
            return await self._update(proposal, who, "edit", content=writeback.clean(arg))
        if action != "confirm":
            raise MemoryRefused("a proposed change can be confirmed, edited or rejected")
        change = policy.proposal_of(proposal)
        target = await self.get(actor, where, change[1]) if change else None
        if change is None or target is None:
            raise MemoryRefused("the memory this change was proposed for is gone; reject the proposal")
        allowed = policy.can_review(actor, target)
        if not allowed:
            raise MemoryRefused(allowed.reason)
        kind = change[0]
        if kind == "forget":
            done = await self.records.forget(target.id, who, note=f"proposed in {proposal.id}")
            self.changed()
        elif kind == "supersede":
            done = await self.review(actor, where, "supersede", target.id, proposal.content)
        else:
            done = await self.review(actor, where, "edit", target.id, proposal.content)
        await self._fold_companion(proposal, done, who)
        await self._update(
            proposal,
            who,
            "confirm",
            review_status=ReviewStatus.CONFIRMED,
            status=RecordStatus.SUPERSEDED,
            superseded_by=done.id,
        )
        return done

    async def _fold_companion(self, proposal: MemoryRecord, done: MemoryRecord, who: str) -> None:
        """A confirmed proposal that came with a new record (its text is in the change): that record
        is superseded by the result, so the fact is not held twice."""
        tag = next((t for t in proposal.tags if t.startswith(COMPANION_TAG)), None)
        other = await self.records.get(tag[len(COMPANION_TAG) :]) if tag else None
        if (
            other is not None
            and other.status == RecordStatus.ACTIVE
            and other.scope == done.scope
            and other.id != done.id
        ):
            await self._update(other, who, "supersede", status=RecordStatus.SUPERSEDED, superseded_by=done.id)

    async def target_of(self, actor: Actor, where: Where, proposal: MemoryRecord) -> MemoryRecord | None:
        """The record a proposed change would change, as `actor` may see it now (None: not a
        proposal, or the record is gone)."""
        change = policy.proposal_of(proposal)
        return await self.get(actor, where, change[1]) if change else None

    async def _update(self, record: MemoryRecord, who: str, action: str, **changes: Any) -> MemoryRecord:
        try:
            done = await self.records.update(
                record.id, actor=who, action=action, expected_revision=record.revision, **changes
            )
        except RecordError as exc:
            raise MemoryRefused(str(exc) or "the memory changed meanwhile: try again") from None
        event(log, "memory_reviewed", id=record.id, action=action)
        self.changed()
        return done


def _model_guard(actor: Actor, record: MemoryRecord) -> None:
    """The model never changes what a person wrote, confirmed or shares (policy.model_may_change)."""
    if actor.run == "tool":
        allowed = policy.model_may_change(record)
        if not allowed:
            raise MemoryRefused(allowed.reason)


def actor(user_id: str | None, roles: tuple[str, ...] | frozenset[str], run: policy.Run = "chat") -> Actor:
    return Actor(user_id, frozenset(roles), run)
