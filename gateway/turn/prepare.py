"""A turn's preparation and its record afterwards, one path for every surface that runs one: the chat
channels and REST (gateway/turn/router.py) and the OpenAI-compatible API (gateway/web/openai_api.py).
Each gets the same recall, memory tools, formation (through the session's budget) and recall trace
for the person asking.

The prompt (DESIGN §12): the stable part first, byte-identical from turn to turn until the session
is next trimmed (the instructions and Memory.md, the session's summary, its kept messages), so
providers' prompt caches hit; then this turn's recall, in the newest user message
(gateway/turn/context.py, attach_recall, says why there).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.config.model import AgentConfig, Config
from gateway.core.events import ConversationRef
from gateway.media.frame import TurnMedia
from gateway.recall.engine import TurnMemory, TurnRecall
from gateway.recall.trace import TraceRecorder
from gateway.session.budget import FlushTarget, SessionMemory
from gateway.session.memory_service import MemoryService
from gateway.turn.context import PromptContext, Section, attach_recall, recall_block
from gateway.turn.engine import build_messages, unframed
from gateway.turn.tools import ToolContext
from memory.store.identities import User
from memory.store.sessions import Message, SessionState
from memory.store.storage import Storage
from memory.trust.policy import Actor


@dataclass(slots=True)
class PreparedTurn:
    """A turn ready for the model: its prompt and tool context, and what its record needs."""

    agent: AgentConfig
    user: User
    key: str  # the session key (an ephemeral request's own key)
    audience: str
    new: Message  # the newest user message: the recall's query
    prompt: list[dict[str, Any]]
    ctx: ToolContext
    memory: TurnMemory | None  # what recall found, for the trace; None without recall
    sections: list[Section]  # the memory sections the prompt carries: Memory.md, then recall
    state: SessionState | None  # None: an ephemeral request, of which nothing is kept


class TurnPreparer:
    def __init__(
        self,
        config: Config,
        storage: Storage,
        session_memory: SessionMemory,
        context: PromptContext,
        memory: MemoryService | None = None,
        recall: TurnRecall | None = None,
        traces: TraceRecorder | None = None,
    ) -> None:
        self.config = config  # the router hands over a reloaded config (Router.use_config)
        self.storage = storage
        self.session_memory = session_memory
        self.context = context
        self.memory = memory
        self.recall = recall
        self.traces = traces

    async def prepare(
        self,
        agent: AgentConfig,
        user: User,
        audience: str,
        state: SessionState,
        new: Message,
        target: FlushTarget | None,
        media: TurnMedia | None = None,
        *,
        person: bool = True,
        ref: ConversationRef | None = None,
    ) -> PreparedTurn:
        """A turn of a session kept on the gateway: `new` answered after its summary and kept messages.
        With `media` (what the message carries, gateway/media), the model reads its live text and
        pictures this turn, while the session keeps `new`: a line per attachment, never its content.
        `person=False`: a scheduled run or a webhook acting for a conversation and nobody in it
        (gateway/schedules): `user` only names the run; no personal memory is read or written."""
        reader = user.id if person else None
        turn_memory = await self._recall(reader, user.roles if person else (), audience, state.key, new.content)
        core = self.context.core_sections(agent, reader, audience)
        recalled = self.context.recall_sections(core, turn_memory.sections if turn_memory is not None else [])
        system = self.context.render(agent, core)
        live = media.live_message(new) if media is not None else new
        # The auto-flush counts the stable part; recall stays within memory.context_budget_chars.
        await self.session_memory.before_turn(system, state, [live], target)
        prompt = build_messages(agent, list(state.recent), [live], state.summary, system)
        prompt = attach_recall(prompt, recall_block(recalled))
        if media is not None:
            prompt = media.attach(prompt)
        ctx = self._tools(agent, reader, user.roles if person else (), audience, state.key, ref)
        return PreparedTurn(agent, user, state.key, audience, new, prompt, ctx, turn_memory, [*core, *recalled], state)

    async def prepare_ephemeral(
        self, agent: AgentConfig, user: User, key: str, messages: Sequence[Message]
    ) -> PreparedTurn:
        """A request that brings its whole conversation and keeps none (the OpenAI API without
        `user`): the person's assistant all the same, in a direct conversation: Memory.md, recall for
        its newest user message and the memory tools; no session, so no summary and no formation."""
        audience = "personal"
        new = next((m for m in reversed(messages) if m.role == "user"), Message("user", ""))
        turn_memory = await self._recall(user.id, user.roles, audience, key, new.content)
        core = self.context.core_sections(agent, user.id, audience)
        recalled = self.context.recall_sections(core, turn_memory.sections if turn_memory is not None else [])
        system = self.context.render(agent, core)
        prompt = [{"role": "system", "content": system}, *(unframed(m.to_llm()) for m in messages)]
        prompt = attach_recall(prompt, recall_block(recalled))
        ctx = self._tools(agent, user.id, user.roles, audience, key)
        return PreparedTurn(agent, user, key, audience, new, prompt, ctx, turn_memory, [*core, *recalled], None)

    async def _recall(
        self, user_id: str | None, roles: Sequence[str], audience: str, key: str, query: str
    ) -> TurnMemory | None:
        if self.recall is None or self.memory is None:
            return None
        actor = Actor(user_id, frozenset(roles), "chat" if user_id is not None else "scheduled")
        return await self.recall.for_turn(actor, self.memory.where(audience, key), query)

    def _tools(
        self,
        agent: AgentConfig,
        user_id: str | None,
        roles: Sequence[str],
        audience: str,
        key: str,
        ref: ConversationRef | None = None,
    ) -> ToolContext:
        return ToolContext(
            conversation=ref,
            user_id=user_id,
            session_key=key,
            timezone=self.config.timezone,
            audience=audience,
            roles=tuple(roles),
            agent=agent.name,
        )

    async def finish(
        self,
        turn: PreparedTurn,
        produced: Sequence[Message],
        *,
        finish_event: str | None = None,
        sent: tuple[str, str | None] | None = None,
    ) -> None:
        """After the reply: the turn's messages into its session (with its inbound event finished,
        `finish_event`, and its reply recorded as `sent`), the session's budget checked (a summary
        and the formation it queues run in the background), and the recall trace written."""
        if turn.state is not None:
            await self.storage.sessions.append(turn.state, [turn.new, *produced], finish_event=finish_event, sent=sent)
            self.session_memory.after_turn(turn.agent, turn.state)
        if self.traces is not None:  # the reply is out: the trace is written in the background
            self.traces.record(
                turn.memory,
                turn.sections,
                turn.ctx.written,
                session_key=turn.key,
                user_id=turn.user.id,
                event_id=turn.new.event_id,
                query=turn.new.content,
                audience=turn.audience,
                public_person=turn.user.has_role("public"),
                lookups=turn.ctx.lookups,
            )
