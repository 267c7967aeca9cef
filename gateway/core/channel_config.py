"""What every channel's config model shares: the strict base (unknown keys are errors, values are
frozen) and a chat platform's access policy, audience and limits (DESIGN §3). Each platform's own
model lives in its package (`channels/<platform>/config.py`); gateway.config gathers them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


DmPolicy = Literal["open", "allowlist", "pairing", "disabled"]
GroupPolicy = Literal["open", "allowlist", "disabled"]
Audience = Literal["personal", "team", "public"]


class ChatChannelConfig(Strict):
    """What every chat platform shares: access policy, audience, limits."""

    enabled: bool = True
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
    # Attachments larger than this are refused with a message.
    max_attachment_bytes: Annotated[int, Field(ge=0)] = 20 * 1024 * 1024
    # Inbound text larger than this (characters) is refused with a message.
    max_message_chars: Annotated[int, Field(ge=1)] = 32_000
    # Timeout of one platform API request (a send that times out is never retried: it may have arrived).
    request_timeout: Annotated[float, Field(gt=0, le=300)] = 30
