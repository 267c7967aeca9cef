"""Who may read, write and review which memory, and how far a new memory is trusted (DESIGN §3, §6).

Pure: plain values in, a `Decision` out, whose reason is a sentence a person can be shown. The store,
the chat commands, the memory tools and the CLI all ask here, so one rule is written once.

The shape of the rules:
- Memory is inert when it is switched off, in a public conversation and for public participants.
- A user never sees, writes or reviews another user's personal memory; an administrator neither.
- Channel memory belongs to its conversation; administrators may read and review it from anywhere.
- Project and global memory are read by every non-public user, written only by the writers of
  `memory.write_access`, and never by the model itself ("a single agent never creates global rules").
- Scopes only ever narrow; nothing here widens one.

`admin` is the only role that counts as an administrator: `system` (the web console) is a global
writer through `memory.write_access.allowed_roles`, which is what lets an operator turn it off.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, NamedTuple

from memory.records.model import (
    GLOBAL,
    MemoryClass,
    MemoryRecord,
    Provenance,
    RecordStatus,
    ReviewStatus,
    Scope,
    ScopeKind,
    UsePolicy,
)

__all__ = [
    "ADMIN",
    "OPERATOR",
    "PUBLIC",
    "SYSTEM",
    "USER",
    "Actor",
    "Audience",
    "Decision",
    "Run",
    "Visibility",
    "Where",
    "WriteAccess",
    "can_read",
    "can_review",
    "can_write",
    "default_scope",
    "held_back",
    "instruction_grade",
    "may_narrow",
    "model_may_change",
    "needs_confirmation",
    "proposal_of",
    "stale",
    "trust_defaults",
    "visible_scopes",
]

ADMIN = "admin"
SYSTEM = "system"
USER = "user"
PUBLIC = "public"

Run = Literal["chat", "tool", "cli", "console", "import", "scheduled", "webhook"]
Audience = Literal["personal", "team", "public"]


@dataclass(frozen=True, slots=True)
class Actor:
    """Who is asking, and how the request arrives: a person typing a command (`chat`), the model
    calling a memory tool during a turn (`tool`), the operator's CLI (`cli`), a person in the web
    console (`console`), `clawgate memory import` (`import`), a scheduled job or a webhook. The same
    person is trusted less through the model than at the keyboard, since the model acts on whatever
    text it has read."""

    user_id: str | None
    roles: frozenset[str] = frozenset()
    run: Run = "chat"

    @property
    def is_admin(self) -> bool:
        return ADMIN in self.roles

    @property
    def is_public(self) -> bool:
        """A public participant has no memory at all, whatever other role is listed with it."""
        return PUBLIC in self.roles

    @property
    def is_operator(self) -> bool:
        """The operator at the shell (`clawgate memory …` without a user): whoever runs the CLI can
        read the database itself, so hiding a record there protects nobody. Chat administrators are
        not operators: through a conversation they never see another person's personal memory."""
        return self.run == "cli" and self.user_id is None and ADMIN in self.roles


OPERATOR = Actor(None, frozenset({ADMIN}), "cli")


@dataclass(frozen=True, slots=True)
class WriteAccess:
    """`memory.write_access`: who besides administrators may write global (and project) memory."""

    enabled: bool = True
    allowed_roles: frozenset[str] = frozenset({SYSTEM})
    allowed_users: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Where:
    """The conversation the request comes from: its audience, its session/conversation key (e.g.
    `telegram:group:-100`; None outside any conversation, as on the CLI), whether memory is on, and
    the projects the conversation is bound to in the config (`projects:`). Project memory is read
    only where its project is bound; outside any conversation (the CLI, the console) every project
    is in reach."""

    audience: Audience
    conversation: str | None = None
    memory_enabled: bool = True
    projects: tuple[str, ...] = ()

    def reaches(self, project: str | None) -> bool:
        return self.conversation is None or project in self.projects


@dataclass(frozen=True, slots=True)
class Decision:
    """Allowed or not, and why, in a sentence that can be shown to the person who asked."""

    allowed: bool
    reason: str

    def __bool__(self) -> bool:
        return self.allowed


class Visibility(NamedTuple):
    """What a search may look at: these exact scopes, plus every project when `include_projects`."""

    scopes: list[Scope]
    include_projects: bool


def _yes(reason: str) -> Decision:
    return Decision(True, reason)


def _no(reason: str) -> Decision:
    return Decision(False, reason)


