"""memory/changes.py: a memory that reports a change ranks above the older memory of its scope it changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory.changes import WINDOW, newer_first, says_change, subject_words
from memory.recall import Candidate, Scored
from memory.records.model import MemoryClass

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "text",
    [
        "We moved from Porto to Lisbon in March 2026; the new flat is in Arroios.",
        "Switched from vim to Helix in May 2026.",
        "Replaced the Pixel 7 with a Fairphone 5.",
        "No longer on the night shift since the move.",
        "Gave up badminton; Tuesday nights are table tennis now.",
        "From September 2026 production deploys are allowed Monday to Thursday.",
        "Since 2025 the backups run at 02:00.",
        "As of today the standup is at 9:30.",
        "The release was pushed back to February.",
        "I used to drink coffee every morning.",
        "Sold the Corolla before moving.",
        "Dropped CrossFit for pilates.",
        "We use Dagster instead of Airflow.",
    ],
)
def test_a_statement_of_change_is_recognised(text: str) -> None:
    assert says_change(text)


@pytest.mark.parametrize(
    "text",
    [
        "I live in Porto, a few streets from the market.",
        "My phone is a Pixel 7.",
        "Production deploy window: Tuesday and Wednesday, 10:00 to 15:00 CET.",
        "I drive a 2016 Toyota Corolla.",
        "From 9 to 5 I am at the office.",  # a range, not a change
        "",
    ],
)
def test_a_plain_statement_is_not_a_change(text: str) -> None:
    assert not says_change(text)


def test_left_as_a_direction_is_a_false_alarm_that_costs_only_an_order() -> None:
    # "left" is a change verb ("left the team"): as a direction it is a false alarm. newer_first only
    # reorders, so the cost is one place in the ranking, never a memory: the test documents it.
    assert says_change("The meeting room is on the left side.")


def test_subject_words_leave_out_stop_words_numbers_and_change_verbs() -> None:
    assert subject_words("Switched from vim to Helix in May 2026") == {"vim", "helix", "may"}
    assert subject_words("My phone is a Pixel 7") == {"phone", "pixel"}
    assert "shifts" not in subject_words("night shifts") and "shift" in subject_words("night shifts")


def _s(cid: str, text: str, score: float, days: int, scope: str = "personal:alice", kind: str = "record") -> Scored:
    c = Candidate(kind, cid, text, scope, T0 + timedelta(days=days), MemoryClass.DURABLE_FACT)
    return Scored(c, score, {})


def _ids(ranked: list[Scored]) -> list[str]:
    return [s.candidate.id for s in ranked]


def test_the_newer_change_moves_right_above_the_older_memory_it_changes() -> None:
    ranked = [
        _s("old", "I live in Porto, near the market.", 0.8, 0),
        _s("other", "My cat is called Miso.", 0.6, 10),
        _s("new", "We moved from Porto to Lisbon in March.", 0.4, 100),
    ]
    assert _ids(newer_first(ranked)) == ["new", "old", "other"]


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        (("old", "I live in Porto.", 0.8, 100), ("new", "We moved from Porto to Lisbon.", 0.4, 0), "older change"),
        (("old", "I live in Porto.", 0.8, 0), ("new", "Switched from vim to Helix.", 0.4, 100), "no shared subject"),
        (("old", "I live in Porto.", 0.8, 0), ("new", "I like Porto wine.", 0.4, 100), "not a change"),
    ],
)
def test_nothing_moves_without_a_newer_change_about_the_same_subject(
    old: tuple[str, str, float, int], new: tuple[str, str, float, int], why: str
) -> None:
    ranked = [_s(*old), _s(*new)]
    assert _ids(newer_first(ranked)) == ["old", "new"], why


def test_a_change_never_moves_above_memory_of_another_scope_or_kind() -> None:
    ranked = [
        _s("shared", "The office is in Porto.", 0.9, 0, scope="global"),
        _s("note", "I live in Porto.", 0.85, 0, kind="daily"),
        _s("new", "We moved from Porto to Lisbon.", 0.4, 100),
    ]
    assert _ids(newer_first(ranked)) == ["shared", "note", "new"]


def test_only_the_top_of_the_ranking_is_looked_at() -> None:
    filler = [_s(f"f{i}", f"Filler fact number {i} about gardening.", 0.9 - i / 100, 50) for i in range(WINDOW)]
    ranked = [_s("old", "I live in Porto.", 0.95, 0), *filler, _s("new", "We moved from Porto to Lisbon.", 0.1, 100)]
    assert _ids(newer_first(ranked))[-1] == "new"  # beyond the window: left where fusion put it


def test_a_chain_of_changes_keeps_the_newest_first() -> None:
    ranked = [
        _s("a", "I live in Porto.", 0.9, 0),
        _s("b", "Moved from Porto to Lisbon.", 0.5, 100),
        _s("c", "Moved from Lisbon to Berlin, leaving Porto far behind.", 0.3, 200),
    ]
    assert _ids(newer_first(ranked)) == ["c", "b", "a"]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["I live in Porto.", "Moved from Porto to Lisbon.", "Switched to Helix.", "vim user"]),
            st.integers(0, 300),
            st.sampled_from(["personal:alice", "global"]),
        ),
        max_size=12,
    )
)
def test_it_only_reorders_and_never_puts_a_change_below_an_older_memory_it_changes(
    items: list[tuple[str, int, str]],
) -> None:
    ranked = [_s(f"i{n}", text, 1 - n / 100, days, scope) for n, (text, days, scope) in enumerate(items)]
    out = newer_first(ranked)
    assert sorted(_ids(out)) == sorted(_ids(ranked))
    position = {s.candidate.id: n for n, s in enumerate(out)}
    for s in out:
        if says_change(s.candidate.text) and position[s.candidate.id] < WINDOW:
            # Each change is above the best-ranked older memory of its scope about the same subject
            # that was above it before (it moved right above the first one it found).
            earlier = [
                o
                for o in ranked[: ranked.index(s)]
                if o.candidate.scope == s.candidate.scope
                and o.candidate.created_at < s.candidate.created_at
                and subject_words(o.candidate.text) & subject_words(s.candidate.text)
            ]
            if earlier:
                assert position[s.candidate.id] < position[earlier[0].candidate.id]
