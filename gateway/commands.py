"""Chat commands, the same on every channel, each checked against the sender's role."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway.config import AgentConfig, Config
from gateway.events import ConversationKind, MessageReceived
from gateway.turn import model_chain
from memory.identities import User
from memory.storage import Storage


@dataclass(frozen=True, slots=True)
class CommandContext:
    event: MessageReceived
    user: User
    session_key: str
    agent: AgentConfig
    config: Config
    storage: Storage


Handler = Callable[[CommandContext, str], Awaitable[str]]
Allowed = Callable[[CommandContext], bool]


def _anyone(ctx: CommandContext) -> bool:
    return not ctx.user.has_role("public")


def _owner_or_admin(ctx: CommandContext) -> bool:
    """Resetting a DM is the person's own business; resetting a shared group session is an admin's."""
    if ctx.user.has_role("admin", "system"):
        return True
    return _anyone(ctx) and ctx.event.ref.kind == ConversationKind.DM


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    summary: str
    handler: Handler
    allowed: Allowed = _anyone


async def _help(ctx: CommandContext, _args: str) -> str:
    lines = ["Commands you can use here:"]
    for cmd in COMMANDS.values():
        if cmd.allowed(ctx):
            lines.append(f"/{cmd.name} — {cmd.summary}")
    return "\n".join(lines)


async def _new(ctx: CommandContext, _args: str) -> str:
    await ctx.storage.sessions.reset(ctx.session_key, ctx.agent.name, ctx.user.id)
    return "Started a new conversation. Earlier messages are no longer part of the context."


async def _status(ctx: CommandContext, _args: str) -> str:
    state = await ctx.storage.sessions.active(ctx.session_key, ctx.agent.name, ctx.user.id)
    chain = model_chain(ctx.config, ctx.agent)
    model = chain[0].model if chain else "(none configured)"
    fallbacks = ", ".join(s.model for s in chain[1:]) or "none"
    return "\n".join(
        [
            f"Agent: {ctx.agent.name}",
            f"Model: {model} (fallbacks: {fallbacks})",
            f"Session: {ctx.session_key}",
            f"Messages: {state.message_count}",
            f"Estimated tokens: {state.token_count}",
            f"Started: {state.created_at.isoformat(timespec='seconds')}",
        ]
    )


async def _whoami(ctx: CommandContext, _args: str) -> str:
    fresh = await ctx.storage.identities.get_user(ctx.user.id) or ctx.user
    return "\n".join(
        [
            f"User: {fresh.id}",
            f"Identities: {', '.join(fresh.identities) or ctx.event.sender.identity}",
            f"Roles: {', '.join(fresh.roles)}",
            f"You are writing as: {ctx.event.sender.identity}",
        ]
    )


COMMANDS: dict[str, Command] = {
    c.name: c
    for c in [
        Command("help", "list the commands you can use", _help),
        Command("new", "start a new conversation", _new, _owner_or_admin),
        Command("reset", "same as /new: clear this conversation's context", _new, _owner_or_admin),
        Command("status", "model, session size and estimated tokens", _status),
        Command("whoami", "your user id, linked identities and roles", _whoami),
    ]
}


def parse(text: str) -> tuple[str, str] | None:
    """`/name args` -> (name, args). Accepts Telegram's `/name@botname`. None when not a command."""
    stripped = text.strip()
    if not stripped.startswith("/") or len(stripped) < 2:
        return None
    head, _, rest = stripped[1:].partition(" ")
    name = head.split("@", 1)[0].lower()
    if not name.isidentifier():
        return None
    return name, rest.strip()


async def dispatch(ctx: CommandContext, name: str, args: str) -> str:
    cmd = COMMANDS.get(name)
    if cmd is None:
        return f"Unknown command /{name}. Try /help."
    if not cmd.allowed(ctx):
        return f"You are not allowed to use /{name} here."
    return await cmd.handler(ctx, args)