def _closed(actor: Actor, where: Where) -> Decision | None:
    """The cases where memory does nothing at all, checked before any scope rule."""
    if not where.memory_enabled:
        return _no("memory is switched off here")
    if where.audience == "public":
        return _no("memory is off in a public conversation: nothing is recalled or stored")
    if actor.is_public:
        return _no("public participants have no memory")
    return None


def _owns(actor: Actor, scope: Scope) -> bool:
    return scope.kind == ScopeKind.PERSONAL and actor.user_id is not None and scope.name == actor.user_id


def _in_conversation(scope: Scope, where: Where) -> bool:
    return scope.kind == ScopeKind.CHANNEL and where.conversation is not None and scope.name == where.conversation


# --- reading -------------------------------------------------------------------------------------


def _scope_readable(actor: Actor, scope: Scope, where: Where) -> Decision:
    if scope.kind == ScopeKind.PERSONAL:
        if _owns(actor, scope):
            return _yes("it is your personal memory")
        if actor.is_operator:
            return _yes("the operator reviews every memory from the shell")
        return _no("a user never sees another user's personal memory")
    if scope.kind == ScopeKind.CHANNEL:
        if _in_conversation(scope, where):
            return _yes("it is the memory of this conversation")
        if actor.is_admin:
            return _yes("administrators may read any conversation's memory to review it")
        return _no("a conversation's memory is read only inside that conversation")
    if scope.kind == ScopeKind.PROJECT:
        if where.reaches(scope.name):
            return _yes("project memory is shared in the conversations bound to its project")
        if actor.is_admin:
            return _yes("administrators may read any project's memory to review it")
        return _no("project memory is read only in conversations bound to that project (projects: in the config)")
    return _yes("global memory is shared with every user")


def can_read(actor: Actor, record: MemoryRecord, where: Where, now: datetime, *, by_id: bool = False) -> Decision:
    """May `actor`, in `where`, see `record`?

    By default this is the search and recall question: traces, superseded records and records
    rejected in review are history, never found. With `by_id=True` it is the question of opening
    one record by its id (`/memory show`, the review queue): those are shown, a trace only to its
    author, the owner of its personal scope or an administrator. Forgotten, expired and
    public-conversation records are never shown either way: what was said in public is excluded
    from all recall (DESIGN §3)."""
    closed = _closed(actor, where)
    if closed is not None:
        return closed
    if record.status == RecordStatus.DELETED:
        return _no("it was forgotten")
    if record.expired(now):
        return _no("it has expired")
    if record.origin_audience == "public":
        return _no("it was written in a public conversation, whose memories are never recalled")
    if not by_id:
        if record.memory_class == MemoryClass.TRACE:
            return _no("traces are never searched; open one by its id")
        if record.status == RecordStatus.SUPERSEDED:
            return _no("it was superseded; superseded memory is shown by id only")
        if record.review_status == ReviewStatus.REJECTED:
            return _no("it was rejected in review")
        if is_proposal(record):
            return _no("it is a proposed change waiting in the review queue; open it by its id")
    scope = _scope_readable(actor, record.scope, where)
    if not scope:
        return scope
    if record.memory_class == MemoryClass.TRACE and not (
        actor.is_admin or record.author == actor.user_id or _owns(actor, record.scope)
    ):
        return _no("a trace is shown only to its author or an administrator")
    return scope


def visible_scopes(actor: Actor, where: Where) -> Visibility:
    """The scopes a search from `where` looks in: the actor's personal memory, the current
    conversation's memory and global memory, plus the projects the conversation is bound to (every
    project outside a conversation). Other conversations stay out even for
    administrators (they open those by id to review): recall must not carry one group's memory
    into another. Nothing at all when memory is off, public or the actor is public."""
    if _closed(actor, where) is not None:
        return Visibility([], include_projects=False)
    scopes: list[Scope] = []
    if actor.user_id is not None:
        scopes.append(Scope.personal(actor.user_id))
    if where.conversation is not None:
        scopes.append(Scope.channel(where.conversation))
    scopes.append(GLOBAL)
    scopes += [Scope(ScopeKind.PROJECT, name) for name in where.projects]
    return Visibility(scopes, include_projects=where.conversation is None)


# --- writing -------------------------------------------------------------------------------------


