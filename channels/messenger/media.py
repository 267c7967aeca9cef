"""Where a Messenger attachment is (docs/media.md): the URL its webhook event carries, on Facebook's
CDN (signed by Meta, so the download needs no credentials: the Page token is never sent with it).

The gateway downloads only from the origins in `origins` (gateway/media/fetch.py). Those are the
configured API base's own origin (a proxy, a test's fake) and the hosts of Facebook's CDN, which
are many (scontent-<place>.xx.fbcdn.net, cdn.fbsbx.com...): an attachment's host is admitted when
it is, over https, a subdomain of one of `media_hosts`, at the moment the attachment is located.
"""

from __future__ import annotations

from collections import OrderedDict
from urllib.parse import urlsplit

from channels.messenger.config import MessengerChannelConfig
from gateway.core.events import Attachment

_REMEMBERED = 256  # CDN origins admitted so far; a small set, capped all the same


def on_cdn(url: str, domains: list[str]) -> str | None:
    """The origin of `url` when it is an https URL on a host under one of `domains`, else None."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port or 443
    except ValueError:
        return None
    host = (parts.hostname or "").lower()
    if parts.scheme.lower() != "https" or not host or parts.username or parts.password:
        return None
    if any(host == d or host.endswith("." + d) for d in domains):
        return f"https://{host}:{port}"
    return None


class MediaHosts:
    def __init__(self, config: MessengerChannelConfig) -> None:
        base = urlsplit(config.api_base_url)
        self._base = frozenset({f"{base.scheme}://{base.netloc}"})
        self._domains = list(config.media_hosts)
        self._cdn: OrderedDict[str, None] = OrderedDict()

    @property
    def origins(self) -> frozenset[str]:
        return self._base | frozenset(self._cdn)

    def locate(self, attachment: Attachment) -> tuple[str, dict[str, str]]:
        """The attachment's URL, no headers. A URL off Facebook's hosts is returned as it is and the
        gateway refuses it before requesting anything (its origin is not in `origins`)."""
        url = attachment.ref
        if not url:
            raise FileNotFoundError("the event named no file")
        origin = on_cdn(url, self._domains)
        if origin is not None:
            self._cdn[origin] = None
            self._cdn.move_to_end(origin)
            while len(self._cdn) > _REMEMBERED:
                self._cdn.popitem(last=False)
        return url, {}
