"""Discord's channel config: the bot token, the REST and gateway addresses, shards."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, SecretStr

from gateway.core.channel_config import ChatChannelConfig


class DiscordChannelConfig(ChatChannelConfig):
    type: Literal["discord"] = "discord"
    token: SecretStr = Field(description="The bot's token, from the developer portal's Bot page.")
    api_base_url: str = Field(
        default="https://discord.com/api/v10",
        description="The REST API's root (one per process: discord.py keeps it globally).",
    )
    gateway_url: str | None = None  # default: what the REST API's /gateway/bot returns
    shard_ids: list[int] | None = Field(
        default=None,
        description="The shards this process runs (with shard_count), to split a large bot across processes.",
    )
    shard_count: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="How many shards the bot has in all."
    )
