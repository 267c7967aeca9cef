"""What an attachment is (docs/media.md): first from what the platform declares (which cap applies,
whether it is worth downloading at all), then from its bytes (which reader gets it). A name or a
declared type can lie; the bytes decide. Pure.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import Literal

from gateway.core.events import Attachment

Kind = Literal["image", "document", "audio", "video", "other"]
KINDS_READ: tuple[Kind, ...] = ("image", "document", "audio")

# Telegram's own words for a message's file; other platforms declare a MIME type.
_PLATFORM_KINDS: dict[str, Kind] = {
    "photo": "image",
    "voice": "audio",
    "audio": "audio",
    "video": "video",
    "video_note": "video",
    "animation": "video",
    "sticker": "other",
}
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp", "image/tiff"})
_TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/x-ndjson",
        "application/xml",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/javascript",
        "application/x-sh",
        "application/x-python",
        "application/sql",
        "application/csv",
    }
)
TEXT_EXTENSIONS = frozenset(
    """txt text md markdown rst org csv tsv json jsonl ndjson yaml yml toml ini cfg conf log xml html htm
    css scss js mjs cjs ts tsx jsx py pyi rb go rs java kt kts c h cc cpp hpp cs php sh bash zsh fish ps1 sql
    r swift scala lua pl ex exs erl hs ml clj dart vue svelte tex properties gradle proto graphql diff patch
    dockerfile makefile""".split()
)
_IMAGE_EXTENSIONS = {"png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "gif": "image/gif"}
_IMAGE_EXTENSIONS |= {"webp": "image/webp", "bmp": "image/bmp", "tif": "image/tiff", "tiff": "image/tiff"}
_AUDIO_EXTENSIONS = frozenset({"ogg", "oga", "opus", "mp3", "m4a", "wav", "flac", "aac", "weba"})
_VIDEO_EXTENSIONS = frozenset({"mp4", "mov", "mkv", "avi", "webm"})


def extension(name: str | None) -> str:
    if not name or "." not in name.strip("."):
        return (name or "").lower() if (name or "").lower() in ("dockerfile", "makefile") else ""
    return name.rsplit(".", 1)[1].lower()


def _of_type(mime: str | None) -> Kind | None:
    if not mime:
        return None
    mime = mime.split(";", 1)[0].strip().lower()
    if mime.startswith("image/"):
        return "image" if mime in IMAGE_TYPES else "other"
    if mime.startswith("audio/"):
        return "audio"
    if mime.startswith("video/"):
        return "video"
    if mime == "application/pdf" or mime.startswith("text/") or mime in _TEXT_TYPES:
        return "document"
    return None


def _of_name(name: str | None) -> Kind | None:
    ext = extension(name)
    if ext == "pdf" or ext in TEXT_EXTENSIONS:
        return "document"
    if ext in _IMAGE_EXTENSIONS:
        return "image"
    if ext in _AUDIO_EXTENSIONS:
        return "audio"
    if ext in _VIDEO_EXTENSIONS:
        return "video"
    return None


def declared_kind(att: Attachment) -> Kind | None:
    """What the platform says the attachment is; None when it does not say (its bytes will)."""
    platform = _PLATFORM_KINDS.get(att.kind)
    if platform is not None:
        return platform
    return _of_type(att.mime) or _of_type(att.kind) or _of_name(att.name)


def sniff(head: bytes) -> str | None:
    """The MIME type the first bytes of a file show, for the formats it matters to tell apart."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "audio/wav"
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "image/tiff"
    if head[:2] == b"BM" and len(head) >= 26 and head[6:10] == b"\x00\x00\x00\x00":
        return "image/bmp"
    if b"%PDF-" in head[:1024]:
        return "application/pdf"
    if head.startswith(b"OggS"):
        return "audio/ogg"
    if head.startswith(b"fLaC"):
        return "audio/flac"
    if head.startswith(b"ID3") or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE6 in (0xE2, 0xE4, 0xE6)):
        return "audio/mpeg"
    if head[4:8] == b"ftyp":
        brand = head[8:12]
        if brand in (b"heic", b"heix", b"mif1", b"msf1", b"avif"):
            return "image/heic"
        return "audio/mp4" if brand in (b"M4A ", b"M4B ") else "video/mp4"
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return "video/webm"
    if head.startswith(b"PK\x03\x04"):
        return "application/zip"
    return None


def looks_like_text(data: bytes) -> bool:
    """Whether `data` reads as text (UTF-8 or UTF-16 with its mark, or a legacy 8-bit encoding with
    next to no control characters): source code and notes, not a binary with a text extension."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return True
    sample = data[:16_384]
    if not sample or b"\x00" in sample:
        return False
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(sample, final=False)
    except UnicodeDecodeError:
        text = sample.decode("cp1252", errors="replace")
    controls = sum(1 for c in text if ord(c) < 32 and c not in "\t\n\r\f") + text.count("\ufffd")
    return controls <= len(text) // 100


@dataclass(frozen=True, slots=True)
class Identified:
    kind: Kind
    mime: str
    label: str  # how a person calls it: "PDF", "image", "text", "voice message"


_AUDIO_LABEL = {"voice": "voice message"}


def identify(att: Attachment, data: bytes) -> Identified:
    """What the downloaded `data` is. A container both sound and video come in (MP4, WebM) counts as
    what the platform declared it to be."""
    found = sniff(data[:1024])
    declared = declared_kind(att)
    if found is None:
        if looks_like_text(data):
            return Identified("document", "text/plain", "text")
        return Identified("other", att.mime or "application/octet-stream", "file")
    if found in ("video/mp4", "video/webm") and declared == "audio":
        found = "audio/mp4" if found == "video/mp4" else "audio/webm"
    if found == "application/pdf":
        return Identified("document", found, "PDF")
    if found in IMAGE_TYPES:
        return Identified("image", found, "image")
    if found.startswith("audio/"):
        return Identified("audio", found, _AUDIO_LABEL.get(att.kind, "audio"))
    if found.startswith("video/"):
        return Identified("video", found, "video")
    return Identified("other", found, "HEIC image" if found == "image/heic" else "file")


def human_size(n: int) -> str:
    """Bytes as a person reads them: "860 bytes", "245 KB", "1.2 MB" (decimal units, like max_mb)."""
    if n < 1000:
        return f"{n} bytes"
    if n < 1_000_000:
        return f"{n / 1000:.0f} KB"
    value = n / 1_000_000
    return f"{value:.1f} MB" if value < 100 else f"{value:.0f} MB"


def clock(seconds: float) -> str:
    """A duration as "0:14" or "1:02:03"."""
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
