"""Slack payloads -> gateway events. Pure functions over the JSON Slack sends.

Identity: Slack may hand us one user message several times, each under an envelope event id of
its own: as a `message` event and as an `app_mention` event when it mentions the bot, and once
per subscription or authorization that covers it (shared channels, several installs); a retry
after a lost acknowledgement comes on top. So a message's gateway event id is its platform
identity, the conversation and the message's `ts` (see `_identity`), and the gateway's journal
answers it once, whichever envelope comes first. An edit is an event of its own (the edited
message's ts plus the edit's time), never a duplicate of the message it changes.

Mentions: `app_mention` events are normalized like `message` events (same identity, same text
cleaning, `mentions_bot` always set), so an app subscribed to `app_mention` alone answers
mentions in channels. `message` events also carry DMs, thread replies, edits and unmentioned
group traffic: those need the message.im / message.channels / message.groups / message.mpim
subscriptions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.core.events import Actor, Attachment, ConversationKind, ConversationRef, MessageReceived, MessageRef

# Message subtypes that are someone writing to us; everything else (joins, topic changes,
# deletions, bot_message, ...) is not a message to answer.
_USER_SUBTYPES = frozenset({None, "file_share", "thread_broadcast", "me_message"})
_GROUP_TYPES = frozenset({"channel", "group", "mpim"})
_MARKUP = re.compile(r"<([^<>|]+)(?:\|([^<>]*))?>")
_SPACES = re.compile(r"[ \t]{2,}")
_TS = re.compile(r"[0-9]{1,12}\.[0-9]{1,9}")


@dataclass(frozen=True, slots=True)
class BotIdentity:
    """Who the bot is in its workspace (from auth.test)."""

    user_id: str
    bot_id: str | None = None
    team_id: str | None = None


def _label_or(label: str | None, fallback: str) -> str:
    return label if label else fallback


def _readable_link(target: str, label: str | None) -> str:
    """`<https://x.y|x.y>` -> `x.y`; `<https://x.y|docs>` -> `docs (https://x.y)`; `<https://x.y>` -> the URL."""
    if not label:
        return target
    bare = target.split(":", 1)[-1].lstrip("/")
    return label if label in (target, bare) else f"{label} ({target})"


def clean_text(text: str, bot_user_id: str) -> tuple[str, bool]:
    """Slack markup -> readable text, and whether the bot was @-mentioned (its mention is removed)."""
    mentioned = False

    def replace(m: re.Match[str]) -> str:
        nonlocal mentioned
        target, label = m.group(1), m.group(2)
        if target.startswith("@"):
            user = target[1:]
            if user == bot_user_id:
                mentioned = True
                return ""
            return "@" + _label_or(label.lstrip("@") if label else None, user)
        if target.startswith("#"):
            return "#" + _label_or(label, target[1:])
        if target.startswith("!"):
            special = target[1:]
            if special in ("here", "channel", "everyone"):
                return "@" + special
            # <!subteam^S123|@team>, <!date^...|fallback text>
            return _label_or(label, "@" + special.split("^", 1)[0])
        return _readable_link(target, label)

    out = _MARKUP.sub(replace, text)
    # Slack escapes only these three; decode `&amp;` last so "&amp;lt;" stays a literal "&lt;".
    out = out.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    if mentioned:
        out = "\n".join(_SPACES.sub(" ", line).strip() for line in out.split("\n")).strip()
    return out, mentioned


def _str(value: object) -> str | None:
    """A non-empty string field, or None: payload fields of another type are treated as absent."""
    return value if isinstance(value, str) and value else None


def _without_token(payload: Mapping[str, Any]) -> dict[str, Any]:
    # Slack still sends the legacy verification token in every payload: not ours to keep.
    return {k: v for k, v in payload.items() if k != "token"}


def _kind(event: Mapping[str, Any], chat_id: str) -> ConversationKind:
    channel_type = _str(event.get("channel_type"))
    if channel_type == "im":
        return ConversationKind.DM
    if channel_type in _GROUP_TYPES:
        return ConversationKind.GROUP
    return ConversationKind.DM if chat_id.startswith("D") else ConversationKind.GROUP


def _attachments(message: Mapping[str, Any]) -> tuple[Attachment, ...]:
    """The message's files, each with its id: files.info names its download address (docs/media.md)."""
    files = message.get("files")
    if not isinstance(files, list):
        return ()
    return tuple(
        Attachment(
            kind=_str(f.get("mimetype")) or _str(f.get("filetype")) or "file",
            name=_str(f.get("name")) or _str(f.get("title")),
            size=f["size"] if type(f.get("size")) is int else None,
            ref=_str(f.get("id")),
            mime=_str(f.get("mimetype")),
            duration=f["duration_ms"] / 1000 if type(f.get("duration_ms")) is int else None,
        )
        for f in files
        if isinstance(f, Mapping)
    )


def _display_name(message: Mapping[str, Any]) -> str | None:
    profile = message.get("user_profile")
    if not isinstance(profile, Mapping):
        return None
    for key in ("display_name", "real_name", "name"):
        if name := _str(profile.get(key)):
            return name
    return None


def _is_from_bot(message: Mapping[str, Any], bot: BotIdentity) -> bool:
    return bool(
        message.get("bot_id")
        or message.get("subtype") == "bot_message"
        or message.get("user") == bot.user_id
        or message.get("bot_profile")
    )


