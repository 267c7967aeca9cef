"""Consolidation into Memory.md and the daily merge, end to end (DESIGN §8): a scripted fake model behind
real LiteLLM, the real database, files, job queue and CLI. A dry run changes nothing and lists exactly
what the real run then moves (records forgotten, files archived, Memory.md appended, nothing else); a
rewrite that drops more than a quarter of a Memory.md is refused with nothing changed; a run cut off
after writing finishes without asking twice; the merge job is queued by its schedule, merges, and is
undone to the byte; the tool refuses a plain user."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import aiohttp
import pytest
import yaml
from sqlalchemy import select

from gateway.app import Gateway
from gateway.core.events import utcnow
from gateway.jobs.consolidation import ConsolidationRefused, Consolidator
from gateway.jobs.merge import MERGE_JOB, MergeScheduler
from memory.archive.daily import DailyFiles
from memory.archive.daily_index import DailyIndex, write_owner_marker
from memory.consolidation.rules import INSTRUCTIONS, marker
from memory.records.model import MemoryClass, MemoryRecord, Provenance, RecordStatus, ReviewStatus, UsePolicy
from memory.records.revisions import RevisionLog
from memory.records.rows import snapshot
from memory.records.store import RecordStore
from memory.store.jobs import DONE
from memory.store.schema import daily_chunks, memory_records
from memory.store.storage import Storage
from tests.cli import run_cli
from tests.conftest import ALICE_TOKEN, ROOT_TOKEN, auth
from tests.fakes.llm import Behavior, FakeLLM, Reply, ToolCall, echo

API_KEY = "sk-test-not-a-real-key-000000"  # the configured ai.api_key: a secret
CONFIRMED = UsePolicy(can_use_as_instruction=True, requires_user_confirmation=False)
UNCONFIRMED = UsePolicy(can_use_as_instruction=False, requires_user_confirmation=True)
GLOBAL_CORE = "# Memory\n\n- The office is in Berlin\n- Releases need two approvals\n"
BOOKKEEPING = ("revision", "updated_at")


class Model:
    """Answers consolidation requests by which Memory.md they are about (a word of its notes); echoes
    anything else."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    def __call__(self, req: dict[str, Any]) -> Behavior:
        if req["messages"][0]["content"] != INSTRUCTIONS:
            return echo(req)
        prompt = str(req["messages"][1]["content"])
        self.asked.append(prompt)
        for word, answer in self.answers.items():
            if word in prompt:
                return Reply(answer)
        return Reply('{"entries": []}')


def core_of(gw: Gateway) -> Consolidator:
    assert gw.consolidator is not None
    return gw.consolidator


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


async def records_state(storage: Storage, *, bookkeeping: bool = True) -> str:
    rows = await storage.db.read(lambda c: c.execute(select(memory_records.c.id)).scalars().all())
    found = await storage.records.get_many(sorted(rows), include_deleted=True)
    shown = [{k: v for k, v in snapshot(r).items() if bookkeeping or k not in BOOKKEEPING} for r in found]
    return json.dumps(shown, sort_keys=True)


async def chunk_paths(storage: Storage) -> set[str]:
    return set(await storage.db.read(lambda c: c.execute(select(daily_chunks.c.path)).scalars().all()))


async def add(
    records: RecordStore,
    content: str,
    scope: str,
    age_days: float,
    *,
    provenance: Provenance = Provenance.USER_CONFIRMED,
    use: UsePolicy = CONFIRMED,
    review: ReviewStatus = ReviewStatus.NONE,
    memory_class: MemoryClass = MemoryClass.DURABLE_FACT,
) -> MemoryRecord:
    return await records.create(
        content,
        memory_class=memory_class,
        provenance=provenance,
        use_policy=use,
        scope=scope,
        author="alice" if scope.startswith("personal") else "root",
        review_status=review,
        now=utcnow() - timedelta(days=age_days),
    )


