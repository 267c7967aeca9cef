"""What every channel's config model shares: the strict base (unknown keys are errors, values are
frozen) and a chat platform's access policy, audience and limits (DESIGN §3). Each platform's own
model lives in its package (`channels/<platform>/config.py`); gateway.config gathers them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


DmPolicy = Literal["open", "allowlist", "pairing", "disabled"]
GroupPolicy = Literal["open", "allowlist", "disabled"]
Audience = Literal["personal", "team", "public"]
ReplyMode = Literal["thread", "quote", "plain"]


MegaBytes = Annotated[float, Field(gt=0, le=2000)]


class MediaSizes(Strict):
    """The largest file taken, in megabytes (10^6 bytes), per kind (docs/media.md)."""

    image: MegaBytes = 10  # pictures
    document: MegaBytes = 20  # text-like files and PDFs
    audio: MegaBytes = 25  # voice notes and audio files: 25 MB is what Whisper takes

    @model_validator(mode="before")
    @classmethod
    def _one_for_all(cls, data: object) -> object:
        # `max_mb: 15` sets every kind at once.
        if isinstance(data, int | float) and not isinstance(data, bool):
            return {"image": data, "document": data, "audio": data}
        return data


class MediaConfig(Strict):
    """Pictures, files and voice people send (docs/media.md): what is read, and up to what size."""

    # false: attachments are refused with a message saying this channel takes text only.
    enabled: bool = True
    # The largest file per kind, in MB; one number sets every kind.
    max_mb: MediaSizes = Field(default_factory=MediaSizes)
    # Longer voice notes and audio files are refused before they are downloaded when the platform
    # says how long they are, else once the file shows it.
    max_audio_seconds: Annotated[int, Field(ge=1, le=4 * 3600)] = 600
    # How much of the text of the files of one message reaches the model (characters, all files together).
    max_file_chars: Annotated[int, Field(ge=200, le=500_000)] = 20_000
    # A PDF's pages past this many are not read (the model is told so).
    max_pdf_pages: Annotated[int, Field(ge=1, le=5_000)] = 50
    # Reading one PDF may take this long; past it the reader is stopped and the person told.
    pdf_seconds: Annotated[float, Field(gt=0, le=300)] = 15
    # Pictures are scaled down to at most this many pixels on their longest side before the model sees them.
    max_image_side: Annotated[int, Field(ge=64, le=8192)] = 2048
    # One download may take this long in all.
    download_seconds: Annotated[float, Field(gt=0, le=600)] = 60


def _one_reaction(value: object) -> object:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and len(value.split()) == 1 and len(value) <= 64:
        return value.strip()
    raise ValueError('must be true, false, or one emoji such as "👀" (no spaces)')


AckReaction = Annotated[bool | str, BeforeValidator(_one_reaction)]


class ChatChannelConfig(Strict):
    """What every chat platform shares: access policy, audience, limits."""

    enabled: bool = True  # false: the channel is not started
    # DMs: open (anyone), allowlist (only allow_from), pairing (unknown senders get a code an admin
    # approves), disabled.
    dm_policy: DmPolicy = "pairing"
    # Groups: open, allowlist (only conversations or senders in allow_from), disabled.
    group_policy: GroupPolicy = "open"
    # In groups, answer only when mentioned (a reply to the bot counts as a mention).
    require_mention: bool = True
    # Identities ("telegram:123"), user ids ("alice") or conversations ("chat:-100123").
    allow_from: list[str] = Field(default_factory=list)
    # Audience per conversation id; DMs default to personal, groups to team.
    audience: dict[str, Audience] = Field(default_factory=dict)
    # The older, single size cap: when set, no attachment over this many bytes, whatever media.max_mb says.
    max_attachment_bytes: Annotated[int, Field(ge=0)] | None = None
    # Inbound text larger than this (characters) is refused with a message.
    max_message_chars: Annotated[int, Field(ge=1)] = 32_000
    # Timeout of one platform API request (a send that times out is never retried: it may have arrived).
    request_timeout: Annotated[float, Field(gt=0, le=300)] = 30
    # Groups: how many recent messages not addressed to the assistant are kept per conversation (thread,
    # topic) and shown to it, attributed, when someone addresses it there. 0: none are kept.
    group_history: Annotated[int, Field(ge=0, le=200)] = 30
    # Groups: how an answer points at the message it answers. thread: in the thread of that message
    # (Slack; elsewhere the same as quote), quote: as a reply quoting it, plain: a message of its own.
    reply_mode: ReplyMode = "quote"
    # Messages one person sends in one conversation less than this many milliseconds apart are
    # answered as one turn. 0: every message is a turn of its own.
    debounce_ms: Annotated[int, Field(ge=0, le=10_000)] = 0
    # Pictures, files and voice (docs/media.md).
    media: MediaConfig = Field(default_factory=MediaConfig)
    # A reaction on the message being answered while the answer is written, removed when it is done:
    # false (none), true (👀), or an emoji the platform takes (docs/channels.md, "Delivery").
    ack_reaction: AckReaction = False
