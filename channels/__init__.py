"""Channel registry: a platform is one package here plus one entry below. SDKs load lazily."""

from __future__ import annotations

import importlib
from typing import Any

from gateway.ports import Adapter, ChannelServices

_FACTORIES = {
    "web": "channels.web.adapter:create",
    "telegram": "channels.telegram.adapter:create",
    "discord": "channels.discord.adapter:create",
    "slack": "channels.slack.adapter:create",
}


def create(name: str, config: Any, services: ChannelServices) -> Adapter:
    target = _FACTORIES.get(config.type)
    if target is None:
        raise ValueError(f"channel {name!r}: unsupported type {config.type!r}")
    module, _, attr = target.partition(":")
    factory = getattr(importlib.import_module(module), attr)
    adapter: Adapter = factory(name, config, services)
    return adapter
