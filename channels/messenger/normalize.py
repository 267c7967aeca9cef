"""A Messenger webhook call's JSON -> gateway.core.events.MessageReceived. Pure: no network.

One call carries entries (one per Page) of `messaging` events: messages (text, quick replies,
attachments), postbacks (a button was tapped), and what the gateway has no use for: echoes of the
Page's own messages, delivery and read receipts, reactions, referrals. Every event becomes a
direct conversation with one person: a channel is one Page, and a person is known by their
page-scoped id (PSID), so the same person has another PSID on another Page.

Quick replies and postbacks become the text the person saw and tapped: that is what they said, and
the payload is a string only the Page's configuration gives meaning to. One exception: a payload
that starts with "/" is a gateway command the operator put behind a button (a persistent menu's
"Start over" -> "/new"), and it is the text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from gateway.core.events import Actor, Attachment, ConversationKind, ConversationRef, MessageReceived, MessageRef

# Messenger's "like" button sends one of these stickers (small, medium, large thumbs up): it is an
# answer ("👍"), not a picture to refuse.
LIKE_STICKERS = frozenset({"369239263222822", "369239343222814", "369239383222810"})
# Attachment types whose payload names a file to download (docs/media.md decides what is read).
_FILE_TYPES = frozenset({"image", "audio", "video", "file"})
_NAME_CHARS = 120


@dataclass(frozen=True, slots=True)
class Incoming:
    """A person's message or postback, and when they sent it (seconds since the epoch, Meta's clock):
    each one reopens that person's 24-hour window."""

    event: MessageReceived
    psid: str
    sent_at: float


@dataclass(frozen=True, slots=True)
class Batch:
    incoming: tuple[Incoming, ...]
    ignored: int  # echoes, receipts and other events with nothing to answer
    foreign: int  # events for another Page than this channel's


def _id(value: Any) -> str | None:
    """Meta sends ids as strings; an integer (hand-made payloads) is accepted, anything else is not."""
    if isinstance(value, str) and value.strip():
        return value.strip()
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _timestamp(value: Any, fallback: float) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value) / 1000  # Meta's timestamps are milliseconds
    return fallback


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def chosen_text(title: str, payload: str) -> str:
    """What a tapped quick reply or button says: a command payload, else what the person saw."""
    if payload.startswith("/"):
        return payload
    return title or payload


def file_name(url: str) -> str | None:
    """The file name at the end of an attachment URL's path (Facebook's CDN keeps it there)."""
    try:
        path = urlsplit(url).path
    except ValueError:
        return None
    name = unquote(path.rstrip("/").rpartition("/")[2]).strip()
    return name[:_NAME_CHARS] or None


def _attachments(items: Any) -> tuple[tuple[Attachment, ...], list[str], bool]:
    """(files to read, lines of text for shared links, whether it was the like button)."""
    files: list[Attachment] = []
    lines: list[str] = []
    liked = False
    if not isinstance(items, list):
        return (), lines, liked
    for item in items:
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type")
        raw_payload = item.get("payload")
        payload: Mapping[str, Any] = raw_payload if isinstance(raw_payload, Mapping) else {}
        url = payload.get("url")
        sticker = _id(payload.get("sticker_id"))
        if sticker is not None or kind == "sticker":
            if sticker in LIKE_STICKERS:
                liked = True
            elif isinstance(url, str) and url:
                files.append(Attachment("sticker", None, ref=url))
            continue
        if kind in _FILE_TYPES and isinstance(url, str) and url:
            files.append(Attachment(str(kind), file_name(url), ref=url))
        elif kind == "fallback":
            # A link the person shared: its title and address as text. Never fetched.
            title, link = item.get("title"), payload.get("url") or item.get("url")
            parts = [p for p in (title, link) if isinstance(p, str) and p]
            if parts:
                lines.append(" ".join(parts) if len(parts) == 1 else f"{parts[0]} ({parts[1]})")
    return tuple(files), lines, liked


