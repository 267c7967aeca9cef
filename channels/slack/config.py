"""Slack's channel config: the tokens, Socket Mode or the HTTP Events API, the Web API's address."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator

from channels.slack.reactions import reaction_name
from gateway.core.channel_config import ChatChannelConfig, ReplyMode


class SlackChannelConfig(ChatChannelConfig):
    type: Literal["slack"] = "slack"
    bot_token: SecretStr = Field(description="The bot token (xoxb-...), from the app's OAuth & Permissions page.")
    app_token: SecretStr | None = None  # Socket Mode (xapp-...)
    signing_secret: SecretStr | None = None  # HTTP Events API
    mode: Literal["socket", "http"] = Field(
        default="socket", description="socket: Socket Mode, no public address; http: the Events API at /slack/events."
    )
    api_base_url: str = Field(default="https://slack.com/api/", description="The Web API's root.")
    reply_mode: ReplyMode = "thread"  # Slack people answer in threads

    @field_validator("ack_reaction")
    @classmethod
    def _slack_reaction(cls, value: bool | str) -> bool | str:
        if isinstance(value, str) and reaction_name(value) is None:
            raise ValueError('Slack reactions are named: give the name, such as "eyes", or a common emoji such as 👀')
        return value
