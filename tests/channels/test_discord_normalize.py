"""Table tests of channels.discord.normalize over gateway-shaped JSON (tests/payloads/discord)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from channels.discord.normalize import command_name, conversation, normalize, normalize_command
from gateway.core.events import ConversationKind, ConversationRef, event_to_payload

PAYLOADS = Path(__file__).parent.parent / "payloads" / "discord"
BOT = "1100000000000000001"
BOT_ROLE = "1200000000000000004"
GUILD_CHANNEL = "1200000000000000002"
THREAD = "1200000000000000003"
DM_CHANNEL = "1300000000000000001"


def sample(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((PAYLOADS / f"{name}.json").read_text())
    return data


def run(name: str, *, mutate: Any = None, **kwargs: Any) -> dict[str, Any] | None:
    s = sample(name)
    if mutate is not None:
        mutate(s["d"])
    ev = normalize(
        s["d"],
        channel="dc",
        bot_id=BOT,
        place=s["place"],
        edited=s["t"] == "MESSAGE_UPDATE",
        bot_role_ids=kwargs.pop("bot_role_ids", (BOT_ROLE,)),
    )
    if ev is None:
        return None
    assert ev.raw is s["d"]
    out = event_to_payload(ev)
    out["reply_to_thread"] = ev.reply_to.conversation.thread_id if ev.reply_to else None
    # Chat messages are read as the reply is written: streaming stays on (field newer than these tests).
    assert out.pop("wants_stream", True) is True
    return out


def test_guild_mention_is_stripped_and_other_mentions_named() -> None:
    assert run("guild_mention") == {
        "event_id": "dc:1350045678901234568",
        "channel": "dc",
        "chat_id": GUILD_CHANNEL,
        "thread_id": None,
        "kind": "group",
        "sender": "discord:111111111111111111",
        "sender_name": "Alice",
        "text": "what did @Bobby and <@333333333333333333> decide?",  # no name in the payload for 333
        "mentions_bot": True,
        "edited": False,
        "attachments": [],
        "reply_to": None,
        "received_at": "2025-03-14T09:26:53.589000+00:00",
        "reply_to_thread": None,
        "message_id": "1350045678901234568",  # what a reply quotes
        "private_reply": False,  # a typed message: no ephemeral answer to it
    }


def test_dm_text_is_trimmed_and_username_used_without_global_name() -> None:
    out = run("dm")
    assert out is not None
    assert (out["kind"], out["chat_id"], out["thread_id"]) == ("dm", DM_CHANNEL, None)
    assert out["text"] == "hi there, can you summarise my notes?"
    assert out["sender_name"] == "alice_w"
    assert out["mentions_bot"] is False
    assert out["event_id"] == "dc:1350045678901240000"


def test_thread_reply_to_bot_counts_as_mention_and_keeps_thread() -> None:
    out = run("thread_reply_to_bot")
    assert out is not None
    assert (out["kind"], out["chat_id"], out["thread_id"]) == ("group", GUILD_CHANNEL, THREAD)
    assert out["mentions_bot"] is True
    assert out["reply_to"] == [GUILD_CHANNEL, "1350045678901250000"]
    assert out["reply_to_thread"] == THREAD
    assert out["sender_name"] == "Ally"  # the guild nickname wins
    assert out["text"] == "ok, and step 2?"


def test_reply_to_someone_else_is_not_a_mention() -> None:
    def other_author(d: dict[str, Any]) -> None:
        d["referenced_message"]["author"] = {"id": "222222222222222222", "username": "bob"}
        d["mentions"] = []

    out = run("thread_reply_to_bot", mutate=other_author)
    assert out is not None
    assert out["mentions_bot"] is False
    assert out["reply_to"] == [GUILD_CHANNEL, "1350045678901250000"]


def test_reply_to_deleted_message_keeps_reference() -> None:
    def deleted(d: dict[str, Any]) -> None:
        d["referenced_message"] = None
        d["mentions"] = []

    out = run("thread_reply_to_bot", mutate=deleted)
    assert out is not None
    assert (out["mentions_bot"], out["reply_to"]) == (False, [GUILD_CHANNEL, "1350045678901250000"])


def test_edit_gets_its_own_event_id_and_flag() -> None:
    out = run("edit")
    assert out is not None
    assert out["event_id"] == "dc:1350045678901234568:edit:2025-03-14T09:27:10.125000+00:00"
    assert out["edited"] is True
    assert out["text"] == "actually, what did they decide yesterday?"
    assert out["received_at"] == "2025-03-14T09:27:10.125000+00:00"


def test_same_payload_twice_gives_the_same_event() -> None:
    assert run("guild_mention") == run("guild_mention")
    assert run("edit") == run("edit")


def test_link_unfurl_update_is_not_an_edit() -> None:
    assert run("unfurl_update") is None


def test_attachments_described_without_text() -> None:
    out = run("attachments")
    assert out is not None
    assert out["text"] == ""
    pdf_url = "https://cdn.discordapp.com/attachments/1300000000000000001/1350045678901270001/report.pdf"
    notes_url = "https://cdn.discordapp.com/attachments/1300000000000000001/1350045678901270002/notes"
    assert out["attachments"] == [
        ["application/pdf", "report.pdf", 48213, f"{pdf_url}?ex=67d5&is=67d4&hm=ab12", "application/pdf", None],
        ["file", "notes", 120, f"{notes_url}?ex=67d5&is=67d4&hm=cd34", None, None],
    ]


def test_bot_role_mention_counts_and_is_stripped() -> None:
    out = run("role_mention")
    assert out is not None
    assert out["mentions_bot"] is True
    assert out["text"] == "ping <@&1200000000000000009>"
    without_role = run("role_mention", bot_role_ids=())
    assert without_role is not None and without_role["mentions_bot"] is False


@pytest.mark.parametrize(
    ("name", "mutate"),
    [
        ("guild_mention", lambda d: d["author"].update(id=BOT, bot=True)),  # the bot itself
        ("guild_mention", lambda d: d["author"].update(bot=True)),  # another bot
        ("guild_mention", lambda d: d.update(webhook_id="555555555555555555")),  # a webhook post
        ("system_join", None),  # "X joined the server"
        ("forward", None),  # a forward: no text of its own
        ("dm", lambda d: d.update(content="")),  # nothing to read (e.g. a sticker)
        ("dm", lambda d: d.pop("author")),
    ],
)
def test_ignored(name: str, mutate: Any) -> None:
    assert run(name, mutate=mutate) is None


def test_only_the_bots_own_mention_is_removed() -> None:
    def content(d: dict[str, Any]) -> None:
        d["content"] = "hey <@!1100000000000000001>, line one\n<@1100000000000000001>\tline two <@111>"

    out = run("guild_mention", mutate=content)
    assert out is not None
    assert out["text"] == "hey , line one\nline two <@111>"


def test_place_decides_thread_and_dm_and_falls_back_to_guild_id() -> None:
    base = {"id": "1", "channel_id": "77"}
    thread = {"id": "77", "type": 11, "parent_id": "70"}
    assert conversation(base, channel="dc", place=thread) == ConversationRef("dc", "70", "77", ConversationKind.GROUP)
    assert conversation(base, channel="dc", place={"id": "77", "type": 1}) == ConversationRef("dc", "77")
    assert conversation(base, channel="dc") == ConversationRef("dc", "77", None, ConversationKind.DM)
    guild = {**base, "guild_id": "9"}
    assert conversation(guild, channel="dc") == ConversationRef("dc", "77", None, ConversationKind.GROUP)
    assert conversation(guild, channel="dc", place={"type": None}).kind is ConversationKind.GROUP
    voice_text = {"id": "77", "type": 2}  # text chat in a voice channel
    assert conversation(guild, channel="dc", place=voice_text).kind is ConversationKind.GROUP


def test_missing_timestamp_falls_back_to_now() -> None:
    d = copy.deepcopy(sample("dm")["d"])
    d.pop("timestamp")
    ev = normalize(d, channel="dc", bot_id=BOT)
    assert ev is not None and ev.received_at.tzinfo is not None


# -- slash commands (INTERACTION_CREATE) --------------------------------------------------------

KNOWN = frozenset({"help", "new", "link"})


def command(name: str, *, mutate: Any = None, known: frozenset[str] = KNOWN) -> dict[str, Any] | None:
    d = sample(name)["d"]
    if mutate is not None:
        mutate(d)
    ev = normalize_command(d, channel="dc", known=known)
    if ev is None:
        return None
    assert ev.raw is d and ev.reply_to is None and ev.attachments == ()
    return event_to_payload(ev)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "interaction_guild",
            {
                "event_id": "dc:1350045678901260000",
                "chat_id": GUILD_CHANNEL,
                "thread_id": None,
                "kind": "group",
                "sender": "discord:111111111111111111",
                "sender_name": "Ally",  # the guild nickname
                "text": "/link ABCD-1234",
            },
        ),
        (
            "interaction_dm",
            {
                "event_id": "dc:1350045678901270000",
                "chat_id": DM_CHANNEL,
                "thread_id": None,
                "kind": "dm",
                "sender": "discord:111111111111111111",
                "sender_name": "alice_w",
                "text": "/new",  # no option given
            },
        ),
        (
            "interaction_thread",
            {
                "event_id": "dc:1350045678901280000",
                "chat_id": GUILD_CHANNEL,  # the thread's parent, like messages in threads
                "thread_id": THREAD,
                "kind": "group",
                "sender": "discord:222222222222222222",
                "sender_name": "Bob",
                "text": "/help how do I link?",
            },
        ),
    ],
)
def test_slash_command_becomes_a_message_to_the_bot(name: str, expected: dict[str, Any]) -> None:
    out = command(name)
    assert out is not None
    assert {k: out[k] for k in expected} == expected
    assert (out["channel"], out["mentions_bot"], out["edited"]) == ("dc", True, False)
    # Interactions carry no timestamp: the time comes from the snowflake id, the same on redelivery.
    assert out["received_at"] == "2025-03-14T09:59:32.485000+00:00"
    assert command(name) == out


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.update(type=3),  # a button press (MESSAGE_COMPONENT)
        lambda d: d.update(type=4),  # autocomplete
        lambda d: d["data"].update(type=2),  # a user context-menu command of the same name
        lambda d: d["data"].update(name="weather"),  # not one of ours
        lambda d: d.pop("member"),  # no user at all
        lambda d: (d.pop("channel"), d.pop("channel_id")),  # nowhere to answer
        lambda d: d.pop("data"),
    ],
)
def test_other_interactions_are_not_messages(mutate: Any) -> None:
    assert command("interaction_guild", mutate=mutate) is None


def test_command_name_only_for_slash_commands() -> None:
    assert command_name(sample("interaction_guild")["d"]) == "link"
    assert command_name({"type": 2, "data": {"type": 1, "name": "weather"}}) == "weather"
    assert command_name({"type": 2, "data": {"type": 3, "name": "Summarise"}}) is None
    assert command_name({"type": 3, "data": {"custom_id": "x", "component_type": 2}}) is None


def test_only_the_text_option_counts_and_channel_id_may_come_from_the_channel() -> None:
    def options(d: dict[str, Any]) -> None:
        d["data"]["options"] = [{"name": "other", "type": 3, "value": "x"}, {"name": "text", "type": 3, "value": " A "}]
        d.pop("channel_id")  # deprecated field: the channel object has the id too

    out = command("interaction_guild", mutate=options)
    assert out is not None
    assert (out["text"], out["chat_id"]) == ("/link A", GUILD_CHANNEL)


def test_unknown_without_the_registered_names() -> None:
    assert command("interaction_dm", known=frozenset()) is None
