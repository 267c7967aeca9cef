"""Where a Slack file is (docs/media.md): files.info with the bot token names its private download
URL, fetched with the same token as a bearer header. The gateway downloads it from Slack's file host
(files.slack.com) or the configured API base's origin (a proxy, a test's fake), from nowhere else.
The app needs the `files:read` scope; without it Slack answers with its sign-in page, which the
gateway refuses as not the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from channels.slack.config import SlackChannelConfig
from gateway.core.events import Attachment

FILES = "https://files.slack.com"
_GONE = frozenset({"file_not_found", "file_deleted"})


def media_origins(config: SlackChannelConfig) -> frozenset[str]:
    base = urlsplit(config.api_base_url)
    return frozenset({FILES, f"{base.scheme}://{base.netloc}"})


async def locate(client: AsyncWebClient, token: str, attachment: Attachment) -> tuple[str, dict[str, str]]:
    if not attachment.ref:
        raise FileNotFoundError("the event named no file")
    try:
        response = await client.files_info(file=attachment.ref)
    except SlackApiError as exc:
        data = getattr(exc.response, "data", None)
        if isinstance(data, Mapping) and data.get("error") in _GONE:
            raise FileNotFoundError(str(data["error"])) from exc
        raise
    file: Any = response.get("file")
    url = file.get("url_private_download") or file.get("url_private") if isinstance(file, Mapping) else None
    if not isinstance(url, str) or not url:
        raise FileNotFoundError("files.info gave no download address")
    return url, {"Authorization": f"Bearer {token}"}
