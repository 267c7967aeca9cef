"""A new memory against what its scope already holds (docs/recall.md, "Duplicates and supersession"):
nominate the near-duplicates, have the background model adjudicate, and apply its verdict within the
writer's rights. memory/records/duplicates.py holds the rules, memory/records/adjudication.py what the
model is asked; this module reads, asks and writes.

Every new memory is written first, as it always was, and compared afterwards: the new fact is never
lost to a slow or failing model. `/remember` and `store_memory` wait for the verdict up to
`memory.dedupe.inline_timeout_seconds` (a nomination-free write, most of them, asks no model at all);
past it, or when the model fails, the comparison is queued as a `dedupe` job. Formation and
`clawgate memory import` queue that job for what they wrote. Only records of the new memory's own
scope are compared, so nothing one person or group wrote is ever compared with another's memory.

Who may change what: a person's own `/remember` may change what that person may review (their own
memory; shared memory for administrators); the model (`store_memory`, formation, import) only what
policy.model_may_change allows. For anything else the verdict becomes a proposal in the reviewer's
queue. Every change is one batch of revisions: one undo (of either record) undoes it.

Logs: memory_dedupe_checked (record, nominated, outcome, by, why, ms), memory_dedupe_queued (job,
records), memory_dedupe_failed (record, error). Never memory content.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from gateway.config.memory import DedupeConfig
from gateway.core.events import utcnow
from gateway.core.logs import event
from gateway.jobs.runner import JobFailed
from gateway.llm.client import LLMClient, LLMError, ModelSpec
from gateway.session.memory_service import MemoryRefused, MemoryService
from memory.embed.embeddings import Embedder
from memory.embed.index import DatabaseIndex, VectorIndex
from memory.embed.pgvector import Reach
from memory.records import adjudication
from memory.records.duplicates import (
    CREATE,
    Candidate,
    DecidedBy,
    Nominee,
    Outcome,
    Settled,
    Step,
    Verdict,
    appended,
    by_rule,
    candidate_ok,
    nominate,
    resolve,
)
from memory.records.model import MemoryRecord, RecordStatus
from memory.records.revisions import Change, RevisionLog
from memory.records.store import RecordError, RecordStore
from memory.store.jobs import Job, JobStore
from memory.trust import policy, writeback
from memory.trust.policy import Actor, Audience, Where
from memory.trust.redact import redact

log = logging.getLogger("clawgate.dedupe")

DEDUPE_JOB = "dedupe"
SYSTEM_AUTHOR = "system:dedupe"  # proposals of background comparisons
LEXICAL_POOL = 10  # full-text hits looked at per new memory
VECTOR_POOL = 10  # nearest vectors looked at per new memory


class Neighbours(Protocol):
    """What nomination reads of the turn's recall (gateway.recall.engine.TurnRecall): the embedder and
    the vector index once loaded, and the index group of a scope's records."""

    embedder: Embedder | None
    index: VectorIndex | DatabaseIndex | None

    def groups(
        self,
        scopes: Sequence[str],
        daily_scopes: Sequence[str],
        include_projects: bool,
        archive_user: str | None,
        archive_keys: Sequence[str],
    ) -> set[str]: ...


@dataclass(frozen=True, slots=True)
class Writer:
    """Who wrote the new memory, where, and who a proposal names as its author. A person typing it
    (`chat`) writes with their own rights; everything else with the model's."""

    actor: Actor
    where: Where
    author: str | None = None

    @property
    def person(self) -> bool:
        return self.actor.run == "chat"

    def may_change(self, record: MemoryRecord) -> bool:
        if self.person:
            return bool(policy.can_review(self.actor, record))
        return bool(policy.model_may_change(record))

    def proposer(self) -> str:
        if self.author:
            return self.author
        return (self.actor.user_id or self.actor.run) if self.person else SYSTEM_AUTHOR

    def payload(self) -> dict[str, Any]:
        a, w = self.actor, self.where
        return {
            "user": a.user_id,
            "roles": sorted(a.roles),
            "run": a.run,
            "audience": w.audience,
            "conversation": w.conversation,
            "projects": list(w.projects),
            "author": self.author,
        }

    @staticmethod
    def of(data: Mapping[str, Any]) -> Writer:
        actor = Actor(data.get("user"), frozenset(data.get("roles") or ()), data.get("run") or "scheduled")
        where = Where(
            data.get("audience") or "personal", data.get("conversation"), True, tuple(data.get("projects") or ())
        )
        return Writer(actor, where, data.get("author"))


