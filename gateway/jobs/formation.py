"""The `formation` job (DESIGN §6, §8): after a session's older messages were archived (a summary,
a trim or a flush), the background model proposes memory candidates from what may form memory
there, and the admitted ones are written as pending evidence. memory/formation/admission.py decides what is
admitted, memory/formation/candidates.py what a candidate becomes (memory/trust/grounding.py whether its
cited lines support it); this module queues, loads, asks and writes.

The owner's records a run wrote are then compared with what their scope held by a `dedupe` job
(gateway/session/adjudicate.py): an outdated note of the assistant's is superseded, anything a person
wrote only proposed for change. Attributed records are never compared.

Idempotent: every record of a run is written in one transaction, with a `source` naming the job;
a run that finds records of its job already written writes nothing. The job's lease is renewed
right before the write, which fences it: no second worker can hold the job during the write.

Every run logs memory_formation_done (counts only, never content: its `dropped` counts candidates
by reason, `ungrounded` among them) or memory_formation_skipped (why); an answer that is not the
JSON asked for logs memory_formation_unparsable and forms nothing.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from gateway.config.model import Config
from gateway.core.logs import event
from gateway.jobs.runner import JobFailed, JobRunner
from gateway.llm.client import LLMClient, ModelSpec
from gateway.session.budget import SessionMemory
from gateway.session.memory_service import write_access
from gateway.turn.engine import NOTICE_AUTHOR
from memory.formation import admission as formation
from memory.formation import candidates as proposing
from memory.formation.admission import Admission, ArchivedRange, Conversation
from memory.formation.candidates import Limits, Proposal
from memory.formation.sources import FormationSources
from memory.records.model import Scope, ScopeKind
from memory.store.jobs import Job
from memory.store.storage import Storage
from memory.store.traces import TraceStore
from memory.trust import policy

log = logging.getLogger("clawgate.formation")

KIND = "formation"
EXISTING_PER_SCOPE = 500  # active records compared against, newest first


def _counts(counter: Counter[str]) -> str:
    """ "assistant:3,tool:1" (or "-"): a log value, counts only."""
    return ",".join(f"{k}:{v}" for k, v in sorted(counter.items()) if v) or "-"


class Formation:
    def __init__(
        self,
        config: Config,
        storage: Storage,
        llm: LLMClient,
        session_memory: SessionMemory,
        runner: JobRunner,
        secrets: list[str],
    ) -> None:
        self.config = config
        self.storage = storage
        self.llm = llm
        self.session_memory = session_memory
        self.runner = runner
        self.sources = FormationSources(storage.db)
        self._secrets = secrets
        # Called after records were written (the recall upkeep embeds them).
        self.on_change: Callable[[], None] | None = None
        # Where the turns whose messages formed a record learn about it (their recall traces).
        self.traces: TraceStore | None = None
        # Queues the comparison of the owner's new records with their near-duplicates
        # (gateway/session/adjudicate.py Duplicates.formed): (ids, owner, audience, conversation).
        self.compare: Callable[[list[str], str | None, str, str], Awaitable[int | None]] | None = None
        self._access = write_access(config)

    def use_config(self, config: Config) -> None:
        """Settings from a config reload (memory.formation, memory.write_access)."""
        self.config = config
        self._access = write_access(config)

    @property
    def enabled(self) -> bool:
        return self.config.memory.enabled and self.config.memory.formation.enabled

    def register(self) -> None:
        self.runner.register(KIND, self.run)

    # -- queueing --------------------------------------------------------------------------------

    async def queue(self, rng: ArchivedRange) -> int | None:
        """Queue one job for an archived range (SessionMemory calls this where it archives, in the
        background); the job id, or None when nothing is queued (off, public, already queued)."""
        if not self.enabled or rng.audience == "public":
            return None
        # Keyed by session: a session's jobs run one at a time, in the order they were queued.
        job_id = await self.runner.enqueue(KIND, rng.session_key, rng.payload(), dedupe=rng.dedupe)
        if job_id is not None:
            event(
                log,
                "memory_formation_queued",
                job=job_id,
                session=rng.session_key,
                first=rng.first_id,
                last=rng.last_id,
                why=rng.why,
            )
        return job_id

    # -- running ---------------------------------------------------------------------------------

    def _skipped(self, job: Job, session: str, why: str, level: int = logging.INFO, **extra: Any) -> dict[str, Any]:
        event(log, "memory_formation_skipped", level, job=job.id, session=session, why=why, **extra)
        return {"skipped": why, **extra}

    async def run(self, job: Job) -> Mapping[str, Any]:
        try:
            rng = ArchivedRange.from_payload(job.payload)
        except ValueError as exc:
            raise JobFailed(f"bad formation payload: {exc}", permanent=True) from None
        if not self.enabled:
            return self._skipped(job, rng.session_key, "disabled")
        loaded = await self.sources.load(rng)
        if loaded is None:
            return self._skipped(job, rng.session_key, "no_session")
        conv = loaded.conversation
        if conv.audience == "public":
            return self._skipped(job, conv.key, "public")
        bound = self.config.projects_of(conv.key) if conv.audience == "team" else ()
        if len(bound) == 1:  # a group bound to one project learns for the project (DESIGN §6)
            conv = replace(conv, project=bound[0])
        if loaded.excluded:
            return self._skipped(job, conv.key, "excluded")
        written = await self.sources.written(job.id)
        if written:
            return self._skipped(job, conv.key, "already_written", records=written)
        cfg = self.config.memory.formation
        lines, left_out = formation.admit(
            loaded.sources,
            conv,
            secrets=self._secrets,
            machine_authors=(NOTICE_AUTHOR,),
            max_chars=cfg.max_message_chars,
        )
        by_class = Counter(ln.admission.value for ln in lines)
        if not lines:
            return self._done(job, conv, by_class, left_out, Counter(), [])
        agent = self.config.agent(loaded.agent) or self.config.agent(None)
        assert agent is not None
        chain = self.session_memory.background_chain(agent)
        if not chain:
            return self._skipped(job, conv.key, "no_model", logging.WARNING)
        proposals, dropped = await self._propose(job, chain, lines, conv, cfg.max_input_chars)
        existing = await self._existing({str(p.scope) for p in proposals})
        planned = proposing.plan(proposals, existing, Limits(cfg.max_candidates, cfg.max_attributed))
        dropped += planned.dropped
        kept = [p for p in planned.kept if self._writable(p, conv, dropped)]
        if kept:
            # The fence: with the lease just renewed, no other worker can claim this job while we
            # check and write. A lost lease means another worker runs it now: leave it to them.
            if not await self.runner.store.extend(job, self.runner.lease):
                return self._skipped(job, conv.key, "lease_lost", logging.WARNING)
            written = await self.sources.written(job.id)
            if written:
                return self._skipped(job, conv.key, "already_written", records=written)
            ids = await self.storage.records.import_batch([proposing.to_record(p, conv, job.id) for p in kept])
            if self.on_change is not None:
                self.on_change()
            await self._trace_formed(conv, loaded.sources, kept, ids)
            await self._compare(conv, kept, ids)
        return self._done(job, conv, by_class, left_out, dropped, kept)

    async def _propose(
        self, job: Job, chain: list[ModelSpec], lines: list[formation.Line], conv: Conversation, max_chars: int
    ) -> tuple[list[Proposal], Counter[str]]:
        """Ask the model about each run of lines. A failing model raises LLMError: the job is retried
        later. An answer that is not the JSON asked for forms nothing from those lines."""
        proposals: list[Proposal] = []
        dropped: Counter[str] = Counter()
        offered = 0
        for part in formation.chunks(lines, max_chars):
            answer = await self.llm.ask(chain, formation.INSTRUCTIONS, formation.render(part, conv))
            try:
                offer, malformed = proposing.parse_answer(answer)
            except proposing.Unparsable:
                event(
                    log,
                    "memory_formation_unparsable",
                    logging.WARNING,
                    job=job.id,
                    session=conv.key,
                    lines=len(part),
                    chars=len(answer),
                )
                dropped["unparsable"] += 1
                continue
            if malformed:
                dropped["malformed_candidate"] += malformed
            found, rejected = proposing.propose(offer, part, conv, secrets=self._secrets, start=offered)
            offered += len(offer)
            proposals += found
            dropped += rejected
        return proposals, dropped

    async def _existing(self, scopes: set[str]) -> dict[str, list[str]]:
        """The texts of the active, unexpired records of each scope (newest first, a bounded number)."""
        out: dict[str, list[str]] = {}
        for scope in sorted(scopes):
            conversation = Scope.parse(scope).name or ""
            texts = await self.storage.records.texts(scope, limit=EXISTING_PER_SCOPE)
            out[scope] = [proposing.statement(content, attribution, conversation) for content, attribution in texts]
        return out

    async def _trace_formed(
        self, conv: Conversation, sources: list[formation.Source], kept: list[Proposal], ids: list[str]
    ) -> None:
        """Add what was formed to the recall traces of the turns whose messages it came from."""
        if self.traces is None:
            return
        event_of = {s.id: s.event_id for s in sources if s.event_id}
        by_event: dict[str, list[str]] = {}
        for proposal, rid in zip(kept, ids, strict=True):
            for message in proposal.message_ids:
                if message in event_of:
                    by_event.setdefault(event_of[message], []).append(rid)
        try:
            await self.traces.formed(conv.key, by_event)
        except Exception as exc:  # the records are written; a trace that misses them is logged, not retried
            event(log, "recall_trace_failed", logging.WARNING, session=conv.key, error=type(exc).__name__)

    async def _compare(self, conv: Conversation, kept: list[Proposal], ids: list[str]) -> None:
        """Queue the comparison of the owner's new records with what their scope held: an update may
        supersede an older note. Attributed records are never compared (what someone said in a group
        changes no other memory); their repeats were dropped by plan() already."""
        owned = [rid for p, rid in zip(kept, ids, strict=True) if p.admission == Admission.OWNER]
        if self.compare is None or not owned:
            return
        try:
            await self.compare(owned, conv.owner, conv.audience, conv.key)
        except Exception as exc:  # the records are written; a missed comparison leaves both standing
            event(log, "memory_dedupe_queue_failed", logging.WARNING, session=conv.key, error=type(exc).__name__)

    def _writable(self, proposal: Proposal, conv: Conversation, dropped: Counter[str]) -> bool:
        """The policy's word on the target scope, asked as a scheduled run on behalf of the
        conversation: a personal scope only for its owner, a channel only from inside it, the
        project the operator bound the conversation to (config `projects:`, the explicit policy that
        lets a group's learning reach its project), never global (memory.write_access never lets a
        scheduled run write global memory)."""
        scope: Scope = proposal.scope
        if scope.kind == ScopeKind.PROJECT and conv.project is not None and scope.name == conv.project:
            return True
        if scope.kind not in (ScopeKind.PERSONAL, ScopeKind.CHANNEL):
            dropped["policy"] += 1
            return False
        who = conv.owner if proposal.admission == Admission.OWNER else None
        actor = policy.Actor(who, frozenset(), "scheduled")
        where = policy.Where(conv.audience, conv.key, self.config.memory.enabled)  # type: ignore[arg-type]
        decision = policy.can_write(actor, scope, where, self._access)
        if not decision:
            dropped["policy"] += 1
            event(log, "memory_formation_refused", logging.WARNING, session=conv.key, scope_kind=scope.kind.value)
        return bool(decision)

    def _done(
        self,
        job: Job,
        conv: Conversation,
        by_class: Counter[str],
        left_out: Counter[str],
        dropped: Counter[str],
        kept: list[Proposal],
    ) -> dict[str, Any]:
        formed = Counter(p.admission.value for p in kept)
        owner, attributed = Admission.OWNER.value, Admission.ATTRIBUTED.value
        event(
            log,
            "memory_formation_done",
            job=job.id,
            session=conv.key,
            lines_owner=by_class[owner],
            lines_attributed=by_class[attributed],
            left_out=_counts(left_out),
            formed_owner=formed[owner],
            formed_attributed=formed[attributed],
            dropped=_counts(dropped),
        )
        return {
            "records": len(kept),
            "owner": formed[owner],
            "attributed": formed[attributed],
            "left_out": dict(left_out),
            "dropped": dict(dropped),
        }