def _writer(actor: Actor, access: WriteAccess, what: str) -> Decision:
    """`memory.write_access` (DESIGN §6): administrators, callers whose role is allowed, users
    listed by name; with `enabled: false`, administrators only."""
    if actor.is_admin:
        return _yes(f"administrators may write {what} memory")
    if not access.enabled:
        return _no(f"only administrators may write {what} memory while memory.write_access is disabled")
    if actor.roles & access.allowed_roles:
        return _yes(f"your role may write {what} memory (memory.write_access.allowed_roles)")
    if actor.user_id is not None and actor.user_id in access.allowed_users:
        return _yes(f"you may write {what} memory (memory.write_access.allowed_users)")
    return _no(f"only writers may store {what} memory (memory.write_access)")


def _channel_writable(actor: Actor, scope: Scope, where: Where) -> Decision:
    here = _in_conversation(scope, where)
    if here and where.audience == "team":
        return _yes("it is the memory of this conversation")
    if actor.run == "tool" and not here:
        # An administrator's model still reads other people's text: it must not carry it elsewhere.
        return _no("the assistant writes only the memory of the conversation it is in")
    if actor.is_admin:
        return _yes("administrators may write any conversation's memory")
    if here:
        return _no("conversation memory is written only in a group or channel")
    return _no("a conversation's memory is written only from inside that conversation")


def can_write(actor: Actor, scope: Scope, where: Where, access: WriteAccess) -> Decision:
    """May `actor`, in `where`, store a memory in `scope`?"""
    closed = _closed(actor, where)
    if closed is not None:
        return closed
    if scope.kind == ScopeKind.PERSONAL:
        if _owns(actor, scope):
            return _yes("it is your personal memory")
        return _no("personal memory is written only by its owner, never by anyone else (administrators neither)")
    if scope.kind == ScopeKind.CHANNEL:
        return _channel_writable(actor, scope, where)
    if scope.kind == ScopeKind.PROJECT:
        if actor.run == "tool":
            return _no("the assistant never creates project memory on its own; ask a person who may write it")
        return _writer(actor, access, "project")
    if actor.run == "tool":
        return _no(
            "a single agent never creates global rules: global memory is written by people (memory.write_access)"
        )
    if actor.run in ("scheduled", "webhook"):
        return _no(f"{actor.run} runs never write global memory")
    return _writer(actor, access, "global")


# --- reviewing -----------------------------------------------------------------------------------


def can_review(actor: Actor, record: MemoryRecord) -> Decision:
    """May `actor` confirm, edit, restrict, reject… `record`? People review their own personal
    memory; administrators review the shared kinds. Nobody reviews another person's personal
    memory, since reviewing means reading it."""
    if actor.is_public:
        return _no("public participants have no memory")
    if record.status == RecordStatus.DELETED:
        return _no("it was forgotten; restore it from its revisions first")
    if record.scope.kind == ScopeKind.PERSONAL:
        if _owns(actor, record.scope):
            return _yes("it is your personal memory")
        if actor.is_operator:
            return _yes("the operator reviews every memory from the shell")
        return _no("personal memory is reviewed only by its owner (administrators neither)")
    if actor.is_admin:
        return _yes(f"administrators review {record.scope.kind.value} memory")
    return _no(f"only administrators review {record.scope.kind.value} memory")


# --- trust ---------------------------------------------------------------------------------------

_HUMAN_GRADE = frozenset({Provenance.USER_CONFIRMED, Provenance.IMPORTED})
_UNRELIABLE = frozenset({Provenance.DISPUTED, Provenance.SUPERSEDED})


def trust_defaults(
    provenance: Provenance, author_is_human: bool, scope: Scope, sensitive: bool
) -> tuple[UsePolicy, ReviewStatus, MemoryClass]:
    """The use policy, review status and class a new memory starts with (DESIGN §6).

    Provenance is a claim made by the caller, so it buys trust only when a person stands behind
    it: `user_confirmed` or `imported` with a human author (the one who typed /remember or ran the
    import) is instruction-grade within its scope; the same claim from the model is treated as
    what it is, agent-written evidence. Agent-written memory always waits in the review queue of
    whoever reviews its scope (the person themselves for personal memory), so nothing the model
    stores goes unseen. Disputed and superseded memory is evidence that is never injected on its
    own. (Who may make shared memory instruction-grade by writing it is the caller's question:
    see MemoryService.remember.)"""
    if provenance in _UNRELIABLE:
        review = ReviewStatus.DISPUTED if provenance == Provenance.DISPUTED else ReviewStatus.NONE
        return DISPUTED_USE, review, MemoryClass.EVIDENCE
    if provenance in _HUMAN_GRADE and author_is_human:
        return (
            UsePolicy(can_use_as_instruction=True, can_use_as_evidence=True, requires_user_confirmation=False),
            ReviewStatus.NONE,
            MemoryClass.DURABLE_FACT,
        )
    return (
        UsePolicy(can_use_as_instruction=False, can_use_as_evidence=True, requires_user_confirmation=True),
        ReviewStatus.PENDING,
        MemoryClass.EVIDENCE,
    )


