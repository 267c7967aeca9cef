"""The web console: pages under /console and their JSON API under /api/v1, on the
gateway's own web server. `mount` builds both from a started gateway's parts."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from gateway.config.model import Config
from gateway.recall.engine import TurnRecall
from gateway.session.memory_service import MemoryService
from gateway.turn.context import CoreFiles
from gateway.web.auth import TokenAuth
from gateway.web.console.api import ConsoleApi
from gateway.web.console.auth import ConsoleAuth
from gateway.web.console.once import OnceLink, link_user
from gateway.web.console.pages import ConsolePages
from gateway.web.console.service import ConsoleService
from memory.store.storage import Storage
from memory.store.traces import TraceStore


def mount(
    app: web.Application,
    config: Config,
    storage: Storage,
    tokens: TokenAuth,
    memory: MemoryService,
    core: CoreFiles,
    recall: TurnRecall | None,
    traces: TraceStore,
    status: Callable[[], Awaitable[dict[str, Any]]],
    secrets: list[str],
    once: OnceLink | None = None,
) -> ConsoleService:
    """The console's pages and API on `app`; `status`: what the overview shows of the gateway;
    `once`: the one-time sign-in link, while no user has a token."""
    service = ConsoleService(config, storage, memory, core, recall, traces, status, secrets)
    public = [ch.public_url for ch in config.web_channels().values() if ch.public_url]
    auth = ConsoleAuth(
        tokens, storage.console_sessions, storage.identities, public, once, lambda: link_user(service.config)
    )
    ConsoleApi(service, auth).mount(app)
    ConsolePages(service, auth).mount(app)
    return service
