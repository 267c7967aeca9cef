"""Where a Discord attachment is (docs/media.md): the CDN URL the message itself carries (signed by
Discord, so the download needs no credentials). The gateway downloads it from Discord's file hosts,
or from the configured API base's origin (a proxy, a test's fake), and from nowhere else.
"""

from __future__ import annotations

from channels.discord.config import DiscordChannelConfig
from gateway.core.events import Attachment

CDN = ("https://cdn.discordapp.com", "https://media.discordapp.net")


def media_origins(config: DiscordChannelConfig) -> frozenset[str]:
    return frozenset({*CDN, config.api_base_url})


async def locate(attachment: Attachment) -> tuple[str, dict[str, str]]:
    if not attachment.ref:
        raise FileNotFoundError("the message named no file")
    return attachment.ref, {}
