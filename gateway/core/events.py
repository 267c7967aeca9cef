"""Small, frozen event types shared by channels, memory and the gateway.

Times are timezone-aware UTC. Thread identity is a field, never a metadata entry. `raw`
(the platform payload) is kept out of equality and repr so it never leaks into logs.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

# Authors of messages the gateway itself puts in a session (its notices, the prompts of scheduled runs
# and webhooks) are named in this namespace, which no platform identity uses ("<platform>:<id>"):
# such messages are nobody's words, so they never form memory (memory/formation/admission.py).
GATEWAY_AUTHOR = "clawgate:"


def utcnow() -> datetime:
    return datetime.now(UTC)


class ConversationKind(enum.StrEnum):
    DM = "dm"
    GROUP = "group"
    CHANNEL = "channel"


@dataclass(frozen=True, slots=True)
class ConversationRef:
    channel: str  # configured channel name, e.g. "web" or "telegram-main"
    chat_id: str
    thread_id: str | None = None
    kind: ConversationKind = ConversationKind.DM

    @property
    def session_key(self) -> str:
        """`<channel>:<kind>:<chat>[:<thread>]`, the per-conversation session key (DESIGN §3)."""
        base = f"{self.channel}:{self.kind.value}:{self.chat_id}"
        return f"{base}:{self.thread_id}" if self.thread_id else base


@dataclass(frozen=True, slots=True)
class Actor:
    identity: str  # "<platform>:<platform user id>", e.g. "web:alice", "telegram:123"
    display_name: str | None = None
    is_bot: bool = False


@dataclass(frozen=True, slots=True)
class MessageRef:
    conversation: ConversationRef
    message_id: str


@dataclass(frozen=True, slots=True)
class Attachment:
    kind: str  # the platform's word for it: "photo", "voice", a MIME type...
    name: str | None = None
    size: int | None = None
    # How the channel fetches it again (docs/media.md): a Telegram file_id, a Slack file id, a
    # Discord attachment URL, a web upload's id. Never the bytes: an event is journaled with this.
    ref: str | None = None
    mime: str | None = None  # the MIME type the platform declares, if it does
    duration: float | None = None  # seconds, for audio the platform measured


@dataclass(frozen=True, slots=True)
class MessageReceived:
    event_id: str  # globally unique per channel delivery; the dedupe key
    ref: ConversationRef
    sender: Actor
    text: str
    mentions_bot: bool = False
    reply_to: MessageRef | None = None
    attachments: tuple[Attachment, ...] = ()
    edited: bool = False  # an edit of an earlier message (same platform message, new text)
    # False when nobody can watch the reply being written (an HTTP request waiting for its answer):
    # the model is then asked for one answer instead of a stream.
    wants_stream: bool = True
    received_at: datetime = field(default_factory=utcnow)
    raw: Any = field(default=None, compare=False, repr=False)
    # The platform's own id of this message (Telegram message_id, Discord snowflake, Slack ts): what a
    # reply quotes or threads under. None where there is no message to point at (slash commands).
    message_id: str | None = None
    # The platform can answer this event so that only its sender sees it (Slack's ephemeral messages
    # in a channel, Discord's ephemeral follow-up to a slash command).
    private_reply: bool = False

    def __post_init__(self) -> None:
        # NUL characters mean nothing in chat, and PostgreSQL text columns refuse them: they would
        # turn a message into a failed turn there. Dropped here, once, for every channel.
        if "\x00" in self.text:
            object.__setattr__(self, "text", self.text.replace("\x00", ""))
        name = self.sender.display_name
        if name is not None and "\x00" in name:
            object.__setattr__(self, "sender", replace(self.sender, display_name=name.replace("\x00", "")))


@dataclass(frozen=True, slots=True)
class OutboundMessage:
    conversation: ConversationRef
    text: str
    idempotency_key: str
    in_reply_to_event: str | None = None
    reply_to: MessageRef | None = None
    final: bool = True
    # Only this person (an identity, "slack:T1/U9") sees the message: sent as an ephemeral message
    # (the event's `private_reply` says the platform can). Never edited afterwards.
    private_to: str | None = None


def event_to_payload(ev: MessageReceived) -> dict[str, Any]:
    """What the inbound journal keeps of an event: enough to process it again after a crash."""
    return {
        "event_id": ev.event_id,
        "channel": ev.ref.channel,
        "chat_id": ev.ref.chat_id,
        "thread_id": ev.ref.thread_id,
        "kind": ev.ref.kind.value,
        "sender": ev.sender.identity,
        "sender_name": ev.sender.display_name,
        "text": ev.text,
        "mentions_bot": ev.mentions_bot,
        "edited": ev.edited,
        "wants_stream": ev.wants_stream,
        "attachments": [[a.kind, a.name, a.size, a.ref, a.mime, a.duration] for a in ev.attachments],
        "reply_to": [ev.reply_to.conversation.chat_id, ev.reply_to.message_id] if ev.reply_to else None,
        "received_at": ev.received_at.isoformat(),
        "message_id": ev.message_id,
        "private_reply": ev.private_reply,
    }


def event_from_payload(p: dict[str, Any]) -> MessageReceived:
    ref = ConversationRef(p["channel"], p["chat_id"], p.get("thread_id"), ConversationKind(p["kind"]))
    return MessageReceived(
        event_id=p["event_id"],
        ref=ref,
        sender=Actor(p["sender"], p.get("sender_name")),
        text=p["text"],
        mentions_bot=bool(p.get("mentions_bot")),
        edited=bool(p.get("edited")),
        wants_stream=bool(p.get("wants_stream", True)),
        # Events journaled before attachments kept their ref have three items: the rest default.
        attachments=tuple(Attachment(*item) for item in p.get("attachments") or ()),
        reply_to=MessageRef(ref, p["reply_to"][1]) if p.get("reply_to") else None,
        received_at=datetime.fromisoformat(p["received_at"]),
        message_id=p.get("message_id"),
        private_reply=bool(p.get("private_reply")),
    )
