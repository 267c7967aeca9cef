"""Voice notes and audio files (docs/media.md): how long they are, and their words.

The length comes from the platform when it says (Telegram, Discord voice messages, Slack clips),
else from the file: an Ogg stream's last granule position (Opus, Vorbis), a WAV header, an MP3's
bit rate. A file whose length none of those shows is bounded by its size cap alone.

The words come from LiteLLM's transcription API (`ai.transcription.model`, e.g. a Whisper model).
"""

from __future__ import annotations

import asyncio
from typing import Any

# What Whisper-style endpoints recognise a file by: its name's extension.
EXTENSIONS = {
    "audio/ogg": "ogg",
    "audio/opus": "ogg",
    "audio/mpeg": "mp3",
    "audio/mp4": "m4a",
    "audio/x-m4a": "m4a",
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/webm": "webm",
    "audio/flac": "flac",
}
# MPEG-1 Layer III bit rates (kbit/s) by the header's index; MPEG-2/2.5 Layer III below.
_MP3_RATES_V1 = (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 0)
_MP3_RATES_V2 = (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160, 0)


def duration(data: bytes, mime: str) -> float | None:
    """Seconds of audio in `data`, when its format shows it cheaply; None otherwise."""
    try:
        if mime == "audio/ogg":
            return _ogg(data)
        if mime == "audio/wav":
            return _wav(data)
        if mime == "audio/mpeg":
            return _mp3(data)
    except (IndexError, ValueError, ZeroDivisionError):
        return None
    return None


def _ogg(data: bytes) -> float | None:
    last = data.rfind(b"OggS", max(0, len(data) - 65_536))
    if last < 0 or len(data) < last + 14:
        return None
    granule = int.from_bytes(data[last + 6 : last + 14], "little")
    head = data[:4096]
    opus = head.find(b"OpusHead")
    if opus >= 0:
        pre_skip = int.from_bytes(head[opus + 10 : opus + 12], "little")
        return max(0, granule - pre_skip) / 48_000
    vorbis = head.find(b"\x01vorbis")
    if vorbis >= 0:
        rate = int.from_bytes(head[vorbis + 12 : vorbis + 16], "little")
        return granule / rate if rate else None
    return None


def _wav(data: bytes) -> float | None:
    pos, byte_rate = 12, 0
    while pos + 8 <= len(data):
        chunk, size = data[pos : pos + 4], int.from_bytes(data[pos + 4 : pos + 8], "little")
        if chunk == b"fmt ":
            byte_rate = int.from_bytes(data[pos + 16 : pos + 20], "little")
        elif chunk == b"data":
            return min(size, len(data) - pos - 8) / byte_rate if byte_rate else None
        pos += 8 + size + (size & 1)
    return None


def _mp3(data: bytes) -> float | None:
    start = 0
    if data.startswith(b"ID3") and len(data) >= 10:
        start = 10 + ((data[6] << 21) | (data[7] << 14) | (data[8] << 7) | data[9])
    header = data[start : start + 4]
    if len(header) < 4 or header[0] != 0xFF or header[1] & 0xE0 != 0xE0:
        return None
    version = (header[1] >> 3) & 0b11  # 3: MPEG-1
    rates = _MP3_RATES_V1 if version == 3 else _MP3_RATES_V2
    kbps = rates[header[2] >> 4]
    # A variable-rate file's first frame says little about the rest: an estimate, as a bound should be.
    return (len(data) - start) * 8 / (kbps * 1000) if kbps else None


def file_name(name: str | None, mime: str) -> str:
    """A name the transcription endpoint recognises the format by."""
    ext = EXTENSIONS.get(mime, "ogg")
    base = (name or "voice").rsplit("/", 1)[-1] or "voice"
    return base if base.lower().endswith("." + ext) else f"{base}.{ext}"


async def transcribe(
    litellm: Any,
    data: bytes,
    mime: str,
    name: str | None,
    *,
    model: str,
    api_base: str | None,
    api_key: str | None,
    language: str | None,
    timeout: float,
) -> str:
    """The words of `data` (raises whatever LiteLLM raises; the caller classifies it)."""
    kwargs: dict[str, Any] = {
        "model": model,
        "file": (file_name(name, mime), data, mime),
        "timeout": timeout,
        "max_retries": 0,
    }
    if api_base:
        kwargs["api_base"] = api_base
    if api_key:
        kwargs["api_key"] = api_key
    if language:
        kwargs["language"] = language
    async with asyncio.timeout(timeout):
        response = await litellm.atranscription(**kwargs)
    text = getattr(response, "text", None)
    if text is None and isinstance(response, dict):
        text = response.get("text")
    return str(text or "").strip()
