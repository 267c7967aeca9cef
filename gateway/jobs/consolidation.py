"""Consolidation into Memory.md (DESIGN §8): `clawgate memory consolidate`, the `memory_consolidate`
tool and the `consolidate` job. The rules for what goes and what the model may do to a Memory.md are
memory/consolidation/rules.py's.

What moves: active global and personal records last changed more than `memory.consolidate_after_days`
ago (the run may look back another number of days) that a person stands behind (see
memory.consolidation.rules.skip_reason), and the global and personal daily files dated before that many days
ago. Global ones go into `data/memory/Memory.md`, a person's into `data/memory/users/<user>/Memory.md`.
Channel daily files stay where they are: no channel Memory.md exists to take them.

`plan` says what would move and changes nothing (a dry run is a plan). `run` asks the model about every
Memory.md first; a failed call, an unusable answer or a refused rewrite leaves every file and record as
it was. Only then, per Memory.md: the file is replaced atomically, the records are forgotten through
RecordStore (undoable within its window; actor "system", note "consolidated into Memory.md"), the daily
files move to `archived/<same relative path>` and leave the daily index. A Memory.md edited by hand
while the model was asked is left alone, with its records and files, and reported.

Logs: memory_consolidated (counts), memory_consolidate_refused (why).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from gateway.config.model import Config
from gateway.core.events import utcnow
from gateway.core.logs import event
from gateway.jobs.runner import JobFailed
from gateway.llm.client import LLMClient, LLMError, ModelSpec
from memory.archive.daily import DailyFiles
from memory.archive.daily_index import DailyIndex, write_owner_marker
from memory.consolidation import files, rules
from memory.records.model import MemoryRecord, ScopeKind
from memory.records.store import RecordNotFound, StaleRevision
from memory.store.jobs import Job
from memory.store.storage import Storage
from memory.trust.redact import redact

log = logging.getLogger("clawgate.consolidation")

CONSOLIDATE_JOB = "consolidate"
CONSOLIDATE_KEY = "sys:consolidate"
ACTOR = "system"
NOTE = "consolidated into Memory.md"
MAX_RECORDS = 1000  # per run; the rest waits for the next one (reported as more_remaining)
MAX_FILES = 200

Progress = Callable[[str], None]


class ConsolidationError(Exception):
    """Nothing was consolidated, for the reason given (nothing changed)."""


class ConsolidationRefused(ConsolidationError):
    """A rewrite of a Memory.md that would drop too much of it (nothing changed)."""


@dataclass
class Target:
    """One Memory.md and what goes into it."""

    core: Path
    scope: str  # global | personal:<user>
    owner: str | None
    records: list[MemoryRecord] = field(default_factory=list)
    files: list[tuple[Path, Path]] = field(default_factory=list)  # (daily file, where it is archived)


@dataclass
class Plan:
    lookback_days: int
    now: datetime
    cutoff: datetime  # records last changed before this
    cutoff_day: date  # daily files dated before this (local day)
    targets: list[Target]
    skipped_records: dict[str, int]
    skipped_files: dict[str, int]
    channel_files: int
    more: bool


@dataclass
class _Outcome:
    text: str
    before: str
    added: int = 0
    dropped: int = 0
    refused: int = 0


class Consolidator:
    def __init__(
        self,
        config: Config,
        storage: Storage,
        llm: LLMClient,
        daily: DailyFiles,
        daily_index: DailyIndex | None,
        secrets: list[str],
        chain: Callable[[], list[ModelSpec]],
    ) -> None:
        self.config = config
        self.storage = storage
        self.llm = llm
        self.daily = daily
        self.daily_index = daily_index
        self.secrets = secrets
        self.chain = chain
        self.on_change: Callable[[], None] | None = None  # records changed (recall re-embeds)

    @property
    def root(self) -> Path:
        return self.daily.root

    # -- what would move ---------------------------------------------------------------------------

    async def plan(
        self, *, lookback_days: int | None = None, now: datetime | None = None, owner: str | None = None
    ) -> Plan:
        """What would move. With `owner` (a person runs it, through the memory_consolidate tool) only
        global memory and that person's own are looked at: other people's personal memory is
        consolidated by the operator's CLI alone (DESIGN §8)."""
        days = self.config.memory.consolidate_after_days if lookback_days is None else lookback_days
        if days < 0:
            raise ValueError("the lookback must be 0 days or more")
        now = now or utcnow()
        cutoff = now - timedelta(days=days)
        cutoff_day = now.astimezone(ZoneInfo(self.config.timezone)).date() - timedelta(days=days)
        found = await self.storage.records.active(
            scope_kinds=[ScopeKind.GLOBAL, ScopeKind.PERSONAL], updated_before=cutoff, limit=MAX_RECORDS + 1
        )
        plan = Plan(days, now, cutoff, cutoff_day, [], {}, {}, 0, len(found) > MAX_RECORDS)
        targets: dict[Path, Target] = {}
        mine = {"global", f"personal:{owner}"} if owner is not None else None
        for record in found[:MAX_RECORDS]:
            if mine is not None and str(record.scope) not in mine:
                continue  # someone else's: not this person's to consolidate, nor to be told about
            reason = rules.skip_reason(record, now)
            if reason is not None:
                plan.skipped_records[reason] = plan.skipped_records.get(reason, 0) + 1
                continue
            self._target(targets, str(record.scope)).records.append(record)
        old = await asyncio.to_thread(files.daily_files_before, self.root, cutoff_day)
        taken: set[Path] = set()
        moving = 0
        for daily in old:
            if daily.scope is None:
                plan.skipped_files["owner_unknown"] = plan.skipped_files.get("owner_unknown", 0) + 1
                continue
            if mine is not None and daily.scope not in mine and not daily.scope.startswith("channel:"):
                continue
            if daily.scope.startswith("channel:"):
                plan.channel_files += 1
                continue
            if moving == MAX_FILES:
                plan.more = True
                break
            destination = await asyncio.to_thread(files.archive_path, self.root, daily.path, taken)
            taken.add(destination)
            self._target(targets, daily.scope).files.append((daily.path, destination))
            moving += 1
        plan.targets = sorted(targets.values(), key=lambda t: (t.scope != "global", t.scope))
        return plan

    def _target(self, targets: dict[Path, Target], scope: str) -> Target:
        owner = None if scope == "global" else scope.partition(":")[2]
        core = self.root / files.CORE_NAME if owner is None else self.daily.directory("user", owner) / files.CORE_NAME
        if core not in targets:
            targets[core] = Target(core, scope, owner)
        return targets[core]

    def report(self, plan: Plan, *, dry_run: bool) -> dict[str, Any]:
        """What the plan moves, by Memory.md: the same shape for a dry run and a real run's result."""
        return {
            "dry_run": dry_run,
            "lookback_days": plan.lookback_days,
            "records_changed_before": plan.cutoff.isoformat(timespec="seconds"),
            "files_dated_before": plan.cutoff_day.isoformat(),
            "targets": [
                {
                    "memory_md": self._rel(t.core),
                    "scope": t.scope,
                    "records": [r.id for r in t.records],
                    "files": [{"from": self._rel(s), "to": self._rel(d)} for s, d in t.files],
                }
                for t in plan.targets
            ],
            "skipped_records": dict(sorted(plan.skipped_records.items())),
            "skipped_files": dict(sorted(plan.skipped_files.items())),
            "channel_files_left": plan.channel_files,
            "more_remaining": plan.more,
        }

    def _rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    # -- the real run ------------------------------------------------------------------------------

    async def run(self, plan: Plan, *, run_id: str, progress: Progress | None = None) -> dict[str, Any]:
        """Consolidate what `plan` lists (see the module doc); the report of what moved.
        ConsolidationError (nothing changed) when the model fails or a rewrite is refused."""
        say = progress or (lambda _line: None)
        report = self.report(plan, dry_run=False)
        if not plan.targets:
            event(log, "memory_consolidated", targets=0, records=0, files=0, entries=0)
            return report
        outcomes = await self._ask_all(plan, run_id, say)
        forgotten = moved = entries = 0
        for target, item in zip(plan.targets, report["targets"], strict=True):
            say(f"writing {item['memory_md']}")
            await self._write(target, outcomes[target.core], item)
            forgotten += len(item["records"])
            moved += len(item["files"])
            entries += item["entries_added"]
        if forgotten and self.on_change is not None:
            self.on_change()
        event(
            log,
            "memory_consolidated",
            targets=len(plan.targets),
            records=forgotten,
            files=moved,
            entries=entries,
            skipped_records=sum(plan.skipped_records.values()),
            channel_files_left=plan.channel_files,
        )
        return report

    async def _ask_all(self, plan: Plan, run_id: str, say: Progress) -> dict[Path, _Outcome]:
        chain = self.chain()
        today = plan.now.astimezone(ZoneInfo(self.config.timezone)).date()
        outcomes: dict[Path, _Outcome] = {}
        for n, target in enumerate(plan.targets, start=1):
            where = self._rel(target.core)
            current = await asyncio.to_thread(files.read_text, target.core)
            if rules.has_marker(current, run_id):  # written by this run before it was cut off
                outcomes[target.core] = _Outcome(current, current)
                continue
            if not chain:
                self._refused("no_model", where)
                raise ConsolidationError("no model is configured (ai.model): nothing was consolidated")
            notes = [rules.record_note(r) for r in target.records]
            for source, _ in target.files:
                text = await asyncio.to_thread(files.read_text, source)
                notes.append(rules.Note(self._rel(source), redact(text, self.secrets)))
            outcome = _Outcome(current, current)
            pieces = rules.parts(notes)
            for i, piece in enumerate(pieces, start=1):
                say(f"[{n}/{len(plan.targets)}] {where}: asking the model (part {i}/{len(pieces)})")
                answer = await self._answer(chain, outcome.text, piece, where)
                try:
                    applied = rules.apply_answer(outcome.text, answer, today, run_id, self.secrets)
                    rules.check_rewrite(current, applied.text)  # several parts must not add up to more
                except rules.RewriteRefused as exc:
                    self._refused("drop", where, dropped=exc.dropped, entries=exc.total)
                    raise ConsolidationRefused(f"{where}: {exc}; nothing was changed") from None
                outcome.text = applied.text
                outcome.added += applied.added
                outcome.dropped += applied.dropped
                outcome.refused += applied.refused
            outcomes[target.core] = outcome
        return outcomes

    async def _answer(self, chain: list[ModelSpec], current: str, piece: str, where: str) -> rules.Answer:
        text = redact(rules.prompt(current, piece), self.secrets)
        try:
            answer = await self.llm.ask(chain, rules.INSTRUCTIONS, text)
        except LLMError as exc:
            self._refused("model_failed", where, kind=exc.kind)
            raise ConsolidationError(f"the model failed ({exc.kind}): nothing was consolidated") from None
        try:
            return rules.parse_answer(answer)
        except rules.UnusableAnswer as exc:
            self._refused("unusable_answer", where)
            raise ConsolidationError(f"{where}: {exc}; nothing was consolidated") from None

    def _refused(self, why: str, target: str, **ctx: Any) -> None:
        event(log, "memory_consolidate_refused", logging.WARNING, why=why, target=target, **ctx)

    async def _write(self, target: Target, outcome: _Outcome, item: dict[str, Any]) -> None:
        """Write one Memory.md, then forget its records and archive its files; `item` (its part of the
        report) is updated to what really moved (nothing, when the Memory.md was edited meanwhile)."""
        item.update(entries_added=outcome.added, entries_dropped=outcome.dropped, entries_refused=outcome.refused)
        item["not_moved"] = []
        if outcome.text != outcome.before:
            if not await asyncio.to_thread(self._replace_core, target, outcome):
                self._refused("edited_meanwhile", item["memory_md"])
                item["not_moved"] = [*item["records"], *(f["from"] for f in item["files"])]
                item.update(records=[], files=[], entries_added=0, entries_dropped=0, why="edited_meanwhile")
                return
        kept: list[str] = []
        for record in target.records:
            try:
                await self.storage.records.forget(record.id, ACTOR, note=NOTE, expected_revision=record.revision)
            except (StaleRevision, RecordNotFound):  # changed or gone since it was read: not what the model saw
                kept.append(record.id)
        moved: list[dict[str, str]] = []
        for (source, destination), shown in zip(target.files, item["files"], strict=True):
            if await asyncio.to_thread(files.move, source, destination):
                if self.daily_index is not None:
                    await self.daily_index.drop(source)
                moved.append(shown)
            else:
                kept.append(shown["from"])
        item["records"] = [r for r in item["records"] if r not in kept]
        item["files"] = moved
        item["not_moved"] = kept

    def _replace_core(self, target: Target, outcome: _Outcome) -> bool:
        """Write the new Memory.md unless someone changed the file since it was read (worker thread)."""
        if files.read_text(target.core) != outcome.before:
            return False
        if target.owner is not None:
            write_owner_marker(target.core.parent, target.owner)
        files.write_core(target.core, outcome.text)
        return True

    # -- the job -------------------------------------------------------------------------------------

    async def handle_job(self, job: Job) -> Mapping[str, Any]:
        """The `consolidate` job: payload {"now": ISO time, "lookback_days": N}, fixed when it was queued,
        so a run cut off and claimed again plans the same items (minus those already moved) and finds
        its own marker in the Memory.md files it already wrote."""
        now = datetime.fromisoformat(str(job.payload["now"]))
        days = job.payload.get("lookback_days")
        owner = job.payload.get("owner")
        plan = await self.plan(
            lookback_days=None if days is None else int(days), now=now, owner=None if owner is None else str(owner)
        )
        try:
            report = await self.run(plan, run_id=f"job-{job.id}")
        except ConsolidationRefused as exc:
            raise JobFailed(str(exc), permanent=True) from None
        return summary(report)


