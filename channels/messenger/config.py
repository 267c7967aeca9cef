"""Facebook Messenger's channel config: the Page's token, the app secret that signs webhook calls, the
verify token of the webhook's subscription, and the Graph API's address."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator

from gateway.core.channel_config import ChatChannelConfig

# The tags Meta allows on a message sent outside the 24-hour window (docs/messenger.md). HUMAN_AGENT
# needs Meta's Human Agent permission and reaches people for 7 days after they last wrote.
MessageTag = Literal["ACCOUNT_UPDATE", "CONFIRMED_EVENT_UPDATE", "POST_PURCHASE_UPDATE", "HUMAN_AGENT"]
# Facebook's file hosts: attachment URLs in webhook events point at subdomains of these.
FACEBOOK_CDN = ("fbcdn.net", "fbsbx.com")
_DOMAIN = re.compile(r"^(?=.{1,253}$)(?!-)[a-z0-9-]{1,63}(?:\.[a-z0-9-]{1,63})+$")
_VERSION = re.compile(r"^v\d{1,3}\.\d{1,2}$")


class MessengerChannelConfig(ChatChannelConfig):
    type: Literal["messenger"] = "messenger"
    page_access_token: SecretStr = Field(description="The connected Page's access token.")
    app_secret: SecretStr  # X-Hub-Signature-256 of every webhook call is checked with it
    verify_token: Annotated[SecretStr, Field(min_length=8)]  # echoed back when the subscription is verified
    webhook_path: str = Field(
        default="/messenger/webhook", description="Where Meta posts webhook calls, on the shared web server."
    )
    api_base_url: str = "https://graph.facebook.com"  # requests go to {api_base_url}/{graph_version}/...
    graph_version: str = Field(default="v21.0", description="The Graph API version requests use.")
    # Sent with a reply that falls outside the 24-hour window; None: such a reply is not sent (logged).
    message_tag: MessageTag | None = None
    # Attachments are downloaded only from hosts under these domains (https), or from api_base_url's
    # own origin; any other URL in an event is never fetched.
    media_hosts: list[str] = Field(default_factory=lambda: list(FACEBOOK_CDN))

    @field_validator("webhook_path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.startswith("/") or "?" in value or "#" in value or " " in value:
            raise ValueError("must be a path on the gateway's web server, starting with /, such as /messenger/webhook")
        return value

    @field_validator("graph_version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not _VERSION.match(value):
            raise ValueError("must be a Graph API version such as v21.0")
        return value

    @field_validator("api_base_url")
    @classmethod
    def _base(cls, value: str) -> str:
        if not value.startswith(("https://", "http://")):
            raise ValueError("must be an http(s) URL, such as https://graph.facebook.com")
        return value.rstrip("/")

    @field_validator("media_hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        hosts = [v.strip().lower().lstrip(".") for v in value]
        bad = [h for h in hosts if not _DOMAIN.match(h)]
        if bad:
            raise ValueError(f"must be domain names such as fbcdn.net (no scheme, no path): {', '.join(bad)}")
        return hosts
