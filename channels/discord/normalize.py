"""Discord message JSON -> `MessageReceived`. Pure: no SDK, no network.

Input is shaped like the gateway's MESSAGE_CREATE / MESSAGE_UPDATE `d` object. A message payload
does not say whether its channel is a thread, so the caller passes the channel as Discord's channel
JSON (`{"id", "type", "parent_id"}`, what GUILD_CREATE and GET /channels/{id} return); without it
a message with a `guild_id` is taken for a plain guild channel and one without for a DM.
Slash commands arrive as INTERACTION_CREATE `d` objects, which carry their channel themselves.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from typing import Any

from channels.discord.commands import CHAT_INPUT, TEXT_OPTION
from gateway.core.events import (
    Actor,
    Attachment,
    ConversationKind,
    ConversationRef,
    MessageReceived,
    MessageRef,
    utcnow,
)

# Channel types (https://discord.com/developers/docs/resources/channel#channel-object-channel-types).
DM = 1
GROUP_DM = 3
THREAD_TYPES = frozenset({10, 11, 12})  # announcement, public and private threads
# Message types people write: DEFAULT and REPLY. Joins, pins, "thread created" and the other
# system messages are not addressed to the bot.
CHAT_MESSAGE_TYPES = frozenset({0, 19})
REPLY_REFERENCE = 0  # message_reference.type: 0 is a reply, 1 a forward
APPLICATION_COMMAND = 2  # interaction type of a slash (or context-menu) command
DISCORD_EPOCH_MS = 1_420_070_400_000

_USER_MENTION = re.compile(r"<@!?(\d+)>")


def normalize(
    data: Mapping[str, Any],
    *,
    channel: str,
    bot_id: str,
    place: Mapping[str, Any] | None = None,
    bot_role_ids: Collection[str] = (),
    edited: bool = False,
) -> MessageReceived | None:
    """One Discord message as a gateway event, or None when the bot should not see it.

    `channel` is the configured channel name, `bot_id` the bot's user id, `bot_role_ids` the
    bot's managed roles in this guild (people often pick the role when they mean the bot).
    `edited` marks a MESSAGE_UPDATE: only a real edit (with `edited_timestamp`) counts; the
    updates Discord sends when it unfurls a link do not.
    """
    author = data.get("author")
    if not isinstance(author, Mapping) or _is_bot(data, author, bot_id):
        return None
    if data.get("type", 0) not in CHAT_MESSAGE_TYPES:
        return None
    edit_stamp = data.get("edited_timestamp")
    if edited and not edit_stamp:
        return None
    ref = conversation(data, channel=channel, place=place)
    mentioned = _mentions(data)
    bot_roles = {str(r) for r in bot_role_ids}
    text = _readable(str(data.get("content") or ""), bot_id, bot_roles, mentioned)
    attachments = tuple(_attachment(a) for a in data.get("attachments") or () if isinstance(a, Mapping))
    if not text and not attachments:
        return None  # stickers, embeds only, or content hidden without the message-content intent
    reply_to, replies_to_bot = _reply(data, ref, bot_id)
    message_id = str(data["id"])
    event_id = f"{channel}:{message_id}:edit:{edit_stamp}" if edited else f"{channel}:{message_id}"
    return MessageReceived(
        event_id=event_id,
        ref=ref,
        sender=Actor(f"discord:{author['id']}", _display_name(author, data.get("member"))),
        text=text,
        mentions_bot=bot_id in mentioned or bool(bot_roles & _role_ids(data)) or replies_to_bot,
        reply_to=reply_to,
        attachments=attachments,
        edited=edited,
        received_at=_time(edit_stamp if edited else data.get("timestamp")),
        raw=data,
        message_id=message_id,
    )


def conversation(data: Mapping[str, Any], *, channel: str, place: Mapping[str, Any] | None = None) -> ConversationRef:
    """Where a message was written: DM, guild channel, or a thread under its parent channel."""
    channel_id = str(data["channel_id"])
    kind = place.get("type") if place else None
    if kind in THREAD_TYPES and place and place.get("parent_id"):
        return ConversationRef(channel, str(place["parent_id"]), channel_id, ConversationKind.GROUP)
    if kind == DM or (kind is None and not data.get("guild_id")):
        return ConversationRef(channel, channel_id, None, ConversationKind.DM)
    return ConversationRef(channel, channel_id, None, ConversationKind.GROUP)


def command_name(data: Mapping[str, Any]) -> str | None:
    """The slash command an INTERACTION_CREATE invokes; None for any other interaction."""
    command = data.get("data")
    if data.get("type") != APPLICATION_COMMAND or not isinstance(command, Mapping):
        return None
    if command.get("type", CHAT_INPUT) != CHAT_INPUT or not command.get("name"):
        return None  # a user or message context-menu command: this bot registers none
    return str(command["name"])


def normalize_command(data: Mapping[str, Any], *, channel: str, known: Collection[str]) -> MessageReceived | None:
    """A slash command (INTERACTION_CREATE) as the message "/name text" addressed to the bot.

    None for other interactions, for names not in `known` (the commands this channel registered),
    and when the payload lacks the user or the channel to answer in.
    """
    name = command_name(data)
    member = data.get("member")
    who = member.get("user") if isinstance(member, Mapping) else data.get("user")  # guild vs DM
    place = data.get("channel")
    channel_id = data.get("channel_id") or (place.get("id") if isinstance(place, Mapping) else None)
    if name is None or name not in known or not isinstance(who, Mapping) or not channel_id:
        return None
    where = {"channel_id": channel_id, "guild_id": data.get("guild_id")}
    interaction_id = str(data["id"])
    return MessageReceived(
        event_id=f"{channel}:{interaction_id}",
        ref=conversation(where, channel=channel, place=place if isinstance(place, Mapping) else None),
        sender=Actor(f"discord:{who['id']}", _display_name(who, member)),
        text=f"/{name} {_text_option(data['data'])}".strip(),
        mentions_bot=True,  # a slash command is addressed to the bot wherever it is used
        received_at=_snowflake_time(interaction_id),
        raw=data,
        private_reply=True,  # an ephemeral follow-up to the interaction (DiscordAdapter.send)
    )


def _text_option(command: Mapping[str, Any]) -> str:
    for option in command.get("options") or ():
        if isinstance(option, Mapping) and option.get("name") == TEXT_OPTION and option.get("value") is not None:
            return str(option["value"]).strip()
    return ""


def _snowflake_time(snowflake: str) -> datetime:
    """When Discord made the id: interactions carry no timestamp, and a redelivery must match."""
    try:
        ms = (int(snowflake) >> 22) + DISCORD_EPOCH_MS
    except ValueError:
        return utcnow()
    return datetime.fromtimestamp(ms / 1000, UTC)


def _is_bot(data: Mapping[str, Any], author: Mapping[str, Any], bot_id: str) -> bool:
    # Webhook posts carry a fake author flagged as a bot; checking webhook_id too costs nothing.
    return str(author.get("id")) == bot_id or bool(author.get("bot")) or data.get("webhook_id") is not None


def _display_name(user: Mapping[str, Any], member: Any) -> str | None:
    nick = member.get("nick") if isinstance(member, Mapping) else None
    return nick or user.get("global_name") or user.get("username")


def _mentions(data: Mapping[str, Any]) -> dict[str, str | None]:
    """Mentioned user id -> the name to show for them (guild nickname first)."""
    found: dict[str, str | None] = {}
    for user in data.get("mentions") or ():
        if isinstance(user, Mapping) and "id" in user:
            found[str(user["id"])] = _display_name(user, user.get("member"))
    return found


def _role_ids(data: Mapping[str, Any]) -> set[str]:
    return {str(r) for r in data.get("mention_roles") or ()}


def _readable(content: str, bot_id: str, bot_roles: set[str], mentioned: Mapping[str, str | None]) -> str:
    """Drop the bot's own mention; show other user mentions as "@name" where the payload names them."""
    text = re.sub(rf"<@!?{re.escape(bot_id)}>[ \t]?", "", content)
    for role in bot_roles:
        text = re.sub(rf"<@&{re.escape(role)}>[ \t]?", "", text)

    def named(m: re.Match[str]) -> str:
        name = mentioned.get(m.group(1))
        return f"@{name}" if name else m.group(0)

    return _USER_MENTION.sub(named, text).strip()


