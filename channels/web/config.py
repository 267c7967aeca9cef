"""The web channel's config: where the shared server listens, who chats without a token, the
address it is published at, the hosts it answers, and who may read its metrics."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator

from gateway.core.channel_config import MediaConfig, Strict


class MetricsConfig(Strict):
    """Who may read /metrics: this machine always; with `token`, anyone sending it as a bearer
    token (a Prometheus elsewhere); with `public: true`, anyone at all."""

    token: Annotated[SecretStr, Field(min_length=16)] | None = Field(
        default=None, description="A bearer token (16+ characters) that may read /metrics from elsewhere."
    )
    public: bool = Field(default=False, description="true: anyone may read /metrics.")


class WebChannelConfig(Strict):
    type: Literal["web"] = "web"
    enabled: bool = Field(
        default=True, description="false: no web server (then no chat page, console, APIs or webhooks)."
    )
    host: str = Field(
        default="127.0.0.1",
        description="Bind address of the shared web server; beyond loopback a user token is required.",
    )
    port: Annotated[int, Field(ge=0, le=65535)] = Field(default=8080, description="Port of the shared web server.")
    # On a loopback bind, a visitor without a token chats as `local_user`.
    allow_local_anonymous: bool = True
    local_user: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")] = Field(
        default="local", description="The user such a local visitor is."
    )
    # Inbound message size limit in bytes (UTF-8). Larger bodies get 413.
    max_message_bytes: Annotated[int, Field(ge=1, le=16 * 1024 * 1024)] = 64 * 1024
    # The address people open when a TLS proxy or load balancer sits in front, e.g.
    # https://chat.example.com: the console then accepts that origin and marks its cookie Secure.
    public_url: str | None = None
    # More names this server is reached by (an internal DNS name, a second domain). Loopback names,
    # the bind address, public_url's host and Telegram's webhook_url host are known already: a
    # request for any other Host is refused (421), which keeps DNS-rebinding pages out.
    allowed_hosts: list[Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9.-]+$")]] = Field(
        default_factory=list
    )
    metrics: MetricsConfig = Field(default_factory=MetricsConfig, description="Who may read /metrics.")
    # Pictures and files sent with a message (docs/media.md); a message's uploads together are at
    # most the largest of media.max_mb.
    media: MediaConfig = Field(default_factory=MediaConfig)

    @field_validator("public_url")
    @classmethod
    def _an_origin(cls, value: str | None) -> str | None:
        if value is None or not value.strip():  # unset, or an empty ${VARIABLE:-}
            return None
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{value!r} must be an http(s) address, e.g. https://chat.example.com")
        if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
            raise ValueError(f"{value!r} must be only a scheme and a host (and port): the gateway serves from /")
        return f"{parts.scheme}://{parts.netloc.lower()}"

    @property
    def is_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False
