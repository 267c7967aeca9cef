"""Telegram's channel config: the bot token, polling or a webhook, the Bot API's address."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator

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

    @field_validator("ack_reaction")
    @classmethod
    def _telegram_reaction(cls, value: bool | str) -> bool | str:
        if isinstance(value, str):
            from telegram.constants import ReactionEmoji  # PTB is loaded only when a reaction is named

            if value not in {e.value for e in ReactionEmoji}:
                raise ValueError(
                    "a Telegram bot can react only with Telegram's standard reactions, such as 👀 👍 🔥 🤔"
                )
        return value
