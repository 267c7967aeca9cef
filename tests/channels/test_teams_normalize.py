"""Teams activity JSON -> MessageReceived: tables over the fake's Teams-shaped activities. Pure."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from channels.teams.normalize import (
    Ignored,
    clean_text,
    event_id_of,
    file_attachments,
    normalize_activity,
    reference_of,
    split_thread,
    threaded,
)
from gateway.core.events import ConversationKind, MessageReceived
from tests.fakes.teams import CHANNEL, GROUP_CHAT, TENANT_ID, FakeTeams

fake = FakeTeams(url="https://smba.example")
BOT = fake.bot_id


def event(activity: dict[str, Any]) -> MessageReceived:
    ev = normalize_activity(activity, channel="teams")
    assert isinstance(ev, MessageReceived), ev
    return ev


def test_a_personal_chat_is_a_dm_of_the_entra_person() -> None:
    activity = fake.personal("hello there", user="42", name="Ann Example")
    ev = event(activity)
    assert ev.ref.kind == ConversationKind.DM
    assert (ev.ref.chat_id, ev.ref.thread_id) == ("a:1personal-chat-42", None)
    assert ev.sender.identity == f"teams:{TENANT_ID}/aad-42"
    assert ev.sender.display_name == "Ann Example"
    assert ev.text == "hello there" and not ev.mentions_bot
    assert ev.message_id == activity["id"]
    assert ev.event_id == event_id_of("teams", "a:1personal-chat-42", activity["id"])
    assert ev.raw is activity


def test_without_an_entra_object_the_teams_user_id_stands_in() -> None:
    ev = event(fake.personal("hi", user="7", aad=False))
    assert ev.sender.identity == f"teams:{TENANT_ID}/29:7"


def test_the_tenant_may_come_from_the_channel_data_alone() -> None:
    activity = fake.personal("hi")
    del activity["conversation"]["tenantId"]
    assert event(activity).sender.identity.startswith(f"teams:{TENANT_ID}/")


@pytest.mark.parametrize(
    ("build", "kind", "chat", "thread"),
    [
        (lambda: fake.group_chat("hi"), ConversationKind.GROUP, GROUP_CHAT, None),
        (lambda: fake.channel("hi", activity_id="1700000000001"), ConversationKind.GROUP, CHANNEL, "1700000000001"),
        (lambda: fake.channel("hi", thread="1700000000001"), ConversationKind.GROUP, CHANNEL, "1700000000001"),
    ],
)
def test_groups_and_channel_threads(build: Any, kind: ConversationKind, chat: str, thread: str | None) -> None:
    ev = event(build())
    assert (ev.ref.kind, ev.ref.chat_id, ev.ref.thread_id) == (kind, chat, thread)


def test_a_channel_post_without_a_thread_in_its_id_starts_its_own() -> None:
    activity = fake.channel("hi", activity_id="1700000000005")
    activity["conversation"]["id"] = CHANNEL
    assert event(activity).ref.thread_id == "1700000000005"


@pytest.mark.parametrize(
    ("text", "entities", "cleaned", "mentioned"),
    [
        ("<at>clawbot</at> what now?", [("<at>clawbot</at>", BOT)], "what now?", True),
        ("what now, <at>clawbot</at>?", [("<at>clawbot</at>", BOT)], "what now,?", True),
        ("<at>clawbot</at> /status", [("<at>clawbot</at>", BOT)], "/status", True),
        ("ask <at>Bob Smith</at> about it", [("<at>Bob Smith</at>", "29:bob")], "ask @Bob Smith about it", False),
        (
            "<at>clawbot</at> and <at>Bob</at>",
            [("<at>clawbot</at>", BOT), ("<at>Bob</at>", "29:bob")],
            "and @Bob",
            True,
        ),
        # The bot's name in <at> without an entity is not a mention (Teams marks mentions with one).
        ("<at>clawbot</at> hi", [], "@clawbot hi", False),
        # An entity for the bot whose text is not found still counts (Teams says it was mentioned).
        ("hi", [("<at>claw</at>", BOT)], "hi", True),
        ("line one\r\nline   two  ", [], "line one\nline two", False),
        ("ok <at>clawbot</at> go", [("<at>clawbot</at>", BOT)], "ok go", True),
    ],
)
def test_mentions(text: str, entities: list[tuple[str, str]], cleaned: str, mentioned: bool) -> None:
    ents = [{"type": "mention", "text": t, "mentioned": {"id": who, "name": "x"}} for t, who in entities]
    ents.append({"type": "clientInfo", "locale": "en-US"})
    assert clean_text(text, ents, BOT) == (cleaned, mentioned)


def test_group_mentions_set_mentions_bot() -> None:
    assert event(fake.group_chat("are you there?", mention=True)).mentions_bot
    plain = event(fake.group_chat("just chatting"))
    assert not plain.mentions_bot and plain.text == "just chatting"


@pytest.mark.parametrize(
    ("activity", "reason"),
    [
        (fake.personal("I am the bot", from_self=True), "own message"),
        (fake.installed({"conversationType": "personal", "id": "a:1"}), "conversationUpdate activity"),
        (fake.activity({"conversationType": "personal", "id": "a:1"}, None, kind="typing"), "typing activity"),
        (fake.activity({"conversationType": "personal", "id": "a:1"}, None, kind="messageReaction"), "messageReaction"),
        (fake.activity({"conversationType": "personal", "id": "a:1"}, None, kind="invoke"), "invoke activity"),
        (fake.personal("hi") | {"channelId": "webchat"}, "not Teams"),
        (fake.personal("hi") | {"from": {}}, "incomplete"),
        (fake.personal("<at>clawbot</at>", mention=False) | {"text": "  "}, "no text"),
    ],
)
def test_what_is_not_a_message_for_the_gateway(activity: dict[str, Any], reason: str) -> None:
    found = normalize_activity(activity, channel="teams")
    assert isinstance(found, Ignored) and reason in found.reason


def test_files_are_counted_and_not_read() -> None:
    activity = fake.personal("see attached")
    activity["attachments"].append(
        {"contentType": "application/vnd.microsoft.teams.file.download.info", "name": "a.pdf", "content": {}}
    )
    assert file_attachments(activity) == 1  # the text/html copy of the text is not a file
    assert event(activity).attachments == ()


def test_the_reference_is_the_address_without_text() -> None:
    activity = fake.channel("secret plans", thread="1700000000001")
    key, data = reference_of(activity) or ("", {})
    assert key == CHANNEL
    assert data == {
        "service_url": fake.service_url,
        "conversation_id": CHANNEL,
        "conversation_type": "channel",
        "tenant_id": TENANT_ID,
        "bot_id": BOT,
        "bot_name": "clawbot",
        "channel_id": "msteams",
    }
    assert "secret" not in str(data)
    assert reference_of({"type": "message"}) is None


@given(st.text(alphabet="abc:@;=.19", min_size=1, max_size=40), st.text(alphabet="0123456789", max_size=15))
def test_threads_round_trip(chat: str, thread: str) -> None:
    chat = chat.replace(";messageid=", "")
    assert split_thread(threaded(chat, thread or None)) == (chat, thread or None)


def test_event_ids_are_unique_per_conversation_and_bounded() -> None:
    assert event_id_of("teams", "a:1", "17") != event_id_of("teams", "a:2", "17")
    assert event_id_of("teams", "a:1", "17").startswith("teams:")
    assert len(event_id_of("t" * 60, "a:" + "x" * 400, "9" * 500)) <= 255
