"""The memory policy matrix (DESIGN §3, §6). Expected decisions come from the small tables below,
written from the design, never from the code under test."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
from memory.trust.policy import (
    OPERATOR,
    Actor,
    Audience,
    Decision,
    Run,
    Where,
    WriteAccess,
    can_read,
    can_review,
    can_write,
    default_scope,
    instruction_grade,
    may_narrow,
    trust_defaults,
    visible_scopes,
)

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
ME = "alice"
HERE = "telegram:group:-100"
ELSEWHERE = "discord:channel:9"

SCOPES = {
    "personal-own": Scope.personal(ME),
    "personal-other": Scope.personal("bob"),
    "channel-here": Scope.channel(HERE),
    "channel-elsewhere": Scope.channel(ELSEWHERE),
    "project": Scope(ScopeKind.PROJECT, "atlas"),
    "global": GLOBAL,
}
CASES = list(SCOPES)
ROLES = ["admin", "system", "user", "public"]
AUDIENCES: list[Audience] = ["personal", "team", "public"]
RUNS: list[Run] = list(get_args(Run))


def _grid(rows: dict[str, str]) -> dict[tuple[str, str], bool]:
    """`role: "Y N …"` rows, one column per entry of CASES."""
    table: dict[tuple[str, str], bool] = {}
    for role, row in rows.items():
        cells = row.split()
        assert len(cells) == len(CASES)
        for case, cell in zip(CASES, cells, strict=True):
            table[role, case] = cell == "Y"
    return table


# Columns:          own other here elsewhere project global
READ = _grid(
    {
        "admin": "   Y   N     Y    Y         Y       Y",
        "system": "  Y   N     Y    N         Y       Y",
        "user": "    Y   N     Y    N         Y       Y",
        "public": "  N   N     N    N         N       N",
    }
)
# Writes in a group (team audience), typed by a person, with the default memory.write_access.
WRITE_TEAM = _grid(
    {
        "admin": "   Y   N     Y    Y         Y       Y",
        "system": "  Y   N     Y    N         Y       Y",
        "user": "    Y   N     Y    N         N       N",
        "public": "  N   N     N    N         N       N",
    }
)
# Writes in a DM (personal audience): no conversation memory except for administrators.
WRITE_PERSONAL = _grid(
    {
        "admin": "   Y   N     Y    Y         Y       Y",
        "system": "  Y   N     N    N         Y       Y",
        "user": "    Y   N     N    N         N       N",
        "public": "  N   N     N    N         N       N",
    }
)
# What each kind of run may never write, whoever is behind it.
RUN_NEVER: dict[str, set[str]] = {
    "chat": set(),
    "cli": set(),
    "console": set(),
    "import": set(),
    "tool": {"project", "global", "channel-elsewhere"},
    "scheduled": {"global"},
    "webhook": {"global"},
}
REVIEW = _grid(
    {
        "admin": "   Y   N     Y    Y         Y       Y",
        "system": "  Y   N     N    N         N       N",
        "user": "    Y   N     N    N         N       N",
        "public": "  N   N     N    N         N       N",
    }
)


def actor(role: str, run: Run = "chat", user_id: str | None = ME) -> Actor:
    return Actor(user_id, frozenset({role}), run)


def where(audience: Audience, conversation: str | None = HERE, enabled: bool = True) -> Where:
    """A conversation bound to the project of SCOPES (project memory is read only in those)."""
    return Where(audience, conversation, enabled, ("atlas",) if conversation is not None else ())


def record(scope: Scope, **changes: object) -> MemoryRecord:
    base = MemoryRecord(
        id="mem-1",
        content="Deploys happen on Tuesdays",
        memory_class=MemoryClass.DURABLE_FACT,
        provenance=Provenance.USER_CONFIRMED,
        use_policy=UsePolicy(can_use_as_instruction=True, requires_user_confirmation=False),
        scope=scope,
        author=ME,
        created_at=NOW - timedelta(days=1),
        updated_at=NOW - timedelta(days=1),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def assert_decision(decision: Decision, expected: bool) -> None:
    assert isinstance(decision, Decision)
    assert decision.allowed is expected
    assert bool(decision) is expected
    assert decision.reason.strip(), "every decision says why"


# --- the matrix ----------------------------------------------------------------------------------


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("audience", AUDIENCES)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("role", ROLES)
def test_read_matrix(role: str, case: str, audience: Audience, run: Run) -> None:
    expected = audience != "public" and READ[role, case]
    rec = record(SCOPES[case])
    assert_decision(can_read(actor(role, run), rec, where(audience), NOW), expected)
    assert_decision(can_read(actor(role, run), rec, where(audience), NOW, by_id=True), expected)


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("audience", AUDIENCES)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("role", ROLES)
def test_write_matrix(role: str, case: str, audience: Audience, run: Run) -> None:
    table = {"personal": WRITE_PERSONAL, "team": WRITE_TEAM}.get(audience)
    expected = table is not None and table[role, case] and case not in RUN_NEVER[run]
    assert_decision(can_write(actor(role, run), SCOPES[case], where(audience), WriteAccess()), expected)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("role", ROLES)
def test_review_matrix(role: str, case: str) -> None:
    assert_decision(can_review(actor(role), record(SCOPES[case])), REVIEW[role, case])


# --- memory.write_access -------------------------------------------------------------------------

# (access, role, user id) → may write global and project memory
WRITE_ACCESS = [
    (WriteAccess(), "admin", ME, True),
    (WriteAccess(), "system", ME, True),
    (WriteAccess(), "user", ME, False),
    (WriteAccess(enabled=False), "admin", ME, True),
    (WriteAccess(enabled=False), "system", ME, False),
    (WriteAccess(enabled=False, allowed_users=frozenset({ME})), "user", ME, False),
    (WriteAccess(enabled=False, allowed_roles=frozenset({"user"})), "user", ME, False),
    (WriteAccess(allowed_roles=frozenset()), "system", ME, False),
    (WriteAccess(allowed_roles=frozenset({"user"})), "user", ME, True),
    (WriteAccess(allowed_roles=frozenset({"user"})), "system", ME, False),
    (WriteAccess(allowed_users=frozenset({ME})), "user", ME, True),
    (WriteAccess(allowed_users=frozenset({ME})), "user", "bob", False),
    (WriteAccess(allowed_users=frozenset({ME})), "user", None, False),
    (WriteAccess(allowed_users=frozenset({ME}), allowed_roles=frozenset({"public"})), "public", ME, False),
]


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("case", ["project", "global"])
@pytest.mark.parametrize(("access", "role", "user_id", "expected"), WRITE_ACCESS)
def test_write_access(access: WriteAccess, role: str, user_id: str | None, expected: bool, case: str, run: Run) -> None:
    allowed = expected and case not in RUN_NEVER[run]
    decision = can_write(actor(role, run, user_id), SCOPES[case], where("team"), access)
    assert_decision(decision, allowed)


def test_denied_global_write_names_the_setting() -> None:
    decision = can_write(actor("user"), GLOBAL, where("team"), WriteAccess())
    assert "memory.write_access" in decision.reason
    decision = can_write(actor("user", "tool"), GLOBAL, where("team"), WriteAccess())
    assert "single agent never creates global rules" in decision.reason


def test_roles_combine() -> None:
    both = Actor(ME, frozenset({"user", "system"}))
    assert can_write(both, GLOBAL, where("team"), WriteAccess())
    assert not can_write(Actor(ME, frozenset({"admin", "public"})), Scope.personal(ME), where("team"), WriteAccess())
    assert not Actor(ME, frozenset({"user"})).is_admin and Actor(ME, frozenset({"admin"})).is_admin


def test_no_roles_is_an_ordinary_user() -> None:
    nobody = Actor(ME, frozenset())
    assert can_write(nobody, Scope.personal(ME), where("personal"), WriteAccess())
    assert not can_write(nobody, GLOBAL, where("personal"), WriteAccess())
    assert can_read(nobody, record(GLOBAL), where("personal"), NOW)


def test_without_a_user_there_is_no_personal_memory() -> None:
    job = Actor(None, frozenset({"system"}), "scheduled")
    assert not can_read(job, record(Scope.personal(ME)), where("team"), NOW)
    assert not can_write(job, Scope.personal(ME), where("team"), WriteAccess())
    assert can_write(job, Scope(ScopeKind.PROJECT, "atlas"), where("team"), WriteAccess())
    assert visible_scopes(job, where("team")).scopes == [Scope.channel(HERE), GLOBAL, SCOPES["project"]]


def test_channel_memory_needs_the_conversation() -> None:
    outside = Where("team", None)
    assert not can_write(actor("user"), Scope.channel(HERE), outside, WriteAccess())
    assert not can_read(actor("user"), record(Scope.channel(HERE)), outside, NOW)
    assert can_write(actor("admin", "cli"), Scope.channel(HERE), outside, WriteAccess())
    assert not can_write(actor("admin", "tool"), Scope.channel(HERE), outside, WriteAccess())


# --- memory off, public, expiry, status ---------------------------------------------------------


@pytest.mark.parametrize("audience", AUDIENCES)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("role", ROLES)
def test_memory_disabled_does_nothing(role: str, case: str, audience: Audience) -> None:
    off = where(audience, enabled=False)
    assert_decision(can_read(actor(role), record(SCOPES[case]), off, NOW, by_id=True), False)
    assert_decision(can_write(actor(role, "cli"), SCOPES[case], off, WriteAccess()), False)
    assert visible_scopes(actor(role), off).scopes == []
    assert visible_scopes(actor(role), off).include_projects is False


@pytest.mark.parametrize("by_id", [False, True])
@pytest.mark.parametrize("audience", ["personal", "team"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("role", ROLES)
def test_records_from_public_conversations_are_never_read(
    role: str, case: str, audience: Audience, by_id: bool
) -> None:
    rec = record(SCOPES[case], origin_audience="public")
    assert_decision(can_read(actor(role), rec, where(audience), NOW, by_id=by_id), False)


@pytest.mark.parametrize("by_id", [False, True])
@pytest.mark.parametrize(
    "changes",
    [
        {"status": RecordStatus.DELETED},
        {"expires_at": NOW},
        {"expires_at": NOW - timedelta(seconds=1)},
        {"memory_class": MemoryClass.EVIDENCE, "expires_at": NOW - timedelta(days=1)},
    ],
    ids=["deleted", "expires-now", "expired", "expired-evidence"],
)
@pytest.mark.parametrize("case", ["personal-own", "channel-here", "project", "global"])
@pytest.mark.parametrize("role", ["admin", "system", "user"])
def test_deleted_and_expired_records_are_never_read(
    role: str, case: str, changes: dict[str, object], by_id: bool
) -> None:
    rec = record(SCOPES[case], **changes)
    assert_decision(can_read(actor(role), rec, where("team"), NOW, by_id=by_id), False)


def test_not_yet_expired_is_read() -> None:
    rec = record(GLOBAL, memory_class=MemoryClass.EVIDENCE, expires_at=NOW + timedelta(seconds=1))
    assert_decision(can_read(actor("user"), rec, where("team"), NOW), True)


@pytest.mark.parametrize("role", ROLES)
def test_deleted_records_are_not_reviewed(role: str) -> None:
    for case in CASES:
        assert_decision(can_review(actor(role), record(SCOPES[case], status=RecordStatus.DELETED)), False)


@pytest.mark.parametrize(
    "changes",
    [{"status": RecordStatus.SUPERSEDED, "superseded_by": "mem-2"}, {"review_status": ReviewStatus.REJECTED}],
    ids=["superseded", "rejected"],
)
def test_history_is_shown_by_id_but_never_searched(changes: dict[str, object]) -> None:
    rec = record(GLOBAL, **changes)
    assert_decision(can_read(actor("user"), rec, where("team"), NOW), False)
    assert_decision(can_read(actor("user"), rec, where("team"), NOW, by_id=True), True)


# Traces: never searched; by id, shown to their author, the owner of their personal scope or an
# administrator, and only where the scope itself is readable.
TRACES = [
    # (role, user, scope case, author, by id expected)
    ("user", ME, "global", ME, True),
    ("user", ME, "global", "agent:main", False),
    ("user", "carol", "global", ME, False),
    ("admin", "root", "global", "agent:main", True),
    ("user", ME, "personal-own", "agent:main", True),
    ("admin", ME, "personal-own", "agent:main", True),
    ("admin", "root", "personal-other", "bob", False),
    ("user", ME, "channel-here", ME, True),
    ("user", ME, "channel-here", "agent:main", False),
    ("admin", "root", "channel-elsewhere", "agent:main", True),
    ("user", ME, "channel-elsewhere", ME, False),
    ("system", ME, "project", "agent:main", False),
    ("public", ME, "personal-own", ME, False),
]


@pytest.mark.parametrize(("role", "user_id", "case", "author", "expected"), TRACES)
def test_traces(role: str, user_id: str, case: str, author: str, expected: bool) -> None:
    rec = record(
        SCOPES[case],
        memory_class=MemoryClass.TRACE,
        author=author,
        provenance=Provenance.GENERATED,
        expires_at=NOW + timedelta(hours=1),
    )
    who = actor(role, user_id=user_id)
    assert_decision(can_read(who, rec, where("team"), NOW), False)
    assert_decision(can_read(who, rec, where("team"), NOW, by_id=True), expected)


# --- visible scopes ------------------------------------------------------------------------------


@pytest.mark.parametrize("audience", AUDIENCES)
@pytest.mark.parametrize("role", ROLES)
def test_visible_scopes(role: str, audience: Audience) -> None:
    visible = visible_scopes(actor(role), where(audience))
    if audience == "public" or role == "public":
        assert visible.scopes == [] and visible.include_projects is False
        return
    # Administrators too: other conversations are opened by id, never recalled; of the projects,
    # only the one the conversation is bound to.
    assert visible.scopes == [Scope.personal(ME), Scope.channel(HERE), GLOBAL, SCOPES["project"]]
    assert visible.include_projects is False
    scopes, include_projects = visible  # unpacks like a pair
    assert scopes == visible.scopes and not include_projects


@pytest.mark.parametrize("role", ["user", "system", "admin"])
def test_project_memory_is_read_only_where_its_project_is_bound(role: str) -> None:
    unbound = Where("team", ELSEWHERE)
    rec = record(SCOPES["project"])
    assert SCOPES["project"] not in visible_scopes(actor(role), unbound).scopes
    assert not visible_scopes(actor(role), unbound).include_projects
    assert_decision(can_read(actor(role), rec, unbound, NOW), role == "admin")  # admins review any project
    assert_decision(can_read(actor(role), rec, where("team"), NOW), True)
    assert_decision(can_read(actor(role), rec, Where("personal", None), NOW), True)  # the CLI, the console
    assert visible_scopes(actor(role), Where("personal", None)).include_projects


def test_the_operator_reviews_what_no_chat_administrator_may() -> None:
    mine = record(Scope.personal("bob"), author="bob")
    assert OPERATOR.is_operator and not actor("admin").is_operator
    assert_decision(can_review(OPERATOR, mine), True)
    assert_decision(can_read(OPERATOR, mine, Where("personal", None), NOW, by_id=True), True)
    assert_decision(can_review(actor("admin"), mine), False)
    assert_decision(can_write(OPERATOR, Scope.personal("bob"), Where("personal", None), WriteAccess()), False)


def test_visible_scopes_outside_a_conversation() -> None:
    assert visible_scopes(actor("user"), Where("personal", None)).scopes == [Scope.personal(ME), GLOBAL]


# --- properties over arbitrary actors and places ------------------------------------------------

_ROLE_SETS = st.frozensets(st.sampled_from([*ROLES, "guest"]), max_size=3)
_USERS = st.sampled_from([ME, "bob", None])
_WHERES = st.builds(Where, st.sampled_from(AUDIENCES), st.sampled_from([HERE, ELSEWHERE, None]), st.booleans())
_ACCESS = st.builds(
    WriteAccess,
    st.booleans(),
    st.frozensets(st.sampled_from([*ROLES, "guest"]), max_size=3),
    st.frozensets(st.sampled_from([ME, "bob"]), max_size=2),
)


@given(
    roles=_ROLE_SETS,
    user_id=_USERS,
    run=st.sampled_from(RUNS),
    place=_WHERES,
    access=_ACCESS,
    case=st.sampled_from(CASES),
    by_id=st.booleans(),
)
def test_policy_invariants(
    roles: frozenset[str], user_id: str | None, run: Run, place: Where, access: WriteAccess, case: str, by_id: bool
) -> None:
    who = Actor(user_id, roles, run)
    scope = SCOPES[case]
    rec = record(scope, author="bob")
    read = can_read(who, rec, place, NOW, by_id=by_id)
    write = can_write(who, scope, place, access)
    review = can_review(who, rec)
    for decision in (read, write, review):
        assert decision.reason.strip()
    closed = not place.memory_enabled or place.audience == "public" or "public" in roles
    if closed:
        assert not read and not write and visible_scopes(who, place).scopes == []
    if "public" in roles:
        assert not review
    if scope.kind == ScopeKind.PERSONAL and scope.name != user_id and not who.is_operator:
        # A user never sees, writes or reviews another user's personal memory; administrators neither
        # (the operator at the shell, who can read the database anyway, is the one exception).
        assert not read and not write and not review
    if run == "tool" and scope.kind in (ScopeKind.GLOBAL, ScopeKind.PROJECT):
        assert not write
    if run in ("scheduled", "webhook") and scope.kind == ScopeKind.GLOBAL:
        assert not write
    if scope.kind in (ScopeKind.GLOBAL, ScopeKind.PROJECT) and write:
        assert "admin" in roles or (
            access.enabled and (roles & access.allowed_roles or user_id in access.allowed_users)
        )
    # Whatever a search looks at is readable.
    for visible in visible_scopes(who, place).scopes:
        assert can_read(who, record(visible, author="bob"), place, NOW)


# --- trust defaults ------------------------------------------------------------------------------

EVIDENCE_POLICY = UsePolicy(can_use_as_instruction=False, requires_user_confirmation=True)
INSTRUCTION_POLICY = UsePolicy(can_use_as_instruction=True, requires_user_confirmation=False)
SIDELINED_POLICY = UsePolicy(
    can_use_as_instruction=False, requires_user_confirmation=True, do_not_inject_automatically=True
)


def _expected_trust(
    provenance: Provenance, human: bool, scope: Scope, sensitive: bool
) -> tuple[UsePolicy, ReviewStatus, MemoryClass]:
    if provenance == Provenance.DISPUTED:
        return SIDELINED_POLICY, ReviewStatus.DISPUTED, MemoryClass.EVIDENCE
    if provenance == Provenance.SUPERSEDED:
        return SIDELINED_POLICY, ReviewStatus.NONE, MemoryClass.EVIDENCE
    if human and provenance in (Provenance.USER_CONFIRMED, Provenance.IMPORTED):
        return INSTRUCTION_POLICY, ReviewStatus.NONE, MemoryClass.DURABLE_FACT
    # Whatever the model writes waits in a review queue, a person's own included (DESIGN §11).
    return EVIDENCE_POLICY, ReviewStatus.PENDING, MemoryClass.EVIDENCE


@pytest.mark.parametrize("sensitive", [False, True])
@pytest.mark.parametrize("case", ["personal-own", "channel-here", "project", "global"])
@pytest.mark.parametrize("human", [False, True])
@pytest.mark.parametrize("provenance", list(Provenance))
def test_trust_defaults(provenance: Provenance, human: bool, case: str, sensitive: bool) -> None:
    scope = SCOPES[case]
    assert trust_defaults(provenance, human, scope, sensitive) == _expected_trust(provenance, human, scope, sensitive)


def test_agent_written_memory_is_evidence_never_instruction() -> None:
    for provenance in (Provenance.INFERRED, Provenance.GENERATED, Provenance.OBSERVED, Provenance.USER_CONFIRMED):
        use, review, cls = trust_defaults(provenance, False, GLOBAL, False)
        assert not use.can_use_as_instruction and use.requires_user_confirmation
        assert cls == MemoryClass.EVIDENCE and review == ReviewStatus.PENDING
    # In a person's own memory too: it waits in their review queue, so nothing the model stored goes unseen.
    use, review, _ = trust_defaults(Provenance.INFERRED, False, Scope.personal(ME), False)
    assert review == ReviewStatus.PENDING and not use.can_use_as_instruction


# --- default scope -------------------------------------------------------------------------------

DEFAULT_SCOPES = [
    (ME, "personal", "telegram:dm:1", None, Scope.personal(ME)),
    (ME, "team", HERE, None, Scope.personal(ME)),
    (ME, "team", HERE, "channel", Scope.channel(HERE)),
    (ME, "team", HERE, "global", GLOBAL),
    (ME, "personal", "telegram:dm:1", "global", GLOBAL),
    (None, "team", HERE, "global", GLOBAL),
    (None, "team", HERE, "channel", Scope.channel(HERE)),
]


@pytest.mark.parametrize(("user_id", "audience", "conversation", "flag", "expected"), DEFAULT_SCOPES)
def test_default_scope(
    user_id: str | None, audience: Audience, conversation: str | None, flag: str | None, expected: Scope
) -> None:
    assert default_scope(user_id, audience, conversation, flag) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("user_id", "audience", "conversation", "flag", "message"),
    [
        (ME, "personal", "telegram:dm:1", "channel", "--channel"),
        (ME, "team", None, "channel", "--channel"),
        (ME, "public", HERE, None, "public"),
        (ME, "public", HERE, "global", "public"),
        (None, "team", HERE, None, "known user"),
        ("", "personal", None, None, "known user"),
        (ME, "team", HERE, "everywhere", "unknown scope option"),
    ],
)
def test_default_scope_refuses(
    user_id: str | None, audience: Audience, conversation: str | None, flag: str | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        default_scope(user_id, audience, conversation, flag)  # type: ignore[arg-type]


# --- narrowing -----------------------------------------------------------------------------------

# Breadth: global 3 > project 2 > channel 1 > personal 0.
BREADTH = {"global": 3, "project": 2, "channel-here": 1, "channel-elsewhere": 1, "personal-own": 0, "personal-other": 0}


@pytest.mark.parametrize("new", CASES)
@pytest.mark.parametrize("old", CASES)
def test_may_narrow(old: str, new: str) -> None:
    expected = old == new or BREADTH[new] < BREADTH[old]
    assert may_narrow(SCOPES[old], SCOPES[new]) is expected


def test_sideways_moves_are_not_narrowing() -> None:
    assert not may_narrow(Scope(ScopeKind.PROJECT, "a"), Scope(ScopeKind.PROJECT, "b"))
    assert not may_narrow(Scope.personal(ME), GLOBAL)
    assert may_narrow(Scope(ScopeKind.PROJECT, "a"), Scope(ScopeKind.PROJECT, "a"))


# --- instruction grade ---------------------------------------------------------------------------

INSTRUCTION = UsePolicy(can_use_as_instruction=True, requires_user_confirmation=False)
EVIDENCE = UsePolicy()
INSTRUCTION_GRADE = [
    ("confirmed by a person", {}, True),
    ("trusted import", {"provenance": Provenance.IMPORTED}, True),
    (
        "inferred then confirmed in review",
        {"provenance": Provenance.INFERRED, "review_status": ReviewStatus.CONFIRMED},
        True,
    ),
    ("inferred, policy says instruction", {"provenance": Provenance.INFERRED}, False),
    ("generated", {"provenance": Provenance.GENERATED}, False),
    ("observed", {"provenance": Provenance.OBSERVED}, False),
    ("evidence policy", {"use_policy": EVIDENCE}, False),
    ("evidence policy, confirmed", {"use_policy": EVIDENCE, "review_status": ReviewStatus.CONFIRMED}, False),
    ("pending review", {"review_status": ReviewStatus.PENDING}, False),
    ("rejected", {"review_status": ReviewStatus.REJECTED}, False),
    ("stale", {"review_status": ReviewStatus.STALE}, False),
    ("disputed review", {"review_status": ReviewStatus.DISPUTED}, False),
    ("disputed provenance", {"provenance": Provenance.DISPUTED}, False),
    (
        "disputed provenance, confirmed",
        {"provenance": Provenance.DISPUTED, "review_status": ReviewStatus.CONFIRMED},
        False,
    ),
    ("superseded provenance", {"provenance": Provenance.SUPERSEDED}, False),
    ("superseded record", {"status": RecordStatus.SUPERSEDED}, False),
    ("deleted record", {"status": RecordStatus.DELETED}, False),
]


@pytest.mark.parametrize(("name", "changes", "expected"), INSTRUCTION_GRADE, ids=[c[0] for c in INSTRUCTION_GRADE])
def test_instruction_grade(name: str, changes: dict[str, object], expected: bool) -> None:
    rec = record(GLOBAL, **{"use_policy": INSTRUCTION, **changes})
    assert instruction_grade(rec) is expected


@pytest.mark.parametrize("provenance", list(Provenance))
def test_trust_defaults_agree_with_instruction_grade(provenance: Provenance) -> None:
    """A person's /remember is followed as written; anything the model wrote is not, until confirmed."""
    for human in (False, True):
        use, review, cls = trust_defaults(provenance, human, Scope.personal(ME), False)
        rec = record(Scope.personal(ME), provenance=provenance, use_policy=use, review_status=review, memory_class=cls)
        assert instruction_grade(rec) is (human and provenance in (Provenance.USER_CONFIRMED, Provenance.IMPORTED))


def test_decision_is_truthy_only_when_allowed() -> None:
    assert Decision(True, "ok") and not Decision(False, "no")
