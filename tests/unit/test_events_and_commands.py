from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.core.events import (
    Actor,
    ConversationKind,
    ConversationRef,
    MessageReceived,
    event_from_payload,
    event_to_payload,
)
from gateway.turn.commands.chat import parse


def test_session_keys() -> None:
    assert ConversationRef("web", "alice").session_key == "web:dm:alice"
    assert ConversationRef("tg", "-100", "7", ConversationKind.GROUP).session_key == "tg:group:-100:7"


def test_raw_payload_stays_out_of_equality_and_repr() -> None:
    a = MessageReceived("e1", ConversationRef("web", "u"), Actor("web:u"), "hi", raw={"token": "secret"})
    b = MessageReceived(
        "e1", ConversationRef("web", "u"), Actor("web:u"), "hi", raw={"other": 1}, received_at=a.received_at
    )
    assert a == b
    assert "secret" not in repr(a)


@given(
    text=st.text(max_size=200),
    chat=st.text(min_size=1, max_size=20),
    thread=st.none() | st.text(min_size=1, max_size=10),
    kind=st.sampled_from(list(ConversationKind)),
)
def test_payload_roundtrip(text: str, chat: str, thread: str | None, kind: ConversationKind) -> None:
    ev = MessageReceived("id", ConversationRef("web", chat, thread, kind), Actor("web:x", "X"), text)
    assert event_from_payload(event_to_payload(ev)) == ev


def test_received_at_is_timezone_aware() -> None:
    ev = MessageReceived("id", ConversationRef("web", "u"), Actor("web:u"), "x")
    assert ev.received_at.tzinfo is not None


def test_command_parsing() -> None:
    assert parse("/help") == ("help", "")
    assert parse("  /STATUS  ") == ("status", "")
    assert parse("/new@clawgate_bot") == ("new", "")
    assert parse("/remember buy milk") == ("remember", "buy milk")
    assert parse("hello /help") is None
    assert parse("/") is None
    assert parse("/ spaced") is None
    assert parse("/path/to/file") is None


def test_nul_characters_are_dropped_from_inbound_text_and_names() -> None:
    # PostgreSQL text columns refuse NUL: such a message would become a failed turn there.
    ev = MessageReceived("e1", ConversationRef("web", "c1"), Actor("web:alice", "Al\x00ice"), "hel\x00lo\x00")
    assert ev.text == "hello"
    assert ev.sender.display_name == "Alice"
    plain = MessageReceived("e2", ConversationRef("web", "c1"), Actor("web:alice"), "hello")
    assert plain.sender.display_name is None and plain.text == "hello"
