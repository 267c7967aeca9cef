"""What may come in (docs/media.md): the cap for each kind, what is refused before anything is
downloaded, and how a refusal is worded. Pure.

A refusal names each file and why, in plain words, and the turn does not run: nothing of the
message reaches the session, the archive or the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.core.channel_config import MediaConfig
from gateway.core.events import Attachment
from gateway.media.kinds import Kind, clock, declared_kind, human_size

MB = 1_000_000
SUPPORTED = (
    "pictures (JPEG, PNG, GIF, WebP), PDFs, text files (notes, CSV, JSON, source code) and voice notes or audio files"
)
_KIND_WORDS = {"image": "pictures", "document": "files", "audio": "voice notes and audio"}
_UNSUPPORTED_WORDS = {
    "video": "videos",
    "video_note": "video notes",
    "animation": "animations",
    "sticker": "stickers",
}
_DEFAULT_NAMES = {"photo": "photo", "voice": "voice message", "sticker": "sticker", "video_note": "video note"}
_NAME_CHARS = 80


@dataclass(frozen=True, slots=True)
class Problem:
    """Why one attachment cannot be read."""

    name: str
    why: str
    unsupported: bool = False  # a kind this does not read at all: the reply lists what it does read
    needs_transcription: bool = False  # audio, with ai.transcription.model unset


def display_name(att: Attachment) -> str:
    """How a reply or a stored line names an attachment: its name (one line, at most 80 characters,
    without the gateway's frame brackets), else what it is."""
    name = " ".join((att.name or "").split())
    name = "".join(c for c in name if c.isprintable() and c not in "\u27e6\u27e7\u27ea\u27eb")
    if not name:
        return _DEFAULT_NAMES.get(att.kind, "file")
    return name if len(name) <= _NAME_CHARS else name[: _NAME_CHARS - 1] + "…"


def cap(cfg: MediaConfig, kind: Kind | None, legacy: int | None = None, platform: int | None = None) -> int:
    """The most bytes an attachment of `kind` may have: media.max_mb for it (the largest of them
    while the kind is not known yet), within the older max_attachment_bytes and what the platform
    lets a bot download, when those are set."""
    sizes = {"image": cfg.max_mb.image, "document": cfg.max_mb.document, "audio": cfg.max_mb.audio}
    limit = int(sizes[kind] * MB) if kind in sizes else int(max(sizes.values()) * MB)
    for other in (legacy, platform):
        if other is not None:
            limit = min(limit, other)
    return limit


def too_big(name: str, kind: Kind | None, size: int, limit: int) -> Problem:
    what = _KIND_WORDS.get(kind or "", "files")
    return Problem(name, f"it is {human_size(size)}, and {what} may be at most {human_size(limit)}")


def over(name: str, kind: Kind | None, limit: int) -> Problem:
    """A file found over its cap while it was downloaded (its size was not declared, or was wrong)."""
    what = _KIND_WORDS.get(kind or "", "files")
    return Problem(name, f"it is larger than {human_size(limit)}, the most {what} may be")


def too_long(name: str, seconds: float, limit: int) -> Problem:
    return Problem(name, f"it is {clock(seconds)} long, and voice and audio may be at most {clock(limit)}")


def unsupported(name: str, what: str) -> Problem:
    return Problem(name, f"I can't read {what}", unsupported=True)


def before_download(
    att: Attachment, cfg: MediaConfig, *, legacy: int | None, platform: int | None, transcription: bool
) -> Problem | None:
    """What can be told from the platform's description alone, so that a file that would be refused
    anyway is never downloaded: a kind this does not read, a declared size or length over the caps,
    voice while transcription is off."""
    name = display_name(att)
    kind = declared_kind(att)
    if kind in ("video", "other"):
        return unsupported(name, _UNSUPPORTED_WORDS.get(att.kind, "this kind of file"))
    if att.size == 0:
        return Problem(name, "it is empty")
    limit = cap(cfg, kind, legacy, platform)
    if att.size is not None and att.size > limit:
        return too_big(name, kind, att.size, limit)
    if kind == "audio":
        if not transcription:
            return Problem(name, "voice is not turned on", needs_transcription=True)
        if att.duration is not None and att.duration > cfg.max_audio_seconds:
            return too_long(name, att.duration, cfg.max_audio_seconds)
    return None


def refusal(problems: Sequence[Problem]) -> str:
    """The reply to a message whose attachments cannot all be read."""
    if problems and all(p.needs_transcription for p in problems):
        return (
            "I can't listen to voice messages or audio here yet: an operator can turn it on by setting "
            "`ai.transcription.model` (a transcription model such as `openai/whisper-1`) in config.yaml. "
            "Please type your message meanwhile."
        )
    lines = [f"- {p.name}: {p.why}." for p in problems if not p.needs_transcription]
    if any(p.needs_transcription for p in problems):
        lines.append("- voice and audio: they need `ai.transcription.model` set in config.yaml.")
    head = "I couldn't use what you attached, so I haven't read your message yet:"
    tail = f"I can read {SUPPORTED}." if any(p.unsupported for p in problems) else "Please send it again another way."
    return "\n".join([head, *lines, tail])


def disabled() -> str:
    return "This channel takes text only: attachments are turned off here. Please send your message as text."


def no_source() -> str:
    return "I can't open attachments on this channel. Please send your message as text."
