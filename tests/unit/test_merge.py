"""The daily merge's pure parts (memory/records/merge.py: which learned notes say the same thing) and its
scheduling (gateway/jobs/merge.py) with an injected clock over a real job queue: once a day, at the
configured local time, whoever asks and however often."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.jobs.merge import MERGE_JOB, MERGE_NAME, MergeScheduler, changes_for, merge_due
from memory.records.merge import MIN_JACCARD, folds_into, is_learned, jaccard, merge_groups, words
from memory.records.model import (
    MemoryClass,
    MemoryRecord,
    Provenance,
    RecordStatus,
    ReviewStatus,
    Scope,
    UsePolicy,
)
from memory.store.db import Database
from memory.store.jobs import JobStore

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
ALICE = Scope.personal("alice")
GROUP = Scope.channel("telegram:group:-100")
_n = 0


def note(
    content: str,
    *,
    scope: Scope = ALICE,
    provenance: Provenance = Provenance.INFERRED,
    review: ReviewStatus = ReviewStatus.PENDING,
    age_days: float = 1,
    **kw: object,
) -> MemoryRecord:
    global _n
    _n += 1
    created = NOW - timedelta(days=age_days)
    return replace(
        MemoryRecord(
            id=f"mem-{_n:04d}",
            content=content,
            memory_class=MemoryClass.EVIDENCE,
            provenance=provenance,
            use_policy=UsePolicy(can_use_as_instruction=False, requires_user_confirmation=True),
            scope=scope,
            author="agent:main",
            created_at=created,
            updated_at=created,
            review_status=review,
            expires_at=created + timedelta(days=30),
        ),
        **kw,
    )


# -- words and "the same thing" -------------------------------------------------------------------


def test_words_drop_function_words_and_plural_s_but_keep_negations() -> None:
    assert words("The team deploys on Tuesdays.") == {"team", "deploy", "tuesday"}
    assert words("Alice does NOT use tabs") == {"alice", "doe", "not", "use", "tab"}
    assert words("Alice doesn't use tabs") == words("Alice does not use tabs")
    assert words("the of and") == frozenset()
    assert words("class bus this") == {"class", "bus"}  # "ss"/"us" endings are not plurals


@pytest.mark.parametrize(
    ("shorter", "fuller", "same"),
    [
        ("Alice prefers dark mode", "alice prefers dark mode.", True),  # case, punctuation
        ("Alice prefers dark mode", "Alice prefers the dark mode", True),  # a function word
        ("Alice uses vim", "Alice uses vim with the solarized theme", True),  # 3/5: more detail
        ("Prefers tea", "Prefers tea in the morning before stand-ups", False),  # 2/6: a bigger statement
        ("User prefers tea", "User prefers coffee", False),  # not contained: a contradiction
        ("User likes coffee", "User does not like coffee", False),  # contained, 3/5, but negated
        ("User likes coffee", "User doesn't like coffee", False),
        ("User can't swim", "User cannot swim", True),
        ("Never deploy on Fridays", "Never deploy on Fridays after noon", True),
        (
            "The team deploys the backend service to production every Tuesday after the standup meeting",
            "The team deploys the backend service to production every Thursday after the standup meeting",
            False,  # Jaccard 0.8, one word apart: containment keeps them apart
        ),
        ("", "anything at all", False),
    ],
)
def test_folds_into(shorter: str, fuller: str, same: bool) -> None:
    assert folds_into(words(shorter), words(fuller)) is same


def test_jaccard_of_a_long_contradiction_is_high_which_is_why_containment_is_required() -> None:
    a = words("The team deploys the backend service to production every Tuesday after the standup meeting")
    b = words("The team deploys the backend service to production every Thursday after the standup meeting")
    assert jaccard(a, b) >= 0.8 > 0.6 == MIN_JACCARD and not folds_into(a, b)


# -- what counts as a learned note ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "learned"),
    [
        ({}, True),
        ({"provenance": Provenance.GENERATED}, True),
        ({"review_status": ReviewStatus.NONE}, True),
        ({"provenance": Provenance.USER_CONFIRMED}, False),
        ({"provenance": Provenance.IMPORTED}, False),
        ({"review_status": ReviewStatus.CONFIRMED}, False),  # a person confirmed it: never merged away
        ({"review_status": ReviewStatus.REJECTED}, False),
        ({"review_status": ReviewStatus.DISPUTED}, False),
        ({"use_policy": UsePolicy(can_use_as_instruction=True, requires_user_confirmation=False)}, False),
        ({"status": RecordStatus.SUPERSEDED}, False),
        ({"memory_class": MemoryClass.TRACE}, False),
        ({"expires_at": NOW - timedelta(seconds=1)}, False),
    ],
)
def test_is_learned(changes: dict[str, object], learned: bool) -> None:
    assert is_learned(replace(note("Alice uses vim"), **changes), NOW) is learned  # type: ignore[arg-type]


# -- groups -----------------------------------------------------------------------------------------


def test_a_group_is_built_around_the_fullest_note() -> None:
    short = note("Alice uses vim", age_days=5)
    same = note("alice uses VIM.", age_days=4)
    full = note("Alice uses vim with the solarized theme", age_days=3)
    other = note("Alice drinks tea", age_days=2)
    groups = merge_groups([short, same, full, other], NOW)
    assert len(groups) == 1
    assert groups[0].survivor.id == full.id
    assert {m.id for m in groups[0].merged} == {short.id, same.id}


def test_equal_notes_keep_the_newest_which_expires_last() -> None:
    old, new = note("Alice uses vim", age_days=9), note("Alice uses vim", age_days=1)
    [group] = merge_groups([old, new], NOW)
    assert group.survivor.id == new.id and [m.id for m in group.merged] == [old.id]


def test_notes_of_other_scopes_speakers_sensitivity_or_standing_are_never_merged() -> None:
    base = note("The build runs on arm64 runners")
    records = [
        base,
        note("The build runs on arm64 runners", scope=GROUP),
        note("The build runs on arm64 runners", attribution="bob"),
        note("The build runs on arm64 runners", sensitivity="sensitive"),
        note("The build runs on arm64 runners", review=ReviewStatus.CONFIRMED),
        note("The build runs on arm64 runners", provenance=Provenance.USER_CONFIRMED),
    ]
    assert merge_groups(records, NOW) == []


def test_no_chains_every_member_is_contained_in_its_own_survivor() -> None:
    a = note("Alice uses vim")  # 3 words
    b = note("Alice uses vim with solarized")  # 4: a folds into b (3/4)
    c = note("Alice uses vim with solarized theme daily")  # 6: b folds (4/6), a does not (3/6)
    [group] = merge_groups([a, b, c], NOW)
    assert group.survivor.id == c.id and [m.id for m in group.merged] == [b.id]


def test_a_merge_is_one_change_per_record_superseding_the_absorbed_notes() -> None:
    [group] = merge_groups([note("Alice uses vim"), note("Alice uses vim with the solarized theme")], NOW)
    survivor, absorbed = changes_for(group)
    assert survivor.record_id == group.survivor.id and survivor.fields == {} and survivor.action == "merge"
    assert survivor.expected_revision == group.survivor.revision
    assert absorbed.fields == {"status": RecordStatus.SUPERSEDED, "superseded_by": group.survivor.id}


VOCAB = ["alice", "uses", "vim", "tea", "not", "deploys", "tuesday", "theme", "the", "dark", "mode", "on"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from(VOCAB), min_size=1, max_size=7), min_size=1, max_size=14))
def test_merged_notes_never_say_anything_their_survivor_does_not(texts: list[list[str]]) -> None:
    records = [note(" ".join(t)) for t in texts]
    # The word index finds the same groups as comparing every pair would.
    fullest = sorted(records, key=lambda r: (len(words(r.content)), len(r.content), r.created_at, r.id), reverse=True)
    taken: set[str] = set()
    pairwise = []
    for i, survivor in enumerate(fullest):
        if survivor.id in taken:
            continue
        folded = [
            r.id
            for r in fullest[i + 1 :]
            if r.id not in taken and folds_into(words(r.content), words(survivor.content))
        ]
        taken.update(folded)
        if folded:
            pairwise.append((survivor.id, folded))
    assert [(g.survivor.id, [m.id for m in g.merged]) for g in merge_groups(records, NOW)] == pairwise
    seen: set[str] = set()
    for group in merge_groups(records, NOW):
        kept = words(group.survivor.content)
        assert group.merged
        for member in group.merged:
            assert words(member.content) <= kept and jaccard(words(member.content), kept) >= MIN_JACCARD
            assert member.scope == group.survivor.scope
        ids = [group.survivor.id, *(m.id for m in group.merged)]
        assert not seen & set(ids)
        seen |= set(ids)


# -- scheduling --------------------------------------------------------------------------------------

BERLIN = ZoneInfo("Europe/Berlin")
AT = time(3, 0)


@pytest.mark.parametrize(
    ("now", "due", "next_look"),
    [
        # Winter (UTC+1): 03:00 local is 02:00 UTC.
        (datetime(2026, 1, 10, 1, 59, tzinfo=UTC), None, datetime(2026, 1, 10, 2, 0, tzinfo=UTC)),
        (datetime(2026, 1, 10, 2, 0, tzinfo=UTC), date(2026, 1, 10), datetime(2026, 1, 11, 2, 0, tzinfo=UTC)),
        (datetime(2026, 1, 10, 22, 30, tzinfo=UTC), date(2026, 1, 10), datetime(2026, 1, 11, 2, 0, tzinfo=UTC)),
        # 23:30 UTC is already the next local day, before its 03:00.
        (datetime(2026, 1, 10, 23, 30, tzinfo=UTC), None, datetime(2026, 1, 11, 2, 0, tzinfo=UTC)),
        # The night clocks go forward (29 March 2026): the next 03:00 is at UTC+2.
        (datetime(2026, 3, 28, 12, 0, tzinfo=UTC), date(2026, 3, 28), datetime(2026, 3, 29, 1, 0, tzinfo=UTC)),
    ],
)
def test_merge_due(now: datetime, due: date | None, next_look: datetime) -> None:
    assert merge_due(now, AT, BERLIN) == (due, next_look)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[JobStore]:
    db = Database(f"sqlite:///{tmp_path / 'jobs.db'}")
    await db.migrate()
    yield JobStore(db)
    await db.close()


async def test_the_merge_is_queued_once_a_day_by_however_many_schedulers(store: JobStore) -> None:
    clock = Clock(datetime(2026, 1, 10, 1, 0, tzinfo=UTC))  # 02:00 in Berlin
    first = MergeScheduler(store.enqueue, AT, BERLIN, clock)
    second = MergeScheduler(store.enqueue, AT, BERLIN, clock)  # another instance on the same database
    assert await first.tick() == datetime(2026, 1, 10, 2, 0, tzinfo=UTC)
    assert await store.list(kind=MERGE_JOB) == []
    clock.now = datetime(2026, 1, 10, 2, 0, tzinfo=UTC)
    await first.tick()
    await second.tick()
    clock.now += timedelta(hours=9)  # a restart later that day
    await MergeScheduler(store.enqueue, AT, BERLIN, clock).tick()
    [job] = await store.list(kind=MERGE_JOB)
    assert job.key == "sys:merge" and job.payload == {"name": MERGE_NAME, "day": "2026-01-10"}
    clock.now = datetime(2026, 1, 11, 2, 0, tzinfo=UTC)  # the next night
    assert await second.tick() == datetime(2026, 1, 12, 2, 0, tzinfo=UTC)
    assert [j.payload["day"] for j in await store.list(kind=MERGE_JOB)] == ["2026-01-11", "2026-01-10"]


async def test_a_gateway_started_after_the_time_queues_the_days_merge_at_once(store: JobStore) -> None:
    clock = Clock(datetime(2026, 6, 3, 13, 0, tzinfo=UTC))  # 15:00 in Berlin, no merge yet today
    next_look = await MergeScheduler(store.enqueue, AT, BERLIN, clock).tick()
    [job] = await store.list(kind=MERGE_JOB)
    assert job.payload["day"] == "2026-06-03" and next_look == datetime(2026, 6, 4, 1, 0, tzinfo=UTC)
