"""How attachments reach the prompt and what the session keeps (gateway/media/frame.py), and how a
prepared turn carries them (gateway/turn/prepare.py's use of TurnMedia). Pure."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.media import frame
from gateway.turn.context import attach_recall
from memory.store.sessions import Message

REF = frame.MediaRef("document", "notes.txt", 120, "ab" * 32)


def test_a_file_is_quoted_between_the_gateways_lines() -> None:
    part = frame.document(REF, "text", "120 bytes", "hello\nworld", ["cut at 11 characters"])
    assert part.stored == "[attached: notes.txt, text, 120 bytes]"
    assert part.live == (
        "\u27eafile: notes.txt, text, 120 bytes; cut at 11 characters; its content follows\u27eb\n"
        "hello\nworld\n\u27eaend of file: notes.txt\u27eb"
    )


@given(st.text(alphabet=st.sampled_from("ab \n\u27ea\u27eb\u27e6\u27e7"), max_size=60))
def test_nothing_a_file_holds_can_write_the_gateways_brackets(body: str) -> None:
    part = frame.document(REF, "text", "1 KB", body)
    inside = part.live.split("\n", 1)[1].rsplit("\n", 1)[0]
    assert not set(inside) & {"\u27ea", "\u27eb", "\u27e6", "\u27e7"}


def test_a_voice_note_alone_is_the_message() -> None:
    voice = frame.transcript(
        frame.MediaRef("audio", "voice message", 900, "c" * 64), "voice message", "0:14", "hi  there"
    )
    turn = frame.compose("", [voice])
    assert turn.text == "[voice message, 0:14, transcript] hi there"
    assert turn.live == "\u27eavoice message, 0:14, transcript\u27eb hi there"  # no legend: nothing quoted
    assert turn.images == ()


def test_words_pictures_and_files_together() -> None:
    picture = frame.image(frame.MediaRef("image", "a.png", 10, "d" * 64), "data:image/png;base64,AAAA", "1x1 pixels")
    unseen = frame.image(frame.MediaRef("image", "b.png", 10, "e" * 64), None, "1x1 pixels")
    doc = frame.document(REF, "text", "120 bytes", "x")
    turn = frame.compose("look \u27e6here\u27e7", [picture, unseen, doc])
    assert turn.text == (
        "look \u27e6here\u27e7\n[attached: a.png, image, 1x1 pixels]\n[attached: b.png, image, 1x1 pixels]\n"
        "[attached: notes.txt, text, 120 bytes]"
    )
    assert turn.live.startswith(frame.LEGEND + "\n\nlook [here]\n\u27eaimage: a.png, 1x1 pixels: shown below\u27eb")
    assert "b.png, 1x1 pixels: received, but not shown to you" in turn.live
    assert turn.images == ({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},)
    assert [r.name for r in turn.refs] == ["a.png", "b.png", "notes.txt"]


def test_the_model_reads_the_live_message_after_recall_and_the_session_keeps_the_line() -> None:
    picture = frame.image(frame.MediaRef("image", "a.png", 10, "d" * 64), "data:image/png;base64,AAAA", "1x1 pixels")
    turn = frame.compose("what is it?", [picture])
    stored = Message("user", turn.text, author="web:alice", event_id="e1")
    live = turn.live_message(stored)
    assert (live.content, live.author, live.event_id) == (turn.live, "web:alice", "e1")
    prompt = [{"role": "system", "content": "s"}, {"role": "user", "content": live.content}]
    prompt = turn.attach(attach_recall(prompt, "\u27e6recalled memory\u27e7 x\n\n\u27e6message\u27e7"))
    parts = prompt[-1]["content"]
    assert parts[0]["type"] == "text" and parts[0]["text"].startswith("\u27e6recalled memory\u27e7 x")
    assert parts[0]["text"].endswith(turn.live) and parts[1] == turn.images[0]
    assert stored.content == "what is it?\n[attached: a.png, image, 1x1 pixels]"


def test_a_message_without_attachments_is_left_as_it_is() -> None:
    turn = frame.TurnMedia.plain_text("hello")
    message = Message("user", "hello")
    assert turn.live_message(message) is message
    prompt = [{"role": "user", "content": "hello"}]
    assert turn.attach(prompt) is prompt
