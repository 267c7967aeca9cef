"""What an attachment is and whether it may come in (gateway/media/kinds.py, policy.py): table tests."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.config.load import parse_config
from gateway.core.channel_config import MediaConfig
from gateway.core.events import Attachment, event_from_payload, event_to_payload
from gateway.media import kinds, policy
from tests.fakes import media

MB = 1_000_000


@pytest.mark.parametrize(
    ("head", "mime"),
    [
        (media.png(), "image/png"),
        (media.jpeg(), "image/jpeg"),
        (b"GIF89a....", "image/gif"),
        (b"RIFF\x00\x00\x00\x00WEBPVP8 ", "image/webp"),
        (b"RIFF\x00\x00\x00\x00WAVEfmt ", "audio/wav"),
        (b"%PDF-1.7\n", "application/pdf"),
        (b"\xef\xbb\xbf junk then %PDF-1.4", "application/pdf"),  # a header a little way in still counts
        (media.ogg_voice(1), "audio/ogg"),
        (b"ID3\x04\x00", "audio/mpeg"),
        (b"\xff\xfb\x90\x00", "audio/mpeg"),
        (b"\x00\x00\x00\x20ftypM4A \x00", "audio/mp4"),
        (b"\x00\x00\x00\x20ftypisom\x00", "video/mp4"),
        (b"\x00\x00\x00\x20ftypheic\x00", "image/heic"),
        (b"\x1a\x45\xdf\xa3\x9f", "video/webm"),
        (media.zip_file(), "application/zip"),
        (b"hello world", None),
        (b"", None),
    ],
)
def test_sniff(head: bytes, mime: str | None) -> None:
    assert kinds.sniff(head) == mime


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"plain notes\nline two\n", True),
        ("caf\u00e9 na\u00efve \u2014 \U0001f600".encode(), True),
        ("Gr\u00fc\u00dfe aus K\u00f6ln".encode("cp1252"), True),  # not UTF-8, still text
        ("utf-16 text".encode("utf-16"), True),
        (b"x" * 16_383 + "\u00e9".encode(), True),  # a character cut at the sample's edge is no error
        (b"\x00\x01\x02binary", False),
        (bytes(range(1, 32)) * 20, False),
        (b"", False),
    ],
)
def test_looks_like_text(data: bytes, text: bool) -> None:
    assert kinds.looks_like_text(data) is text


@pytest.mark.parametrize(
    ("att", "kind"),
    [
        (Attachment("photo"), "image"),
        (Attachment("voice", mime="audio/ogg"), "audio"),
        (Attachment("video_note"), "video"),
        (Attachment("sticker"), "other"),
        (Attachment("document", "report.pdf", mime="application/pdf"), "document"),
        (Attachment("document", "shot.png", mime="image/png"), "image"),  # a picture sent as a file
        (Attachment("image/heic", "IMG_1.heic"), "other"),  # a picture type it cannot read
        (Attachment("text/x-python", "a.py"), "document"),
        (Attachment("file", "notes"), None),  # nothing said: its bytes will tell
        (Attachment("file", "main.rs"), "document"),
        (Attachment("png", "diagram"), None),  # Slack's filetype alone
        (Attachment("file", "clip.mov"), "video"),
    ],
)
def test_declared_kind(att: Attachment, kind: str | None) -> None:
    assert kinds.declared_kind(att) == kind


@pytest.mark.parametrize(
    ("att", "data", "kind", "label"),
    [
        (Attachment("document", "cat.txt", mime="text/plain"), media.png(), "image", "image"),  # the bytes win
        (Attachment("document", "notes.pdf"), b"just some notes\n", "document", "text"),
        (Attachment("voice"), media.ogg_voice(2), "audio", "voice message"),
        (Attachment("audio/webm", "clip.webm", mime="audio/webm"), b"\x1a\x45\xdf\xa3" + bytes(50), "audio", "audio"),
        (Attachment("file", "movie.webm"), b"\x1a\x45\xdf\xa3" + bytes(50), "video", "video"),
        (Attachment("file", "blob.bin"), bytes(range(256)) * 4, "other", "file"),
    ],
)
def test_identify_by_bytes(att: Attachment, data: bytes, kind: str, label: str) -> None:
    found = kinds.identify(att, data)
    assert (found.kind, found.label) == (kind, label)


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 bytes"),
        (999, "999 bytes"),
        (1_000, "1 KB"),
        (245_400, "245 KB"),
        (1_234_567, "1.2 MB"),
        (250 * MB, "250 MB"),
    ],
)
def test_human_size(n: int, text: str) -> None:
    assert kinds.human_size(n) == text


@pytest.mark.parametrize(("seconds", "text"), [(0, "0:00"), (14.4, "0:14"), (600, "10:00"), (10_800, "3:00:00")])
def test_clock(seconds: float, text: str) -> None:
    assert kinds.clock(seconds) == text


def test_caps_per_kind_within_the_older_cap_and_the_platforms() -> None:
    cfg = MediaConfig()
    assert [policy.cap(cfg, k) for k in ("image", "document", "audio", None)] == [10 * MB, 20 * MB, 25 * MB, 25 * MB]
    assert policy.cap(cfg, "audio", legacy=5 * MB) == 5 * MB
    assert policy.cap(cfg, "audio", platform=20 * 1024 * 1024) == 20 * 1024 * 1024
    assert MediaConfig.model_validate({"max_mb": 3}).max_mb.document == 3  # one number: every kind


@pytest.mark.parametrize(
    ("att", "transcription", "why"),
    [
        (Attachment("video", "demo.mp4", 1_000), True, "I can't read videos"),
        (Attachment("sticker", None, 100), True, "I can't read stickers"),
        (Attachment("document", "a.txt", 0), True, "it is empty"),
        (Attachment("photo", None, 11 * MB), True, "it is 11.0 MB, and pictures may be at most 10.0 MB"),
        (Attachment("voice", None, 1_000, duration=601), True, "it is 10:01 long"),
        (Attachment("voice", None, 1_000, duration=5), False, "voice is not turned on"),
        (Attachment("document", "a.pdf", 19 * MB, mime="application/pdf"), True, None),
        (Attachment("file", "unknown", None), True, None),
    ],
)
def test_what_is_refused_before_download(att: Attachment, transcription: bool, why: str | None) -> None:
    problem = policy.before_download(att, MediaConfig(), legacy=None, platform=None, transcription=transcription)
    if why is None:
        assert problem is None
    else:
        assert problem is not None and why in problem.why


def test_refusals_name_each_file_and_what_is_supported() -> None:
    text = policy.refusal([policy.unsupported("movie.mp4", "videos"), policy.Problem("a.txt", "it is empty")])
    assert "- movie.mp4: I can't read videos." in text and "- a.txt: it is empty." in text
    assert "I can read pictures (JPEG, PNG, GIF, WebP), PDFs" in text
    voice_only = policy.refusal([policy.Problem("voice message", "off", needs_transcription=True)])
    assert "ai.transcription.model" in voice_only and "- " not in voice_only


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        (None, "file"),
        ("  report\nfinal.pdf ", "report final.pdf"),
        ("\u27eaend\u27eb.txt", "end.txt"),  # a name cannot carry the frame's brackets
        ("x" * 200 + ".txt", "x" * 79 + "\u2026"),
    ],
)
def test_display_names_are_one_safe_line(name: str | None, shown: str) -> None:
    assert policy.display_name(Attachment("document", name)) == shown


def test_the_older_single_cap_stays_valid_and_bad_values_are_named() -> None:
    cfg = parse_config(
        {
            "channels": {
                "telegram": {"token": "1:x", "max_attachment_bytes": 1_000_000, "media": {"max_mb": {"audio": 5}}},
            }
        },
        "t",
        env={},
    )
    channel = cfg.channels["telegram"]
    assert channel.max_attachment_bytes == 1_000_000 and channel.media.max_mb.audio == 5  # type: ignore[union-attr]
    with pytest.raises(ValidationError, match="max_mb"):
        MediaConfig.model_validate({"max_mb": {"image": 0}})
    with pytest.raises(ValidationError, match="video"):
        MediaConfig.model_validate({"max_mb": {"video": 5}})


def test_the_journal_keeps_file_ids_and_reads_events_kept_before_them() -> None:
    from gateway.core.events import Actor, ConversationRef, MessageReceived

    ev = MessageReceived(
        "tg:1",
        ConversationRef("tg", "1"),
        Actor("telegram:1"),
        "",
        attachments=(Attachment("voice", None, 10, "AwACfileid", "audio/ogg", 4.0),),
    )
    payload = event_to_payload(ev)
    assert payload["attachments"] == [["voice", None, 10, "AwACfileid", "audio/ogg", 4.0]]
    assert event_from_payload(payload).attachments == ev.attachments
    payload["attachments"] = [["photo", None, 300]]  # journaled by an older version
    assert event_from_payload(payload).attachments == (Attachment("photo", None, 300),)


@pytest.mark.parametrize(
    ("ai", "expected"),
    [
        # The chat model's provider: its address and key are the transcription's too.
        (
            {"model": "openai/gpt-4o", "api_base": "http://llm/v1", "api_key": "sk-chat-000000000000"},
            ("http://llm/v1", "sk-chat-000000000000"),
        ),
        # Another provider: neither goes there; LiteLLM's own defaults (its key variable) apply.
        ({"model": "anthropic/claude-sonnet-4", "api_key": "sk-ant-00000000000000"}, (None, None)),
        # A key of its own, with the chat's address for the same provider.
        (
            {"model": "openai/gpt-4o", "api_base": "http://llm/v1", "transcription": {"api_key": "sk-own-00000000000"}},
            ("http://llm/v1", "sk-own-00000000000"),
        ),
        # An address of its own: the chat's key does not follow it there.
        (
            {
                "model": "openai/gpt-4o",
                "api_key": "sk-chat-000000000000",
                "transcription": {"api_base": "http://stt/v1"},
            },
            ("http://stt/v1", None),
        ),
    ],
)
def test_transcription_credentials(ai: dict[str, object], expected: tuple[str | None, str | None]) -> None:
    from gateway.media.turn import transcription_credentials

    transcription = {"model": "openai/whisper-1", **ai.pop("transcription", {})}  # type: ignore[dict-item]
    config = parse_config({"ai": {**ai, "transcription": transcription}}, "t", env={})
    assert transcription_credentials(config.ai) == expected
