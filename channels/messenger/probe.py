"""Does Meta accept the Page access token: `GET /{graph_version}/me` at `api_base_url`, the token in the
Authorization header (read only, like every probe). The answer names the Page; the token is never
shown. Errors are told apart by Meta's error code and the HTTP status, never by text."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from channels.messenger.config import MessengerChannelConfig
from channels.messenger.errors import BAD_TOKEN, PERMISSION, GraphError
from channels.messenger.graph import GraphClient
from gateway.core.probe import Finding, Probe, needs_web_server, short, timed_out, unreachable


async def probe(p: Probe, cfg: MessengerChannelConfig) -> Finding:
    if (missing := needs_web_server(p, "Messenger's webhook calls")) is not None:
        return missing
    token = cfg.page_access_token.get_secret_value().strip()
    if not token:
        return Finding(
            "fail",
            "no Page access token",
            f"set {p.setting('page_access_token')} to the token of the Page (Meta app > Messenger > settings)",
        )
    base = f"{cfg.api_base_url}/{cfg.graph_version}"
    data: dict[str, Any] = {"api_base_url": cfg.api_base_url, "graph_version": cfg.graph_version}
    try:
        async with asyncio.timeout(p.timeout), GraphClient(cfg.api_base_url, cfg.graph_version, token, p.timeout) as g:
            me = await g.me()
    except GraphError as exc:
        data |= {"status": exc.status, "error": exc.code, "error_subcode": exc.subcode}
        if exc.code == BAD_TOKEN or exc.status == 401:
            return Finding(
                "fail",
                f"Meta refused the Page access token (error {exc.code}: {exc.message[:160]})",
                f"generate a new Page access token (Meta app > Messenger > Access tokens) and set "
                f"{p.setting('page_access_token')}",
                data | {"reason": "token_refused"},
            )
        if exc.rate_limited:
            return Finding("warn", f"Meta is rate limiting this app (error {exc.code})", "wait, then try again", data)
        if exc.code in PERMISSION:
            return Finding(
                "fail",
                f"the token lacks a permission (error {exc.code})",
                "the Page token needs pages_messaging: add it to the app and generate the token again",
                data | {"reason": "permission"},
            )
        if exc.status >= 500:
            return Finding(
                "fail",
                f"{base} answered {exc.status}",
                f"Meta has trouble: try again later, or check {p.setting('api_base_url')}",
                data | {"reason": "server"},
            )
        return Finding(
            "fail",
            f"GET /me failed: {short(exc)}",
            f"check {p.setting('graph_version')} and {p.setting('api_base_url')}",
            data,
        )
    except TimeoutError:
        return timed_out(p, base)
    except (aiohttp.ClientError, OSError) as exc:
        return unreachable(p, base, exc)
    page, name = me.get("id"), me.get("name")
    data |= {"page_id": page, "page": name}
    return Finding(
        "ok",
        f"Page {name} (id {page}); webhook at {cfg.webhook_path}: subscribe the Page to messages and "
        "messaging_postbacks",
        data=data,
    )
