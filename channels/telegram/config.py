"""Telegram's channel config: the bot token, polling or a webhook, the Bot API's address."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, SecretStr

from gateway.core.channel_config import ChatChannelConfig


class TelegramChannelConfig(ChatChannelConfig):
    type: Literal["telegram"] = "telegram"
    token: SecretStr
    mode: Literal["polling", "webhook"] = "polling"
    api_base_url: str = "https://api.telegram.org"
    # Webhook mode: the public URL Telegram should call (ends in /telegram/<channel name>) and the
    # secret it must send in X-Telegram-Bot-Api-Secret-Token.
    webhook_url: str | None = None
    webhook_secret: Annotated[SecretStr, Field(min_length=16)] | None = None
    parse_mode: Literal["HTML", "MarkdownV2"] = "HTML"
    poll_timeout: Annotated[float, Field(ge=0, le=60)] = 30
