"""A Teams activity (the Bot Framework Activity JSON) -> MessageReceived. Pure: no SDK, no network.

Works on the JSON Azure Bot Service posts (the adapter has checked its shape with the SDK's Activity
model first). Where a Teams conversation is:

- personal chat (`conversationType: personal`): a DM, keyed on the conversation id;
- group chat (`groupChat`): a group;
- channel (`channel`): a group whose every message lives in a thread. Teams names the thread in the
  conversation id, `19:…@thread.tacv2;messageid=<root message id>`; the channel is the part before
  `;messageid=`, the thread its root message, and an answer goes to that same threaded id.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.core.events import Actor, ConversationKind, ConversationRef, MessageReceived

TEAMS = "msteams"  # the Bot Framework channelId of Microsoft Teams
THREAD_MARK = ";messageid="
_AT_TAG = re.compile(r"<at>(.*?)</at>", re.IGNORECASE | re.DOTALL)
_SPACES = re.compile(r"[ \t]{2,}")
_GONE = "\x00"  # where the bot's mention was (NULs mean nothing in chat: MessageReceived drops them)
_GAP_AFTER = re.compile(r"\x00[ \t]+")
_GAP_BEFORE = re.compile(r"[ \t]+\x00(?=\W|$)")
# A message's text as Teams sends it also comes as a `text/html` attachment: not a file.
_NOT_FILES = frozenset({"text/html", "text/plain"})


@dataclass(frozen=True, slots=True)
class Ignored:
    """An activity that is not a message for the gateway, and why (for a debug log line)."""

    reason: str


def split_thread(conversation_id: str) -> tuple[str, str | None]:
    """(the conversation without its thread, the thread's root message id or None)."""
    base, mark, thread = conversation_id.partition(THREAD_MARK)
    return base, (thread or None) if mark else None


def threaded(chat_id: str, thread_id: str | None) -> str:
    """The conversation id that posts into `thread_id` of channel `chat_id` (or to the chat itself)."""
    return f"{chat_id}{THREAD_MARK}{thread_id}" if thread_id else chat_id


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def tenant_of(activity: Mapping[str, Any]) -> str | None:
    """The Entra ID tenant an activity comes from: the conversation's, else the channel data's."""
    return _str(_map(activity.get("conversation")).get("tenantId")) or _str(
        _map(_map(activity.get("channelData")).get("tenant")).get("id")
    )


def kind_of(conversation: Mapping[str, Any]) -> ConversationKind:
    kind = conversation.get("conversationType")
    if kind == "personal":
        return ConversationKind.DM
    if kind in ("groupChat", "channel"):
        return ConversationKind.GROUP
    return ConversationKind.GROUP if conversation.get("isGroup") else ConversationKind.DM


def reference_of(activity: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(conversation key, what to keep of it) — the address a reply or a proactive message is sent
    to, after a restart or from another instance: never message text. None when incomplete."""
    conversation = _map(activity.get("conversation"))
    conversation_id, service_url = _str(conversation.get("id")), _str(activity.get("serviceUrl"))
    bot = _map(activity.get("recipient"))
    if conversation_id is None or service_url is None or _str(bot.get("id")) is None:
        return None
    chat_id, _thread = split_thread(conversation_id)
    return chat_id, {
        "service_url": service_url,
        "conversation_id": chat_id,
        "conversation_type": _str(conversation.get("conversationType")),
        "tenant_id": tenant_of(activity),
        "bot_id": bot.get("id"),
        "bot_name": _str(bot.get("name")),
        "channel_id": _str(activity.get("channelId")) or TEAMS,
    }


def event_id_of(channel: str, chat_id: str, activity_id: str) -> str:
    """`<channel>:<conversation digest>:<activity id>`. Teams' message ids are unique within a
    conversation only (they are times in milliseconds), and a conversation id runs past a hundred
    characters: a short digest of it keeps the id unique and within the journal's 255."""
    digest = hashlib.sha256(chat_id.encode()).hexdigest()[:12]
    if len(activity_id) > 160:  # never from Teams; a bound all the same
        activity_id = hashlib.sha256(activity_id.encode()).hexdigest()
    return f"{channel}:{digest}:{activity_id}"


def file_attachments(activity: Mapping[str, Any]) -> int:
    """How many attachments of a message are files or cards, not a copy of its own text."""
    items = activity.get("attachments")
    if not isinstance(items, list):
        return 0
    return sum(1 for a in items if isinstance(a, Mapping) and a.get("contentType") not in _NOT_FILES)


def clean_text(text: str, entities: Sequence[Any], bot_id: str) -> tuple[str, bool]:
    """(the text without the bot's own mention, whether the bot was mentioned).

    A mention is `<at>Name</at>` in the text with an entity of type "mention" naming who is meant:
    the bot's own is removed; anyone else's reads "@Name". Only an entity makes a mention: the bot's
    name typed inside `<at>` without one (or a reply to the bot, which Teams does not mark) is text.
    """
    mentioned = False
    for ent in entities:
        if not isinstance(ent, Mapping) or ent.get("type") != "mention":
            continue
        who = _map(ent.get("mentioned"))
        marker = _str(ent.get("text"))
        if who.get("id") == bot_id:
            mentioned = True
            if marker and marker in text:
                text = text.replace(marker, _GONE, 1)
        elif marker and marker in text:
            name = _AT_TAG.sub(r"\1", marker).strip() or _str(who.get("name")) or ""
            text = text.replace(marker, f"@{name}" if name else " ", 1)
    # Tags left without an entity (a tag or team mention Teams sent no entity for) read as names.
    text = _AT_TAG.sub(lambda m: f"@{m.group(1).strip()}" if m.group(1).strip() else " ", text)
    # The bot's mention goes with the space after it, or before it when punctuation follows.
    text = _GAP_BEFORE.sub(_GONE, _GAP_AFTER.sub(_GONE, text)).replace(_GONE, "")
    lines = [_SPACES.sub(" ", line).strip() for line in text.replace("\r\n", "\n").split("\n")]
    return "\n".join(lines).strip(), mentioned


def normalize_activity(activity: Mapping[str, Any], *, channel: str) -> MessageReceived | Ignored:
    """The event for one activity, or why it is not one."""
    kind = activity.get("type")
    if kind != "message":
        return Ignored(f"{kind} activity")
    if activity.get("channelId") != TEAMS:
        return Ignored(f"from channel {activity.get('channelId')!r}, not Teams")
    sender, bot = _map(activity.get("from")), _map(activity.get("recipient"))
    conversation = _map(activity.get("conversation"))
    activity_id, sender_id, bot_id = _str(activity.get("id")), _str(sender.get("id")), _str(bot.get("id"))
    conversation_id, tenant = _str(conversation.get("id")), tenant_of(activity)
    if activity_id is None or sender_id is None or bot_id is None or conversation_id is None or tenant is None:
        return Ignored("incomplete message activity")
    if sender_id == bot_id:
        return Ignored("own message")
    entities = activity.get("entities")
    raw_text = activity.get("text")
    text, mentioned = clean_text(
        raw_text if isinstance(raw_text, str) else "", entities if isinstance(entities, list) else [], bot_id
    )
    if not text:
        return Ignored("no text (files and cards are not read on Teams)")
    chat_id, thread_id = split_thread(conversation_id)
    ref_kind = kind_of(conversation)
    if conversation.get("conversationType") == "channel":
        thread_id = thread_id or activity_id  # a new post starts its own thread
    else:
        thread_id = None
    # The person is their Entra ID object: the same in every chat, team and client. Teams omits it
    # only for accounts outside Entra ID (and for bots); their Teams user id is the next best.
    person = _str(sender.get("aadObjectId")) or sender_id
    return MessageReceived(
        event_id=event_id_of(channel, chat_id, activity_id),
        ref=ConversationRef(channel, chat_id, thread_id, ref_kind),
        sender=Actor(f"teams:{tenant}/{person}", _str(sender.get("name"))),
        text=text,
        mentions_bot=mentioned,
        raw=activity,
        message_id=activity_id,
    )
