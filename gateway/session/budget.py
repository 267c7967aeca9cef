"""Short-term session memory (DESIGN §4): keeping each session within its budget, off the reply path.

- After a turn, a session past its limit is summarized by the background model chain and its older
  messages are archived, in a background task (one per session at a time). The next turns then
  start with the same prefix (instructions, summary, kept messages), which prompt caches like.
- If every model fails, nothing is pruned and the next turn tries again; only a session twice past
  its limit, or one with no model configured at all, is pruned without a summary.
- Before a turn, a request that would pass `auto_flush_tokens` drops its older messages: they are
  archived with a flush job, and a background worker distils them into today's daily Markdown file
  (the person's in a DM, the conversation's in a group). Public conversations write no files.
- Each archived range (summarized, trimmed or flushed) queues one memory formation job through
  `formation` (gateway/jobs/formation.py), from this background work, never from a turn.

What the summary and flush models are sent is read from storage, which holds only redacted text
(memory/store/sessions.py redacts every message as it is stored, migration 0014 what was stored before):
it is not redacted again, only checked for secrets configured since it was stored (a reload adds
to the list). The flushed notes are redacted once more as they are written (memory/archive/daily.py).

Every path logs a stable event: session_summarized, session_summary_failed,
session_trimmed_without_summary, session_flushed, session_flush_written, session_flush_failed.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from gateway.config.model import AgentConfig, Config
from gateway.core.events import utcnow
from gateway.core.logs import event
from gateway.llm.client import LLMClient, LLMError, ModelSpec
from memory.archive.daily_index import write_owner_marker
from memory.budget import Budget, plan_flush, plan_trim
from memory.formation.admission import ArchivedRange
from memory.store.flushes import FlushJob, FlushLine
from memory.store.leases import SessionLeases
from memory.store.sessions import Archived, FlushRequest, Message, SessionState
from memory.store.storage import Storage
from memory.tokens import estimate_tokens
from memory.trust.redact import redact

if TYPE_CHECKING:
    from memory.archive.daily import DailyFiles
    from memory.archive.daily_index import DailyIndex

log = logging.getLogger("clawgate.session_memory")

MAX_FLUSH_ATTEMPTS = 5
FLUSH_RETRY_SECONDS = 30.0
TOOL_RESULT_CHARS = 600  # of a tool's output shown to the summarizer

SUMMARY_INSTRUCTIONS = (
    "You maintain the running summary of a chat between a person and an assistant. Older messages "
    "are about to leave the assistant's context; fold them into the summary so the conversation can "
    "go on without them. Keep: what the person wants and prefers, decisions, facts they gave, open "
    "questions and promised next steps, names, numbers and dates that matter. Drop small talk and "
    "anything later messages overrode. Write plain prose or short bullets in the conversation's "
    "language, at most {words} words, and nothing else: no preamble."
)

FLUSH_INSTRUCTIONS = (
    "Below is part of a chat that is leaving the assistant's context. Write down what is worth "
    "remembering later as short, self-contained Markdown bullets (one line each, starting with '- '): "
    "facts about the person and their work, preferences, decisions, commitments, open questions. "
    "Attribute statements to their author when the chat has several people. Never copy passwords, "
    "keys, tokens or other secrets. No preamble. If nothing is worth keeping, answer exactly NONE."
)


@dataclass(frozen=True, slots=True)
class FlushTarget:
    """Whose daily file the older messages of a session go to: the person's (a DM) or the
    conversation's (a group); None for a public conversation, which writes nothing."""

    scope: str  # user | channel
    owner: str

    @staticmethod
    def of(dm: bool, user_id: str | None, session_key: str, audience: str) -> FlushTarget | None:
        if audience == "public":
            return None
        if dm and user_id:
            return FlushTarget("user", user_id)
        return FlushTarget("channel", session_key)


