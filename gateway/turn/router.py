"""The message path after an adapter: dedupe, identity, commands, one turn at a time per session."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager, nullcontext
from datetime import timedelta
from typing import Any

from gateway.config.load import secret_values
from gateway.config.model import Config
from gateway.core.channel_config import ChatChannelConfig
from gateway.core.events import (
    ConversationKind,
    ConversationRef,
    MessageReceived,
    event_from_payload,
    event_to_payload,
    utcnow,
)
from gateway.core.logs import event
from gateway.core.metrics import Metrics
from gateway.core.ports import Adapter, DeliveryError, KeyReused, RecordedReply, SessionBusy, Unavailable
from gateway.media.turn import MediaTurns
from gateway.recall.engine import TurnRecall
from gateway.recall.trace import TraceRecorder
from gateway.schedules.scheduler import Scheduler
from gateway.session.budget import FlushTarget, SessionMemory
from gateway.session.memory_service import MemoryService
from gateway.turn import access, group_context, replies
from gateway.turn.admission import Admission
from gateway.turn.burst import Bursts, merge
from gateway.turn.burst import window as burst_window
from gateway.turn.commands import chat as commands
from gateway.turn.commands.context import AttemptLimiter, CommandContext
from gateway.turn.context import PromptContext
from gateway.turn.delivery import Delivery, ack_reaction, reply_key
from gateway.turn.engine import TurnEngine
from gateway.turn.outage import StorageOutage
from gateway.turn.prepare import TurnPreparer
from gateway.turn.stops import Stops
from gateway.turn.turnstile import Place, Turnstile
from memory.store.db import StorageUnwritable
from memory.store.identities import User
from memory.store.leases import Lease, SessionLeases
from memory.store.platforms.journal import PendingEvent
from memory.store.sessions import Message, SessionState
from memory.store.storage import Storage
from memory.trust.redact import contains_secret, redact

log = logging.getLogger("clawgate.router")

MAX_ATTEMPTS = 3
BUSY = "I'm still working through your earlier messages. Please send this one again in a moment."
APOLOGY = "Sorry, I could not process your message because of an internal error. Please send it again."


class Router:
    def __init__(
        self,
        config: Config,
        storage: Storage,
        engine: TurnEngine,
        delivery: Delivery,
        adapters: dict[str, Adapter],
        metrics: Metrics,
        session_memory: SessionMemory,
        context: PromptContext,
        memory: MemoryService | None = None,
        recall: TurnRecall | None = None,
        traces: TraceRecorder | None = None,
        leases: SessionLeases | None = None,
    ) -> None:
        self.memory = memory
        # Several instances share the database: turns of a session are serialized through leases
        # in it, and each answers a chat session's waiting events in the order they arrived.
        self.leases = leases
        self.recall = recall
        self.traces = traces
        self.config = config
        self.session_memory = session_memory
        self.context = context
        self.storage = storage
        self.engine = engine
        self.delivery = delivery
        self.adapters = adapters
        self.metrics = metrics
        # Every conversation's (and shared session's) messages, in the order they arrived.
        self._line = Turnstile()
        self._active: Counter[str] = Counter()  # event ids this process is handling right now
        self.outage = StorageOutage(self._chat)
        self._limiter = AttemptLimiter()
        self._declared = config.declared_identities()
        self.bursts = Bursts()  # messages a person sends in quick succession: one turn (burst.py)
        self.admission = Admission(storage, metrics, self._limiter)
        self._inflight: set[asyncio.Task[None]] = set()
        self._accepted: set[str] = set()  # journaled by `accept`, not yet handled
        self._secrets = secret_values(config)
        # Prompt, recall, tools and the record of every turn: shared with the OpenAI-compatible API.
        self.turns = TurnPreparer(config, storage, session_memory, context, memory, recall, traces)
        self.media = MediaTurns(engine.llm)  # attachments read for their turn (docs/media.md)
        self.schedules: Scheduler | None = None  # reminders (/remind), set by the gateway once it runs
        self.stops = Stops()  # replies a person asked to stop (the chat page's Stop button)

    def use_config(self, config: Config) -> None:
        """Settings from a config reload: access lists, roles, agents and budgets for the next turns."""
        self.config = config
        self.turns.config = config
        self._declared = config.declared_identities()
        self._secrets = secret_values(config)

    def session_key_for(self, ref: ConversationRef, user: User) -> str:
        if ref.kind == ConversationKind.DM and self.config.session.dm_scope == "per_user":
            return f"user:dm:{user.id}" + (f":{ref.thread_id}" if ref.thread_id else "")
        return ref.session_key

    @asynccontextmanager
    async def session_slot(self, key: str, *, leased: bool = True) -> AsyncIterator[None]:
        """One turn at a time in session `key`, in the order callers came: in this process, and
        across instances (the session's lease, unless the caller holds it already: `leased=False`)."""
        place = self._line.join(key)
        try:
            if self._busy(place):
                raise SessionBusy(key)
            await self._turn_of(place)
            async with AsyncExitStack() as stack:
                if self.leases is not None and leased:
                    await stack.enter_async_context(self.leases.hold(key))
                yield
        finally:
            place.leave()

    async def _turn_of(self, place: Place) -> None:
        if not place.ahead:
            return
        self.metrics.queue_depth.inc()
        try:
            await place.wait()
        finally:
            self.metrics.queue_depth.dec()

    def _busy(self, place: Place) -> bool:
        pending = place.ahead
        if self.leases is not None:  # with leases, a session's turns wait for its lease first
            pending = max(pending, self.leases.waiting(place.key))
        return pending >= self.config.session.max_pending_per_session

    @contextmanager
    def _acting(self, event_id: str) -> Iterator[None]:
        """`event_id` is being handled here: a resume after a storage outage leaves it alone."""
        self._active[event_id] += 1
        try:
            yield
        finally:
            self._active[event_id] -= 1
            if not self._active[event_id]:
                del self._active[event_id]

    async def handle(self, ev: MessageReceived) -> None:
        """The adapters' sink. Returns when the reply is delivered (or the event was a duplicate)."""
        # Its place in the conversation's line is taken now, before any await: the order of arrival.
        place = self._line.join(ev.ref.session_key)
        task = asyncio.current_task()
        if task is not None:
            self._inflight.add(task)
        try:
            with self._acting(ev.event_id):
                await self._handle(ev, place)
        finally:
            place.leave()
            if task is not None:
                self._inflight.discard(task)

    async def _handle(self, ev: MessageReceived, place: Place) -> None:
        adapter = self.adapters[ev.ref.channel]
        busy = self._busy(place)
        if busy:
            self.metrics.rejected.labels(ev.ref.channel, "busy").inc()
            if not self._chat(ev.ref.channel):
                raise SessionBusy(ev.ref.session_key)  # HTTP callers get a 429 and retry
        if ev.event_id in self._accepted:
            self._accepted.discard(ev.event_id)
        else:
            try:
                if not await self.accept(ev, keep=False):
                    return
            except StorageUnwritable as exc:
                await self.outage.not_taken(adapter, ev, exc.reason)
                return
        window = burst_window(self.config.channels.get(ev.ref.channel), ev, command=commands.parse(ev.text) is not None)
        if window:
            burst = self.bursts.join(ev)
            if burst is not None:
                place.leave()  # answered in the turn of the burst's first message, in its place
                await burst.settled.wait()
                return
        elif window == 0.0:
            self.bursts.close(ev)  # a command: after the burst before it, before what follows
        if busy:
            # A chat platform cannot retry for us: tell the person instead of dropping the message.
            event(log, "inbound_busy", logging.WARNING, channel=ev.ref.channel, event_id=ev.event_id)
            await self._answer(adapter, ev, BUSY, "refused")
            return
        if window:
            await self._answer_burst(ev, adapter, place, window)
            return
        await self._process(ev, adapter, place)

    async def _answer_burst(self, ev: MessageReceived, adapter: Adapter, place: Place, window: float) -> None:
        burst = self.bursts.open(ev, window)
        try:
            try:
                # Under the session's lease while it gathers: no other instance answers its parts apart.
                async with self.leases.hold(ev.ref.session_key) if self.leases is not None else nullcontext():
                    events = await self.bursts.gather(burst)
                    if len(events) > 1:
                        merged = merge(events)
                        rest = [e.event_id for e in events[1:]]
                        await self.storage.journal.merge(ev.event_id, rest, self._journaled(merged))
                        event(log, "inbound_burst", channel=ev.ref.channel, event_id=ev.event_id, parts=len(events))
                        events = [merged]
            except StorageUnwritable as exc:
                # Not merged: every part is still an unfinished event of its own, answered on its own.
                event(log, "inbound_burst_unmerged", logging.WARNING, event_id=ev.event_id, reason=exc.reason)
                burst.closed = True
                events = list(burst.events)
            for one in events:
                await self._process(one, adapter, place)
        finally:
            burst.closed = True
            burst.settled.set()

    async def accept(self, ev: MessageReceived, *, keep: bool = True) -> bool:
        """Journal `ev`; False when it was seen before. Webhook channels call this before they
        acknowledge a delivery, so an instance dying right after the acknowledgement loses nothing
        (the event waits in the journal for `sweep`); `handle` then skips the journal (`keep`)."""
        if not await self.storage.journal.record(ev.event_id, ev.ref.channel, ev.ref.session_key, self._journaled(ev)):
            self.metrics.duplicates.labels(ev.ref.channel).inc()
            event(log, "inbound_duplicate", channel=ev.ref.channel, event_id=ev.event_id)
            return False
        if keep:
            self._accepted.add(ev.event_id)
        return True

    async def replay(self, ev: MessageReceived) -> RecordedReply | None:
        """An HTTP client sent `ev` again with the same idempotency key (its first try timed out,
        or reached an instance that died). A first try still running is waited for: here through
        the session's slot, elsewhere through its lease. One whose instance died before finishing
        is answered now, under the lease, so once. Then: the reply recorded for it, if any."""
        found = await self.storage.journal.journaled(ev.event_id)
        if found is None:
            return None
        if not self.storage.journal.matches(found[1], self._journaled(ev).get("text") or ""):
            raise KeyReused(ev.event_id)
        if found[0] == "received":
            if self.leases is None:
                # The first try is this process's: it holds its place until it is done. One still
                # unfinished after that was put off (the storage could not be written): answer it now.
                async with self.session_slot(ev.ref.session_key):
                    found = await self.storage.journal.journaled(ev.event_id)
                    if found is not None and found[0] == "received" and ev.event_id not in self._active:
                        with self._acting(ev.event_id):
                            await self._resume(found[1], ev)
            else:
                async with self.leases.hold(ev.ref.session_key) as lease:
                    assert lease is not None
                    found = await self.storage.journal.journaled(ev.event_id)
                    if found is not None and found[0] == "received":
                        await self._resume(found[1], ev)
            found = await self.storage.journal.journaled(ev.event_id)
        if found is None or found[0] != "done":
            return None
        reply = await self.storage.sessions.reply_for_event(ev.event_id)
        if reply is None:
            return None
        sent = await self.storage.journal.sent_before(reply_key(ev.event_id))
        return RecordedReply(reply.content, sent[1] if sent is not None else None)

    def _journaled(self, ev: MessageReceived) -> dict[str, Any]:
        """The payload kept in the journal. A /remember with a secret in it is refused, and the
        secret must not be stored anywhere either: the journal keeps it redacted."""
        payload = event_to_payload(ev)
        parsed = commands.parse(ev.text)
        if parsed is not None and parsed[0] in ("remember", "memory") and contains_secret(ev.text, self._secrets):
            payload["text"] = redact(ev.text, self._secrets)
        return payload

    def _chat(self, channel: str) -> bool:
        return isinstance(self.config.channels.get(channel), ChatChannelConfig)

    async def _process(self, ev: MessageReceived, adapter: Adapter, place: Place) -> None:
        await self._turn_of(place)
        if self.leases is None:
            await self._process_one(ev, adapter)
            return
        async with self.leases.hold(ev.ref.session_key) as lease:
            assert lease is not None
            if self._chat(ev.ref.channel):
                # Whichever instance holds the lease answers everything waiting, in arrival order:
                # an earlier message received by another instance is answered before this one.
                await self._answer_waiting(lease, ev)
            else:
                # A web request waits for its own answer on this instance.
                await self._process_one(ev, adapter)

    async def _answer_waiting(self, lease: Lease, current: MessageReceived | None = None) -> None:
        """Under the session's lease: answer its unfinished events, oldest first, until done or
        the lease is lost. `current`: the event this instance has just received."""
        for pending in await self.storage.journal.unfinished_in(lease.key):
            if lease.lost:
                return  # another instance has the session now, and answers the rest
            fresh = current if current is not None and pending.event_id == current.event_id else None
            await self._resume(pending, fresh)

    async def _resume(self, pending: PendingEvent, fresh: MessageReceived | None = None) -> None:
        """Answer one journaled event: `fresh`, one this instance has just received; otherwise
        one from the journal, which a crash may have left half done (its reply recorded, even)."""
        adapter = self.adapters.get(pending.channel)
        if adapter is None:
            event(log, "resume_channel_missing", logging.WARNING, channel=pending.channel, event_id=pending.event_id)
            return
        ev = fresh or event_from_payload(pending.payload)
        started_before = pending.attempts > 0 if self.leases is not None else fresh is None
        if started_before:
            event(log, "resume_event", channel=pending.channel, event_id=pending.event_id, attempts=pending.attempts)
        if pending.attempts >= MAX_ATTEMPTS:
            await self._apologize(adapter, ev)
            return
        if started_before or self.leases is not None:
            # Counted before the turn runs: with instances sharing the database, any event may be
            # taken on by another one, which must know whether this one got as far as starting it.
            await self.storage.journal.bump_attempts(pending.event_id)
        if started_before:
            recorded = await self.storage.sessions.reply_for_event(pending.event_id)
            if recorded is not None:
                await self._answer(adapter, ev, recorded.content)
                return
        await self._process_one(ev, adapter)

    async def _process_one(self, ev: MessageReceived, adapter: Adapter) -> None:
        started = time.perf_counter()
        user = await self.storage.identities.resolve(ev.sender.identity, ev.sender.display_name)
        agent = self.config.agent(None)
        assert agent is not None
        parsed = commands.addressed(ev)
        if not await self.admission.admit(self.config, self._declared, ev, adapter, user, parsed, self._answer):
            return
        key = self.session_key_for(ev.ref, user)
        answer_to = self._target(ev, adapter)  # where the answer goes: it may start a thread (replies.py)
        outcome = "ok"
        unavailable: Unavailable | None = None
        # The caller holds the conversation's place (and lease); a person's DM session spanning
        # conversations (session.dm_scope per_user) needs its own as well.
        async with self.session_slot(key) if key != ev.ref.session_key else nullcontext():
            try:
                if parsed is not None:
                    ctx = CommandContext(
                        ev,
                        user,
                        key,
                        agent,
                        self.config,
                        self.storage,
                        self.session_memory,
                        self._limiter,
                        self.audience(ev.ref),
                        self.memory,
                        self.schedules,
                    )
                    text, to = await commands.answer(ctx, parsed, answer_to, adapter.capabilities.private_commands)
                    await self._answer(adapter, ev, text, target=to)
                    outcome = "command"
                    if adapter.capabilities.shows_history:
                        await commands.keep(ctx, parsed[0], text, to)
                else:
                    outcome = await self._turn(ev, adapter, user, key, answer_to)
            except StorageUnwritable as exc:
                outcome = "deferred"
                unavailable = await self.outage.defer(adapter, ev, exc.reason)
            except Exception as exc:
                # A bug or a storage failure: tell the person, and do not retry this event forever.
                outcome = "error"
                event(
                    log,
                    "turn_crashed",
                    logging.ERROR,
                    channel=ev.ref.channel,
                    session=key,
                    event_id=ev.event_id,
                    error=type(exc).__name__,
                )
                log.debug("turn_crashed traceback", exc_info=True)
                await self._apologize(adapter, ev)
        self.metrics.turns.labels(ev.ref.channel, outcome).inc()
        self.metrics.turn_latency.labels(ev.ref.channel).observe(time.perf_counter() - started)
        event(
            log,
            "turn_completed",
            channel=ev.ref.channel,
            session=key,
            event_id=ev.event_id,
            outcome=outcome,
            ms=(time.perf_counter() - started) * 1000,
        )
        if unavailable is not None:
            raise unavailable

    def _target(self, ev: MessageReceived, adapter: Adapter) -> replies.Target:
        cfg = self.config.channels.get(ev.ref.channel)
        return replies.for_channel(ev, cfg, threads_any_message=adapter.capabilities.threads_any_message)

    async def _answer(
        self,
        adapter: Adapter,
        ev: MessageReceived,
        text: str,
        status: str = "done",
        key: str | None = None,
        target: replies.Target | None = None,
    ) -> None:
        """A one-shot reply (command output, refusal, notice), then the event is finished with `status`.

        The reply is recorded as sent only when it was: a failed or duplicate send leaves its
        outbound record as it was.
        """
        to = target or self._target(ev, adapter)
        try:
            sent = await self.delivery.notice(
                adapter, to.conversation, ev.event_id, text, key, reply_to=to.reply_to, private_to=to.private_to
            )
        except DeliveryError:
            sent = None
        await self.storage.journal.finish(ev.event_id, status, sent=sent)

    async def _apologize(self, adapter: Adapter, ev: MessageReceived) -> None:
        try:
            await self._answer(adapter, ev, APOLOGY, "failed", key=f"{ev.event_id}:error")
        except Exception as exc:
            event(log, "apology_failed", logging.ERROR, event_id=ev.event_id, error=type(exc).__name__)

    async def _turn(self, ev: MessageReceived, adapter: Adapter, user: User, key: str, to: replies.Target) -> str:
        agent = self.config.agent(None)
        assert agent is not None
        audience = self.audience(ev.ref)
        state = await self.storage.sessions.active(key, agent.name, user.id, audience)
        if ev.ref.kind == ConversationKind.DM and state.user_id not in (None, user.id):
            state = await self._new_owner(state, key, agent.name, user.id)
        media = await self.media.resolve(ev, adapter, self.config, agent)
        if media.refusal is not None:  # nothing of the message is kept (docs/media.md)
            await self._answer(adapter, ev, media.refusal, "refused")
            return "media_refused"
        user_msg = Message("user", media.text, author=ev.sender.identity, event_id=ev.event_id)
        target = FlushTarget.of(ev.ref.kind == ConversationKind.DM, user.id, key, audience)
        turn = await self.turns.prepare(agent, user, audience, state, user_msg, target, media=media, ref=ev.ref)
        cfg = self.config.channels.get(ev.ref.channel)
        said = await group_context.context_for(self.storage.groups, cfg, ev, self.config.timezone)
        turn.prompt = group_context.attach_group_context(turn.prompt, said)  # the prompt only: never kept
        outcome = "ok"
        sent = None
        reaction = ack_reaction(cfg.ack_reaction) if isinstance(cfg, ChatChannelConfig) else None
        streamed = ev.wants_stream and adapter.capabilities.can_edit
        try:
            async with self.delivery.acknowledged(adapter, ev, reaction), adapter.typing(ev.ref):
                delivered = await self.delivery.stream(
                    adapter,
                    to.conversation,
                    ev.event_id,
                    self.stops.watch(ev.event_id, self.engine.run(agent, turn.prompt, turn.ctx, streamed)),
                    reply_to=to.reply_to,
                    live=streamed,
                )
            result = delivered.result
            sent = delivered.sent
            if result.error is not None:
                outcome = "llm_error"
        except DeliveryError:
            # The model answered but the platform refused the reply; keep the answer in the session.
            outcome = "delivery_error"
            result = None
        produced = result.produced if result is not None else []
        for message in produced:  # the event's reply, found again by a retry or a resumed turn
            message.event_id = ev.event_id
        await self.turns.finish(turn, produced, finish_event=ev.event_id, sent=sent)
        return outcome

    async def _new_owner(self, state: SessionState, key: str, agent: str, user_id: str) -> SessionState:
        """A direct conversation whose session belongs to someone else: its account was taken out
        of that person's identities in the config, and someone new writes from it. (A /link moves
        the account's sessions to the person it joins, so that is not this.) The conversation stays
        its owner's, archived as theirs; this person starts afresh."""
        event(log, "session_owner_changed", session=key, earlier=state.user_id, now=user_id)
        fresh, _ = await self.storage.sessions.reset(key, agent, user_id)
        return fresh

    def audience(self, ref: ConversationRef) -> str:
        cfg = self.config.channels.get(ref.channel)
        return access.audience(cfg if isinstance(cfg, ChatChannelConfig) else None, ref)

    async def resume_unfinished(self) -> int:
        """Answer events a crash (or an outage of the storage) left unfinished: finish recorded
        replies, re-run the rest.

        With instances sharing the database, a chat session's events are answered under its lease
        (a session another instance is working on is left to it) and in order; web requests are
        answered only by the instance that received them, so their leftovers are not picked up.
        """
        if self.leases is not None:
            return await self.sweep(grace=0.0)
        return self.resume(await self.unfinished())

    async def unfinished(self) -> list[PendingEvent]:
        """The journal's unfinished events, oldest first, but those being handled here right now."""
        return [p for p in await self.storage.journal.unfinished() if p.event_id not in self._active]

    def reserve(self, pending: list[PendingEvent]) -> list[Place]:
        """Places for `pending` in their conversations' lines, taken now: a message arriving after
        this call is answered after them (start-up reserves before the channels connect)."""
        return [self._line.join(p.session_key) for p in pending]

    def resume(self, pending: list[PendingEvent], places: list[Place] | None = None) -> int:
        """Answer `pending` (oldest first), each in its place (`reserve`d now unless given)."""
        for p, place in zip(pending, self.reserve(pending) if places is None else places, strict=True):
            self.spawn(self._resume_in_line(p, place))
        return len(pending)

    async def _resume_in_line(self, pending: PendingEvent, place: Place) -> None:
        try:
            with self._acting(pending.event_id):
                await self._turn_of(place)
                await self._resume(pending)
        finally:
            place.leave()

    async def sweep(self, grace: float) -> int:
        """Shared database: take on the chat sessions with events waiting longer than `grace`
        seconds whose lease is free (their instance stopped or died); how many were taken on."""
        assert self.leases is not None
        channels = [name for name in self.adapters if self._chat(name)]
        if not channels:
            return 0
        waiting = await self.storage.journal.waiting_sessions(utcnow() - timedelta(seconds=grace), channels)
        taken = [key for key in waiting if not self.leases.waiting(key)]
        for key in taken:
            self.spawn(self._take_over(key))
        return len(taken)

    async def _take_over(self, session_key: str) -> None:
        assert self.leases is not None
        async with self.leases.hold(session_key, wait=False) as lease:
            if lease is not None:
                await self._answer_waiting(lease)

    async def sweep_forever(self, period: float) -> None:
        """Every `period` seconds, take on sessions whose instance went away (see `sweep`)."""
        while True:
            await asyncio.sleep(period)
            try:
                taken = await self.sweep(grace=period)
            except Exception as exc:  # the database is away: try again next period
                event(log, "sweep_failed", logging.WARNING, error=type(exc).__name__)
                continue
            if taken:
                event(log, "sessions_taken_over", count=taken)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self._inflight.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            event(log, "turn_crashed", logging.ERROR, error=type(exc).__name__, detail=str(exc)[:200])

    async def drain(self, timeout: float) -> None:
        """Let turns in flight finish for up to `timeout` seconds; cancel and reap the rest.

        Their events stay unfinished in the journal and are resumed at the next start.
        """
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=timeout)
        left = set(self._inflight)
        for task in left:
            task.cancel()
        if left:
            event(log, "turns_cancelled_at_shutdown", logging.WARNING, count=len(left))
            await asyncio.wait(left, timeout=5)
