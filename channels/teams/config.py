"""Microsoft Teams' channel config: the bot's Entra ID app registration, the messaging endpoint, and
the addresses of the services it trusts and calls (each one a test seam)."""

from __future__ import annotations

from typing import Literal

from pydantic import SecretStr, field_validator

from gateway.core.channel_config import ChatChannelConfig


class TeamsChannelConfig(ChatChannelConfig):
    type: Literal["teams"] = "teams"
    app_id: str  # the bot's Microsoft App ID (Entra ID application/client id)
    app_password: SecretStr  # its client secret
    # The Entra ID tenant of a single-tenant bot; None for a multi-tenant one.
    tenant_id: str | None = None
    endpoint_path: str = "/api/messages"  # where Azure Bot Service posts activities, on the shared server
    # Where the signing keys of incoming activities are announced (Bot Framework's OpenID metadata).
    openid_metadata_url: str = "https://login.botframework.com/v1/.well-known/openidconfiguration"
    # The token endpoint the bot's own credentials are exchanged at, for calls to the Bot Connector.
    token_url: str | None = None  # default: login.microsoftonline.com for tenant_id (or botframework.com)
    # Replies go to the serviceUrl each activity names; this only overrides it (a proxy, a test).
    api_base_url: str | None = None

    @field_validator("app_id")
    @classmethod
    def _app_id(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the bot's Microsoft App ID (a GUID, from its Azure Bot resource) is required")
        return value.strip()

    @field_validator("endpoint_path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.startswith("/") or any(c in value for c in "?#{} "):
            raise ValueError('must be a path on the web server, such as "/api/messages"')
        return value

    @field_validator("ack_reaction")
    @classmethod
    def _no_reactions(cls, value: bool | str) -> bool | str:
        if value is not False:
            raise ValueError("Teams has no API for a bot to react to a message: leave ack_reaction off")
        return value
