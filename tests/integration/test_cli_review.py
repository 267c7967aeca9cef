"""`clawgate memory show` and `clawgate memory review …` against a real database: the operator's queue
and a user's, every review action with the record's state read back from storage, refusals, --json.

One data dir serves the whole module (each test makes its own records). The entry point runs once
as a process, as an operator would; the other calls go through `gateway.cli.main` in this process,
the same function `python -m gateway` calls, so the suite does not pay a second of imports per call.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gateway.cli import main as cli
from gateway.cli import review as cli_review
from gateway.turn.commands.memory import REVIEW_ACTIONS
from memory.records.model import MemoryRecord, Provenance, RecordStatus, ReviewStatus
from memory.store.storage import Storage
from tests.cli import run_cli
from tests.conftest import ALICE_TOKEN, config_data
from tests.memories import make_memory


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("review")
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump(config_data(root, None)))
    yield config


def _db(config: Path) -> str:
    return f"sqlite:///{config.parent}/data/clawgate.db"


def _make(config: Path, *items: tuple[str, str]) -> list[str]:
    """Pending evidence as the assistant leaves it: (text, scope) → ids."""

    async def work() -> list[str]:
        storage = await Storage.open(_db(config))
        try:
            return [(await make_memory(storage, text, scope)).id for text, scope in items]
        finally:
            await storage.close()

    return asyncio.run(work())


def _read(config: Path, *ids: str) -> dict[str, MemoryRecord]:
    async def work() -> dict[str, MemoryRecord]:
        storage = await Storage.open(_db(config))
        try:
            found = await storage.records.get_many(ids, include_deleted=True)
            return {r.id: r for r in found}
        finally:
            await storage.close()

    return asyncio.run(work())


def _cli(capsys: pytest.CaptureFixture[str], config: Path, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(["--config", str(config), "memory", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_actions_are_the_chat_commands() -> None:
    assert tuple(cli_review.ACTIONS) == REVIEW_ACTIONS


async def test_the_entry_point_lists_the_operators_queue(home: Path) -> None:
    mine, theirs, shared, group = await asyncio.to_thread(
        _make,
        home,
        ("Alice takes her coffee black", "personal:alice"),
        ("Bob parks on level 3", "personal:bob"),
        ("Releases are tagged on Mondays", "global"),
        ("The group meets at nine", "channel:telegram:group:-100"),
    )
    rc, out, err = await run_cli("--config", str(home), "memory", "review")
    assert rc == 0, err
    for record_id in (mine, theirs, shared, group):
        assert record_id in out
    line = next(line for line in out.splitlines() if line.startswith(theirs))
    assert line == f"{theirs} [personal:bob · evidence · inferred · evidence, review pending] Bob parks on level 3"


def test_queues_json_limit_and_unknown_user(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mine, theirs, shared, group = _make(
        home,
        ("Alice waters the ficus on Sundays", "personal:alice"),
        ("Bob's train leaves at 7:40", "personal:bob"),
        ("The wiki moved to docs.example.org", "global"),
        ("Standup is in room 4", "channel:telegram:group:-100"),
    )
    rc, out, _ = _cli(capsys, home, "review", "--json")
    assert rc == 0
    listed = {r["id"]: r for r in json.loads(out)}
    assert {mine, theirs, shared, group} <= set(listed)
    assert listed[theirs]["review_status"] == "pending" and listed[theirs]["grade"] == "evidence"

    rc, out, _ = _cli(capsys, home, "review", "--user", "alice", "--json")
    seen = {r["id"] for r in json.loads(out)}
    assert rc == 0 and mine in seen and not seen & {theirs, shared, group}
    # An administrator in chat reviews the shared kinds, never another person's personal memory.
    rc, out, _ = _cli(capsys, home, "review", "--user", "root")
    assert rc == 0 and shared in out and group in out and mine not in out and theirs not in out

    rc, out, err = _cli(capsys, home, "review", "--limit", "1")
    assert rc == 0 and len(out.splitlines()) == 1 and "--limit N shows more" in err

    rc, out, err = _cli(capsys, home, "review", "--user", "nobody")
    assert rc == 2 and out == ""
    assert "no user 'nobody'" in err and "users:" in err and "/whoami" in err


def test_show_in_full_and_an_unknown_id(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (shared,) = _make(home, ("Backups run at 02:00 UTC", "global"))
    (mine,) = _make(home, ("Alice is allergic to cats", "personal:alice"))
    assert _cli(capsys, home, "review", "confirm", shared)[0] == 0

    rc, out, _ = _cli(capsys, home, "show", shared)
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].startswith(f"{shared} [global") and lines[1] == "Backups run at 02:00 UTC"
    assert "revision 2" in out and "confirm" in out and "create" in out  # its revisions, newest first
    assert out.index("confirm ") < out.index("create ")

    rc, out, _ = _cli(capsys, home, "show", shared, "--json")
    data = json.loads(out)
    assert rc == 0 and data["id"] == shared and data["review_status"] == "confirmed"
    assert data["grade"] == "instruction" and data["status"] == "active"
    assert [r["action"] for r in data["revisions"]] == ["confirm", "create"]

    # The operator opens a personal record by id; another user cannot, and learns nothing about it.
    assert _cli(capsys, home, "show", mine)[0] == 0
    rc, out, err = _cli(capsys, home, "show", mine, "--user", "bob")
    assert rc == 1 and out == "" and f"No memory {mine} that bob can see." in err

    rc, out, err = _cli(capsys, home, "show", "mem-doesnotexist00")
    assert rc == 1 and out == "" and "No memory mem-doesnotexist00." in err

    rc, out, _ = _cli(capsys, home, "review", "show", mine)
    assert rc == 0 and "Alice is allergic to cats" in out and "clawgate memory review {confirm," in out
    rc, out, _ = _cli(capsys, home, "review", "show", shared, "--user", "alice")
    assert rc == 0 and "alice may not review it: only administrators review global memory" in out


def test_every_action_changes_the_record(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ids = _make(
        home,
        ("Deploy window is Tuesday", "global"),  # confirm, then evidence
        ("Alice's desk is by the window", "personal:alice"),  # edit (by Alice)
        ("The VPN is vpn.example.org", "global"),  # scope
        ("The office wifi is slow", "global"),  # stale
        ("Lunch is at noon", "channel:telegram:group:-100"),  # merge into
        ("on Fridays", "channel:telegram:group:-100"),  # merged away
        ("The moon is cheese", "global"),  # reject, then undo
        ("Tests take an hour", "global"),  # dispute
        ("Ops rota is weekly", "global"),  # supersede
        ("Printer is on floor 2", "global"),  # undo of its creation
    )
    confirmed, edited, moved, stale, merged, gone, rejected, disputed, replaced, unmade = ids

    rc, out, _ = _cli(capsys, home, "review", "confirm", confirmed)
    assert rc == 0 and out.startswith(f"confirmed: {confirmed} [global") and "instruction" in out
    assert _read(home, confirmed)[confirmed].review_status == ReviewStatus.CONFIRMED
    assert _read(home, confirmed)[confirmed].use_policy.can_use_as_instruction
    rc, out, _ = _cli(capsys, home, "review", "evidence", confirmed)
    assert rc == 0 and out.startswith("now evidence only:")

    rc, out, _ = _cli(
        capsys, home, "review", "--user", "alice", "edit", edited, "Alice's", "desk", "is", "by", "the", "door"
    )
    assert rc == 0 and out.startswith(f"edited: {edited}") and "by the door" in out

    rc, out, _ = _cli(capsys, home, "review", "scope", moved, "project:infra")
    assert rc == 0 and out.startswith(f"moved to project:infra: {moved}")
    for action, record_id in (("stale", stale), ("reject", rejected), ("dispute", disputed)):
        assert _cli(capsys, home, "review", action, record_id)[0] == 0, action
    rc, out, _ = _cli(capsys, home, "review", "merge", merged, gone)
    assert rc == 0 and out.startswith(f"merged {gone} into it: {merged}")
    rc, out, _ = _cli(capsys, home, "review", "supersede", replaced, "Ops rota is fortnightly")
    assert rc == 0 and out.startswith(f"superseded {replaced}; the new memory: mem-")
    new_id = out.split("the new memory: ")[1].split()[0]
    rc, out, _ = _cli(capsys, home, "review", "undo", rejected, "--json")
    assert rc == 0 and json.loads(out)["review_status"] == "pending"
    rc, out, _ = _cli(capsys, home, "review", "undo", unmade)
    assert rc == 0 and out.startswith(f"undid its creation, so it is forgotten: {unmade}")
    # The operator still opens it by id, and is not told that undo would bring it back.
    rc, out, _ = _cli(capsys, home, "show", unmade)
    assert rc == 0 and "\nforgotten\n" in out
    rc, _, err = _cli(capsys, home, "review", "undo", unmade)
    assert rc == 1 and "has no change left to undo" in err

    got = _read(home, *ids, new_id)
    assert not got[confirmed].use_policy.can_use_as_instruction
    assert got[confirmed].review_status == ReviewStatus.CONFIRMED
    assert got[edited].content == "Alice's desk is by the door"
    assert got[edited].review_status == ReviewStatus.CONFIRMED  # a person's edit confirms it
    assert str(got[moved].scope) == "project:infra"
    assert got[stale].review_status == ReviewStatus.STALE
    assert got[merged].content == "Lunch is at noon on Fridays"
    assert got[gone].status == RecordStatus.SUPERSEDED and got[gone].superseded_by == merged
    assert got[rejected].review_status == ReviewStatus.PENDING  # rejected, then undone
    assert got[rejected].revision == 3
    assert got[disputed].review_status == ReviewStatus.DISPUTED and got[disputed].provenance == Provenance.DISPUTED
    assert got[replaced].status == RecordStatus.SUPERSEDED and got[replaced].superseded_by == new_id
    assert got[new_id].content == "Ops rota is fortnightly" and str(got[new_id].scope) == "global"
    assert got[unmade].status == RecordStatus.DELETED


def test_refusals_say_why_and_change_nothing(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    group, shared, mine = _make(
        home,
        ("The group's build bot is called Otto", "channel:telegram:group:-100"),
        ("Everyone uses UTC", "global"),
        ("Alice's locker is 12", "personal:alice"),
    )
    refused: list[tuple[list[str], str]] = [
        (["scope", group, "global"], "a scope may only narrow: channel:telegram:group:-100 cannot become global"),
        # A secret of the config (a user's token) is refused like any other secret, and never echoed.
        (["edit", mine, "my", "token", "is", ALICE_TOKEN], "secrets are never stored"),
        (["--user", "alice", "confirm", shared], "only administrators review global memory"),
        (["--user", "bob", "confirm", mine], f"No memory {mine} that you can see."),
        (["merge", group, shared], "only memories of the same scope can be merged"),
        (["merge", group, group], "a memory cannot be merged with itself"),
        (["scope", group, "somewhere:else"], "unknown scope"),
    ]
    for argv, reason in refused:
        rc, out, err = _cli(capsys, home, "review", *argv)
        assert rc == 1 and out == "", argv
        assert reason in err and ALICE_TOKEN not in err, (argv, err)
    got = _read(home, group, shared, mine)
    assert all(r.revision == 1 and r.review_status == ReviewStatus.PENDING for r in got.values())
    assert got[mine].content == "Alice's locker is 12"


def test_memory_turned_off(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(config_data(tmp_path, None, memory__enabled=False)))
    rc, out, err = _cli(capsys, config, "review")
    assert rc == 2 and out == "" and "memory is turned off" in err
