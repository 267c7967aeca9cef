"""Where an answer goes, and what it points at (docs/channels.md, "Groups"). Pure.

In a direct conversation an answer is a plain message. In a group it points at the message that
asked (`reply_mode`): `quote` answers as a reply quoting it (Telegram reply_parameters, Discord
message_reference); `thread` answers in its thread where the platform threads any message (Slack:
thread_ts is the asking message's ts, unless it was written in a thread already), and elsewhere is
the same as quote; `plain` is a message of its own. Only the first message of a split answer
quotes; every part goes to the same place.

Answering in a new thread does not move the conversation: the turn stays in the session of the place
it was asked in, so what is remembered for that channel, its `/memory trace` and `/new` keep working
from there; a follow-up written in the thread is, like any thread, a conversation of its own.

Some commands show things only their sender should see (commands.chat, `private`). In a group, such
an answer goes out privately where the platform can (`MessageReceived.private_reply`: a Slack
ephemeral message, Discord's ephemeral reply to its slash command); elsewhere the command is not run
and the sender is told where to ask instead.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gateway.core.channel_config import ChatChannelConfig, ReplyMode
from gateway.core.events import ConversationKind, ConversationRef, MessageReceived, MessageRef


@dataclass(frozen=True, slots=True)
class Target:
    conversation: ConversationRef  # where every part of the answer goes
    reply_to: MessageRef | None = None  # what its first part quotes
    private_to: str | None = None  # the identity who alone sees it (an ephemeral answer)


def for_channel(ev: MessageReceived, cfg: object, *, threads_any_message: bool) -> Target:
    """`target` under the channel's `reply_mode`; channels without one (the web chat) answer plainly."""
    if not isinstance(cfg, ChatChannelConfig):
        return Target(ev.ref)
    return target(ev, cfg.reply_mode, threads_any_message=threads_any_message)


def target(ev: MessageReceived, mode: ReplyMode, *, threads_any_message: bool) -> Target:
    """Where the answer to `ev` goes. `threads_any_message`: the platform starts a thread under any
    message (Slack), rather than having threads only as places of their own."""
    if ev.ref.kind == ConversationKind.DM or mode == "plain" or not ev.message_id:
        return Target(ev.ref)
    quote = MessageRef(ev.ref, ev.message_id)
    if not threads_any_message:
        return Target(ev.ref, quote)
    conversation = ev.ref if ev.ref.thread_id else replace(ev.ref, thread_id=ev.message_id)
    # Slack: a thread reply quotes nothing; `quote` also shows it in the channel (reply_broadcast).
    return Target(conversation, quote if mode == "quote" else None)


def private(ev: MessageReceived, answer_to: Target) -> Target | None:
    """The target of an answer only `ev`'s sender may see: in a DM, the usual one; in a group, where
    `ev` was written, privately (quoting and threading nothing); None where the platform cannot answer
    privately there (the command is then not run in the group)."""
    if ev.ref.kind == ConversationKind.DM:
        return answer_to
    if not ev.private_reply:
        return None
    return Target(ev.ref, None, ev.sender.identity)
