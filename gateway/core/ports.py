"""The adapter port: the small surface every channel implements (DESIGN §2)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

from gateway.core.events import ConversationRef, MessageReceived, MessageRef, OutboundMessage

EventSink = Callable[[MessageReceived], Awaitable[None]]


def _len(text: str) -> int:
    return len(text)


@dataclass(frozen=True, slots=True)
class Capabilities:
    can_edit: bool = False
    typing: bool = False
    threads: bool = False
    max_length: int = 4000
    length: Callable[[str], int] = _len
    min_edit_interval: float = 1.0
    # A sent message stays on the platform, so sending it again after a crash would show it twice:
    # every send is claimed in the outbound journal first. False where the session history is the
    # record and a send only pushes to whoever is connected (the web channel).
    durable_sends: bool = True


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


@dataclass(frozen=True, slots=True)
class HistoryItem:
    role: str
    text: str


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


@dataclass(frozen=True, slots=True)
class RecordedReply:
    text: str
    message_id: str | None


class KeyReused(Exception):
    """An idempotency key sent again with a different message."""
