"""benchmarks/data/assistant_memory/ (the held-out recall set, see its README.md): well formed, every
reference pointing where it must, the split the seeded procedure gives, the counts the set promises.
Reads the files only: no database, no model."""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "assistant_memory"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)  # the set's "now" (benchmarks/assistant_memory.py)
EVIDENCE_LIFETIME = timedelta(days=30)  # DESIGN §6
SEED = "clawgate-assistant-memory"
MINIMUM = {  # per kind, over both halves
    "paraphrase": 70,
    "keyword": 25,
    "multi": 20,
    "temporal": 20,
    "shared": 20,
    "superseded": 20,
    "crosslingual": 12,
    "privacy": 25,
    "none": 25,
}
UNANSWERABLE = {"privacy", "none"}
MEMORY_FIELDS = {"id", "user", "scope", "class", "created_at", "text"}
MEMORY_OPTIONAL = {"supersedes", "lang"}
QUESTION_FIELDS = {"id", "split", "kind", "user", "where", "query", "answers"}
QUESTION_OPTIONAL = {"stale", "forbidden", "lang"}


def _jsonl(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines() if line.strip()]


PERSONAL = _jsonl("personal.jsonl")
SHARED = _jsonl("shared.jsonl")
MEMORIES = PERSONAL + SHARED
QUESTIONS = _jsonl("questions.jsonl")
PROJECTS: dict[str, Any] = json.loads((DATA / "projects.json").read_text(encoding="utf-8"))
BY_ID = {m["id"]: m for m in MEMORIES}
USERS = sorted({m["user"] for m in PERSONAL})


def _at(text: str) -> datetime:
    at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    assert at.tzinfo is not None, text
    return at


def visible(user: str, where: str) -> set[str]:
    """The scopes `user` can recall from `where`, as the gateway's policy has it: their personal
    memory in their DM only, a group's channel memory in it, global memory, a project where it is bound."""
    scopes = {"global"}
    if where == "dm":
        scopes.add(f"personal:{user}")
    else:
        scopes.add(f"channel:{where}")
        scopes |= {f"project:{name}" for name, bound in PROJECTS.items() if where in bound["conversations"]}
    return scopes


def test_memories_are_well_formed() -> None:
    ids = [m["id"] for m in MEMORIES]
    assert len(ids) == len(set(ids)), [i for i, n in Counter(ids).items() if n > 1]
    for m in MEMORIES:
        assert MEMORY_FIELDS <= set(m) <= MEMORY_FIELDS | MEMORY_OPTIONAL, m["id"]
        assert m["class"] in ("durable_fact", "evidence"), m["id"]
        assert isinstance(m["text"], str) and m["text"].strip() == m["text"] and m["text"], m["id"]
        at = _at(m["created_at"])
        assert NOW - timedelta(days=550) <= at < NOW, m["id"]
        if m["class"] == "evidence":  # still unexpired at the set's "now"
            assert at + EVIDENCE_LIFETIME > NOW, m["id"]
    for m in PERSONAL:
        assert m["user"] and m["scope"] == f"personal:{m['user']}", m["id"]
        assert m["id"].startswith(f"{m['user']}-"), m["id"]
    for m in SHARED:
        assert m["user"] is None, m["id"]
        kind, _, name = m["scope"].partition(":")
        assert m["scope"] == "global" or (kind in ("project", "channel") and name), m["id"]


def test_supersessions_point_to_an_older_memory_of_the_same_owner() -> None:
    newer = [m for m in MEMORIES if "supersedes" in m]
    assert len(newer) >= 15
    replaced = [m["supersedes"] for m in newer]
    assert len(replaced) == len(set(replaced))
    for m in newer:
        old = BY_ID[m["supersedes"]]
        assert old["user"] == m["user"] and old["scope"] == m["scope"], m["id"]
        assert _at(old["created_at"]) < _at(m["created_at"]), m["id"]
        assert "supersedes" not in old, m["id"]  # pairs, not chains