def _identity(chat_id: str, ts: str, edit_stamp: str | None) -> str:
    """The platform identity of a user message, or of one edit of it.

    Slack gives every message a `ts` that is unique within its conversation and the same in every
    event about it: the `message` and `app_mention` of one mention, a `thread_broadcast` (one
    message shown in the thread and the channel), a `file_share`, each delivery per subscription.
    Channel ids are unique across workspaces, and a shared channel keeps one id in every org, so
    the pair needs no team. `client_msg_id` would not do: it is absent on some messages (apps,
    workflows, some uploads), is chosen by the sending client rather than by Slack, and an edit
    carries the original's, which would fold the edit into the message it changes."""
    return f"{chat_id}:{ts}" if edit_stamp is None else f"{chat_id}:{ts}:edit:{edit_stamp}"


def _ts(value: object) -> str | None:
    """A Slack timestamp ("1718000100.000200"), or None. It is the dedupe key, so a value of any
    other shape is not trusted to be unique (nor to keep the identity's parts apart)."""
    ts = _str(value)
    return ts if ts is not None and _TS.fullmatch(ts) else None


def _resent_edit_stamp(event: Mapping[str, Any], edited: Mapping[str, Any]) -> str | None:
    """When an edited message still mentions the bot, Slack sends its `app_mention` again: the
    original `ts` plus an `edited` record. The edit's own time tells it from the original and from
    other edits; the event's time is what `message_changed` carries for the same edit, and
    `edited.ts` stands in when the event has none of its own."""
    event_ts = _ts(event.get("event_ts"))
    return event_ts if event_ts is not None and event_ts != _ts(event.get("ts")) else _ts(edited.get("ts"))


def normalize_event(body: Mapping[str, Any], *, channel: str, bot: BotIdentity) -> MessageReceived | None:
    """An Events API envelope (`event_callback`) with a `message` or `app_mention` event ->
    MessageReceived, or None when it is not for us. See the module docstring for the event id."""
    event = body.get("event")
    if body.get("type") != "event_callback" or not isinstance(event, Mapping):
        return None
    kind = event.get("type")
    if kind not in ("message", "app_mention"):
        return None
    subtype = event.get("subtype")
    if subtype is not None and not isinstance(subtype, str):
        return None
    edit_stamp: str | None = None
    if kind == "message" and subtype == "message_changed":
        message = event.get("message")
        previous = event.get("previous_message")
        if not isinstance(message, Mapping):
            return None
        # Slack also sends message_changed for unfurls, reply counts and language metadata:
        # only a change of text is an edit someone made.
        if isinstance(previous, Mapping) and previous.get("text") == message.get("text"):
            return None
        edit_stamp = _ts(event.get("ts")) or _ts(event.get("event_ts"))
        if edit_stamp is None:
            return None  # an edit we could not tell from the message or from its other edits
    elif subtype in _USER_SUBTYPES:
        message = event
        edited = event.get("edited")
        if isinstance(edited, Mapping):
            edit_stamp = _resent_edit_stamp(event, edited)
            if edit_stamp is None:
                return None
    else:
        return None
    user = _str(message.get("user"))
    chat_id = _str(event.get("channel")) or _str(message.get("channel"))
    ts = _ts(message.get("ts"))
    if _is_from_bot(message, bot) or not user or not chat_id or not ts:
        return None
    thread_ts = _str(message.get("thread_ts"))
    thread_id = thread_ts if thread_ts and thread_ts != ts else None
    ref = ConversationRef(channel, chat_id, thread_id, _kind(event, chat_id))

    text, mentioned = clean_text(_str(message.get("text")) or "", bot.user_id)
    # A reply in a thread the bot started counts as talking to the bot.
    replies_to_bot = thread_id is not None and message.get("parent_user_id") == bot.user_id
    team = (
        _str(message.get("user_team")) or _str(message.get("team")) or _str(body.get("team_id")) or bot.team_id or "?"
    )
    return MessageReceived(
        event_id=f"{channel}:{_identity(chat_id, ts, edit_stamp)}",
        ref=ref,
        sender=Actor(f"slack:{team}/{user}", _display_name(message)),
        text=text,
        # Slack sends app_mention only for a mention of the bot, whatever form the text takes.
        mentions_bot=mentioned or replies_to_bot or kind == "app_mention",
        reply_to=MessageRef(ref, thread_id) if thread_id else None,
        attachments=_attachments(message),
        edited=edit_stamp is not None,
        raw=_without_token(body),
        message_id=ts,
        private_reply=ref.kind != ConversationKind.DM,  # chat.postEphemeral
    )


def normalize_command(payload: Mapping[str, Any], *, channel: str) -> MessageReceived | None:
    """A slash command payload -> MessageReceived with text "/<command> <text>".

    A slash command is addressed to the bot by construction, so it counts as a mention.
    """
    command = _str(payload.get("command")) or ""
    user = _str(payload.get("user_id"))
    chat_id = _str(payload.get("channel_id")) or ""
    trigger = _str(payload.get("trigger_id"))
    if not command.startswith("/") or not user or not chat_id or not trigger:
        return None
    is_dm = payload.get("channel_name") == "directmessage" or chat_id.startswith("D")
    ref = ConversationRef(channel, chat_id, None, ConversationKind.DM if is_dm else ConversationKind.GROUP)
    team = _str(payload.get("team_id")) or "?"
    args = (_str(payload.get("text")) or "").strip()
    return MessageReceived(
        event_id=f"{channel}:{trigger}",
        ref=ref,
        sender=Actor(f"slack:{team}/{user}", _str(payload.get("user_name"))),
        text=f"{command} {args}".strip(),
        mentions_bot=True,
        raw=_without_token(payload),
        private_reply=not is_dm,  # chat.postEphemeral
    )
