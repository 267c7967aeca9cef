"""Slack payloads (tests/payloads/slack/*.json, shaped like Slack's Events API JSON) -> MessageReceived."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from channels.slack.normalize import BotIdentity, clean_text, normalize_command, normalize_event
from gateway.events import Attachment, ConversationKind, ConversationRef, MessageRef

PAYLOADS = Path(__file__).parent.parent / "payloads" / "slack"
BOT = BotIdentity(user_id="U0BOT00001", bot_id="B0BOT00001", team_id="T123ABC456")


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((PAYLOADS / f"{name}.json").read_text())
    return data


def test_dm_message() -> None:
    ev = normalize_event(load("message_im"), channel="slack-main", bot=BOT)
    assert ev is not None
    assert ev.event_id == "slack-main:Ev0DM0000001"
    assert ev.ref == ConversationRef("slack-main", "D0123DM456", None, ConversationKind.DM)
    assert ev.sender.identity == "slack:T123ABC456/U222BBB222"
    assert ev.text == "Can you summarize the report (https://example.com/report?a=1&b=2) for @carol? 5 < 6 & 7 > 3"
    assert not ev.mentions_bot and not ev.edited and ev.reply_to is None
    assert ev.raw["event_id"] == "Ev0DM0000001" and "token" not in ev.raw


def test_channel_mention_is_stripped_and_flagged() -> None:
    ev = normalize_event(load("message_channel_mention"), channel="slack", bot=BOT)
    assert ev is not None
    assert ev.ref.kind == ConversationKind.GROUP and ev.ref.chat_id == "C0GEN00001" and ev.ref.thread_id is None
    assert ev.mentions_bot
    assert ev.text == "what did @here decide in #general?"
    assert ev.sender.display_name == "bob"


def test_app_mention_is_left_to_the_message_event() -> None:
    # The same mention also arrives as a `message` event: taking both would answer twice.
    assert normalize_event(load("app_mention"), channel="slack", bot=BOT) is None


def test_thread_reply_to_the_bot() -> None:
    ev = normalize_event(load("thread_reply"), channel="slack", bot=BOT)
    assert ev is not None
    assert ev.ref == ConversationRef("slack", "C0GEN00001", "1718000200.000300", ConversationKind.GROUP)
    assert ev.reply_to == MessageRef(ev.ref, "1718000200.000300")
    assert ev.mentions_bot  # a reply in the bot's thread counts as addressing it


def test_thread_reply_to_someone_else_is_not_a_mention() -> None:
    body = load("thread_reply")
    body["event"]["parent_user_id"] = "U999"
    ev = normalize_event(body, channel="slack", bot=BOT)
    assert ev is not None and not ev.mentions_bot and ev.ref.thread_id == "1718000200.000300"


def test_thread_parent_is_not_in_a_thread() -> None:
    body = load("message_channel_mention")
    body["event"]["thread_ts"] = body["event"]["ts"]  # a parent message carries its own ts as thread_ts
    ev = normalize_event(body, channel="slack", bot=BOT)
    assert ev is not None and ev.ref.thread_id is None and ev.reply_to is None


def test_edit_has_its_own_event_id() -> None:
    ev = normalize_event(load("message_changed"), channel="slack", bot=BOT)
    assert ev is not None
    assert ev.edited
    assert ev.event_id == "slack:Ev0ED0000005"
    assert ev.text == "Can you summarize the *final* report?"
    assert ev.ref == ConversationRef("slack", "D0123DM456", None, ConversationKind.DM)
    assert ev.sender.identity == "slack:T123ABC456/U222BBB222"


def test_edit_without_text_change_is_ignored() -> None:
    # Unfurls, reply counts and language metadata also send message_changed.
    assert normalize_event(load("message_changed_unfurl"), channel="slack", bot=BOT) is None


def test_files_become_attachments() -> None:
    ev = normalize_event(load("file_share"), channel="slack", bot=BOT)
    assert ev is not None
    assert ev.text == "here is the log"
    assert ev.attachments == (Attachment("text/plain", "server.log", 20480), Attachment("png", "diagram", 1048576))


@pytest.mark.parametrize("name", ["bot_message", "own_message", "channel_join"])
def test_not_for_us(name: str) -> None:
    assert normalize_event(load(name), channel="slack", bot=BOT) is None


def test_edit_of_a_bot_message_is_ignored() -> None:
    body = load("message_changed")
    body["event"]["message"] |= {"user": BOT.user_id, "bot_id": BOT.bot_id}
    assert normalize_event(body, channel="slack", bot=BOT) is None


def test_group_kinds() -> None:
    for channel_type, chat in (("group", "G0PRIV"), ("mpim", "C0MPIM"), ("channel", "C0PUB")):
        body = load("message_channel_mention")
        body["event"] |= {"channel_type": channel_type, "channel": chat}
        ev = normalize_event(body, channel="slack", bot=BOT)
        assert ev is not None and ev.ref.kind == ConversationKind.GROUP, channel_type


def test_missing_event_id_falls_back_to_channel_and_ts() -> None:
    body = load("message_im")
    del body["event_id"]
    ev = normalize_event(body, channel="slack", bot=BOT)
    assert ev is not None and ev.event_id == "slack:D0123DM456:1718000000.000100"


def test_shared_channel_user_keeps_their_own_team() -> None:
    body = load("message_channel_mention")
    body["event"]["user_team"] = "T0OTHER"
    ev = normalize_event(body, channel="slack", bot=BOT)
    assert ev is not None and ev.sender.identity == "slack:T0OTHER/U222BBB222"


def test_not_an_event_callback() -> None:
    assert normalize_event({"type": "url_verification", "challenge": "x"}, channel="slack", bot=BOT) is None
    assert normalize_event({"type": "event_callback", "event": "nope"}, channel="slack", bot=BOT) is None


@pytest.mark.parametrize(
    ("text", "expected", "mentioned"),
    [
        ("<@U0BOT00001> hi", "hi", True),
        ("hi <@U0BOT00001|clawgate>  there", "hi there", True),
        ("ask <@U123|alice> and <@U456>", "ask @alice and @U456", False),
        ("<!channel> <!everyone> <!subteam^S1|@devs> <!subteam^S2>", "@channel @everyone @devs @subteam", False),
        ("<!date^1392734382^{date_short}|Feb 18, 2014>", "Feb 18, 2014", False),
        ("<https://a.b/c>", "https://a.b/c", False),
        ("<http://a.b|a.b> <mailto:x@y.z|x@y.z>", "a.b x@y.z", False),
        ("a &amp;lt; b", "a &lt; b", False),
        ("line1\n<@U0BOT00001>   line2", "line1\nline2", True),
    ],
)
def test_clean_text(text: str, expected: str, mentioned: bool) -> None:
    assert clean_text(text, "U0BOT00001") == (expected, mentioned)


def test_slash_command_in_a_channel() -> None:
    ev = normalize_command(load("slash_command"), channel="slack")
    assert ev is not None
    assert ev.text == "/link ABC123"
    assert ev.event_id == "slack:13345224609.738474920.8088930838d88f008e0"
    assert ev.ref == ConversationRef("slack", "C0GEN00001", None, ConversationKind.GROUP)
    assert ev.sender.identity == "slack:T123ABC456/U222BBB222" and ev.sender.display_name == "bob"
    assert ev.mentions_bot


def test_slash_command_in_a_dm() -> None:
    payload = load("slash_command") | {"channel_id": "D0123DM456", "channel_name": "directmessage", "text": ""}
    ev = normalize_command(payload, channel="slack")
    assert ev is not None and ev.text == "/link" and ev.ref.kind == ConversationKind.DM


def test_slash_command_without_trigger_is_refused() -> None:
    payload = load("slash_command")
    del payload["trigger_id"]
    assert normalize_command(payload, channel="slack") is None


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
_KEYS = [
    "type",
    "subtype",
    "user",
    "text",
    "ts",
    "thread_ts",
    "channel",
    "channel_type",
    "files",
    "message",
    "previous_message",
    "user_profile",
    "team",
    "bot_id",
    "parent_user_id",
]


@given(
    st.sampled_from(["message_im", "message_changed", "file_share", "thread_reply"]),
    st.sampled_from(_KEYS),
    _JSON,
)
def test_odd_field_types_never_crash(name: str, key: str, value: object) -> None:
    # Slack's payloads are not ours to trust: a surprising shape is ignored, never an exception.
    body = load(name)
    body["event"][key] = value
    ev = normalize_event(body, channel="slack", bot=BOT)
    assert ev is None or isinstance(ev.text, str)
