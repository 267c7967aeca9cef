"""Channel registry: a platform is one package here plus one entry below. SDKs load lazily."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gateway.core.ports import Adapter, ChannelServices

if TYPE_CHECKING:
    from gateway.core.probe import Finding, Probe

_FACTORIES = {
    "web": "channels.web.adapter:create",
    "telegram": "channels.telegram.adapter:create",
    "discord": "channels.discord.adapter:create",
    "slack": "channels.slack.adapter:create",
    "teams": "channels.teams.adapter:create",
    "messenger": "channels.messenger.adapter:create",
}
# Read-only checks of a platform's credentials and reachability (`clawgate doctor`). The web channel
# has none: it asks no platform (the doctor checks its host and port itself).
_PROBES = {
    "telegram": "channels.telegram.probe:probe",
    "discord": "channels.discord.probe:probe",
    "slack": "channels.slack.probe:probe",
    "teams": "channels.teams.probe:probe",
    "messenger": "channels.messenger.probe:probe",
}
PROBED_TYPES = frozenset(_PROBES)  # the channel types whose probe asks a platform over the network


def _load(table: dict[str, str], name: str, kind: str, missing: str) -> Any:
    """The function registered for channel type `kind`, its module imported now (SDKs load here)."""
    target = table.get(kind)
    if target is None:
        raise ValueError(f"channel {name!r}: {missing} {kind!r}")
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def create(name: str, config: Any, services: ChannelServices) -> Adapter:
    factory = _load(_FACTORIES, name, config.type, "unsupported type")
    adapter: Adapter = factory(name, config, services)
    return adapter


async def probe(p: Probe, config: Any) -> Finding:
    """Ask the platform of channel `p.name` (config: its channel config), within `p.timeout`."""
    check = _load(_PROBES, p.name, config.type, "no probe for type")
    found: Finding = await check(p, config)
    return found
