"""The web console: pages under /console and their JSON API under /api/v1, on the
gateway's own web server. `mount` builds both from a started gateway's parts."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aiohttp import web

from gateway.jobs.consolidation import CONSOLIDATE_JOB
from gateway.session.memory_service import MemoryService
from gateway.turn.engine import model_chain
from gateway.web.console.api import ConsoleApi
from gateway.web.console.auth import ConsoleAuth
from gateway.web.console.pages import ConsolePages
from gateway.web.console.service import ConsoleService
from memory.store.jobs import DONE

if TYPE_CHECKING:
    from gateway.app import Gateway
    from gateway.turn.context import CoreFiles


def mount(
    app: web.Application, gateway: Gateway, memory: MemoryService, core: CoreFiles, secrets: list[str]
) -> ConsoleService:
    storage = gateway.storage
    assert storage is not None and gateway.traces is not None

    async def status() -> dict[str, Any]:
        return await gateway_status(gateway)

    service = ConsoleService(
        gateway.config, storage, memory, core, gateway.recall, gateway.traces.store, status, secrets
    )
    public = [ch.public_url for ch in gateway.config.web_channels().values() if ch.public_url]
    auth = ConsoleAuth(gateway.auth, storage.console_sessions, storage.identities, public)
    ConsoleApi(service, auth).mount(app)
    ConsolePages(service, auth).mount(app)
    return service


async def gateway_status(gateway: Gateway) -> dict[str, Any]:
    """Channels, models, embeddings, the job queue and the last consolidation, as the status page
    shows them. Model reachability is what the latest call to each model found (no call is made)."""
    storage = gateway.storage
    assert storage is not None
    channels = {}
    for name, adapter in gateway.adapters.items():
        health = adapter.health()
        channels[name] = {"ok": health.ok, "detail": health.detail}
    models = []
    seen: set[str] = set()
    for agent in gateway.config.agents.list:
        chain = model_chain(gateway.config, agent)
        missing = await gateway.llm.missing_credentials(chain) if gateway.llm.loaded else {}
        for spec in chain:
            if spec.model in seen:
                continue
            seen.add(spec.model)
            last = gateway.metrics.last_llm_call.get(spec.model)
            models.append(
                {
                    "model": spec.model,
                    "agent": agent.name,
                    "last_outcome": last[0] if last else None,
                    "last_call_at": _iso(last[1]) if last else None,
                    "missing_credentials": missing.get(spec.model, []),
                }
            )
    embeddings: dict[str, Any] = {"enabled": False}
    recall = gateway.recall
    if recall is not None and recall.embedder is not None:
        model_id = recall.embedder.model_id
        coverage = await recall.vectors.coverage(model_id)
        embeddings = {
            "enabled": True,
            "model": model_id,
            "loaded": recall.index is not None,
            "coverage": {kind: {"embedded": done, "total": total} for kind, (done, total) in coverage.items()},
        }
    consolidated = await storage.jobs.list(DONE, CONSOLIDATE_JOB, 1)
    return {
        "uptime_seconds": round(time.time() - gateway.started_at),
        "channels": channels,
        "models": models,
        "embeddings": embeddings,
        "jobs": await storage.jobs.counts(),
        "flushes": await storage.flushes.counts(),
        "last_consolidation": consolidated[0].finished_at.isoformat()
        if consolidated and consolidated[0].finished_at
        else None,
        # config.yaml as running: the last reload, its problems' paths, what waits for a restart
        "config": gateway.reloader.status() if gateway.reloader is not None else None,
    }


def _iso(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).isoformat()
