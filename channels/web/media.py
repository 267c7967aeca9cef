"""Pictures and files sent with a message from the chat page or the REST API (docs/media.md).

They come in the message itself (`files`: a list of `{"name", "type", "data"}`, `data` in base64),
at most MAX_FILES of them and, together, at most the largest of `media.max_mb`; each is then judged
by the same policy as every channel's attachments (gateway/media): its kind's cap, what it is by its
bytes. The bytes stay in memory for the message's turn and are dropped when it ends: nothing is
written anywhere. A turn resumed after a crash finds them gone and says so.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from dataclasses import dataclass, field

from channels.web.config import WebChannelConfig
from gateway.core.channel_config import MediaConfig
from gateway.core.events import Attachment

MAX_FILES = 8
MB = 1_000_000
PREFIX = "upload:"


class UploadError(ValueError):
    """A message's files that cannot be taken: `status` 400 (malformed) or 413 (too large)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def upload_budget(media: MediaConfig) -> int:
    """The most bytes of files one message may carry."""
    sizes = media.max_mb
    return int(max(sizes.image, sizes.document, sizes.audio) * MB) if media.enabled else 0


def body_cap(config: WebChannelConfig) -> int:
    """The largest request body (or WebSocket frame) a message with files makes: its text, the files
    in base64 (four characters for three bytes) and room for the JSON around them."""
    return config.max_message_bytes + 8192 + (upload_budget(config.media) * 4 + 2) // 3 + MAX_FILES * 1024


def _field(item: dict[str, object], key: str, limit: int, required: bool) -> str | None:
    value = item.get(key)
    if value is None or value == "":
        if required:
            raise UploadError(400, f"each file needs '{key}'")
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise UploadError(400, f"a file's '{key}' must be a string of at most {limit} characters")
    return value


def parse_files(value: object, budget: int) -> list[tuple[Attachment, bytes]]:
    """The files of a message (its `files` field): each an attachment with an upload ref, and its bytes."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise UploadError(400, "'files' must be a list of {name, type, data} objects")
    if len(value) > MAX_FILES:
        raise UploadError(400, f"at most {MAX_FILES} files may come with one message")
    if value and budget == 0:
        raise UploadError(400, "attachments are turned off here: send text only")
    found: list[tuple[Attachment, bytes]] = []
    total = 0
    for item in value:
        if not isinstance(item, dict):
            raise UploadError(400, "'files' must be a list of {name, type, data} objects")
        name = _field(item, "name", 255, True)
        mime = _field(item, "type", 127, False)
        data = item.get("data")
        if not isinstance(data, str):
            raise UploadError(400, "a file's 'data' must be its content in base64")
        if total + len(data) * 3 // 4 > budget + 3:  # before decoding: a budget's worth is all that is decoded
            raise UploadError(413, f"the files are larger than {budget // MB} MB together")
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise UploadError(400, f"the data of {name!r} is not valid base64") from None
        total += len(raw)
        if total > budget:
            raise UploadError(413, f"the files are larger than {budget // MB} MB together")
        ref = PREFIX + uuid.uuid4().hex
        found.append((Attachment(mime or "file", name, len(raw), ref, mime), raw))
    return found


@dataclass(slots=True)
class Uploads:
    """The bytes of the files of messages whose turns have not ended, by their upload ref."""

    by_ref: dict[str, bytes] = field(default_factory=dict)
    by_event: dict[str, list[str]] = field(default_factory=dict)

    def keep(self, event_id: str, files: list[tuple[Attachment, bytes]]) -> None:
        for att, raw in files:
            assert att.ref is not None
            self.by_ref[att.ref] = raw
            self.by_event.setdefault(event_id, []).append(att.ref)

    def get(self, attachment: Attachment) -> bytes:
        raw = self.by_ref.get(attachment.ref or "")
        if raw is None:
            raise FileNotFoundError("the upload is gone (the turn that had it ended, or the gateway restarted)")
        return raw

    def drop(self, event_id: str) -> None:
        for ref in self.by_event.pop(event_id, ()):
            self.by_ref.pop(ref, None)
