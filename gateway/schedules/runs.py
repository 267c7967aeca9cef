"""One run nobody typed, answered in its target conversation: a reminder's message, or an agent run
(a reminder that asked for one, a `schedules:` entry, a webhook).

A run is its own audience (DESIGN §13): it reads what its target conversation may read and, through
the memory tools, writes only that conversation's narrowest scope: the person's own memory in their
DM, else the conversation's; never project or global memory (the policy refuses those to the model
in every turn, memory/trust/policy.py). A run for a conversation and nobody in it (a config schedule
or a webhook into a group) reads and writes no one's personal memory. Its prompt is stored under a
`clawgate:` author, so formation never learns from it (memory/formation/admission.py).

Its delivery uses the turn's idempotent send, keyed by the run's own event id: a run that is run
again after a crash never posts twice.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from typing import Any, Protocol

from gateway.config.model import Config
from gateway.core.events import GATEWAY_AUTHOR, ConversationKind, ConversationRef
from gateway.core.logs import event
from gateway.core.ports import Adapter, DeliveryError
from gateway.media.frame import label
from gateway.session.budget import FlushTarget
from gateway.turn.context import on_newest_user
from gateway.turn.delivery import Delivery
from gateway.turn.engine import TurnEngine
from gateway.turn.prepare import TurnPreparer
from memory.store.identities import User
from memory.store.sessions import Message, SessionState
from memory.store.storage import Storage

log = logging.getLogger("clawgate.schedules")


class RunFailed(Exception):
    """A run that could not be delivered or answered: `retryable` ones are tried again later."""

    def __init__(self, reason: str, *, retryable: bool = True) -> None:
        super().__init__(reason)
        self.retryable = retryable


@dataclass(frozen=True, slots=True)
class Run:
    """What to run, where: `event_id` keys its delivery (and names it in traces and logs)."""

    event_id: str
    kind: str  # reminder | schedule | webhook
    label: str  # the schedule's or hook's name, "reminder 12"
    ref: ConversationRef
    text: str  # the message (mode "message") or the user message the agent answers (mode "agent")
    mode: str = "agent"
    agent: str | None = None
    person: str | None = None  # the user it acts for (who set the reminder, the DM's person), or None
    # What the gateway tells the model about the run ("scheduled run 'digest', due 08:00, late"): put
    # before the prompt in the gateway's frame for this turn only, kept out of the recall query (its
    # date is not what the prompt asks about) and out of the session.
    note: str = ""

    @property
    def author(self) -> str:
        return f"{GATEWAY_AUTHOR}{self.kind}:{self.label}"


class Host(Protocol):
    """The parts of the gateway's router a run goes through (gateway/turn/router.py): the same
    adapters, sessions (and their one-turn-at-a-time slots), turn preparation, model and delivery."""

    @property
    def adapters(self) -> Mapping[str, Adapter]: ...

    @property
    def config(self) -> Config: ...

    @property
    def storage(self) -> Storage: ...

    @property
    def turns(self) -> TurnPreparer: ...

    @property
    def engine(self) -> TurnEngine: ...

    @property
    def delivery(self) -> Delivery: ...

    def audience(self, ref: ConversationRef) -> str: ...

    def session_key_for(self, ref: ConversationRef, user: User) -> str: ...

    def session_slot(self, key: str, *, leased: bool = True) -> AbstractAsyncContextManager[None]: ...


class Runner:
    """Runs a Run through the router's own parts: its adapters, delivery, sessions and turns."""

    def __init__(self, router: Host) -> None:
        self.router = router

    async def run(self, run: Run) -> str:
        """Deliver or answer `run`; its outcome ("ok", "duplicate", "llm_error"). RunFailed when
        its target cannot be reached (retryable unless the target does not exist)."""
        adapter = self.router.adapters.get(run.ref.channel)
        if adapter is None:
            raise RunFailed(f"channel {run.ref.channel!r} is not running", retryable=False)
        audience = self.router.audience(run.ref)
        if audience == "public":
            raise RunFailed(
                "the target conversation is public: runs answer only in private or team ones", retryable=False
            )
        person = await self._person(run)
        run = await self._in_their_dm(run)
        acting = person or _stand_in(run)
        key = self.router.session_key_for(run.ref, acting)
        agent = self.router.config.agent(run.agent)
        if agent is None:
            raise RunFailed(f"no agent {run.agent!r} in the config", retryable=False)
        async with self.router.session_slot(key):
            state = await self.router.storage.sessions.active(key, agent.name, person.id if person else None, audience)
            target = FlushTarget.of(run.ref.kind == ConversationKind.DM, person.id if person else None, key, audience)
            if run.mode == "message":
                return await self._message(run, adapter, state, key)
            new = Message("user", run.text, author=run.author, event_id=run.event_id)
            turn = await self.router.turns.prepare(
                agent, acting, audience, state, new, target, person=person is not None, ref=run.ref
            )
            if run.note:
                turn.prompt = on_newest_user(turn.prompt, lambda m: _noted(m, run.note))
            try:
                async with adapter.typing(run.ref):
                    delivered = await self.router.delivery.stream(
                        adapter,
                        run.ref,
                        run.event_id,
                        self.router.engine.run(agent, turn.prompt, turn.ctx, adapter.capabilities.can_edit),
                    )
            except DeliveryError as exc:
                raise RunFailed(f"the platform refused the answer: {exc}", retryable=exc.retryable) from exc
            produced = delivered.result.produced
            for message in produced:
                message.event_id = run.event_id
            await self.router.turns.finish(turn, produced, sent=delivered.sent)
        outcome = "llm_error" if delivered.result.error is not None else "ok"
        if delivered.sent is None and outcome == "ok":
            outcome = "duplicate"
        event(log, "schedule_run_answered", kind=run.kind, name=run.label, session=key, outcome=outcome)
        return outcome

    async def _message(self, run: Run, adapter: Adapter, state: SessionState, key: str) -> str:
        try:
            sent = await self.router.delivery.notice(adapter, run.ref, run.event_id, run.text)
        except DeliveryError as exc:
            raise RunFailed(f"the platform refused the reminder: {exc}", retryable=exc.retryable) from exc
        if sent is None:
            return "duplicate"
        # The conversation's history says it was reminded (the model sees it next turn; the web chat
        # shows it after a reload), under the gateway's own author: no memory forms from it.
        said = Message("assistant", run.text, author=run.author, event_id=run.event_id)
        await self.router.storage.sessions.append(state, [said])
        event(log, "schedule_run_delivered", kind=run.kind, name=run.label, session=key)
        return "ok"

    async def _in_their_dm(self, run: Run) -> Run:
        """`run` with its conversation's chat id: a target named by its person (their DM on the
        channel) is the DM they wrote in last. Platforms name a DM by their own id, known only once
        the person has written there."""
        if run.ref.chat_id:
            return run
        if run.person is None:
            raise RunFailed(f"{run.label}: no conversation to answer in", retryable=False)
        chat = await self.router.storage.schedules.dm_chat(run.ref.channel, run.person)
        if chat is None:
            raise RunFailed(
                f"{run.person} has not chatted with the bot on {run.ref.channel} yet: a message from them there "
                "starts the conversation this run answers in",
                retryable=False,
            )
        return replace(run, ref=ConversationRef(run.ref.channel, chat, None, ConversationKind.DM))

    async def _person(self, run: Run) -> User | None:
        if run.person is None:
            return None
        user = await self.router.storage.identities.get_user(run.person)
        if user is None:
            raise RunFailed(f"user {run.person!r} no longer exists", retryable=False)
        return user


def _noted(message: dict[str, Any], note: str) -> dict[str, Any] | None:
    content = message.get("content")
    if not isinstance(content, str):
        return None
    return {**message, "content": f"{label(note)}\n{content}"}


def _stand_in(run: Run) -> User:
    """Who a run for a conversation and nobody in it is, in its session and trace: its own name."""
    return User(id=run.author, roles=())
