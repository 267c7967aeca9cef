"""Slack payloads (tests/payloads/slack/*.json, shaped like Slack's Events API JSON) -> MessageReceived."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from channels.slack.normalize import BotIdentity, clean_text, normalize_command, normalize_event
from gateway.core.events import Attachment, ConversationKind, ConversationRef, MessageRef

PAYLOADS = Path(__file__).parent.parent / "payloads" / "slack"
BOT = BotIdentity(user_id="U0BOT00001", bot_id="B0BOT00001", team_id="T123ABC456")


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((PAYLOADS / f"{name}.json").read_text())
    return data


def test_dm_message() -> None:
    ev = normalize_event(load("message_im"), channel="slack-main", bot=BOT)
    assert ev is not None
    assert ev.event_id == "slack-main:D0123DM456:1718000000.000100"
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


def test_app_mention_is_the_same_event_as_its_message() -> None:
    # Slack sends one mention twice, under two envelope event ids: whichever comes first is
    # answered, the other is a duplicate in the gateway's journal.
    message = normalize_event(load("message_channel_mention"), channel="slack", bot=BOT)
    mention = normalize_event(load("app_mention"), channel="slack", bot=BOT)
    assert message is not None and mention is not None
    assert mention.event_id == message.event_id == "slack:C0GEN00001:1718000100.000200"
    assert mention.ref == message.ref == ConversationRef("slack", "C0GEN00001", None, ConversationKind.GROUP)
    assert mention.text == message.text == "what did @here decide in #general?"
    assert mention.sender.identity == message.sender.identity == "slack:T123ABC456/U222BBB222"
    assert mention.mentions_bot and not mention.edited and mention.reply_to is None
    assert mention.raw["event_id"] == "Ev0AM0000003" and "token" not in mention.raw


def test_app_mention_is_a_mention_whatever_its_text() -> None:
    # Slack decides what mentions the app; a text we do not recognize as one must not hide it.
    body = load("app_mention")
    body["event"]["text"] = "what about tomorrow?"
    ev = normalize_event(body, channel="slack", bot=BOT)
    assert ev is not None and ev.mentions_bot and ev.text == "what about tomorrow?"


def test_app_mention_in_a_thread() -> None:
    body = load("app_mention")
    body["event"] |= {"ts": "1718000300.000400", "thread_ts": "1718000200.000300"}
    ev = normalize_event(body, channel="slack", bot=BOT)
    assert ev is not None
    assert ev.ref == ConversationRef("slack", "C0GEN00001", "1718000200.000300", ConversationKind.GROUP)
    assert ev.reply_to == MessageRef(ev.ref, "1718000200.000300")
    assert ev.event_id == "slack:C0GEN00001:1718000300.000400"


@pytest.mark.parametrize(
    "change",
    [
        {"bot_id": "B0OTHER0001"},
        {"user": BOT.user_id},
        {"bot_profile": {"id": "B0OTHER0001", "name": "ci"}},
        {"subtype": "bot_message"},
        {"subtype": "channel_join"},
    ],
)
def test_app_mention_from_a_bot_or_not_a_message_is_ignored(change: dict[str, Any]) -> None:
    body = load("app_mention")
    assert normalize_event(body, channel="slack", bot=BOT) is not None  # as Slack sent it: taken
    body["event"] |= change
    assert normalize_event(body, channel="slack", bot=BOT) is None


def test_edited_mention_is_an_edit_of_its_own() -> None:
    # Slack sends app_mention again when a message that mentions the bot is edited: with the
    # original ts, so only its `edited` record keeps it from passing for the original.
    ev = normalize_event(load("app_mention_edited"), channel="slack", bot=BOT)
    assert ev is not None
    assert ev.edited and ev.mentions_bot
    assert ev.event_id == "slack:C0GEN00001:1718000100.000200:edit:1718000450.000900"
    assert ev.text == "what did @here decide in #general yesterday?"


def test_edited_mention_without_its_own_time_takes_the_edit_record() -> None:
    body = load("app_mention_edited")
    body["event"]["event_ts"] = body["event"]["ts"]
    ev = normalize_event(body, channel="slack", bot=BOT)
    assert ev is not None and ev.event_id == "slack:C0GEN00001:1718000100.000200:edit:1718000450.000000"
    del body["event"]["edited"]["ts"]
    assert normalize_event(body, channel="slack", bot=BOT) is None  # no way to tell it from the original


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
    assert ev.event_id == "slack:D0123DM456:1718000000.000100:edit:1718000400.000500"
    original = normalize_event(load("message_im"), channel="slack", bot=BOT)
    assert original is not None and original.event_id != ev.event_id and original.ref == ev.ref
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
    assert ev.attachments == (
        Attachment("text/plain", "server.log", 20480, "F0FILE0001", "text/plain"),
        Attachment("png", "diagram", 1048576, "F0FILE0002"),
    )


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


@pytest.mark.parametrize(
    ("name", "change", "event_id"),
    [
        ("message_im", {}, "D0123DM456:1718000000.000100"),
        ("message_channel_mention", {}, "C0GEN00001:1718000100.000200"),
        ("app_mention", {}, "C0GEN00001:1718000100.000200"),
        # A thread reply is a message of its own: its ts, not its thread's.
        ("thread_reply", {}, "C0GEN00001:1718000300.000400"),
        # One message shown in the thread and in the channel: one identity, whichever event names it.
        ("thread_broadcast", {}, "C0GEN00001:1718000350.000450"),
        ("thread_broadcast", {"type": "app_mention"}, "C0GEN00001:1718000350.000450"),
        ("file_share", {}, "D0123DM456:1718000600.000800"),
        ("file_share", {"type": "app_mention"}, "D0123DM456:1718000600.000800"),
        ("message_im", {"subtype": "me_message"}, "D0123DM456:1718000000.000100"),
        # client_msg_id is absent on some messages and chosen by the client: not part of the identity.
        ("message_im", {"client_msg_id": None}, "D0123DM456:1718000000.000100"),
        ("message_im", {"client_msg_id": "6f0b1f6e-0000-0000-0000-000000000000"}, "D0123DM456:1718000000.000100"),
        # The same ts in another conversation is another message.
        ("message_im", {"channel": "D0OTHER0001"}, "D0OTHER0001:1718000000.000100"),
        ("message_changed", {}, "D0123DM456:1718000000.000100:edit:1718000400.000500"),
        ("message_changed", {"ts": "1718000401.000000"}, "D0123DM456:1718000000.000100:edit:1718000401.000000"),
        ("app_mention_edited", {}, "C0GEN00001:1718000100.000200:edit:1718000450.000900"),
    ],
)
def test_event_id_is_the_messages_platform_identity(name: str, change: dict[str, Any], event_id: str) -> None:
    body = load(name)
    body["event"] |= change
    body["event"] = {k: v for k, v in body["event"].items() if v is not None}
    for envelope in (body, body | {"event_id": "Ev0ANOTHER01"}, {k: v for k, v in body.items() if k != "event_id"}):
        ev = normalize_event(envelope, channel="slack", bot=BOT)
        assert ev is not None and ev.event_id == f"slack:{event_id}", envelope.get("event_id")


@pytest.mark.parametrize("ts", ["1718000000", "1718000000.000100:edit:1", "abc.def", " 1718000000.000100"])
def test_message_without_a_slack_timestamp_is_ignored(ts: object) -> None:
    # The ts is the dedupe key: a value of another shape cannot be trusted to be unique.
    body = load("message_im")
    body["event"]["ts"] = ts
    assert normalize_event(body, channel="slack", bot=BOT) is None


def test_edit_without_its_own_time_is_ignored() -> None:
    body = load("message_changed")
    del body["event"]["ts"]
    ev = normalize_event(body, channel="slack", bot=BOT)
    assert ev is not None and ev.event_id.endswith(":edit:1718000400.000500")  # event_ts stands in
    del body["event"]["event_ts"]
    assert normalize_event(body, channel="slack", bot=BOT) is None


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
    "event_ts",
    "edited",
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
    st.sampled_from(
        ["message_im", "message_changed", "file_share", "thread_reply", "app_mention", "app_mention_edited"]
    ),
    st.sampled_from(_KEYS),
    _JSON,
)
def test_odd_field_types_never_crash(name: str, key: str, value: object) -> None:
    # Slack's payloads are not ours to trust: a surprising shape is ignored, never an exception.
    body = load(name)
    body["event"][key] = value
    ev = normalize_event(body, channel="slack", bot=BOT)
    assert ev is None or isinstance(ev.text, str)


def _as_app_mention(body: dict[str, Any]) -> dict[str, Any]:
    """The app_mention envelope Slack sends for the same message: another event id, no
    channel_type or user_profile."""
    event = {k: v for k, v in body["event"].items() if k not in ("channel_type", "user_profile")}
    return body | {"event_id": "Ev0TWIN00001", "event": event | {"type": "app_mention"}}


_MARKUP_PIECES = st.sampled_from(
    [
        "<@U0BOT00001>",
        "<@U0BOT00001|clawgate>",
        "<@U333CCC333|carol>",
        "<!here>",
        "<#C0GEN00001|general>",
        "<https://a.b/c|docs>",
        "&amp;",
        "&lt;",
        " ",
        "  ",
        "\n",
        "hi",
        "what?",
        "é",
    ]
)


@given(
    st.sampled_from(["message_channel_mention", "thread_reply", "thread_broadcast", "file_share", "message_im"]),
    st.lists(_MARKUP_PIECES, max_size=8).map("".join),
)
def test_a_message_and_its_app_mention_normalize_alike(name: str, text: str) -> None:
    body = load(name)
    body["event"]["text"] = text
    message = normalize_event(body, channel="slack", bot=BOT)
    mention = normalize_event(_as_app_mention(body), channel="slack", bot=BOT)
    assert message is not None and mention is not None

    def same(ev: Any) -> tuple[Any, ...]:
        return ev.event_id, ev.ref, ev.text, ev.sender.identity, ev.reply_to, ev.attachments, ev.edited

    assert same(mention) == same(message)
    assert mention.mentions_bot
    assert "<@U0BOT00001" not in mention.text
