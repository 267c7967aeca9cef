"""Serve an aiohttp application on a free loopback port (port 0), for fakes and harnesses."""

from __future__ import annotations

from typing import Any

from aiohttp import web


async def serve_loopback(app: web.Application, **runner_options: Any) -> tuple[web.AppRunner, str]:
    """Start `app` on 127.0.0.1 with an OS-chosen port; returns the runner and "http://127.0.0.1:<port>"."""
    runner = web.AppRunner(app, access_log=None, **runner_options)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"
