"""Slack's channel config: the tokens, Socket Mode or the HTTP Events API, the Web API's address."""

from __future__ import annotations

from typing import Literal

from pydantic import SecretStr

from gateway.core.channel_config import ChatChannelConfig


class SlackChannelConfig(ChatChannelConfig):
    type: Literal["slack"] = "slack"
    bot_token: SecretStr
    app_token: SecretStr | None = None  # Socket Mode (xapp-...)
    signing_secret: SecretStr | None = None  # HTTP Events API
    mode: Literal["socket", "http"] = "socket"
    api_base_url: str = "https://slack.com/api/"
