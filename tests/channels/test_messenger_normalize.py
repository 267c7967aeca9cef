"""Messenger webhook JSON -> MessageReceived, as tables: what is answered, with which text and
attachments, and what is ignored (echoes, receipts, other Pages, shapes that are not Meta's)."""

from __future__ import annotations

from typing import Any

import pytest

from channels.messenger.normalize import Batch, chosen_text, file_name, normalize_body
from gateway.core.events import ConversationKind, ConversationRef, MessageRef

PAGE = "104000000000001"
PERSON = "7000000000000001"
NOW = 1_760_000_000.0
TS = 1_759_999_990_000  # milliseconds, as Meta sends them


def event(**payload: Any) -> dict[str, Any]:
    return {"sender": {"id": PERSON}, "recipient": {"id": PAGE}, "timestamp": TS, **payload}


def body(*events: dict[str, Any], page: str = PAGE) -> dict[str, Any]:
    return {"object": "page", "entry": [{"id": page, "time": TS, "messaging": list(events)}]}


def read(*events: dict[str, Any], page_id: str | None = PAGE) -> Batch:
    return normalize_body(body(*events), channel="fb", page_id=page_id, now=NOW)


CDN = "https://scontent.xx.fbcdn.net/v/t1.15752-9/4411_n.jpg?_nc_cat=1&oh=abc"


@pytest.mark.parametrize(
    ("payload", "text"),
    [
        ({"message": {"mid": "m_1", "text": "hello, world!"}}, "hello, world!"),
        ({"message": {"mid": "m_1", "text": "Red", "quick_reply": {"payload": "COLOR_RED"}}}, "Red"),
        ({"message": {"mid": "m_1", "text": "Start over", "quick_reply": {"payload": "/new"}}}, "/new"),
        ({"message": {"mid": "m_1", "text": "", "quick_reply": {"payload": "COLOR_RED"}}}, "COLOR_RED"),
        ({"postback": {"mid": "m_1", "title": "Get Started", "payload": "GET_STARTED"}}, "Get Started"),
        ({"postback": {"mid": "m_1", "title": "Help", "payload": "/help"}}, "/help"),
        ({"postback": {"mid": "m_1", "title": "", "payload": "MENU_1"}}, "MENU_1"),
        (
            {"message": {"mid": "m_1", "attachments": [{"type": "image", "payload": {"sticker_id": 369239263222822}}]}},
            "👍",
        ),
        (
            {
                "message": {
                    "mid": "m_1",
                    "attachments": [{"type": "fallback", "title": "A page", "payload": {"url": "https://ex.am/p"}}],
                }
            },
            "A page (https://ex.am/p)",
        ),
        ({"message": {"mid": "m_1", "text": "x\x00y"}}, "xy"),
    ],
)
def test_text_table(payload: dict[str, Any], text: str) -> None:
    [item] = read(event(**payload)).incoming
    ev = item.event
    assert ev.text == text
    assert ev.event_id == "fb:m_1" and ev.message_id == "m_1"
    assert ev.ref == ConversationRef("fb", PERSON, None, ConversationKind.DM)
    assert ev.sender.identity == f"messenger:{PAGE}/{PERSON}"
    assert ev.mentions_bot
    assert item.psid == PERSON and item.sent_at == TS / 1000


@pytest.mark.parametrize(
    "payload",
    [
        {"message": {"mid": "m_e", "is_echo": True, "app_id": 1, "text": "the Page's own words"}},
        {"delivery": {"mids": ["m_1"], "watermark": TS}},
        {"read": {"watermark": TS}},
        {"reaction": {"mid": "m_1", "action": "react", "emoji": "❤"}},
        {"message": {"text": "no mid"}},
        {"message": {"mid": "m_1"}},  # nothing in it
        {"message": {"mid": "m_1", "attachments": [{"type": "fallback"}]}},  # an unsupported share
        {"message": {"mid": "m_1", "attachments": [{"type": "template", "payload": {"template_type": "x"}}]}},
        {"postback": {"mid": "m_1", "title": "", "payload": ""}},
        {"optin": {"ref": "x"}},
        {"message": "not an object"},
    ],
)
def test_ignored_table(payload: dict[str, Any]) -> None:
    batch = read(event(**payload))
    assert batch.incoming == () and batch.ignored == 1


def test_an_echo_is_ignored_by_its_sender_too() -> None:
    echo = {
        "sender": {"id": PAGE},
        "recipient": {"id": PERSON},
        "timestamp": TS,
        "message": {"mid": "m_2", "text": "hi"},
    }
    assert read(echo).incoming == ()


