"""Chat commands, the same on every channel, each checked against the sender's role."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway.core.events import ConversationKind, MessageReceived
from gateway.core.logs import event
from gateway.turn import replies
from gateway.turn.commands import memory as memory_commands
from gateway.turn.commands.context import CommandContext
from gateway.turn.commands.reminders import remind, reminders_command, timezone
from gateway.turn.engine import COMMAND_ANSWER_AUTHOR, COMMAND_AUTHOR, model_chain
from memory.store.links import LinkError
from memory.store.sessions import Message
from memory.trust.policy import archive_scope

log = logging.getLogger("clawgate.router")

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
    # Its answer shows what only the sender should see (their identities, their memory, a session's
    # model and size, other people's pairing requests): in a group it is answered privately or not at
    # all (gateway/turn/replies.py).
    private: bool = False


async def _help(ctx: CommandContext, _args: str) -> str:
    lines = ["Commands you can use here:"]
    for cmd in COMMANDS.values():
        if cmd.allowed(ctx):
            lines.append(f"/{cmd.name} — {cmd.summary}")
    return "\n".join(lines)


async def _new(ctx: CommandContext, _args: str) -> str:
    await ctx.session_memory.reset(ctx.session_key, ctx.agent, ctx.user.id, ctx.flush_target)
    if ctx.event.ref.kind != ConversationKind.DM:
        await ctx.storage.groups.clear(ctx.event.ref.session_key)  # what the group said before, too
    if not ctx.config.memory.session_memory.enabled:
        return "Started a new conversation. The earlier messages are cleared and kept out of memory."
    return "Started a new conversation. Earlier messages are no longer part of the context (they are archived)."


async def _status(ctx: CommandContext, _args: str) -> str:
    state = await ctx.storage.sessions.active(ctx.session_key, ctx.agent.name, ctx.user.id)
    chain = model_chain(ctx.config, ctx.agent)
    model = chain[0].model if chain else "(none configured)"
    fallbacks = ", ".join(s.model for s in chain[1:]) or "none"
    budget = ctx.session_memory.budget
    limit = f"{budget.token_limit} tokens"
    if budget.message_limit is not None:
        limit = f"{budget.message_limit} messages or {limit}"
    last_flush = state.last_flush_at.isoformat(timespec="seconds") if state.last_flush_at else "never"
    return "\n".join(
        [
            f"Agent: {ctx.agent.name}",
            f"Model: {model} (fallbacks: {fallbacks})",
            f"Session: {ctx.session_key}",
            f"Messages in context: {state.message_count}",
            f"Estimated tokens: {state.token_count} of {limit}"
            + (f" (+ {state.summary_tokens} in the summary)" if state.summary else ""),
            f"Summaries made: {state.summaries}",
            f"Last flush to the daily notes: {last_flush}",
            f"Started: {state.created_at.isoformat(timespec='seconds')}",
        ]
    )


async def _archive(ctx: CommandContext, args: str) -> str:
    query = args.strip()
    if not query:
        return "Usage: /archive WORDS — search the older messages of your conversations."
    if ctx.audience == "public":
        return "The archive is not searchable in a public conversation."
    user_id, keys = archive_scope(ctx.user.id, ctx.session_key, ctx.audience)
    hits = await ctx.storage.archive.search(query, user_id=user_id, session_keys=keys, limit=5)
    if not hits:
        return f"Nothing in your archived messages matches {query!r}."
    lines = [f"Archived messages matching {query!r}:"]
    for h in hits:
        when = h.created_at.strftime("%Y-%m-%d %H:%M")
        lines.append(f"- {when} {h.role}: {h.snippet}")
    return "\n".join(lines)


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


def _memory_on(ctx: CommandContext) -> bool:
    return _anyone(ctx) and ctx.memory is not None and ctx.config.memory.enabled and ctx.audience != "public"


def _is_admin(ctx: CommandContext) -> bool:
    return ctx.user.has_role("admin")


async def _link(ctx: CommandContext, args: str) -> str:
    identity = ctx.event.sender.identity
    if not args:
        if ctx.event.ref.kind != ConversationKind.DM:
            return "Send /link in a direct message: link codes are private."
        code = await ctx.storage.links.create(ctx.user.id, identity)
        shown = f"{code[:4]}-{code[4:]}"
        return (
            f"Your link code is {shown}. Within 10 minutes, send `/link {shown}` from your other account "
            "(on any platform) to make both accounts one person. The code works once."
        )
    if not ctx.limiter.allow(f"link:{identity}"):
        return "Too many link attempts. Wait a few minutes and try again."
    if identity in ctx.config.declared_identities():
        return "This account is assigned to a user in config.yaml; an operator can change it there."
    try:
        owner = await ctx.storage.links.redeem(args, identity)
    except LinkError as exc:
        return f"Could not link: {exc}."
    ctx.storage.identities.forget(identity, (ctx.user.id, owner))
    return f"Linked: {identity} now belongs to user {owner}. /whoami lists all your accounts."


async def _pair(ctx: CommandContext, args: str) -> str:
    verb, _, code = args.partition(" ")
    if verb in ("", "list"):
        pending = await ctx.storage.pairing.pending()
        if not pending:
            return "No pairing requests are waiting."
        lines = ["Waiting for approval (approve with /pair approve CODE):"]
        lines += [f"{p.code}  {p.identity} ({p.display_name or 'no name'}) on {p.channel}" for p in pending]
        return "\n".join(lines)
    if verb == "approve" and code.strip():
        req = await ctx.storage.pairing.approve(code.strip(), ctx.user.id)
        if req is None:
            return f"No pairing request has the code {code.strip()}."
        return f"Approved {req.identity}: they can talk to the assistant now."
    return "Usage: /pair [list] or /pair approve CODE"


COMMANDS: dict[str, Command] = {
    c.name: c
    for c in [
        Command("help", "list the commands you can use", _help),
        Command("new", "start a new conversation", _new, _owner_or_admin),
        Command("reset", "same as /new: clear this conversation's context", _new, _owner_or_admin),
        Command("status", "model, session size and estimated tokens", _status, private=True),
        Command(
            "archive",
            "search the older messages of your conversations: /archive WORDS",
            _archive,
            _memory_on,
            private=True,
        ),
        Command(
            "remember",
            "keep something in memory: /remember TEXT (--channel, --project, --global)",
            memory_commands.remember,
            _memory_on,
        ),
        Command("forget", "forget a memory: /forget ID", memory_commands.forget, _memory_on),
        Command(
            "memory",
            "search, show, list and review memories: /memory for help",
            memory_commands.memory,
            _memory_on,
            private=True,
        ),
        Command("whoami", "your user id, linked identities and roles", _whoami, private=True),
        Command(
            "link", "join your accounts on several platforms: /link, then /link CODE elsewhere", _link, private=True
        ),
        Command("pair", "approve people waiting to talk to the assistant (admins)", _pair, _is_admin, private=True),
        Command("remind", "set a reminder: /remind in 20m stretch, /remind tomorrow 9:00 call the bank", remind),
        Command("reminders", "your reminders; /reminders cancel ID", reminders_command, private=True),
        Command("timezone", "the time zone of your reminders: /timezone Europe/Berlin", timezone, private=True),
    ]
}


def addressed(ev: MessageReceived) -> tuple[str, str] | None:
    """(name, arguments) of a command addressed to the assistant: any in a DM; in a group only with
    a mention (`/cmd@bot`, `@bot /cmd`, a registered command, the platform's own slash commands).
    "/tmp is full again" said to a group is not one (docs/channels.md, "Groups")."""
    parsed = parse(ev.text)
    return parsed if ev.ref.kind == ConversationKind.DM or ev.mentions_bot else None


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


def is_private(name: str) -> bool:
    cmd = COMMANDS.get(name)
    return cmd is not None and cmd.private


def private_hint(name: str, *, slash_command: bool) -> str:
    """What a group is told for a private command it cannot be answered privately there."""
    where = "ask me in a direct message"
    if slash_command:
        where = f"use my /{name} slash command (only you see its answer), or {where}"
    return f"/{name} shows things only you should see, so I don't answer it here: {where}."


async def answer(
    ctx: CommandContext, parsed: tuple[str, str], to: replies.Target, private_commands: bool
) -> tuple[str, replies.Target]:
    """A command's answer and where it goes: in a group, a private one only where it can be
    answered privately (replies.py), else the sender is told where to ask."""
    name, args = parsed
    if is_private(name):
        private = replies.private(ctx.event, to)
        if private is None:
            return private_hint(name, slash_command=private_commands), to
        to = private
    return await dispatch(ctx, name, args), to


# Commands that start the conversation afresh: their exchange is not kept in the new one.
AFRESH = frozenset({"new", "reset"})


async def keep(ctx: CommandContext, name: str, reply: str, to: replies.Target) -> None:
    """A command and its answer go into the direct conversation's session, so a page showing its
    history (Capabilities.shows_history) shows them again. They are kept aside
    (memory/store/sessions.py): never in a prompt or a summary, not counted in the session's
    budget; and not the event's recorded reply (an HTTP retry of a command is still refused as
    already processed). Failing to keep them is logged: the answer was given, a history without
    it is the lesser loss."""
    if ctx.event.ref.kind != ConversationKind.DM or to.private_to is not None or name in AFRESH:
        return
    try:
        state = await ctx.storage.sessions.active(ctx.session_key, ctx.agent.name, ctx.user.id, ctx.audience)
        said = Message("user", ctx.event.text, author=COMMAND_AUTHOR, tokens=0)
        answer = Message("assistant", reply, author=COMMAND_ANSWER_AUTHOR, tokens=0)
        await ctx.storage.sessions.append(state, [said, answer])
    except Exception as exc:
        event(log, "command_not_kept", logging.WARNING, session=ctx.session_key, error=type(exc).__name__)


async def dispatch(ctx: CommandContext, name: str, args: str) -> str:
    cmd = COMMANDS.get(name)
    if cmd is None:
        return f"Unknown command /{name}. Try /help."
    if not cmd.allowed(ctx):
        return f"You are not allowed to use /{name} here."
    return await cmd.handler(ctx, args)