def test_counts_meet_the_minimums() -> None:
    per_user = Counter(m["user"] for m in PERSONAL)
    assert len(per_user) >= 6 and min(per_user.values()) >= 40, per_user
    assert len(SHARED) >= 30
    scopes = {m["scope"].partition(":")[0] for m in SHARED}
    assert scopes == {"global", "project", "channel"}
    assert Counter(m["class"] for m in PERSONAL).keys() == {"durable_fact", "evidence"}
    assert sum(1 for m in MEMORIES if m.get("lang", "en") != "en") >= 10
    kinds = Counter(q["kind"] for q in QUESTIONS)
    assert set(kinds) == set(MINIMUM)
    for kind, least in MINIMUM.items():
        assert kinds[kind] >= least, (kind, kinds[kind])
    assert len(QUESTIONS) >= 240


def test_questions_are_well_formed() -> None:
    ids = [q["id"] for q in QUESTIONS]
    assert len(ids) == len(set(ids))
    groups = {m["scope"].removeprefix("channel:") for m in SHARED if m["scope"].startswith("channel:")}
    for q in QUESTIONS:
        assert QUESTION_FIELDS <= set(q) <= QUESTION_FIELDS | QUESTION_OPTIONAL, q["id"]
        assert q["kind"] in MINIMUM and q["split"] in ("tune", "test"), q["id"]
        assert q["user"] in USERS, q["id"]
        assert q["where"] == "dm" or q["where"] in groups, q["id"]
        assert q["query"].strip(), q["id"]
        assert ("stale" in q) == (q["kind"] == "superseded"), q["id"]
        assert ("forbidden" in q) == (q["kind"] == "privacy"), q["id"]
        assert len(set(q["answers"])) == len(q["answers"]), q["id"]


def test_answers_are_memories_the_asker_can_see() -> None:
    for q in QUESTIONS:
        if q["kind"] in UNANSWERABLE:
            assert q["answers"] == [], q["id"]
            continue
        assert q["answers"], q["id"]
        seen = visible(q["user"], q["where"])
        for a in q["answers"]:
            assert a in BY_ID and BY_ID[a]["scope"] in seen, (q["id"], a)
        if q["kind"] == "multi":
            assert len(q["answers"]) >= 2, q["id"]
        if q["kind"] == "shared":
            assert all(BY_ID[a]["user"] is None for a in q["answers"]), q["id"]
        if q["kind"] == "crosslingual":
            languages = {BY_ID[a].get("lang", "en") for a in q["answers"]}
            assert languages != {q.get("lang", "en")}, q["id"]


def test_superseded_questions_name_a_pair() -> None:
    for q in (q for q in QUESTIONS if q["kind"] == "superseded"):
        assert len(q["answers"]) == 1, q["id"]
        assert BY_ID[q["answers"][0]].get("supersedes") == q["stale"], q["id"]
        assert BY_ID[q["stale"]]["scope"] in visible(q["user"], q["where"]), q["id"]


def test_privacy_probes_forbid_only_other_users_memories() -> None:
    for q in (q for q in QUESTIONS if q["kind"] == "privacy"):
        assert q["forbidden"] and len(set(q["forbidden"])) == len(q["forbidden"]), q["id"]
        for f in q["forbidden"]:
            owner = BY_ID[f]["user"]
            assert owner is not None and owner != q["user"], (q["id"], f)


def test_projects_bind_group_conversations_of_the_set() -> None:
    projects = {m["scope"].removeprefix("project:") for m in SHARED if m["scope"].startswith("project:")}
    assert set(PROJECTS) == projects
    groups = {m["scope"].removeprefix("channel:") for m in SHARED if m["scope"].startswith("channel:")}
    for bound in PROJECTS.values():
        assert bound["conversations"] and set(bound["conversations"]) <= groups


def test_split_is_the_seeded_shuffle_and_balanced_per_kind() -> None:
    by_kind: dict[str, list[str]] = defaultdict(list)
    for q in QUESTIONS:
        by_kind[q["kind"]].append(q["id"])
    expected: dict[str, str] = {}
    for kind, ids in by_kind.items():
        order = sorted(ids)
        random.Random(f"{SEED}:{kind}").shuffle(order)
        half = len(order) // 2
        expected |= dict.fromkeys(order[:half], "tune") | dict.fromkeys(order[half:], "test")
        halves = Counter(q["split"] for q in QUESTIONS if q["kind"] == kind)
        assert abs(halves["tune"] - halves["test"]) <= 1, (kind, halves)
    assert {q["id"]: q["split"] for q in QUESTIONS} == expected
