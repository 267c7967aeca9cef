"""Discord's channel config: the bot token, the REST and gateway addresses, shards."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, SecretStr

from gateway.core.channel_config import ChatChannelConfig


class DiscordChannelConfig(ChatChannelConfig):
    type: Literal["discord"] = "discord"
    token: SecretStr
    api_base_url: str = "https://discord.com/api/v10"
    gateway_url: str | None = None  # default: what the REST API's /gateway/bot returns
    shard_ids: list[int] | None = None
    shard_count: Annotated[int, Field(ge=1)] | None = None
