"""Where a Telegram attachment is (docs/media.md): getFile through python-telegram-bot with the
bot's token, which names the file's path under the Bot API's file URL
(`<api_base_url>/file/bot<token>/<path>`, PTB builds it). The gateway then downloads that URL, from
the configured Bot API's origin only. The URL carries the token: it is never logged.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from telegram import Bot
from telegram.error import BadRequest

from channels.telegram.config import TelegramChannelConfig
from gateway.core.events import Attachment

CLOUD_API = "api.telegram.org"
# Telegram's own Bot API hands a bot files of at most 20 MB (getFile refuses larger ones); a
# self-hosted Bot API server has no such limit.
CLOUD_DOWNLOAD_LIMIT = 20 * 1024 * 1024


def media_origins(config: TelegramChannelConfig) -> frozenset[str]:
    """The Bot API's own address: getFile's URLs are under it, whether Telegram's or self-hosted."""
    return frozenset({config.api_base_url.rstrip("/")})


def download_limit(config: TelegramChannelConfig) -> int | None:
    return CLOUD_DOWNLOAD_LIMIT if urlsplit(config.api_base_url).hostname == CLOUD_API else None


async def locate(bot: Bot, attachment: Attachment) -> tuple[str, dict[str, str]]:
    """The download URL of `attachment` (its file_id asked of getFile): no headers, the token is in it."""
    if not attachment.ref:
        raise FileNotFoundError("the update named no file")
    try:
        file = await bot.get_file(attachment.ref)
    except BadRequest as exc:  # an unknown or expired file_id (or, past the size check, a refused one)
        raise FileNotFoundError(exc.message) from exc
    if not file.file_path or not file.file_path.startswith(("http://", "https://")):
        raise FileNotFoundError("getFile gave no file to download")
    return file.file_path, {}