# What a disputed (or superseded) record may still be used for: weighed when someone asks for it,
# never put into a prompt on its own.
DISPUTED_USE = UsePolicy(
    can_use_as_instruction=False,
    can_use_as_evidence=True,
    requires_user_confirmation=True,
    do_not_inject_automatically=True,
)

# Evidence this close to its expiry is labelled stale in a prompt: it is about to be dropped for
# being old, and a month-old inference is the kind that has gone out of date.
STALE_BEFORE_EXPIRY = timedelta(days=7)

# Why recall keeps a record out of a prompt (recall traces show these).
HELD_SUPERSEDED = "superseded"
HELD_DISPUTED = "disputed"
HELD_REJECTED = "rejected"
HELD_PROPOSAL = "proposal"
HELD_NOT_AUTOMATIC = "not_injected_automatically"
HELD_UNUSABLE = "neither_instruction_nor_evidence"
HELD = (HELD_SUPERSEDED, HELD_DISPUTED, HELD_REJECTED, HELD_PROPOSAL, HELD_NOT_AUTOMATIC, HELD_UNUSABLE)


def held_back(record: MemoryRecord) -> str | None:
    """Why recall must not put `record` into a prompt on its own, or None when it may. Superseded,
    disputed and rejected memory never goes in, whatever its use policy says (a record disputed
    before the policy followed its review counts too); nor a proposed change waiting for review,
    a record whose policy says do_not_inject_automatically, or one usable neither as an
    instruction nor as evidence: those are found by an explicit search only."""
    if record.status == RecordStatus.SUPERSEDED or record.provenance == Provenance.SUPERSEDED:
        return HELD_SUPERSEDED
    if record.review_status == ReviewStatus.DISPUTED or record.provenance == Provenance.DISPUTED:
        return HELD_DISPUTED
    if record.review_status == ReviewStatus.REJECTED:
        return HELD_REJECTED
    if is_proposal(record):
        return HELD_PROPOSAL
    use = record.use_policy
    if use.do_not_inject_automatically:
        return HELD_NOT_AUTOMATIC
    if not (use.can_use_as_instruction or use.can_use_as_evidence):
        return HELD_UNUSABLE
    return None


def auto_injectable(record: MemoryRecord) -> bool:
    """May recall put `record` into a prompt on its own? (held_back says why not.)"""
    return held_back(record) is None


def instruction_grade(record: MemoryRecord) -> bool:
    """May `record` be followed as an instruction rather than weighed as evidence? Only an active
    record whose policy says so, that no review holds back, and that a person stands behind: a
    human confirmation or trusted import, or a confirming review."""
    return (
        record.status == RecordStatus.ACTIVE
        and record.use_policy.can_use_as_instruction
        and record.review_status
        not in (ReviewStatus.PENDING, ReviewStatus.REJECTED, ReviewStatus.STALE, ReviewStatus.DISPUTED)
        and record.provenance not in _UNRELIABLE
        and (record.provenance in _HUMAN_GRADE or record.review_status == ReviewStatus.CONFIRMED)
        and not is_proposal(record)
    )


def needs_confirmation(record: MemoryRecord) -> bool:
    """Must the person confirm `record` before it shapes an action? Anything not instruction-grade
    whose policy asks for it, or that waits in the review queue."""
    if instruction_grade(record):
        return False
    return record.use_policy.requires_user_confirmation or record.review_status == ReviewStatus.PENDING


def stale(record: MemoryRecord, now: datetime) -> bool:
    """Marked stale in review, or evidence within STALE_BEFORE_EXPIRY of its expiry."""
    if record.review_status == ReviewStatus.STALE:
        return True
    return record.expires_at is not None and record.expires_at - now <= STALE_BEFORE_EXPIRY


# --- what the model may change ---------------------------------------------------------------------

