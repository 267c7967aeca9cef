"""discord.py objects -> the JSON shapes `normalize` reads.

discord.py hands `on_message` a parsed `Message`, not the gateway's dict; these functions put back
exactly the fields normalize uses, so one pure function (table-tested on real JSON) decides
everything. Edits arrive raw (`RawMessageUpdateEvent.data`) and need no conversion.
"""

from __future__ import annotations

from typing import Any

import discord


def message_payload(message: discord.Message) -> dict[str, Any]:
    author = message.author
    data: dict[str, Any] = {
        "id": str(message.id),
        "channel_id": str(message.channel.id),
        "type": message.type.value,
        "content": message.content,
        "timestamp": message.created_at.isoformat(),
        "edited_timestamp": message.edited_at.isoformat() if message.edited_at else None,
        "author": user_payload(author),
        "mentions": [user_payload(u) for u in message.mentions],
        "mention_roles": [str(r) for r in message.raw_role_mentions],
        "attachments": [
            {
                "id": str(a.id),
                "filename": a.filename,
                "size": a.size,
                "content_type": a.content_type,
                "url": a.url,  # the CDN address the gateway downloads it from (docs/media.md)
                "duration_secs": a.duration,  # a voice message's length
            }
            for a in message.attachments
        ],
    }
    if message.guild is not None:
        data["guild_id"] = str(message.guild.id)
    if isinstance(author, discord.Member):
        data["member"] = {"nick": author.nick}
    if message.webhook_id is not None:
        data["webhook_id"] = str(message.webhook_id)
    reference = message.reference
    if reference is not None:
        data["message_reference"] = {
            "type": reference.type.value,
            "message_id": str(reference.message_id) if reference.message_id else None,
            "channel_id": str(reference.channel_id),
        }
        resolved = reference.resolved
        data["referenced_message"] = (
            {"id": str(resolved.id), "author": user_payload(resolved.author)}
            if isinstance(resolved, discord.Message)
            else None
        )
    return data


def user_payload(user: discord.abc.User) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": str(user.id),
        "username": user.name,
        "global_name": user.global_name,
        "bot": user.bot,
    }
    if isinstance(user, discord.Member):
        data["member"] = {"nick": user.nick}
    return data


def channel_payload(channel: object) -> dict[str, Any]:
    """`{"id", "type", "parent_id"}` of the message's channel; type None when discord.py has not cached it."""
    kind = getattr(channel, "type", None)
    return {
        "id": str(getattr(channel, "id", "")),
        "type": kind.value if isinstance(kind, discord.ChannelType) else None,
        "parent_id": str(channel.parent_id) if isinstance(channel, discord.Thread) else None,
    }


def interaction_payload(interaction: discord.Interaction) -> dict[str, Any]:
    """The INTERACTION_CREATE fields `normalize_command` reads; discord.py keeps only `data` raw."""
    data: dict[str, Any] = {
        "id": str(interaction.id),
        "type": interaction.type.value,
        "data": dict(interaction.data or {}),
    }
    channel = interaction.channel  # None only for a channel type discord.py does not know
    if channel is not None:
        data["channel_id"] = str(channel.id)
        data["channel"] = channel_payload(channel)
    if interaction.guild_id is not None:
        data["guild_id"] = str(interaction.guild_id)
    who = interaction.user
    if isinstance(who, discord.Member):
        data["member"] = {"nick": who.nick, "user": user_payload(who)}
    elif isinstance(who, discord.User):
        data["user"] = user_payload(who)
    return data
