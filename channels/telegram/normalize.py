"""Telegram Update JSON -> gateway.core.events.MessageReceived. Pure: no SDK, no network.

Works on the Bot API's JSON shape (what a webhook receives, and what PTB's `Update.to_dict()`
gives back in polling mode). Entity offsets are in UTF-16 code units, as Telegram sends them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.core.events import Actor, Attachment, ConversationKind, ConversationRef, MessageReceived, MessageRef

# Update kinds the adapter asks Telegram for (getUpdates / setWebhook `allowed_updates`).
ALLOWED_UPDATES = ("message", "edited_message")

# Message fields that carry a file, in the order we report them. An animation message also has a
# `document` field describing the same file: the animation wins and the document is skipped.
_FILE_KINDS = ("animation", "document", "audio", "voice", "video", "video_note", "sticker")


@dataclass(frozen=True, slots=True)
class BotIdentity:
    """Who "the bot" is, from getMe: needed to spot its own messages and its mentions."""

    id: int
    username: str | None
    # The bot's registered commands: "/status" alone at the start of a group message is addressed to
    # it (Telegram sends the bare form from the command menu); any other "/word" is just text.
    commands: frozenset[str] = frozenset()


def normalize_update(update: Mapping[str, Any], *, channel: str, bot: BotIdentity) -> MessageReceived | None:
    """The event for one update, or None when it is not something the gateway should see."""
    update_id = update.get("update_id")
    if not isinstance(update_id, int):
        return None
    edited = "edited_message" in update
    message = update.get("edited_message") if edited else update.get("message")
    if not isinstance(message, Mapping):
        return None  # channel posts, callbacks, member updates...: not chat messages for us
    sender = message.get("from")
    chat = message.get("chat")
    if not isinstance(sender, Mapping) or not isinstance(chat, Mapping):
        return None
    if not isinstance(sender.get("id"), int) or not isinstance(chat.get("id"), int):
        return None
    # Our own messages and other bots' (including GroupAnonymousBot for anonymous admins, whose
    # person we cannot identify) are ignored.
    if sender.get("is_bot") or sender.get("id") == bot.id:
        return None

    text = message.get("text")
    entities = message.get("entities")
    if text is None:
        text, entities = message.get("caption"), message.get("caption_entities")
    text = text if isinstance(text, str) else ""
    attachments = attachments_of(message)
    if not text and not attachments:
        return None  # service messages (joins, pins, topic created...), polls, locations

    cleaned, mentioned, foreign_command = _clean_text(text, entities if isinstance(entities, list) else [], bot)
    if foreign_command:
        return None  # "/cmd@otherbot" is addressed to another bot in the group
    ref = _conversation(channel, message, chat)
    reply_to, replied_to_bot = _reply(message, ref, bot)
    return MessageReceived(
        event_id=f"{channel}:{update_id}",
        ref=ref,
        sender=Actor(f"telegram:{sender['id']}", display_name(sender), is_bot=False),
        text=cleaned,
        mentions_bot=mentioned or replied_to_bot,
        reply_to=reply_to,
        attachments=attachments,
        edited=edited,
        raw=update,
        message_id=str(message["message_id"]) if isinstance(message.get("message_id"), int) else None,
    )


def _conversation(channel: str, message: Mapping[str, Any], chat: Mapping[str, Any]) -> ConversationRef:
    kind = ConversationKind.DM if chat.get("type") == "private" else ConversationKind.GROUP
    # message_thread_id alone also appears on replies in ordinary supergroups; only a topic message
    # belongs to a forum topic.
    thread = message.get("message_thread_id") if message.get("is_topic_message") else None
    return ConversationRef(channel, str(chat["id"]), str(thread) if thread is not None else None, kind)


def _reply(message: Mapping[str, Any], ref: ConversationRef, bot: BotIdentity) -> tuple[MessageRef | None, bool]:
    replied = message.get("reply_to_message")
    # In a forum topic every message "replies" to the topic's creation message: not a real reply.
    if not isinstance(replied, Mapping) or "forum_topic_created" in replied:
        return None, False
    author = replied.get("from")
    to_bot = isinstance(author, Mapping) and author.get("id") == bot.id
    return MessageRef(ref, str(replied.get("message_id"))), to_bot


def display_name(user: Mapping[str, Any]) -> str | None:
    name = " ".join(str(p) for p in (user.get("first_name"), user.get("last_name")) if p)
    return name or user.get("username") or None


def attachments_of(message: Mapping[str, Any]) -> tuple[Attachment, ...]:
    """The message's files, each with its file_id (what getFile downloads it by, docs/media.md)."""
    found: list[Attachment] = []
    photo = message.get("photo")
    if isinstance(photo, list) and photo:
        # Telegram sends every resolution of a photo; the largest is the real one. Photos are JPEG.
        best = max(photo, key=lambda p: (p.get("file_size") or 0, p.get("width", 0) * p.get("height", 0)))
        found.append(Attachment("photo", None, _int(best.get("file_size")), _str(best.get("file_id")), "image/jpeg"))
    for kind in _FILE_KINDS:
        item = message.get(kind)
        if not isinstance(item, Mapping) or (kind == "document" and "animation" in message):
            continue
        name = item.get("file_name") or (item.get("title") if kind == "audio" else None)
        duration = item.get("duration")
        found.append(
            Attachment(
                kind,
                name,
                _int(item.get("file_size")),
                _str(item.get("file_id")),
                _str(item.get("mime_type")),
                float(duration) if isinstance(duration, int | float) and not isinstance(duration, bool) else None,
            )
        )
    return tuple(found)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _utf16(text: str) -> bytes:
    return text.encode("utf-16-le", "surrogatepass")