def _budget(config: Config) -> Budget:
    mem = config.memory
    return Budget(
        max_tokens=mem.session_memory.max_tokens,
        max_messages=mem.session_memory.messages,
        flush_tokens=mem.flush_tokens,
    )


def _log_failure(task: asyncio.Task[Any]) -> None:
    """A background summary that failed (the database refused it, say): logged, not lost to
    asyncio's 'Task exception was never retrieved'. The session is compacted again after a turn."""
    if task.cancelled() or task.exception() is None:
        return
    error = task.exception()
    event(log, "session_memory_task_failed", logging.WARNING, error=type(error).__name__)
    log.debug("session_memory_task_failed traceback", exc_info=error)


def _line(role: str, author: str | None, content: str) -> str:
    if role == "tool":
        cut = content[:TOOL_RESULT_CHARS] + ("…" if len(content) > TOOL_RESULT_CHARS else "")
        return f"[tool result] {cut}"
    who = f"{role} ({author})" if author and role == "user" else role
    return f"{who}: {content}"


def _bullets(text: str) -> list[str]:
    if text.strip().upper().rstrip(".") == "NONE":
        return []
    out = []
    for raw in text.splitlines():
        m = re.match(r"^\s*(?:[-*•]|\d+[.)])\s+(.*\S)", raw)
        if m:
            out.append(m.group(1))
    return out