def _reply(data: Mapping[str, Any], ref: ConversationRef, bot_id: str) -> tuple[MessageRef | None, bool]:
    reference = data.get("message_reference")
    if not isinstance(reference, Mapping) or reference.get("type", REPLY_REFERENCE) != REPLY_REFERENCE:
        return None, False
    if reference.get("message_id") is None:
        return None, False
    replied = data.get("referenced_message")  # null when the replied-to message was deleted
    author = replied.get("author") if isinstance(replied, Mapping) else None
    to_bot = isinstance(author, Mapping) and str(author.get("id")) == bot_id
    return MessageRef(ref, str(reference["message_id"])), to_bot


def _attachment(a: Mapping[str, Any]) -> Attachment:
    """An attachment with its CDN URL, which the gateway downloads it from (docs/media.md)."""
    size, url, mime, seconds = a.get("size"), a.get("url"), a.get("content_type"), a.get("duration_secs")
    return Attachment(
        str(mime or "file"),
        a.get("filename"),
        size if isinstance(size, int) and not isinstance(size, bool) else None,
        url if isinstance(url, str) and url else None,
        mime if isinstance(mime, str) and mime else None,
        float(seconds) if isinstance(seconds, int | float) and not isinstance(seconds, bool) else None,
    )


def _time(stamp: object) -> datetime:
    """The platform's own timestamp (ISO 8601 with offset), so a redelivery normalizes identically."""
    if isinstance(stamp, str):
        try:
            parsed = datetime.fromisoformat(stamp)
        except ValueError:
            return utcnow()
        if parsed.tzinfo is not None:
            return parsed
    return utcnow()
