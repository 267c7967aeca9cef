"""Recall traces: why each recalled item was used or not (select()'s own decision), what the
prompt's context budget dropped, the store over real SQLite (filters, later revisions, retention)
and the text people read."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.recall.engine import TurnMemory
from gateway.recall.prompt import FOLLOW, NOTES, WEIGH
from gateway.recall.trace import TraceRecorder, build_items, render
from gateway.turn.context import Section, fit
from memory.recall import Candidate, Scored, select, selection
from memory.records.model import MemoryClass, MemoryRecord, Provenance, ReviewStatus, Scope, UsePolicy
from memory.store.storage import Storage
from memory.store.traces import (
    BEYOND_LIMIT,
    CONTEXT_BUDGET,
    INJECTED,
    MAX_ITEMS,
    NEAR_REPEAT,
    OVER_BUDGET,
    QUERY_CHARS,
    RETENTION,
    TraceItem,
    TraceStore,
    Written,
    keep,
)
from tests.postgres import BACKENDS, database_url

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
CONFIRMED = UsePolicy(can_use_as_instruction=True, requires_user_confirmation=False)
EVIDENCE = UsePolicy(can_use_as_instruction=False, requires_user_confirmation=True)


def scored(item_id: str, text: str, score: float, kind: str = "record") -> Scored:
    return Scored(Candidate(kind, item_id, text, "personal:alice", T0), score, {})


def record(item_id: str, use: UsePolicy, review: ReviewStatus = ReviewStatus.NONE) -> MemoryRecord:
    return MemoryRecord(
        item_id, "x", MemoryClass.EVIDENCE, Provenance.INFERRED, use, Scope.personal("alice"), "alice", T0, T0, review
    )


# --- the reasons are select()'s own decision --------------------------------------------------------


def test_each_reason_in_select_order() -> None:
    ranked = [
        scored("a", "alice uses the helix editor", 0.9),
        scored("b", "the helix editor alice uses", 0.8),  # the same words as a: a repeat
        scored("c", "x" * 500, 0.7),  # longer than what is left of the budget
        scored("d", "alice deploys on tuesdays", 0.6),
        scored("e", "alice likes tea", 0.5),  # k = 2 reached
    ]
    chosen = select(ranked, max_chars=100, k=2)
    assert [s.candidate.id for s in chosen] == ["a", "d"]
    assert selection(ranked, 100, 2, 0.9) == [None, NEAR_REPEAT, OVER_BUDGET, None, BEYOND_LIMIT]


WORDS = st.sampled_from(["tea", "coffee", "helix", "vim", "deploy", "tuesday", "alice", "bob", "the", "a"])


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(st.lists(WORDS, min_size=0, max_size=6).map(" ".join), min_size=0, max_size=15),
    max_chars=st.integers(0, 120),
    k=st.integers(1, 6),
    max_similar=st.sampled_from([0.5, 0.9, 1.0]),
)
def test_the_reasons_agree_with_select_on_any_input(
    texts: list[str], max_chars: int, k: int, max_similar: float
) -> None:
    ranked = [scored(str(i), t, 1.0 - i / 100) for i, t in enumerate(texts)]
    chosen = select(ranked, max_chars, k, max_similar)
    reasons = selection(ranked, max_chars, k, max_similar)
    assert set(reasons) <= {None, BEYOND_LIMIT, OVER_BUDGET, NEAR_REPEAT}
    assert [s.candidate.id for s, r in zip(ranked, reasons, strict=True) if r is None] == [
        s.candidate.id for s in chosen
    ]


# --- build_items: the prompt's context budget, and what needs confirmation ------------------------


def turn_of(ranked: list[Scored], chosen: list[Scored], placed: list[tuple[Scored, str, str]]) -> TurnMemory:
    """A turn whose selection chose `chosen` (the others left out over the budget)."""
    records = {
        "mem-ok": record("mem-ok", CONFIRMED),
        "mem-ev": record("mem-ev", EVIDENCE, ReviewStatus.PENDING),
    }
    decisions = [None if s in chosen else OVER_BUDGET for s in ranked]
    return TurnMemory([], ranked, decisions, records, placed)


def test_a_section_the_context_budget_dropped_is_reported_as_such() -> None:
    ok, ev, note = scored("mem-ok", "alice likes tea", 0.9), scored("mem-ev", "alice may like coffee", 0.8), None
    note = scored("17", "we talked about tea", 0.7, kind="archive")
    placed = [
        (ok, FOLLOW, "- alice likes tea (mem-ok)"),
        (ev, WEIGH, "- alice may like coffee (mem-ev)"),
        (note, NOTES, "- [earlier message] we talked about tea"),
    ]
    sections = [Section(FOLLOW, placed[0][2], 2), Section(WEIGH, placed[1][2], 3), Section(NOTES, placed[2][2], 4)]
    kept = fit(sections, budget=len(placed[0][2]) + len(placed[1][2]) + 5)  # the notes do not fit
    items = build_items(turn_of([ok, ev, note], [ok, ev, note], placed), kept)
    assert [(i.id, i.used, i.reason) for i in items] == [
        ("mem-ok", True, INJECTED),
        ("mem-ev", True, INJECTED),
        ("17", False, CONTEXT_BUDGET),
    ]
    assert [i.needs_confirmation for i in items] == [False, True, False]


def test_a_line_cut_out_of_the_only_section_is_not_used() -> None:
    lines = [f"- memory number {n} about tea (mem-{n})" for n in range(6)]
    items_in = [scored(f"mem-{n}", f"memory number {n} about tea", 1 - n / 10) for n in range(6)]
    placed = [(s, FOLLOW, line) for s, line in zip(items_in, lines, strict=True)]
    kept = fit([Section(FOLLOW, "\n".join(lines), 2)], budget=120)  # cut in the middle, ends kept
    items = build_items(turn_of(items_in, items_in, placed), kept)
    assert items[0].used  # the beginning is kept whole; lines cut through count as not used
    assert {i.reason for i in items if not i.used} == {CONTEXT_BUDGET}
    assert any(not i.used for i in items)


# --- the store ----------------------------------------------------------------------------------


@pytest.fixture(params=BACKENDS)
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Storage]:
    s = await Storage.open(database_url(request.param, tmp_path))
    yield s
    await s.close()


ITEM = TraceItem("record", "mem-x", 0.5, True, INJECTED)


async def test_recent_filters_by_user_and_session_newest_first(storage: Storage) -> None:
    store = TraceStore(storage.db)
    first = await store.add("web:alice", "alice", "e1", "q1", [ITEM], now=T0)
    await store.add("web:bob", "bob", "e2", "q2", [ITEM], now=T0)
    second = await store.add("telegram:group:-1", "alice", "e3", "q3", [ITEM], now=T0 + timedelta(minutes=1))
    await store.add("telegram:group:-1", "bob", "e4", "q4", [ITEM], now=T0)
    assert [v.trace.id for v in await store.recent(user_id="alice", limit=10)] == [second, first]
    in_group = await store.recent(user_id="alice", session_key="telegram:group:-1", limit=10)
    assert [v.trace.query for v in in_group] == ["q3"]
    assert [v.trace.user_id for v in await store.recent(session_key="telegram:group:-1", limit=10)] == ["bob", "alice"]
    assert len(await store.recent(user_id="alice", limit=1)) == 1
    with pytest.raises(ValueError):
        await store.recent()


async def test_later_revisions_of_traced_records_are_read_at_display_time(storage: Storage) -> None:
    store = TraceStore(storage.db)
    recalled = await storage.records.create(
        "alice may like coffee",
        memory_class=MemoryClass.EVIDENCE,
        provenance=Provenance.INFERRED,
        use_policy=EVIDENCE,
        scope=Scope.personal("alice"),
        author="alice",
        review_status=ReviewStatus.PENDING,
        now=T0,
    )
    await storage.records.update(recalled.id, actor="alice", action="edit", content="alice likes coffee", now=T0)
    item = TraceItem("record", recalled.id, 0.7, True, INJECTED, needs_confirmation=True)
    tid = await store.add("web:alice", "alice", None, "coffee?", [item], [Written("mem-new", "stored")], now=T0)
    assert (await store.recent(user_id="alice"))[0].changes == ()  # the edit was not later than the trace
    later = T0 + timedelta(hours=1)
    await storage.records.update(
        recalled.id,
        actor="alice",
        action="confirm",
        review_status=ReviewStatus.CONFIRMED,
        use_policy=CONFIRMED,
        now=later,
    )
    await storage.records.update(
        recalled.id, actor="alice", action="supersede", superseded_by="mem-newer", now=later + timedelta(minutes=1)
    )
    (view,) = await store.recent(user_id="alice")
    assert view.trace.id == tid and view.trace.written == (Written("mem-new", "stored"),)
    assert [(c.record_id, c.action, c.superseded_by) for c in view.changes] == [
        (recalled.id, "confirm", None),
        (recalled.id, "supersede", "mem-newer"),
    ]
    text = render([view])
    assert f"{recalled.id} confirmed" in text and f"{recalled.id} superseded by mem-newer" in text
    assert "needs confirmation" in text and "wrote: mem-new (stored)" in text
    assert "coffee" not in text.replace("'coffee?'", "")  # the query is the only text a trace shows


async def test_traces_expire_after_the_retention(storage: Storage) -> None:
    store = TraceStore(storage.db)
    await store.add("web:alice", "alice", None, "old", [ITEM], now=T0)
    await store.add("web:alice", "alice", None, "new", [ITEM], now=T0 + RETENTION)
    assert await store.prune(now=T0 + RETENTION + timedelta(seconds=1)) == 1
    assert [v.trace.query for v in await store.recent(user_id="alice")] == ["new"]


async def test_a_trace_keeps_every_used_item_and_caps_the_rest(storage: Storage) -> None:
    ignored = [TraceItem("archive", str(n), 0.1, False, BEYOND_LIMIT) for n in range(MAX_ITEMS + 10)]
    used = [TraceItem("record", f"mem-{n}", 0.05, True, INJECTED) for n in range(3)]
    kept = keep([*ignored, *used])
    assert len(kept) == MAX_ITEMS and kept[-3:] == used
    store = TraceStore(storage.db)
    await store.add("web:alice", "alice", None, "q" * (QUERY_CHARS + 50), [*ignored, *used])
    (view,) = await store.recent(user_id="alice")
    assert len(view.trace.items) == MAX_ITEMS and len(view.trace.query) == QUERY_CHARS


# --- the recorder --------------------------------------------------------------------------------


async def test_the_recorder_traces_memory_backed_turns_only_and_never_public_ones(storage: Storage) -> None:
    recorder = TraceRecorder(TraceStore(storage.db), secrets=["hunter2-secret"])
    hit = scored("mem-ok", "alice likes tea", 0.9)
    turn = turn_of([hit], [hit], [(hit, FOLLOW, "- alice likes tea")])

    kept = [Section(FOLLOW, "- alice likes tea", 2)]
    common = {"session_key": "web:alice", "user_id": "alice", "event_id": "e1"}
    assert not recorder.record(None, [], [], query="hello", audience="personal", **common)  # nothing recalled
    assert not recorder.record(turn, kept, [], query="tea?", audience="public", **common)
    assert not recorder.record(turn, kept, [], query="tea?", audience="team", public_person=True, **common)
    assert recorder.record(
        turn, kept, [("mem-w", "stored")], query="tea? hunter2-secret", audience="personal", **common
    )
    assert recorder.record(None, [], [("mem-w", "edited")], query="fix it", audience="personal", **common)
    await recorder.settle()
    views = await recorder.store.recent(user_id="alice", limit=10)
    assert [v.trace.query for v in views] == ["fix it", "tea? [redacted]"]
    assert views[1].trace.items[0].used and views[0].trace.items == ()


async def test_a_failed_trace_write_is_logged_and_loses_no_reply(
    storage: Storage, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = TraceRecorder(TraceStore(storage.db))
    await storage.close()  # every write now fails
    assert recorder.record(
        None, [], [("mem-w", "stored")], session_key="s", user_id="u", event_id=None, query="q", audience="personal"
    )
    with caplog.at_level("WARNING"):
        await asyncio.wait_for(recorder.settle(), 5)
    assert "recall_trace_failed" in caplog.text and "error=DatabaseClosed" in caplog.text


def test_a_trace_that_cannot_be_built_is_logged_and_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    hit = scored("mem-ok", "alice likes tea", 0.9)
    broken = TurnMemory([], [hit], [], {}, [])  # a decision missing: building its items raises

    recorder = TraceRecorder(TraceStore(None))  # type: ignore[arg-type]  # never reached
    with caplog.at_level("WARNING"):
        assert not recorder.record(
            broken, [], [], session_key="s", user_id="u", event_id=None, query="q", audience="personal"
        )
    assert "recall_trace_failed session=s error=ValueError" in caplog.text