class SessionMemory:
    def __init__(
        self,
        config: Config,
        storage: Storage,
        llm: LLMClient,
        daily: DailyFiles,
        secrets: list[str],
        daily_index: DailyIndex | None = None,
    ) -> None:
        self.config = config
        self.storage = storage
        self.llm = llm
        self.daily = daily
        self.daily_index = daily_index
        self.budget = _budget(config)
        self._secrets = secrets
        self._compacting: dict[int, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._wake = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self.flush_retry_seconds = FLUSH_RETRY_SECONDS
        # Called after messages were archived or notes written (the recall upkeep embeds them).
        self.on_change: Callable[[str], None] | None = None  # told the kind of item written: archive, daily
        # Queues memory formation for an archived range (gateway/jobs/formation.py); None: no formation.
        self.formation: Callable[[ArchivedRange], Awaitable[object]] | None = None
        # Several instances on one database: a session is summarized by one of them at a time.
        self.leases: SessionLeases | None = None

    def use_config(self, config: Config) -> None:
        """Settings from a config reload; a turn under way keeps the budget it read."""
        self.config = config
        self.budget = _budget(config)

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the flush worker (it first picks up jobs a previous run left pending)."""
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._flush_worker())
            self._wake.set()

    async def stop(self) -> None:
        tasks = [*self._tasks, *([self._worker] if self._worker else [])]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        self._worker = None

    async def idle(self, timeout: float = 30, flushes: bool = True) -> None:
        """Wait until no summary is being made and (with `flushes`) no flush job is pending."""
        async with asyncio.timeout(timeout):
            while True:
                if self._tasks:
                    await asyncio.wait(set(self._tasks))
                    continue
                if not flushes or not await self.storage.flushes.pending(limit=1):
                    return
                self._wake.set()
                await asyncio.sleep(0.02)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_log_failure)
        return task

    # -- the model chain for summaries and flushes -------------------------------------------------

    def background_chain(self, agent: AgentConfig) -> list[ModelSpec]:
        """The background model (ai.gemini with a key, else the agent's own model), then the fallback
        models (ai.fallback, else the agent's own fallback list)."""
        ai = self.config.ai
        key = ai.api_key.get_secret_value() if ai.api_key else None
        chain: list[ModelSpec] = []
        if ai.gemini.api_key is not None and ai.gemini.api_key.get_secret_value() and ai.gemini.model:
            chain.append(ModelSpec(model=ai.gemini.model, api_key=ai.gemini.api_key.get_secret_value()))
        elif agent.model or ai.model:
            chain.append(ModelSpec(model=str(agent.model or ai.model), api_base=ai.api_base, api_key=key))
        for model in ai.fallback or agent.fallback or []:
            if all(spec.model != model for spec in chain):
                chain.append(ModelSpec(model=model, api_base=ai.api_base, api_key=key))
        return chain

    # -- before a turn: auto-flush -----------------------------------------------------------------

    def request_tokens(self, system: str, state: SessionState, new: list[Message]) -> int:
        return _system_tokens(system) + state.summary_tokens + state.token_count + sum(m.tokens for m in new)

    async def before_turn(
        self, system: str, state: SessionState, new: list[Message], target: FlushTarget | None
    ) -> None:
        """Drop the older messages of a request that would pass auto_flush_tokens, into the archive
        and (through a flush job) today's daily file. O(1) unless it has work to do."""
        if not self.config.memory.flush.enabled:
            return
        if self.request_tokens(system, state, new) <= self.budget.flush_tokens:
            return
        fixed = _system_tokens(system) + state.summary_tokens + sum(m.tokens for m in new)
        recent = list(state.recent)
        k = plan_flush([m.role for m in recent], [m.tokens for m in recent], fixed, self.budget)
        through = recent[k - 1].id if k else None
        if through is None:
            return
        # With memory off the older messages still leave the request, into the archive only.
        writes = target is not None and self.config.memory.enabled
        flush = FlushRequest(target.scope, target.owner, self.today().isoformat()) if writes and target else None
        done = await self._archive(state, through, "flushed", flush=flush)
        if done is None:
            return
        event(
            log,
            "session_flushed",
            session=state.key,
            messages=done.count,
            tokens=done.tokens,
            to_file=flush is not None,
            threshold=self.budget.flush_tokens,
        )
        if flush is not None:
            self._wake.set()

    async def _archive(self, state: SessionState, through: int, reason: str, **kw: Any) -> Archived | None:
        done = await self.storage.sessions.archive(state, through, reason, **kw)
        if done is not None and done.count:
            self._changed("archive")
        return done

    def _changed(self, kind: str) -> None:
        if self.on_change is not None:
            self.on_change(kind)

    async def _queue_formation(self, state: SessionState, done: Archived, why: str) -> None:
        if done.first_id is not None and done.last_id is not None:
            rng = ArchivedRange(state.id, state.key, done.first_id, done.last_id, why, state.audience)
            await self._form(rng)

    async def _form(self, rng: ArchivedRange) -> None:
        """Queue formation for what was just archived; only ever called from background work."""
        if self.formation is None:
            return
        try:
            await self.formation(rng)
        except Exception as exc:  # the archive stands; only what it could have formed is lost
            event(
                log, "memory_formation_queue_failed", logging.WARNING, session=rng.session_key, error=type(exc).__name__
            )

    def today(self) -> date:
        return utcnow().astimezone(ZoneInfo(self.config.timezone)).date()

    # -- after a turn: the budget ------------------------------------------------------------------

    def after_turn(self, agent: AgentConfig, state: SessionState) -> None:
        """Summarize and prune in the background when the session is past its limit (O(1) otherwise)."""
        if not self.budget.over(state.token_count, state.message_count) or state.id in self._compacting:
            return
        task = self._spawn(self._compact(agent, state))
        self._compacting[state.id] = task
        task.add_done_callback(lambda _t: self._compacting.pop(state.id, None))

    async def _compact(self, agent: AgentConfig, state: SessionState) -> None:
        if self.leases is None:
            await self._summarize(agent, state)
            return
        # Instances answering one session in turn all see it pass its budget after their turns. The
        # one holding the session's summary lease summarizes; the others' summaries of the same
        # messages would be thrown away, and paid for.
        async with self.leases.hold(f"summary:{state.key}", wait=False) as lease:
            if lease is None:
                return
            if not await self.storage.sessions.caught_up(state):
                return  # summarized (or ended) by another instance meanwhile
            if self.budget.over(state.token_count, state.message_count):
                await self._summarize(agent, state)

    async def _summarize(self, agent: AgentConfig, state: SessionState) -> None:
        recent = list(state.recent)
        k = plan_trim([m.role for m in recent], [m.tokens for m in recent], self.budget)
        through = recent[k - 1].id if k else None
        if through is None:
            event(log, "session_trim_impossible", logging.WARNING, session=state.key, tokens=state.token_count)
            return
        chain = self.background_chain(agent)
        if not chain:
            await self._trim(state, through, "no_model")
            return
        words = max(60, min(1500, self.budget.token_limit // 10))
        text = "\n".join(
            [f"Summary so far:\n{state.summary}\n" if state.summary else "There is no summary yet.\n"]
            + ["Messages to fold in:"]
            + [_line(m.role, m.author, m.content) for m in recent[:k]]
        )
        text = _newly_configured_hidden(text, self._secrets)
        try:
            summary = (await self.llm.ask(chain, SUMMARY_INSTRUCTIONS.format(words=words), text)).strip()
        except LLMError as exc:
            event(
                log,
                "session_summary_failed",
                logging.WARNING,
                session=state.key,
                kind=exc.kind,
                models=",".join(a.model for a in exc.attempts),
                tokens=state.token_count,
                limit=self.budget.token_limit,
            )
            if self.budget.twice_over(state.token_count, state.message_count):
                await self._trim(state, through, "twice_limit")
            return
        if not summary:
            summary = state.summary or ""
        summary = summary[: words * 8]  # a runaway model must not undo the budget
        done = await self._archive(
            state, through, "summarized", summary=summary, summary_tokens=estimate_tokens(summary)
        )
        if done is not None:
            await self._queue_formation(state, done, "summarized")
            event(
                log,
                "session_summarized",
                session=state.key,
                messages=done.count,
                tokens=done.tokens,
                kept_tokens=state.token_count,
                summary_tokens=state.summary_tokens,
                model=chain[0].model,
            )

    async def _trim(self, state: SessionState, through: int, reason: str) -> None:
        done = await self._archive(state, through, "trimmed")
        if done is not None:
            await self._queue_formation(state, done, "trimmed")
            event(
                log,
                "session_trimmed_without_summary",
                logging.WARNING,
                session=state.key,
                reason=reason,
                messages=done.count,
                tokens=done.tokens,
                kept_tokens=state.token_count,
            )

    # -- /new and /reset ---------------------------------------------------------------------------

    async def reset(self, key: str, agent: AgentConfig, user_id: str | None, target: FlushTarget | None) -> None:
        """Start a fresh session. The cleared transcript is archived and flushed to the daily file,
        or, with memory.session_memory.enabled false, kept out of memory for good."""
        keep = self.config.memory.session_memory.enabled
        flush = None
        if keep and target is not None and self.config.memory.flush.enabled and self.config.memory.enabled:
            flush = FlushRequest(target.scope, target.owner, self.today().isoformat())
        _state, done = await self.storage.sessions.reset(key, agent.name, user_id, keep=keep, flush=flush)
        if done is not None and done.count:
            self._changed("archive")
        if done is not None and done.flush_id is not None:
            self._wake.set()

    # -- the flush worker --------------------------------------------------------------------------

    async def _flush_worker(self) -> None:
        delay: float | None = None
        while True:
            if delay is None:
                await self._wake.wait()
            else:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for loses a cancellation that
                # arrives as the event is set, and stop() would wait on this worker for ever.
                try:
                    async with asyncio.timeout(delay):
                        await self._wake.wait()
                except TimeoutError:
                    pass
            self._wake.clear()
            delay = None
            try:
                for job in await self.storage.flushes.pending():
                    if not await self._flush(job):
                        delay = self.flush_retry_seconds
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # storage trouble: try again later, never die
                event(log, "session_flush_worker_error", logging.ERROR, error=type(exc).__name__)
                delay = self.flush_retry_seconds

    async def _flush(self, job: FlushJob) -> bool:
        """Distil one job into its daily file. False when it should be retried later."""
        # Queued before the distilling, so a flush that keeps failing still forms memory (deduped:
        # every attempt of the flush queues the same formation job once).
        await self._form(ArchivedRange(job.session_id, job.session_key, job.first_id, job.last_id, "flushed"))
        agent = self.config.agent(None)
        assert agent is not None
        chain = self.background_chain(agent)
        if not chain:
            await self.storage.flushes.done(job, "no model configured: not distilled")
            event(log, "session_flush_skipped", logging.WARNING, session=job.session_key, reason="no_model")
            return True
        lines = await self.storage.flushes.lines(job)
        if not lines:
            await self.storage.flushes.done(job, "nothing to flush")
            return True
        transcript = _newly_configured_hidden("\n".join(_transcript(lines)), self._secrets)
        try:
            answer = await self.llm.ask(chain, FLUSH_INSTRUCTIONS, transcript)
            bullets = _bullets(answer)  # redacted as the daily file takes them (DailyFiles.append)
            path = self.daily.path(job.scope, job.owner, date.fromisoformat(job.day))  # type: ignore[arg-type]
            heading = f"{_local_time(self.config.timezone)} · {_source(job.session_key)}"
            added = await asyncio.to_thread(self._write, path, job, heading, bullets) if bullets else []
        except (LLMError, OSError) as exc:
            kind = exc.kind if isinstance(exc, LLMError) else f"file: {type(exc).__name__}"
            final = job.attempts + 1 >= MAX_FLUSH_ATTEMPTS
            if final:
                await self.storage.flushes.failed(job, kind)
            else:
                await self.storage.flushes.attempted(job, kind)
            level = logging.ERROR if final else logging.WARNING
            event(log, "session_flush_failed", level, session=job.session_key, kind=kind, final=final)
            return final
        if added and self.daily_index is not None:
            # Before the job is done, so whoever waits for flushes finds the notes searchable.
            scope = f"{'personal' if job.scope == 'user' else 'channel'}:{job.owner}"
            try:
                await self.daily_index.index_file(path, scope)
                self._changed("daily")
            except Exception as exc:  # the file is written; the start-up scan indexes it later
                event(log, "daily_index_failed", logging.WARNING, error=type(exc).__name__)
        await self.storage.flushes.done(job, f"{len(added)} notes")
        event(
            log,
            "session_flush_written",
            session=job.session_key,
            scope=job.scope,
            day=job.day,
            notes=len(added),
            skipped=len(bullets) - len(added),
        )
        return True

    def _write(self, path: Path, job: FlushJob, heading: str, bullets: list[str]) -> list[str]:
        """Append to the daily file (in a worker thread); mark whose directory it is for the index."""
        added = self.daily.append(path, heading, bullets)
        if added:
            write_owner_marker(path.parent, job.owner)
        return added


def _newly_configured_hidden(text: str, secrets: Sequence[str]) -> str:
    """Stored text, redacted when it was stored, with the configured secrets redacted that were
    added since: a substring test per secret, not the detector's full pass over the transcript."""
    if any(len(secret) >= 4 and secret in text for secret in secrets):  # redact skips shorter ones
        return redact(text, secrets)
    return text


@functools.lru_cache(maxsize=256)
def _system_tokens(system: str) -> int:
    """The system prompt is the same from turn to turn (until Memory.md changes): estimate it once."""
    return estimate_tokens(system)


def _transcript(lines: list[FlushLine]) -> list[str]:
    return [_line(ln.role, ln.author, ln.content) for ln in lines if ln.content]


def _local_time(zone: str) -> str:
    now: datetime = utcnow().astimezone(ZoneInfo(zone))
    return now.strftime("%H:%M")


def _source(session_key: str) -> str:
    """A readable origin for a section heading: "telegram group -1001", "web dm"."""
    parts = session_key.split(":")
    return " ".join(parts[:3]) if len(parts) >= 3 else session_key