def _postback_id(channel: str, psid: str, sent_at: float, payload: str) -> str:
    # An old postback has no mid: one made of what Meta sends again unchanged on a redelivery.
    digest = hashlib.sha256(f"{psid}\n{sent_at:.3f}\n{payload}".encode()).hexdigest()[:32]
    return f"{channel}:postback:{digest}"


def normalize_event(
    messaging: Mapping[str, Any], *, channel: str, page_id: str, now: float
) -> tuple[MessageReceived, float] | None:
    """The event for one `messaging` item of Page `page_id` and when it was sent, or None."""
    sender = messaging.get("sender")
    psid = _id(sender.get("id")) if isinstance(sender, Mapping) else None
    if psid is None or psid == page_id:
        return None  # the Page's own doing
    sent_at = _timestamp(messaging.get("timestamp"), now)
    ref = ConversationRef(channel, psid, None, ConversationKind.DM)
    actor = Actor(f"messenger:{page_id}/{psid}")
    message = messaging.get("message")
    if isinstance(message, Mapping):
        if message.get("is_echo"):
            return None  # what the Page (this gateway, or a person in the Page's inbox) sent
        mid = _id(message.get("mid"))
        if mid is None:
            return None
        text = _text(message.get("text"))
        quick = message.get("quick_reply")
        if isinstance(quick, Mapping) and isinstance(quick.get("payload"), str):
            text = chosen_text(text, str(quick["payload"]))
        files, lines, liked = _attachments(message.get("attachments"))
        text = "\n".join([t for t in (text, *lines) if t])
        if liked and not text:
            text = "👍"
        if not text and not files:
            return None  # a share with nothing in it, a template, a reaction
        replied = message.get("reply_to")
        reply_mid = _id(replied.get("mid")) if isinstance(replied, Mapping) else None
        ev = MessageReceived(
            event_id=f"{channel}:{mid}",
            ref=ref,
            sender=actor,
            text=text,
            mentions_bot=True,  # everything written to a Page is addressed to it
            reply_to=MessageRef(ref, reply_mid) if reply_mid else None,
            attachments=files,
            raw=messaging,
            message_id=mid,
        )
        return ev, sent_at
    postback = messaging.get("postback")
    if isinstance(postback, Mapping):
        payload = _text(postback.get("payload"))
        text = chosen_text(_text(postback.get("title")), payload)
        if not text:
            return None
        mid = _id(postback.get("mid"))
        ev = MessageReceived(
            event_id=f"{channel}:{mid}" if mid else _postback_id(channel, psid, sent_at, payload),
            ref=ref,
            sender=actor,
            text=text,
            mentions_bot=True,
            raw=messaging,
            message_id=mid,
        )
        return ev, sent_at
    return None  # delivery, read, reaction, referral, optin...


def _messaging(entry: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    items = entry.get("messaging")
    if isinstance(items, list):
        yield from (m for m in items if isinstance(m, Mapping))


def normalize_body(body: Mapping[str, Any], *, channel: str, page_id: str | None, now: float) -> Batch:
    """Every event of one webhook call (`object: page`) for Page `page_id` (None: any Page).

    The Page comes from the entry's id, else the event's recipient. An item that is not a dict
    is skipped like an event with nothing to answer: the rest of the call is still read."""
    incoming: list[Incoming] = []
    ignored = foreign = 0
    entries = body.get("entry")
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, Mapping):
            ignored += 1
            continue
        for messaging in _messaging(entry):
            recipient = messaging.get("recipient")
            page = _id(entry.get("id")) or (_id(recipient.get("id")) if isinstance(recipient, Mapping) else None)
            if page is None:
                ignored += 1
                continue
            if page_id is not None and page != page_id:
                foreign += 1
                continue
            found = normalize_event(messaging, channel=channel, page_id=page, now=now)
            if found is None:
                ignored += 1
                continue
            ev, sent_at = found
            incoming.append(Incoming(ev, ev.ref.chat_id, sent_at))
    return Batch(tuple(incoming), ignored, foreign)
