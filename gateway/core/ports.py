"""The adapter port: the small surface every channel implements (DESIGN §2)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from gateway.core.events import ConversationRef, MessageReceived, MessageRef, OutboundMessage

EventSink = Callable[[MessageReceived], Awaitable[None]]


def _len(text: str) -> int:
    return len(text)


def _same(text: str) -> str:
    return text


@dataclass(frozen=True, slots=True)
class Rate:
    """A platform's budget for one kind of call: `per_second` on average and `burst` at once, shared
    by every conversation whose rules name the same `key` (a chat, a channel, a whole workspace).

    `sends`: sends spend this budget as well as edits (Telegram counts both towards a group's 20 a
    minute; Slack's chat.update tier does not count chat.postMessage). `hold`: a 429 met in one
    conversation holds every conversation sharing the key until its retry_after is over; False for a
    budget so wide (a bot's global rate) that one chat's refusal says nothing about it."""

    key: str
    per_second: float
    burst: float = 1.0
    sends: bool = True
    hold: bool = True

    def __post_init__(self) -> None:
        if not self.per_second > 0 or not self.burst >= 1:
            raise ValueError(f"rate {self.key!r}: per_second must be above 0 and burst at least 1")


@dataclass(frozen=True, slots=True)
class Capabilities:
    can_edit: bool = False
    typing: bool = False
    threads: bool = False
    max_length: int = 4000
    length: Callable[[str], int] = _len
    # Without `pacing`: at most one edit per this many seconds in a conversation.
    min_edit_interval: float = 1.0
    # A sent message stays on the platform, so sending it again after a crash would show it twice:
    # every send is claimed in the outbound journal first. False where the session history is the
    # record and a send only pushes to whoever is connected (the web channel).
    durable_sends: bool = True
    # The platform's rate budgets for a conversation (a private chat and a group may differ); None
    # derives one from min_edit_interval. Streaming edits wait for every budget; see Rate.
    pacing: Callable[[ConversationRef], tuple[Rate, ...]] | None = None
    # What the platform is sent for a text: two texts rendered alike make an edit that changes nothing.
    rendered: Callable[[str], str] = _same
    # An edit with final=True does something even when the text is unchanged (the web chat ends the
    # reply with it), so Delivery never skips it. False where `final` changes nothing on screen.
    final_edit_matters: bool = True
    # A thread can be started under any message (Slack's thread_ts), not only as a place of its own:
    # a group answer then goes into the thread of the message it answers (gateway/turn/replies.py).
    threads_any_message: bool = False
    # The platform's own slash commands can be answered so that only their sender sees the answer.
    private_commands: bool = False
    # The channel shows a conversation's session history (the web chat page after a reload): chat
    # commands and their answers are kept in the session too, out of the model's prompt.
    shows_history: bool = False

    def rates(self, conv: ConversationRef) -> tuple[Rate, ...]:
        if self.pacing is not None:
            return self.pacing(conv)
        per_second = 1 / self.min_edit_interval if self.min_edit_interval > 0 else float("inf")
        return (Rate(f"chat:{conv.chat_id}", per_second),)


@dataclass(frozen=True, slots=True)
class Health:
    ok: bool
    detail: str = ""


class DeliveryError(Exception):
    """A send or edit that failed. Adapters raise only this type."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        retry_after: float | None = None,
        maybe_delivered: bool = False,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after
        self.maybe_delivered = maybe_delivered


class SessionBusy(Exception):
    """The sink refused an event: too many messages already wait in that session (back-pressure)."""


# How long a client is asked to wait before it tries again when the storage cannot be written.
STORAGE_RETRY_SECONDS = 30.0


def whole_seconds(wait: float) -> int:
    """A wait as the whole seconds a person or a Retry-After header is told: at least one."""
    return max(1, round(wait))


def retry_after(wait: float) -> dict[str, str]:
    """The Retry-After header for a wait of `wait` seconds."""
    return {"Retry-After": str(whole_seconds(wait))}


class Unavailable(Exception):
    """The sink cannot take or answer an event now (its storage cannot be written): `reason` in
    plain words. An event already journaled is kept and answered once the gateway can again; HTTP
    callers get a 503 and may retry (with the same idempotency key, to get that answer)."""

    def __init__(self, reason: str, retry_after: float = STORAGE_RETRY_SECONDS) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class Throttled(Exception):
    """Too many failed sign-ins with this credential or from this address lately: try again after
    `retry_after` seconds. A valid credential is never refused this way."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"too many failed attempts; try again in {whole_seconds(retry_after)} s")
        self.retry_after = retry_after


class Adapter(Protocol):
    name: str
    capabilities: Capabilities

    async def start(self, sink: EventSink) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, msg: OutboundMessage) -> MessageRef: ...

    async def edit(self, ref: MessageRef, text: str, final: bool) -> None: ...

    def typing(self, conv: ConversationRef) -> AbstractAsyncContextManager[None]: ...

    def health(self) -> Health: ...


@runtime_checkable
class Reacting(Protocol):
    """An optional part of the port: adapters whose platform lets a bot react to a message.

    `reaction` is the configured one, as given (an emoji such as "👀"); the adapter puts it in its
    platform's form. Both raise DeliveryError on failure."""

    async def react(self, ref: MessageRef, reaction: str) -> None: ...

    async def unreact(self, ref: MessageRef, reaction: str) -> None: ...


@dataclass(frozen=True, slots=True)
class HistoryItem:
    role: str
    text: str


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    """One of a person's conversations on a channel, for a list to pick from (the chat page)."""

    thread_id: str | None  # the conversation's id within the chat (None: the default one)
    title: str  # the first thing the person said, trimmed ("" before they said anything)
    updated_at: str  # ISO 8601, UTC: when its latest message was stored


class ConversationState(Protocol):
    """What a channel keeps about one of its platform conversations across restarts and instances:
    a small JSON object per (channel, conversation), written whole. Teams keeps the address its
    service answers at (the conversation reference); Messenger keeps when the person last wrote,
    for its 24-hour window. Never message text: that is the session's, and redacted there."""

    async def load(self, channel: str, conversation: str) -> dict[str, Any] | None: ...

    async def save(self, channel: str, conversation: str, data: dict[str, Any]) -> None: ...


@dataclass(frozen=True, slots=True)
class ChannelServices:
    """What the gateway hands a channel when it is created.

    `http` is the shared aiohttp application: channels that receive HTTP (web chat, webhooks)
    add their routes to it before the server starts.
    """

    http: object
    # (bearer token, the client's address) -> user id, or None; raises Throttled after many failures
    authenticate: Callable[[str | None, str | None], str | None]
    history: Callable[[ConversationRef, str], Awaitable[list[HistoryItem]]]  # (conversation, identity)
    # Chat commands (name, one-line summary) to register where the platform has a command menu.
    commands: tuple[tuple[str, str], ...] = ()
    # Journal an event before the platform is acknowledged (webhooks); False: seen before. The
    # channel hands the event to its sink afterwards as usual.
    accept: Callable[[MessageReceived], Awaitable[bool]] | None = None
    # An HTTP client's retry of an event seen before (same idempotency key): the reply recorded for
    # it, once the first try's turn is over, or None when there is none to give (refused, failed).
    # Raises KeyReused when the retry's text is not the first try's.
    replay: Callable[[MessageReceived], Awaitable[RecordedReply | None]] | None = None
    # Per-conversation state kept in the database (see ConversationState); None where nothing is kept.
    conversations: ConversationState | None = None
    # (a conversation of the chat, identity) -> that chat's open conversations, most recent first.
    threads: Callable[[ConversationRef, str], Awaitable[list[ConversationSummary]]] | None = None
    # Stop the reply of a running turn, by the inbound event's id (gateway/turn/stops.py).
    stop_turn: Callable[[str], None] | None = None


@dataclass(frozen=True, slots=True)
class RecordedReply:
    text: str
    message_id: str | None


class KeyReused(Exception):
    """An idempotency key sent again with a different message."""
