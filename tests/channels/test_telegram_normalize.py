"""Telegram updates (tests/payloads/telegram/*.json, shaped like the Bot API's JSON) -> MessageReceived."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from telegram import Update

from channels.telegram.normalize import BotIdentity, attachments_of, normalize_update
from gateway.core.events import Attachment, ConversationKind, MessageReceived

PAYLOADS = Path(__file__).parent.parent / "payloads" / "telegram"
BOT = BotIdentity(7000001, "clawgate_test_bot")
CHANNEL = "tg-main"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((PAYLOADS / f"{name}.json").read_text(encoding="utf-8"))
    return data


def norm(data: dict[str, Any]) -> MessageReceived | None:
    return normalize_update(data, channel=CHANNEL, bot=BOT)


def same(a: MessageReceived | None, b: MessageReceived | None) -> bool:
    """Equal apart from received_at (the moment of normalizing)."""
    if a is None or b is None:
        return a is b
    return replace(a, received_at=b.received_at) == b


# name, chat_id, thread_id, kind, sender, text, mentions_bot, edited
CASES = [
    ("dm_text", "1001", None, "dm", "telegram:1001", "What's on my calendar tomorrow?", False, False),
    ("group_mention", "-1001234567890", None, "group", "telegram:1001", "ask @grace about the release", True, False),
    ("group_plain", "-1001234567890", None, "group", "telegram:1002", "lunch at noon?", False, False),
    ("group_legacy", "-4012345678", None, "group", "telegram:1002", "hey, status?", True, False),
    ("topic_message", "-1009876543210", "77", "group", "telegram:1001", "summarize this topic", True, False),
    ("supergroup_reply_not_topic", "-1001234567890", None, "group", "telegram:1002", "sure", False, False),
    ("reply_to_bot", "-1001234567890", None, "group", "telegram:1001", "which Friday?", True, False),
    ("edited_message", "1001", None, "dm", "telegram:1001", "What's on my calendar on Friday?", False, True),
    ("photo_caption", "-1001234567890", None, "group", "telegram:1001", "what is in this picture?", True, False),
    ("document", "1001", None, "dm", "telegram:1001", "", False, False),
    ("audio", "1001", None, "dm", "telegram:1001", "notes from today", False, False),
    ("text_mentions", "-1001234567890", None, "group", "telegram:1001", "please thank @Linus Torvalds", True, False),
    ("command_to_bot", "-1001234567890", None, "group", "telegram:1001", "/remember the wifi password changes monthly",
     True, False),
    ("dm_command", "1001", None, "dm", "telegram:1001", "/new", False, False),
    ("emoji_offsets", "-1001234567890", None, "group", "telegram:1001", "🎉🎉 thanks! 👍", True, False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "chat_id", "thread_id", "kind", "sender", "text", "mentions", "edited"),
    CASES,
    ids=[c[0] for c in CASES],
)
def test_normalize_table(
    name: str,
    chat_id: str,
    thread_id: str | None,
    kind: str,
    sender: str,
    text: str,
    mentions: bool,
    edited: bool,
) -> None:
    data = load(name)
    ev = norm(data)
    assert ev is not None
    assert ev.event_id == f"{CHANNEL}:{data['update_id']}"
    assert ev.ref.channel == CHANNEL
    assert (ev.ref.chat_id, ev.ref.thread_id, ev.ref.kind) == (chat_id, thread_id, ConversationKind(kind))
    assert ev.sender.identity == sender
    assert not ev.sender.is_bot
    assert ev.text == text
    assert ev.mentions_bot is mentions
    assert ev.edited is edited
    assert ev.raw is data


@pytest.mark.parametrize(
    "name",
    [
        "own_message",
        "other_bot",
        "anonymous_admin",
        "command_to_other_bot",
        "channel_post",
        "new_members",
        "callback_query",
    ],
)
def test_ignored_updates(name: str) -> None:
    assert norm(load(name)) is None


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("photo_caption", (Attachment("photo", None, 90120, "AgACAgQAAxkBAAIBs2a-large", "image/jpeg"),)),
        (
            "document",
            (Attachment("document", "report-q4.pdf", 5242880, "BQACAgQAAxkBAAIBtGa-doc", "application/pdf"),),
        ),
        ("voice", (Attachment("voice", None, 18044, "AwACAgQAAxkBAAIBtWa-voice", "audio/ogg", 4.0),)),
        ("audio", (Attachment("audio", "standup.mp3", 3400000, "CQACAgQAAxkBAAIBtma-audio", "audio/mpeg", 212.0),)),
        ("video", (Attachment("video", "demo.mp4", 31457280, "BAACAgQAAxkBAAIBt2a-video", "video/mp4", 12.0),)),
        ("sticker", (Attachment("sticker", None, 27146, "CAACAgIAAxkBAAIBuGa-sticker"),)),
        ("animation", (Attachment("animation", "party.mp4", 204800, "CgACAgQAAxkBAAIBuWa-anim", "video/mp4", 3.0),)),
        ("dm_text", ()),
    ],
)
def test_attachments(name: str, expected: tuple[Attachment, ...]) -> None:
    ev = norm(load(name))
    assert ev is not None
    assert ev.attachments == expected


def test_display_name_joins_first_and_last() -> None:
    ev = norm(load("dm_text"))
    assert ev is not None and ev.sender.display_name == "Ada Lovelace"


def test_reply_refs() -> None:
    reply = norm(load("reply_to_bot"))
    assert reply is not None and reply.reply_to is not None
    assert reply.reply_to.message_id == "3329"
    assert reply.reply_to.conversation == reply.ref
    plain_reply = norm(load("supergroup_reply_not_topic"))
    assert plain_reply is not None and plain_reply.reply_to is not None
    assert plain_reply.reply_to.message_id == "3311" and not plain_reply.mentions_bot
    # The implicit reply to a forum topic's creation message is not a reply.
    topic = norm(load("topic_message"))
    assert topic is not None and topic.reply_to is None


def test_edit_has_its_own_event_id_and_redelivery_the_same() -> None:
    original, edit = norm(load("dm_text")), norm(load("edited_message"))
    assert original is not None and edit is not None
    assert original.event_id != edit.event_id
    assert same(norm(load("dm_text")), original)  # a redelivered update is the same event


def test_ptb_round_trip_normalizes_the_same() -> None:
    """Polling hands us PTB's Update.to_dict(); it must normalize like the webhook's raw JSON."""
    for path in sorted(PAYLOADS.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        via_ptb = norm(Update.de_json(data, None).to_dict())
        direct = norm(data)
        assert same(via_ptb, direct), path.name


def test_bot_without_username_still_sees_replies() -> None:
    ev = normalize_update(load("reply_to_bot"), channel=CHANNEL, bot=BotIdentity(7000001, None))
    assert ev is not None and ev.mentions_bot
    mention = normalize_update(load("group_mention"), channel=CHANNEL, bot=BotIdentity(7000001, None))
    assert mention is not None and not mention.mentions_bot


def test_malformed_updates_are_ignored() -> None:
    assert norm({}) is None
    assert norm({"update_id": "7", "message": {}}) is None
    assert norm({"update_id": 7, "message": "text"}) is None
    assert norm({"update_id": 7, "message": {"chat": {"id": 1, "type": "private"}, "text": "x"}}) is None
    bad_entities = load("group_mention")
    bad_entities["message"]["entities"] = [{"type": "mention", "offset": "x"}, "junk"]
    ev = norm(bad_entities)
    assert ev is not None and ev.text == bad_entities["message"]["text"]


def test_largest_photo_wins_by_size() -> None:
    msg = {"photo": [{"file_size": 10, "width": 9, "height": 9}, {"file_size": 300, "width": 90, "height": 90}]}
    assert attachments_of(msg) == (Attachment("photo", None, 300, None, "image/jpeg"),)


@given(
    before=st.text(st.characters(codec="utf-8"), max_size=20),
    after=st.text(st.characters(codec="utf-8"), max_size=20),
)
def test_mention_is_stripped_wherever_it_is(before: str, after: str) -> None:
    """UTF-16 offsets (emoji, astral characters) locate the mention exactly."""
    handle = "@clawgate_test_bot"
    text = f"{before} {handle} {after}"
    offset = len(f"{before} ".encode("utf-16-le")) // 2
    data = load("group_plain")
    data["message"]["text"] = text
    data["message"]["entities"] = [{"type": "mention", "offset": offset, "length": len(handle)}]
    ev = norm(data)
    # NUL characters are dropped from inbound text (PostgreSQL refuses them in text columns).
    before, after = before.replace("\x00", ""), after.replace("\x00", "")
    if not (before + after).strip():
        assert ev is not None and ev.text == ""
        return
    assert ev is not None and ev.mentions_bot
    assert handle not in ev.text
    assert ev.text.startswith(before.strip()[:1])