def test_attachments_are_kept_for_the_media_support() -> None:
    message = {
        "mid": "m_9",
        "text": "look",
        "attachments": [
            {"type": "image", "payload": {"url": CDN}},
            {"type": "audio", "payload": {"url": "https://cdn.fbsbx.com/v/t59.3654-21/audioclip-1.mp4?x=1"}},
            {"type": "file", "payload": {"url": "https://cdn.fbsbx.com/v/t59.2708-21/My%20report.pdf?x=1"}},
            {"type": "video", "payload": {"url": "https://video.xx.fbcdn.net/v/clip.mp4"}},
            {"type": "sticker", "payload": {"url": "https://scontent.xx.fbcdn.net/sticker.png", "sticker_id": 1}},
        ],
    }
    [item] = read(event(message=message)).incoming
    got = [(a.kind, a.name, a.ref) for a in item.event.attachments]
    assert got == [
        ("image", "4411_n.jpg", CDN),
        ("audio", "audioclip-1.mp4", "https://cdn.fbsbx.com/v/t59.3654-21/audioclip-1.mp4?x=1"),
        ("file", "My report.pdf", "https://cdn.fbsbx.com/v/t59.2708-21/My%20report.pdf?x=1"),
        ("video", "clip.mp4", "https://video.xx.fbcdn.net/v/clip.mp4"),
        ("sticker", None, "https://scontent.xx.fbcdn.net/sticker.png"),
    ]
    assert item.event.text == "look"


def test_a_reply_names_the_message_it_answers() -> None:
    [item] = read(event(message={"mid": "m_2", "text": "yes", "reply_to": {"mid": "m_1"}})).incoming
    assert item.event.reply_to == MessageRef(item.event.ref, "m_1")


def test_several_entries_and_events_in_one_call() -> None:
    other = "7000000000000002"
    call = {
        "object": "page",
        "entry": [
            {
                "id": PAGE,
                "time": TS,
                "messaging": [event(message={"mid": "m_1", "text": "one"}), event(read={"watermark": 1})],
            },
            {
                "id": PAGE,
                "time": TS,
                "messaging": [
                    {**event(message={"mid": "m_2", "text": "two"}), "sender": {"id": other}},
                    event(postback={"mid": "m_3", "title": "Three", "payload": "P3"}),
                ],
            },
            "not an entry",
        ],
    }
    batch = normalize_body(call, channel="fb", page_id=PAGE, now=NOW)
    assert [(i.event.event_id, i.event.text, i.psid) for i in batch.incoming] == [
        ("fb:m_1", "one", PERSON),
        ("fb:m_2", "two", other),
        ("fb:m_3", "Three", PERSON),
    ]
    assert batch.ignored == 2


def test_events_for_another_page_are_counted_not_answered() -> None:
    batch = normalize_body(
        body(event(message={"mid": "m_1", "text": "hi"}), page="999"), channel="fb", page_id=PAGE, now=NOW
    )
    assert batch.incoming == () and batch.foreign == 1


def test_a_postback_without_mid_gets_an_id_stable_under_redelivery() -> None:
    pb = event(postback={"title": "Menu", "payload": "MENU"})
    first, again = read(pb).incoming[0].event, read(dict(pb)).incoming[0].event
    assert first.event_id == again.event_id and first.event_id.startswith("fb:postback:")
    later = read({**pb, "timestamp": TS + 1000}).incoming[0].event
    assert later.event_id != first.event_id  # the same button tapped again is a new event
    assert first.message_id is None


@pytest.mark.parametrize(
    "shape",
    [{}, {"entry": "x"}, {"entry": [{"messaging": "x"}]}, {"entry": [{"id": PAGE, "messaging": [1, None, []]}]}],
)
def test_shapes_that_are_not_metas_give_nothing(shape: dict[str, Any]) -> None:
    assert normalize_body(shape, channel="fb", page_id=PAGE, now=NOW).incoming == ()


def test_a_missing_timestamp_is_now_and_integer_ids_are_read() -> None:
    item = {"sender": {"id": 7000000000000001}, "recipient": {"id": int(PAGE)}, "message": {"mid": "m_1", "text": "hi"}}
    [got] = normalize_body({"entry": [{"messaging": [item]}]}, channel="fb", page_id=PAGE, now=NOW).incoming
    assert got.sent_at == NOW and got.psid == PERSON


@pytest.mark.parametrize(
    ("title", "payload", "text"),
    [("Yes", "ANSWER_YES", "Yes"), ("Start over", "/new", "/new"), ("", "P", "P"), ("T", "", "T")],
)
def test_chosen_text(title: str, payload: str, text: str) -> None:
    assert chosen_text(title, payload) == text


@pytest.mark.parametrize(
    ("url", "name"),
    [
        (CDN, "4411_n.jpg"),
        ("https://cdn.fbsbx.com/v/t59/Q3%20plan.pdf?dl=1", "Q3 plan.pdf"),
        ("https://cdn.fbsbx.com/", None),
        ("https://[broken/x", None),
    ],
)
def test_file_name(url: str, name: str | None) -> None:
    assert file_name(url) == name