def summary(report: Mapping[str, Any]) -> dict[str, Any]:
    """Counts of a report (for a job's result, a tool's answer in a group)."""
    targets = report["targets"]
    return {
        "dry_run": report["dry_run"],
        "memory_md": len(targets),
        "records": sum(len(t["records"]) for t in targets),
        "files": sum(len(t["files"]) for t in targets),
        "entries_added": sum(t.get("entries_added", 0) for t in targets),
        "not_moved": sum(len(t.get("not_moved", [])) for t in targets),
        "channel_files_left": report["channel_files_left"],
        "more_remaining": report["more_remaining"],
    }


async def queue_consolidation(
    jobs: Any, lookback_days: int | None, now: datetime | None = None, owner: str | None = None
) -> int | None:
    """Queue a `consolidate` job (JobRunner.enqueue) with its time fixed now; its id. `owner`: a
    person's run (global memory and theirs only, see Consolidator.plan); None: the operator's."""
    payload: dict[str, Any] = {"now": (now or utcnow()).isoformat(), "lookback_days": lookback_days}
    if owner is not None:
        payload["owner"] = owner
    # One key for every run, so that runs (which may all rewrite the global Memory.md) go one at a time.
    job_id: int | None = await jobs.enqueue(CONSOLIDATE_JOB, CONSOLIDATE_KEY, payload)
    return job_id
