"""Telegram's channel config: the bot token, polling or a webhook, the Bot API's address."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator

from gateway.core.channel_config import ChatChannelConfig


class TelegramChannelConfig(ChatChannelConfig):
    type: Literal["telegram"] = "telegram"
    token: SecretStr = Field(description="The bot's token, from @BotFather.")
    mode: Literal["polling", "webhook"] = Field(
        default="polling", description="polling: no public address needed; webhook: Telegram calls webhook_url (HTTPS)."
    )
    api_base_url: str = Field(
        default="https://api.telegram.org", description="The Bot API's root (a self-hosted Bot API server, a proxy)."
    )
    # Webhook mode: the public URL Telegram should call (ends in /telegram/<channel name>) and the
    # secret it must send in X-Telegram-Bot-Api-Secret-Token.
    webhook_url: str | None = Field(
        default=None,
        description="Webhook mode: the public HTTPS URL Telegram calls, ending in /telegram/<channel name>.",
    )
    webhook_secret: Annotated[SecretStr, Field(min_length=16)] | None = Field(
        default=None,
        description="Webhook mode: the secret (16+ characters) Telegram sends with every call; required there.",
    )
    parse_mode: Literal["HTML", "MarkdownV2"] = Field(
        default="HTML", description="How replies are formatted for Telegram."
    )
    poll_timeout: Annotated[float, Field(ge=0, le=60)] = Field(
        default=30, description="Polling: seconds one getUpdates long poll waits for news."
    )

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