def job_payload(records: Sequence[str], writer: Writer, *, apart: bool) -> dict[str, Any]:
    """A `dedupe` job's payload: the new records, the writer, and whether the records are compared
    apart from each other (formed or imported together: their own duplicates were folded already)."""
    return {"records": list(records), "writer": writer.payload(), "apart": apart}


async def queue_import(jobs: JobStore, records: Sequence[str], actor: Actor) -> int | None:
    """Queue the comparison of an import's records with what their scope held before (compared
    apart from each other: the file is the operator's to keep tidy); the gateway's job runner does
    it. The job's id."""
    payload = job_payload(records, Writer(actor, Where("personal", None)), apart=True)
    return await jobs.enqueue(DEDUPE_JOB, f"dedupe:{actor.user_id or 'import'}", payload)


class Duplicates:
    def __init__(
        self,
        memory: MemoryService,
        records: RecordStore,
        revisions: RevisionLog,
        llm: LLMClient,
        chain: Callable[[], list[ModelSpec]],
        secrets: list[str],
    ) -> None:
        self.memory = memory  # and its config (a reload hands the service the new one)
        self.records = records
        self.revisions = revisions
        self.llm = llm
        self.chain = chain
        self.secrets = secrets
        self.recall: Neighbours | None = None
        self.enqueue: Callable[..., Any] | None = None  # JobRunner.enqueue

    @property
    def settings(self) -> DedupeConfig:
        return self.memory.config.memory.dedupe

    # -- nomination ---------------------------------------------------------------------------------

    async def nominees(self, record: MemoryRecord, exclude: Collection[str] = ()) -> list[Nominee]:
        """The near-duplicates of `record` in its own scope (see memory/records/duplicates.py)."""
        scope = str(record.scope)
        now = utcnow()
        skip = {record.id, *exclude}
        lexical = await self.records.search(record.content, scopes=[scope], limit=LEXICAL_POOL, now=now)
        found = {r.id: r for r, _ in lexical if r.id not in skip}
        cosines = await self._cosines(record, scope, found, skip)
        if cosines:
            missing = [rid for rid in cosines if rid not in found]
            for r in await self.records.get_many(missing):
                found[r.id] = r
        candidates = [
            Candidate(r, None if cosines is None else cosines.get(r.id))
            for r in found.values()
            if candidate_ok(r, scope) and not r.expired(now)
        ]
        cfg = self.settings
        return nominate(
            record.content,
            candidates,
            min_cosine=cfg.min_cosine,
            min_overlap=cfg.min_overlap,
            limit=cfg.max_nominees,
        )

    async def _cosines(
        self, record: MemoryRecord, scope: str, lexical: Mapping[str, MemoryRecord], skip: Collection[str]
    ) -> dict[str, float] | None:
        """Each candidate's cosine to `record`: the scope's nearest vectors, and the full-text hits
        (embedded here when they have no vector yet). None while embeddings are off or loading."""
        recall = self.recall
        if recall is None or recall.embedder is None or recall.index is None:
            return None
        embedder, index = recall.embedder, recall.index
        try:
            mine = (await embedder.embed_documents([record.content]))[0]
            if isinstance(index, DatabaseIndex):
                near = await index.search(mine, VECTOR_POOL + len(skip), Reach(record_scopes=(scope,)))
            else:
                near = index.search(mine, VECTOR_POOL + len(skip), groups=recall.groups([scope], [], False, None, []))
            cosines = {item: cos for kind, item, cos in near if kind == "record" and item not in skip}
            keys = {("record", rid) for rid in lexical if rid not in cosines}
            if keys:  # full-text hits further away: their stored vectors, if they have one yet
                if isinstance(index, DatabaseIndex):
                    scored = await index.scores(mine, keys)
                else:
                    scored = index.search(mine, len(keys), keys)
                cosines.update({item: cos for _kind, item, cos in scored})
            unscored = [r for rid, r in lexical.items() if rid not in cosines]
            if unscored:
                vectors = await embedder.embed_documents([r.content for r in unscored])
                cosines.update({r.id: float(vectors[i] @ mine) for i, r in enumerate(unscored)})
        except Exception as exc:  # a failing embedding provider: nominate by words, and say so
            event(log, "memory_dedupe_degraded", logging.WARNING, record=record.id, error=type(exc).__name__)
            return None
        return cosines

    # -- the verdict --------------------------------------------------------------------------------

    async def verdict(self, record: MemoryRecord, nominees: Sequence[Nominee]) -> tuple[Verdict, str]:
        """(the verdict, who gave it: "rule" or "model"). LLMError when every model failed."""
        if not nominees:
            return CREATE, "rule"
        chain = self.chain()
        ruled = by_rule(nominees, model=bool(chain))
        if ruled is not None:
            return ruled, "rule"
        shown = [
            Nominee(
                _redacted(n.record, self.secrets),
                n.score,
                n.measure,
                n.contained,
                n.same,
            )
            for n in nominees
        ]
        text = adjudication.render(redact(record.content, self.secrets), shown, record.created_at)
        answer = await self.llm.ask(chain, adjudication.INSTRUCTIONS, text)
        return adjudication.parse(answer, [n.record.id for n in nominees]), "model"

    # -- a new memory, now ----------------------------------------------------------------------------

    async def settle(self, actor: Actor, where: Where, record: MemoryRecord, author: str | None = None) -> Settled:
        """Compare a memory just written by `actor` with its scope, and apply the verdict; past
        `inline_timeout_seconds`, or when the model fails, queue the comparison instead ("queued")."""
        if not self.settings.enabled or record.attribution is not None:
            return Settled("created", record)
        started = time.perf_counter()
        writer = Writer(actor, where, author)
        try:
            nominees = await self.nominees(record)
            if not nominees:
                self._checked(record, 0, "created", "rule", "none_nominated", started)
                return Settled("created", record)
            try:
                async with asyncio.timeout(self.settings.inline_timeout_seconds):
                    verdict, by = await self.verdict(record, nominees)
            except (TimeoutError, LLMError) as exc:
                queued = await self.queue([record.id], writer, apart=False)
                why = "timeout" if isinstance(exc, TimeoutError) else "model_failed"
                self._checked(record, len(nominees), "queued" if queued else "created", "none", why, started)
                return Settled("queued" if queued else "created", record, nominees[0].record)
            settled = await self.apply(record, nominees, verdict, by, writer)
        except Exception as exc:  # the memory is written: a failed comparison leaves it as it is
            event(log, "memory_dedupe_failed", logging.WARNING, record=record.id, error=type(exc).__name__)
            return Settled("created", record)
        self._checked(record, len(nominees), settled.outcome, by, verdict.why, started)
        return settled

    def _checked(self, record: MemoryRecord, n: int, outcome: str, by: str, why: str, started: float) -> None:
        ms = round((time.perf_counter() - started) * 1000, 1)
        event(log, "memory_dedupe_checked", record=record.id, nominated=n, outcome=outcome, by=by, why=why, ms=ms)

    async def queue(self, records: Sequence[str], writer: Writer, *, apart: bool) -> int | None:
        """Queue the comparison of `records` as a `dedupe` job (keyed by the first record's scope: one
        scope's comparisons run one at a time). Its id; None without a job queue."""
        if self.enqueue is None or not records:
            return None
        first = await self.records.get(records[0], include_deleted=True)
        key = f"dedupe:{first.scope}" if first is not None else "dedupe"
        job_id: int | None = await self.enqueue(DEDUPE_JOB, key, job_payload(records, writer, apart=apart))
        event(log, "memory_dedupe_queued", job=job_id, records=len(records))
        return job_id

    async def formed(self, records: Sequence[str], owner: str | None, audience: str, conversation: str) -> int | None:
        """Queue the comparison of what formation just wrote for `owner` in `conversation` (never a
        public one: nothing forms there)."""
        where: Audience = "team" if audience == "team" else "personal"
        writer = Writer(Actor(owner, frozenset(), "scheduled"), Where(where, conversation))
        return await self.queue(records, writer, apart=True)

    # -- the job ------------------------------------------------------------------------------------------

    async def handle_job(self, job: Job) -> Mapping[str, Any]:
        """Compare each record of the job that is still active with its scope. A failing model raises
        (the job is retried later; records settled meanwhile are not compared twice)."""
        ids = job.payload.get("records")
        writer_data = job.payload.get("writer")
        if not isinstance(ids, list) or not isinstance(writer_data, dict):
            raise JobFailed("bad dedupe payload", permanent=True)
        writer = Writer.of(writer_data)
        apart = {str(i) for i in ids} if job.payload.get("apart") else set()
        if not self.settings.enabled or not self.memory.enabled:
            return {"skipped": "disabled"}
        counts: Counter[str] = Counter()
        for rid in ids:
            record = await self.records.get(str(rid))
            if record is None or record.status != RecordStatus.ACTIVE or record.attribution is not None:
                counts["gone"] += 1
                continue
            started = time.perf_counter()
            nominees = await self.nominees(record, exclude=apart)
            if not nominees:
                counts["created"] += 1
                continue
            verdict, by = await self.verdict(record, nominees)
            settled = await self.apply(record, nominees, verdict, by, writer)
            self._checked(record, len(nominees), settled.outcome, by, verdict.why, started)
            counts[settled.outcome] += 1
        return dict(counts)

    # -- applying a verdict ---------------------------------------------------------------------------------

    async def apply(
        self, record: MemoryRecord, nominees: Sequence[Nominee], verdict: Verdict, by: str, writer: Writer
    ) -> Settled:
        """Do what `verdict` says (memory/records/duplicates.py resolve), as one batch of revisions. A
        record that changed meanwhile leaves both as they are ("created")."""
        step = resolve(verdict, record, nominees, writer.may_change)
        decided: DecidedBy = "model" if by == "model" else "rule"
        if step.kind == "keep" or step.target is None:
            return Settled("created", record, step.target, decided_by=decided)
        target = step.target
        if step.kind == "propose":
            return await self._propose(record, step, writer, decided)
        if step.kind == "merge" and step.text is not None:
            step = replace(step, text=self._fit(step.text, target, record))
        try:
            batch, done = await self.revisions.change_batch(
                _changes(record, step), actor=writer.actor.user_id or writer.actor.run
            )
        except RecordError as exc:
            event(log, "memory_dedupe_failed", logging.WARNING, record=record.id, error=type(exc).__name__)
            return Settled("created", record, target, decided_by=decided)
        self.memory.changed()
        now = next(r for r in done if r.id == record.id)
        outcome: Outcome = "skipped" if step.kind == "drop_new" else "merged" if step.kind == "merge" else "replaced"
        return Settled(outcome, now, target, batch=batch, decided_by=decided)

    async def _propose(self, record: MemoryRecord, step: Step, writer: Writer, decided: DecidedBy) -> Settled:
        assert step.target is not None and step.text is not None
        text = self._fit(step.text, step.target, record)
        try:
            proposal = await self.memory.propose_for(
                step.target,
                "supersede",
                text,
                author=writer.proposer(),
                audience=writer.where.audience,
                companion=record.id,
            )
        except MemoryRefused:  # the write-back filter refused the text: both stay as they are
            return Settled("created", record, step.target, decided_by=decided)
        return Settled("proposed", record, step.target, proposal, decided_by=decided)

    def _fit(self, text: str, target: MemoryRecord, record: MemoryRecord) -> str:
        """A body the model wrote, if the write-back filter takes it as it is; else the old body with
        the new statement appended (both passed the filter when they were written)."""
        if text in (record.content, target.content) or writeback.check(text, extra_secrets=self.secrets).action == "ok":
            return text
        return appended(target.content, record.content)


def _changes(record: MemoryRecord, step: Step) -> list[Change]:
    """The revisions of one verdict (all in one batch: undoing either record undoes both)."""
    target = step.target
    assert target is not None
    if step.kind == "drop_new":
        return [Change(record.id, "forget", record.revision, {"status": RecordStatus.DELETED}, f"said in {target.id}")]
    gone = {"status": RecordStatus.SUPERSEDED, "superseded_by": record.id}
    if step.kind == "supersede":
        return [
            Change(record.id, "supersede", record.revision, {}, f"replaces {target.id}"),
            Change(target.id, "supersede", target.revision, gone, f"replaced by {record.id}"),
        ]
    assert step.text is not None
    return [
        Change(record.id, "merge", record.revision, {"content": writeback.clean(step.text)}, f"merged {target.id}"),
        Change(target.id, "merge", target.revision, gone, f"merged into {record.id}"),
    ]


def _redacted(record: MemoryRecord, secrets: Sequence[str]) -> MemoryRecord:
    return replace(record, content=redact(record.content, secrets))