def _clean_text(text: str, entities: Sequence[Any], bot: BotIdentity) -> tuple[str, bool, bool]:
    """(text without the bot's mention, whether the bot was addressed, whether another bot was).

    Other people's text mentions become "@Name" so the model sees who is meant.
    """
    raw = _utf16(text)
    handle = f"@{bot.username}".lower() if bot.username else None
    pieces: list[str] = []
    cursor = 0  # in UTF-16 units
    mentioned = foreign_command = False
    for ent in sorted((e for e in entities if isinstance(e, Mapping)), key=lambda e: e.get("offset", 0)):
        start, length = ent.get("offset", 0), ent.get("length", 0)
        if not isinstance(start, int) or not isinstance(length, int) or start < cursor:
            continue  # nested or malformed entity: keep the text as it is
        chunk = raw[start * 2 : (start + length) * 2].decode("utf-16-le", "surrogatepass")
        kind = ent.get("type")
        replacement: str | None = None
        if kind == "mention" and handle and chunk.lower() == handle:
            mentioned, replacement = True, ""
        elif kind == "text_mention":
            user = ent.get("user")
            if isinstance(user, Mapping) and user.get("id") == bot.id:
                mentioned, replacement = True, ""
            elif not chunk.startswith("@"):
                replacement = "@" + chunk
        elif kind == "bot_command" and "@" in chunk:
            command, _, target = chunk.partition("@")
            if handle and f"@{target}".lower() == handle:
                mentioned, replacement = True, command
            else:
                foreign_command = True
        elif kind == "bot_command" and start == 0 and chunk[1:].lower() in bot.commands:
            mentioned = True
        if replacement is None:
            continue
        pieces.append(raw[cursor * 2 : start * 2].decode("utf-16-le", "surrogatepass"))
        pieces.append(replacement)
        cursor = start + length
    pieces.append(raw[cursor * 2 :].decode("utf-16-le", "surrogatepass"))
    return _join_without_gaps(pieces), mentioned, foreign_command


def _join_without_gaps(pieces: list[str]) -> str:
    """Join text around removed mentions without leaving doubled or dangling spaces."""
    out = ""
    for i, piece in enumerate(pieces):
        if i % 2 == 1 and piece == "":  # a removed mention: drop one space next to it
            nxt = pieces[i + 1] if i + 1 < len(pieces) else ""
            if nxt.startswith(" ") or not nxt:
                pieces[i + 1] = nxt[1:] if nxt.startswith(" ") else nxt
                out = out.rstrip(" ") if not nxt else out
            elif out.endswith(" ") and not nxt[:1].isalnum():
                out = out[:-1]
            continue
        out += piece
    # NULs go (PostgreSQL refuses them in text) before the ends are trimmed: " \x00 @bot" is empty.
    return out.replace("\x00", "").strip()