class Seeded:
    """Records and daily files of several ages and owners, and the global Memory.md."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ids: dict[str, str] = {}
        self.files: dict[str, Path] = {}


async def seed(storage: Storage, root: Path, today: date) -> Seeded:
    s = Seeded(root)
    records = storage.records
    s.ids["global"] = (await add(records, "Deploys happen on Tuesdays", "global", 60)).id
    s.ids["pending"] = (await add(records, "The VPN is down", "global", 60, review=ReviewStatus.PENDING)).id
    s.ids["recent"] = (await add(records, "The cafeteria closes at 3", "global", 2)).id
    s.ids["alice"] = (await add(records, "Alice prefers dark mode", "personal:alice", 50)).id
    s.ids["unconfirmed"] = (
        await add(records, "Alice may like jazz", "personal:alice", 45, provenance=Provenance.INFERRED, use=UNCONFIRMED)
    ).id
    s.ids["bob"] = (await add(records, "Bob owns the billing service", "personal:bob", 40)).id
    daily = DailyFiles(root)
    old, recent = today - timedelta(days=40), today - timedelta(days=2)
    s.files["global"] = daily.path("global", None, old)
    s.files["alice"] = daily.path("user", "alice", old)
    s.files["alice_recent"] = daily.path("user", "alice", recent)
    s.files["channel"] = daily.path("channel", "telegram:group:-100", old)
    daily.append(s.files["global"], "09:00 · web", ["The team moved standups to 10:00"])
    daily.append(s.files["alice"], "10:00 · web dm", ["Alice's laptop runs Fedora"])
    daily.append(s.files["alice_recent"], "10:00 · web dm", ["Alice is planning a trip"])
    daily.append(s.files["channel"], "11:00 · telegram group", ["The group votes on Fridays"])
    write_owner_marker(s.files["alice"].parent, "alice")
    write_owner_marker(s.files["channel"].parent, "telegram:group:-100")
    (root / "Memory.md").write_text(GLOBAL_CORE)
    assert await DailyIndex(storage.db, daily).scan() > 0
    return s


def moved(report: dict[str, Any]) -> list[tuple[str, str, list[str], list[dict[str, str]]]]:
    return [(t["memory_md"], t["scope"], t["records"], t["files"]) for t in report["targets"]]


async def test_a_dry_run_lists_exactly_what_the_real_run_moves_and_nothing_else(
    gateway_factory: Callable[..., Any], fake_llm: FakeLLM, tmp_path: Path
) -> None:
    gw = await gateway_factory(fake_llm)
    storage, cons = gw.storage, core_of(gw)
    root = cons.root
    s = await seed(storage, root, utcnow().date())
    model = Model(
        {
            "Deploys happen on Tuesdays": json.dumps(
                {"entries": ["Deploys happen on Tuesdays", f"The CI key is {API_KEY}", "Standups are at 10:00"]}
            ),
            "dark mode": "- Alice prefers dark mode\n- Alice's laptop runs Fedora",
        }
    )
    fake_llm.default = model
    files_before, records_before, chunks_before = tree(root), await records_state(storage), await chunk_paths(storage)

    dry = cons.report(await cons.plan(), dry_run=True)
    assert tree(root) == files_before and await records_state(storage) == records_before
    assert fake_llm.requests == []  # a dry run asks no model
    rel = {k: p.relative_to(root).as_posix() for k, p in s.files.items()}
    assert moved(dry) == [
        ("Memory.md", "global", [s.ids["global"]], [{"from": rel["global"], "to": f"archived/{rel['global']}"}]),
        (
            f"users/{Path(rel['alice']).parent.name}/Memory.md",
            "personal:alice",
            [s.ids["alice"]],
            [{"from": rel["alice"], "to": f"archived/{rel['alice']}"}],
        ),
        ("users/bob/Memory.md", "personal:bob", [s.ids["bob"]], []),
    ]
    assert dry["skipped_records"] == {"pending": 1, "unconfirmed": 1}
    assert dry["channel_files_left"] == 1 and dry["more_remaining"] is False

    real = await cons.run(await cons.plan(), run_id="test-1")
    assert moved(real) == moved(dry)
    assert [t["entries_added"] for t in real["targets"]] == [3, 2, 0]

    # Records: the three consolidated ones forgotten (undoably, by "system"), the others untouched.
    for key in ("global", "alice", "bob"):
        assert await storage.records.get(s.ids[key]) is None
        last = (await storage.records.revisions(s.ids[key]))[-1]
        assert (last.action, last.actor, last.note) == ("forget", "system", "consolidated into Memory.md")
    others = [i for k, i in s.ids.items() if k not in ("global", "alice", "bob")]
    assert [r.revision for r in await storage.records.get_many(others)] == [1, 1, 1]

    # Files: exactly the two Memory.md files changed, exactly the two old daily files moved.
    files_after = tree(root)
    changed = {p for p in files_before.keys() | files_after.keys() if files_before.get(p) != files_after.get(p)}
    core_alice = f"users/{Path(rel['alice']).parent.name}/Memory.md"
    assert changed == {
        "Memory.md",
        core_alice,
        rel["global"],
        rel["alice"],
        f"archived/{rel['global']}",
        f"archived/{rel['alice']}",
    }
    assert files_after[f"archived/{rel['global']}"] == files_before[rel["global"]]
    assert files_after[f"archived/{rel['alice']}"] == files_before[rel["alice"]]
    core = files_after["Memory.md"].decode()
    assert core.startswith(GLOBAL_CORE) and "- Standups are at 10:00\n" in core and marker("test-1") in core
    assert API_KEY not in core and "- The CI key is [redacted]" in core
    assert "- Alice's laptop runs Fedora\n" in files_after[core_alice].decode()
    assert "users/bob/Memory.md" not in files_after  # nothing was worth keeping: no file written
    assert await chunk_paths(storage) == chunks_before - {rel["global"], rel["alice"]}

    # Each Memory.md's model call saw only its own people's memory.
    [global_prompt] = [p for p in model.asked if "Deploys happen" in p]
    assert "dark mode" not in global_prompt and "Fedora" not in global_prompt and "billing" not in global_prompt
    [alice_prompt] = [p for p in model.asked if "dark mode" in p]
    assert "Fedora" in alice_prompt and "Deploys" not in alice_prompt and "billing" not in alice_prompt

    # A consolidated record comes back with an undo of its forget.
    forget = (await RevisionLog(storage.db).list(record_id=s.ids["alice"], limit=1))[0]
    await RevisionLog(storage.db).undo(forget.id, "cli")
    assert (await storage.records.get(s.ids["alice"])).content == "Alice prefers dark mode"  # type: ignore[union-attr]


async def test_a_rewrite_dropping_more_than_a_quarter_is_refused_and_nothing_changes(
    gateway_factory: Callable[..., Any], fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    gw = await gateway_factory(fake_llm)
    storage, cons = gw.storage, core_of(gw)
    s = await seed(storage, cons.root, utcnow().date())
    alice_core = s.files["alice"].parent / "Memory.md"
    alice_core.write_text("# Alice\n\n- Alice works remotely\n- Alice lives in Lyon\n- Alice speaks French\n")
    # The global Memory.md would be appended to (fine); Alice's rewrite keeps 1 of her 3 entries.
    fake_llm.default = Model(
        {
            "Deploys happen on Tuesdays": '{"entries": ["Standups are at 10:00"]}',
            "dark mode": json.dumps({"memory_md": "# Alice\n\n- Alice works remotely\n- Alice prefers dark mode\n"}),
        }
    )
    files_before, records_before = tree(cons.root), await records_state(storage)
    with caplog.at_level(logging.INFO, logger="clawgate.consolidation"):
        with pytest.raises(ConsolidationRefused, match="drop 2 of the 3 existing entries"):
            await cons.run(await cons.plan(), run_id="test-2")
    assert tree(cons.root) == files_before and await records_state(storage) == records_before
    refusals = [r.getMessage() for r in caplog.records if r.getMessage().startswith("memory_consolidate_refused")]
    assert len(refusals) == 1 and "why=drop" in refusals[0] and "dropped=2" in refusals[0]
    assert not any(r.getMessage().startswith("memory_consolidated") for r in caplog.records)


async def test_a_run_cut_off_after_writing_memory_md_finishes_without_asking_again(
    gateway_factory: Callable[..., Any], fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    gw = await gateway_factory(fake_llm)
    storage, cons = gw.storage, core_of(gw)
    s = await seed(storage, cons.root, utcnow().date())
    model = Model({"Deploys happen on Tuesdays": '{"entries": ["Standups are at 10:00"]}'})
    fake_llm.default = model
    now = utcnow()
    real_forget = storage.records.forget

    class Killed(BaseException):
        """The process dies right after the Memory.md was written."""

    async def killed(*args: Any, **kw: Any) -> Any:
        raise Killed

    monkeypatch.setattr(storage.records, "forget", killed)
    with pytest.raises(Killed):
        await cons.run(await cons.plan(now=now), run_id="job-9")
    core = (cons.root / "Memory.md").read_text()
    assert core.count("Standups are at 10:00") == 1 and s.files["global"].exists()
    asked = len(model.asked)

    monkeypatch.setattr(storage.records, "forget", real_forget)
    again = await cons.run(await cons.plan(now=now), run_id="job-9")  # the job claimed again
    global_target = again["targets"][0]
    assert global_target["records"] == [s.ids["global"]] and global_target["entries_added"] == 0
    assert (cons.root / "Memory.md").read_text() == core  # written once
    assert not s.files["global"].exists() and await storage.records.get(s.ids["global"]) is None
    assert len(model.asked) == asked + 2  # Alice's and Bob's Memory.md were not written: asked again; global not


async def test_a_memory_md_edited_by_hand_while_the_model_is_asked_is_left_alone(
    gateway_factory: Callable[..., Any], fake_llm: FakeLLM
) -> None:
    gw = await gateway_factory(fake_llm)
    storage, cons = gw.storage, core_of(gw)
    s = await seed(storage, cons.root, utcnow().date())
    model = Model({"Deploys happen on Tuesdays": '{"entries": ["Standups are at 10:00"]}'})

    def asked_while_someone_edits(req: dict[str, Any]) -> Behavior:
        if "Deploys happen on Tuesdays" in str(req["messages"][-1]["content"]):
            (cons.root / "Memory.md").write_text(GLOBAL_CORE + "- Added by hand\n")
        return model(req)

    fake_llm.default = asked_while_someone_edits
    report = await cons.run(await cons.plan(), run_id="test-3")
    global_target = report["targets"][0]
    rel = s.files["global"].relative_to(cons.root).as_posix()
    assert global_target["records"] == [] and global_target["files"] == []
    assert global_target["not_moved"] == [s.ids["global"], rel] and global_target["why"] == "edited_meanwhile"
    assert (cons.root / "Memory.md").read_text() == GLOBAL_CORE + "- Added by hand\n"
    assert await storage.records.get(s.ids["global"]) is not None and s.files["global"].exists()
    assert [t["records"] for t in report["targets"][1:]] == [[s.ids["alice"]], [s.ids["bob"]]]  # the others went


async def test_the_scheduled_merge_job_merges_learned_notes_and_its_undo_restores_them_to_the_byte(
    gateway_factory: Callable[..., Any], fake_llm: FakeLLM
) -> None:
    gw = await gateway_factory(fake_llm, timezone="Europe/Berlin")
    storage = gw.storage
    assert gw.jobs is not None
    learned = {"provenance": Provenance.INFERRED, "use": UNCONFIRMED, "memory_class": MemoryClass.EVIDENCE}
    pending = {**learned, "review": ReviewStatus.PENDING}
    short = await add(storage.records, "Alice uses vim", "personal:alice", 3, **pending)  # type: ignore[arg-type]
    full = await add(storage.records, "Alice uses vim with the solarized theme", "personal:alice", 2, **pending)  # type: ignore[arg-type]
    again = await add(storage.records, "alice uses VIM.", "personal:alice", 1, **learned)  # type: ignore[arg-type]
    confirmed = await add(storage.records, "Alice uses vim", "personal:alice", 5)  # a person's: never merged
    other = await add(storage.records, "Alice uses vim", "channel:web:room", 3, **pending)  # type: ignore[arg-type]
    before = await records_state(storage, bookkeeping=False)

    berlin = ZoneInfo("Europe/Berlin")
    three_today = datetime.combine(utcnow().astimezone(berlin).date(), time(3, 0), tzinfo=berlin)
    scheduler = MergeScheduler(gw.jobs.enqueue, time(3, 0), berlin, lambda: three_today)
    await scheduler.tick()
    await scheduler.tick()  # twice: still one job
    await gw.jobs.idle()
    [job] = await storage.jobs.list(kind=MERGE_JOB)
    assert job.status == DONE and job.result is not None
    assert (job.result["groups"], job.result["records"]) == (1, 2)

    now = {r.id: r for r in await storage.records.get_many([short.id, full.id, again.id, confirmed.id, other.id])}
    assert now[full.id].status == RecordStatus.ACTIVE and now[full.id].content == full.content
    assert [now[i].status for i in (short.id, again.id)] == [RecordStatus.SUPERSEDED] * 2
    assert now[short.id].superseded_by == full.id == now[again.id].superseded_by
    assert now[confirmed.id].revision == 1 and now[other.id].revision == 1
    [batch] = job.result["batches"]
    revs = await RevisionLog(storage.db).list(batch=batch)
    assert {r.record_id for r in revs} == {short.id, full.id, again.id} and {r.action for r in revs} == {"merge"}

    await RevisionLog(storage.db).undo(revs[-1].id, "cli")
    assert await records_state(storage, bookkeeping=False) == before
    assert await gw.jobs.run_once() is None  # and nothing new was queued


async def test_the_tool_refuses_a_plain_user_and_serves_an_admin(
    gateway_factory: Callable[..., Any], fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    gw = await gateway_factory(fake_llm)
    s = await seed(gw.storage, core_of(gw).root, utcnow().date())

    async def turn(token: str, arguments: dict[str, Any]) -> dict[str, Any]:
        fake_llm.script(ToolCall("memory_consolidate", arguments), Reply("done"))
        start = len(fake_llm.requests)
        r = await http.post(gw.url + "/api/v1/messages", json={"text": "consolidate memory"}, headers=auth(token))
        assert r.status == 200, await r.text()
        tool_messages = [m for m in fake_llm.requests[start + 1]["messages"] if m.get("role") == "tool"]
        return dict(json.loads(tool_messages[-1]["content"]))

    refused = await turn(ALICE_TOKEN, {"dry_run": False})  # not offered to her: the model made it up
    offered = [t["function"]["name"] for t in fake_llm.requests[-2].get("tools", [])]
    assert "memory_consolidate" not in offered and "store_memory" in offered
    assert refused["error"] == "unknown tool 'memory_consolidate'" and "would_move" not in refused
    assert await gw.storage.records.get(s.ids["global"]) is not None
    assert await gw.storage.jobs.list(kind="consolidate") == []

    shown = await turn(ROOT_TOKEN, {})  # a dry run unless asked otherwise
    assert shown["dry_run"] is True
    # An administrator's run covers shared memory and their own: never alice's or bob's, not even by id.
    assert [t["records"] for t in shown["would_move"]["targets"]] == [[s.ids["global"]]]
    assert s.ids["alice"] not in json.dumps(shown) and s.ids["bob"] not in json.dumps(shown)
    assert await gw.storage.records.get(s.ids["global"]) is not None

    fake_llm.default = Model({})  # the queued run's model calls: nothing worth keeping
    queued = await turn(ROOT_TOKEN, {"dry_run": False, "lookback_days": 30})
    assert gw.jobs is not None and queued["queued_job"]
    await gw.jobs.idle()
    job = await gw.storage.jobs.get(queued["queued_job"])
    assert job is not None and job.status == DONE and job.result is not None and job.result["records"] == 1
    assert await gw.storage.records.get(s.ids["global"]) is None and not s.files["global"].exists()
    for person in ("alice", "bob"):  # other people's memory is the operator's to consolidate (the CLI)
        assert await gw.storage.records.get(s.ids[person]) is not None
    assert s.files["alice"].exists()


# -- the CLI -----------------------------------------------------------------------------------------


def cli_config(tmp_path: Path, fake: FakeLLM) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "ai": {"model": "openai/fake-model", "api_base": fake.api_base, "api_key": API_KEY, "retries": 0},
                "storage": {"data_dir": str(tmp_path / "data")},
            }
        )
    )
    return path


async def test_cli_consolidate_dry_run_then_real_run_and_revisions(tmp_path: Path, fake_llm: FakeLLM) -> None:
    config = cli_config(tmp_path, fake_llm)
    root = tmp_path / "data" / "memory"
    storage = await Storage.open(f"sqlite:///{tmp_path}/data/clawgate.db")
    try:
        s = await seed(storage, root, utcnow().date())
    finally:
        await storage.close()
    files_before = tree(root)

    rc, out, err = await run_cli("--config", str(config), "memory", "consolidate", "--dry-run", "--json")
    assert rc == 0, err
    dry = json.loads(out)
    assert dry["dry_run"] is True and tree(root) == files_before and fake_llm.requests == []
    rc, text_out, _ = await run_cli("--config", str(config), "memory", "consolidate", "--dry-run")
    assert rc == 0 and "dry run: nothing was changed" in text_out and s.ids["global"] in text_out
    assert "channel daily files left alone" in text_out

    fake_llm.default = Model({"Deploys": '{"entries": ["Standups are at 10:00"]}'})
    rc, out, err = await run_cli("--config", str(config), "memory", "consolidate", "--json")
    assert rc == 0, err
    assert "asking the model" in err  # progress, on stderr
    real = json.loads(out)
    assert moved(real) == moved(dry)
    assert "- Standups are at 10:00" in (root / "Memory.md").read_text()

    rc, out, err = await run_cli("--config", str(config), "memory", "revisions", "list", "--record", s.ids["bob"])
    assert rc == 0, err
    forget_id = int(out.split()[0])
    assert "forget" in out.splitlines()[0] and "consolidated into Memory.md" in out.splitlines()[0]
    rc, out, _ = await run_cli("--config", str(config), "memory", "revisions", "show", str(forget_id))
    assert rc == 0 and '- status: "active"' in out and '+ status: "deleted"' in out
    assert '- content: "Bob owns the billing service"' in out and '+ content: ""' in out
    rc, out, err = await run_cli("--config", str(config), "memory", "revisions", "undo", str(forget_id))
    assert rc == 0, err
    assert "undid revision" in out and s.ids["bob"] in out and "active" in out
    rc, _, err = await run_cli("--config", str(config), "memory", "revisions", "undo", str(forget_id))
    assert rc == 1 and "undone already" in err


async def test_cli_undoes_a_merge_as_a_whole_and_refuses_an_older_change(tmp_path: Path, fake_llm: FakeLLM) -> None:
    from gateway.jobs.merge import Merger

    config = cli_config(tmp_path, fake_llm)
    storage = await Storage.open(f"sqlite:///{tmp_path}/data/clawgate.db")
    try:
        learned = {"provenance": Provenance.INFERRED, "use": UNCONFIRMED, "memory_class": MemoryClass.EVIDENCE}
        a = await add(storage.records, "Deploys need a ticket", "global", 2, **learned)  # type: ignore[arg-type]
        b = await add(storage.records, "Deploys need a ticket in the tracker", "global", 1, **learned)  # type: ignore[arg-type]
        before = await records_state(storage, bookkeeping=False)
        result = await Merger(storage.records, RevisionLog(storage.db)).merge()
        [batch] = result["batches"]
        member = next(r for r in await RevisionLog(storage.db).list(batch=batch) if r.record_id == a.id)
        create = (await RevisionLog(storage.db).list(record_id=b.id))[-1]
    finally:
        await storage.close()

    rc, _, err = await run_cli("--config", str(config), "memory", "revisions", "undo", str(create.id))
    assert rc == 1 and "changed after it (revision" in err and "undo revision" in err
    rc, out, _ = await run_cli("--config", str(config), "memory", "revisions", "show", str(member.id))
    assert rc == 0 and f"batch {batch}" in out and f'+ superseded_by: "{b.id}"' in out
    rc, out, err = await run_cli("--config", str(config), "memory", "revisions", "undo", str(member.id))
    assert rc == 0, err
    assert f"undid batch {batch} (2 records)" in out
    storage = await Storage.open(f"sqlite:///{tmp_path}/data/clawgate.db")
    try:
        assert await records_state(storage, bookkeeping=False) == before
    finally:
        await storage.close()
    rc, _, err = await run_cli("--config", str(config), "memory", "revisions", "show", "999999")
    assert rc == 1 and "no revision 999999" in err