# Authors that are not a person: the model's tools and the background jobs (formation, merges).
MACHINE_AUTHORS = ("agent:", "system")
PROPOSAL_TAG = "proposal"
_TARGET_TAG = "of:"
PROPOSAL_ACTIONS = ("edit", "supersede", "forget")


def machine_written(record: MemoryRecord) -> bool:
    return record.author.startswith(MACHINE_AUTHORS)


def model_may_change(record: MemoryRecord) -> Decision:
    """May the model edit, supersede or forget `record` itself (DESIGN §11)? Only what the model
    (or a background job) wrote in one person's own memory and nobody confirmed: for anything a
    person wrote, confirmed or imported, and for any shared memory, it may only propose a change
    for review."""
    if record.scope.kind != ScopeKind.PERSONAL:
        return _no("shared memory is changed by people; the assistant may only propose a change")
    if not machine_written(record) or record.provenance in _HUMAN_GRADE:
        return _no("a person wrote this memory; the assistant may only propose a change")
    if record.review_status == ReviewStatus.CONFIRMED:
        return _no("a person confirmed this memory; the assistant may only propose a change")
    return _yes("the assistant wrote it and nobody confirmed it")


def proposal_tags(action: str, target_id: str) -> tuple[str, ...]:
    """The tags that make a record a proposed change of `target_id` (see proposal_of)."""
    if action not in PROPOSAL_ACTIONS:
        raise ValueError(f"unknown proposal action {action!r}")
    return (PROPOSAL_TAG, action, _TARGET_TAG + target_id)


def is_proposal(record: MemoryRecord) -> bool:
    return PROPOSAL_TAG in record.tags


def proposal_of(record: MemoryRecord) -> tuple[str, str] | None:
    """(action, target record id) when `record` is a proposed change waiting for review."""
    if not is_proposal(record):
        return None
    action = next((t for t in record.tags if t in PROPOSAL_ACTIONS), None)
    target = next((t[len(_TARGET_TAG) :] for t in record.tags if t.startswith(_TARGET_TAG)), None)
    return (action, target) if action and target else None


# --- scopes --------------------------------------------------------------------------------------


def default_scope(
    user_id: str | None,
    audience: Audience,
    conversation: str | None,
    flag: Literal["global", "channel", "project"] | None,
    projects: tuple[str, ...] = (),
) -> Scope:
    """The scope of a new memory: the narrowest useful one, the person's own, unless `--channel`
    (only in a group or channel), `--project` (the one project the conversation is bound to) or
    `--global` asks otherwise; whether the write is then allowed
    is `can_write`'s question. ValueError with a readable reason when there is no such scope."""
    if audience == "public":
        raise ValueError("memory is off in a public conversation")
    if flag is None:
        if not user_id:
            raise ValueError("personal memory needs a known user")
        return Scope.personal(user_id)
    if flag == "channel":
        if audience != "team" or not conversation:
            raise ValueError("--channel works only in a group or channel conversation")
        return Scope.channel(conversation)
    if flag == "global":
        return GLOBAL
    if flag == "project":
        if len(projects) != 1:
            raise ValueError(
                "--project works only in a conversation bound to one project (projects: in the config)"
                if not projects
                else f"this conversation is bound to several projects ({', '.join(projects)}): ask an operator"
            )
        return Scope(ScopeKind.PROJECT, projects[0])
    raise ValueError(f"unknown scope option {flag!r}: use --channel, --project or --global")


# Broadest first: global > project > channel > personal.
_BREADTH = {ScopeKind.PERSONAL: 0, ScopeKind.CHANNEL: 1, ScopeKind.PROJECT: 2, ScopeKind.GLOBAL: 3}


def may_narrow(old: Scope, new: Scope) -> bool:
    """May a memory move from `old` to `new`? Only to a strictly narrower kind (or stay where it
    is): moving to another person, conversation or project of the same kind is a move sideways,
    not a narrowing, and nothing ever widens."""
    if old == new:
        return True
    return _BREADTH[new.kind] < _BREADTH[old.kind]


def archive_scope(user_id: str | None, session_key: str, audience: str) -> tuple[str | None, list[str]]:
    """(user_id, session_keys) one person may search in the archive from where they are: in a DM
    their own sessions everywhere (not the DM's earlier sessions of someone else: an account taken
    out of its owner's identities keeps their past to them); in a group only that group's (never
    their DMs in front of others)."""
    if audience == "personal" and user_id is not None:
        return user_id, []
    return None, [session_key]
