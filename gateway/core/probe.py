"""What a read-only check of a channel or a model reports (`Finding`), what a channel's probe is
handed (`Probe`), and the findings every probe words alike. `clawgate doctor` asks the probes in
`channels/<platform>/probe.py` through `channels.probe`; each names the settings an operator fixes.

At run time nothing is imported here but the standard library: channels and the doctor both depend on this
module, never on each other's internals. No text shown is left to hold a secret: exception messages
are shortened with Telegram's token-bearing URL path masked (python-telegram-bot puts the token in
every URL and in InvalidToken's message), and the doctor then replaces every configured secret."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

FindingStatus = Literal["ok", "info", "warn", "fail"]
_TELEGRAM_URL_TOKEN = re.compile(r"/bot[^/\s]+/")
_SHOWN_CHARS = 160


@dataclass(frozen=True, slots=True)
class Finding:
    status: FindingStatus
    detail: str
    hint: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)


class ConfigView(Protocol):
    """What a probe may read of the gateway's whole config (gateway.config.model.Config is one)."""

    @property
    def channels(self) -> Mapping[str, Any]: ...

    @property
    def users(self) -> Mapping[str, Any]: ...

    def web_channels(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Probe:
    """What a channel's probe needs besides the channel's own config."""

    name: str  # the channel's key under `channels:`
    config: ConfigView
    timeout: float  # the whole probe, in seconds
    variables: Mapping[str, str] = field(default_factory=dict)  # config path -> its ${VARIABLE}

    def setting(self, key: str) -> str:
        """How an operator changes channels.<name>.<key>, for a hint: the key, and the
        environment variable it is read from when it is."""
        path = f"channels.{self.name}.{key}"
        var = self.variables.get(path)
        return f"{path} (from ${var})" if var else path

    @property
    def web_served(self) -> bool:
        """Whether the shared web server runs: it does only for an enabled web channel."""
        return bool(self.config.web_channels())


def short(exc: BaseException) -> str:
    """An exception as `Type: message`, shortened, Telegram URL paths masked."""
    text = " ".join(str(exc).split())
    text = _TELEGRAM_URL_TOKEN.sub("/bot***/", text)
    if len(text) > _SHOWN_CHARS:
        text = text[: _SHOWN_CHARS - 1] + "…"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def mask_userinfo(url: str) -> str:
    """Any URL with the password of its user info replaced by ***."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


def timed_out(p: Probe, url: str) -> Finding:
    return Finding(
        "fail",
        f"no answer from {url} within {p.timeout:g} s",
        f"check {p.setting('api_base_url')}, the network and any proxy "
        "(clawgate doctor --timeout SECONDS waits longer)",
        {"reason": "timeout"},
    )


def unreachable(p: Probe, url: str, why: BaseException) -> Finding:
    return Finding(
        "fail",
        f"cannot reach {url}: {short(why)}",
        f"check {p.setting('api_base_url')}, the network and any proxy",
        {"reason": "connection"},
    )


def needs_web_server(p: Probe, what: str) -> Finding | None:
    """A failure when `what` (webhook updates, HTTP events) would arrive through a web server that
    does not run; None when it runs."""
    if p.web_served:
        return None
    return Finding(
        "fail",
        f"{what} arrive through the web server, and no web channel is enabled to run it",
        "add an enabled web channel (its host and port are where the platform's requests must reach)",
        {"reason": "no_web_server"},
    )
