"""One turn: build the prompt, run the model (with the tool loop), and say what was produced."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from gateway.config.model import AgentConfig, Config
from gateway.core.events import GATEWAY_AUTHOR
from gateway.core.logs import event
from gateway.llm.client import Completion, LLMClient, LLMError, ModelSpec, Restart, TextDelta
from gateway.turn.tools import ToolContext, ToolRegistry
from memory.store.sessions import ASIDE_AUTHOR, Message, kept_aside

log = logging.getLogger("clawgate.turn")

# Marks gateway-authored notices (e.g. "the model failed") so they are shown, never sent to the model.
NOTICE_AUTHOR = f"{GATEWAY_AUTHOR}notice"
# A person's chat command and its answer, kept aside in the session for the page's history (the
# router's _keep_command; memory/store/sessions.py, ASIDE_AUTHOR): never in the session's context.
COMMAND_AUTHOR = f"{ASIDE_AUTHOR}command"
COMMAND_ANSWER_AUTHOR = f"{ASIDE_AUTHOR}answer"


@dataclass(slots=True)
class TurnResult:
    text: str
    produced: list[Message] = field(default_factory=list)
    model: str | None = None
    error: LLMError | None = None


def model_chain(config: Config, agent: AgentConfig) -> list[ModelSpec]:
    """The agent's model, then its fallbacks (the agent's own list, else `ai.fallback`)."""
    primary = agent.model or config.ai.model
    fallbacks = agent.fallback if agent.fallback is not None else config.ai.fallback
    key = config.ai.api_key.get_secret_value() if config.ai.api_key else None
    seen: list[str] = []
    for m in [primary, *fallbacks]:
        if m and m not in seen:
            seen.append(m)
    return [ModelSpec(model=m, api_base=config.ai.api_base, api_key=key) for m in seen]


def system_prompt(agent: AgentConfig) -> str:
    return agent.instructions.strip() or "You are a helpful assistant."


SUMMARY_HEADING = "Summary of the earlier part of this conversation (older messages were archived):"

# The frame recalled memory is quoted in (gateway/turn/context.py, gateway/recall/prompt.py):
# mathematical brackets nobody types in a chat. Recall reaches the model in a user message
# (context.attach_recall), so no other message may carry them: in a person's words (the newest ones
# and those kept from earlier turns), the model's and a tool's output, they become plain brackets.
OPEN, CLOSE = "\u27e6", "\u27e7"
PLAIN_BRACKETS = {ord(OPEN): "[", ord(CLOSE): "]"}  # str.translate: the frame's brackets made plain


def unframed(message: dict[str, Any]) -> dict[str, Any]:
    """`message` (an LLM message) with the frame's brackets in its text made plain; the same object
    when there are none (most messages), so the prompt's stable part stays byte for byte the same."""
    content = message.get("content")
    if not isinstance(content, str) or (OPEN not in content and CLOSE not in content):
        return message
    return {**message, "content": content.translate(PLAIN_BRACKETS)}


def build_messages(
    agent: AgentConfig,
    history: list[Message],
    new: list[Message],
    summary: str | None = None,
    system: str | None = None,
) -> list[dict[str, Any]]:
    """The system prompt (by default the agent's instructions alone; see gateway/turn/context.py), the
    session's summary, then its messages: the same prefix from turn to turn until the session is
    next summarized or Memory.md changes (prompt-cache friendly, DESIGN §12). The turn's recall is
    not part of it: context.attach_recall puts it into the newest user message afterwards."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system or system_prompt(agent)}]
    if summary:
        out.append({"role": "system", "content": f"{SUMMARY_HEADING}\n{summary}"})
    for m in (*history, *new):
        if m.author == NOTICE_AUTHOR or kept_aside(m.author) or m.role == "system":
            continue
        out.append(unframed(m.to_llm()))
    return _drop_orphan_tool_results(out)


def _drop_orphan_tool_results(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A history window may start inside a tool exchange; providers reject a tool result whose call is gone."""
    known: set[str] = set()
    out = []
    for m in msgs:
        if m.get("tool_calls"):
            known.update(tc.get("id", "") for tc in m["tool_calls"])
        if m["role"] == "tool" and m.get("tool_call_id") not in known:
            continue
        out.append(m)
    return out


class TurnEngine:
    def __init__(self, config: Config, llm: LLMClient, tools: ToolRegistry) -> None:
        self.config = config
        self.llm = llm
        self.tools = tools

    async def run(
        self,
        agent: AgentConfig,
        prompt: list[dict[str, Any]],
        ctx: ToolContext,
        stream: bool = True,
    ) -> AsyncIterator[TextDelta | Restart | TurnResult]:
        """Stream deltas; the last item is the TurnResult (also on failure: a notice text)."""
        config = self.config  # a reload during the turn applies to the next one
        chain = model_chain(config, agent)
        if not chain:
            err = LLMError([])
            event(log, "turn_no_model", logging.ERROR, session=ctx.session_key)
            yield TurnResult(err.user_message(), [_notice(err.user_message())], None, err)
            return
        working = list(prompt)
        produced: list[Message] = []
        schemas = self.tools.schemas(ctx) if config.ai.max_tool_rounds > 0 else None
        rounds = 0
        while True:
            final: Completion | None = None
            offer_tools = schemas if rounds < config.ai.max_tool_rounds else None
            try:
                async for ev in self.llm.stream(chain, working, offer_tools, stream):
                    if isinstance(ev, Completion):
                        final = ev
                    else:
                        yield ev
            except LLMError as err:
                event(
                    log,
                    "turn_llm_failed",
                    logging.ERROR,
                    session=ctx.session_key,
                    kind=err.kind,
                    models=",".join(a.model for a in err.attempts),
                )
                text = err.user_message()
                yield TurnResult(text, [*produced, _notice(text)], None, err)
                return
            assert final is not None
            if final.tool_calls and offer_tools:
                rounds += 1
                call_msg = Message(role="assistant", content=final.text, tool_calls=final.tool_calls)
                produced.append(call_msg)
                working.append(call_msg.to_llm())
                for tc in final.tool_calls:
                    name = tc["function"]["name"]
                    result = await self.tools.call(ctx, name, tc["function"]["arguments"])
                    event(log, "tool_called", session=ctx.session_key, tool=name, round=rounds)
                    res_msg = Message(role="tool", content=result, tool_call_id=tc["id"])
                    produced.append(res_msg)
                    working.append(unframed(res_msg.to_llm()))  # a memory's text may hold the frame
                continue
            text = final.text
            if not text.strip():
                text = "(the model returned an empty answer)"
            if ctx.receipts:  # what the tools did, in the gateway's words (ToolContext.receipts)
                extra = "\n\n" + "\n".join(ctx.receipts)
                yield TextDelta(extra)
                text += extra
            produced.append(Message(role="assistant", content=text))
            yield TurnResult(text, produced, final.model)
            return


def _notice(text: str) -> Message:
    return Message(role="assistant", content=text, author=NOTICE_AUTHOR)
