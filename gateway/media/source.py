"""What a channel offers so that the attachments of its messages can be read (docs/media.md).

Structural: a channel implements it without importing it (channels import only gateway.core).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from gateway.core.events import Attachment

# The bytes themselves (a web upload, already in memory), or a URL and the request headers that
# carry the bot's credentials for it.
Located = bytes | tuple[str, Mapping[str, str]]


@runtime_checkable
class MediaSource(Protocol):
    # The origins ("https://cdn.discordapp.com") downloads may come from: the platform's own hosts and
    # the channel's configured API base. A URL anywhere else is refused before it is requested.
    media_origins: frozenset[str]

    async def locate_media(self, attachment: Attachment) -> Located:
        """Where `attachment` is. Raises FileNotFoundError when the platform no longer has it; any
        other exception means the platform's API failed."""
        ...
