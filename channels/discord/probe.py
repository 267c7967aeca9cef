"""Does Discord accept the bot's token, and can its gateway be reached: GET /users/@me and GET
/gateway/bot at `api_base_url`, then one TCP connection to the gateway (`gateway_url` when set).
Read only, like every probe; no session is started (an IDENTIFY would spend one of the bot's daily
session starts). The requests go through plain aiohttp, not discord.py."""

from __future__ import annotations

import asyncio
import contextlib
import errno
from typing import Any
from urllib.parse import urlsplit

from channels.discord.config import DiscordChannelConfig
from gateway.core.probe import Finding, FindingStatus, Probe, short, timed_out, unreachable


def shard_advice(recommended: int, configured: int | None) -> tuple[FindingStatus, str, str | None]:
    """(status, what to say, hint) about the shard count Discord recommends for this bot."""
    count = configured or 1
    said = f"{recommended} shard(s) recommended, {count} configured"
    if count >= recommended:
        return "ok", said, None
    return (
        "warn",
        said,
        f"set shard_count: {recommended} (several instances: split shard_ids between them); "
        "Discord refuses a bot in too many servers per shard",
    )


async def _tcp_reachable(url: str, timeout: float) -> None:
    """Open and close one TCP connection to a ws(s):// URL's host; OSError or TimeoutError if not."""
    parts = urlsplit(url)
    if not parts.hostname:
        raise OSError(errno.EINVAL, f"not a URL: {url!r}")
    port = parts.port or (443 if parts.scheme in ("wss", "https") else 80)
    async with asyncio.timeout(timeout):
        _reader, writer = await asyncio.open_connection(parts.hostname, port)
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()


async def probe(p: Probe, cfg: DiscordChannelConfig) -> Finding:
    import aiohttp

    token = cfg.token.get_secret_value().strip()
    if not token:
        return Finding("fail", "no token", f"set {p.setting('token')} to the bot's token (Developer Portal, Bot page)")
    api = cfg.api_base_url.rstrip("/")
    data: dict[str, Any] = {"api_base_url": api}
    me: dict[str, Any] = {}
    gw: dict[str, Any] = {}
    gw_status = 0
    headers = {"Authorization": f"Bot {token}", "User-Agent": "DiscordBot (clawgate doctor)"}
    try:
        async with (
            asyncio.timeout(p.timeout),
            aiohttp.ClientSession(headers=headers, timeout=aiohttp.ClientTimeout(total=p.timeout)) as http,
        ):
            async with http.get(f"{api}/users/@me") as resp:
                me_status, me = resp.status, await resp.json(content_type=None) if resp.status == 200 else {}
            if me_status == 200:
                async with http.get(f"{api}/gateway/bot") as resp:
                    gw_status, gw = resp.status, await resp.json(content_type=None) if resp.status == 200 else {}
    except TimeoutError:
        return timed_out(p, api)
    except (aiohttp.ClientError, OSError) as exc:
        return unreachable(p, api, exc)
    except ValueError as exc:  # a 200 whose body is not JSON: not a Discord API
        return Finding(
            "fail", f"{api} answered, but not as Discord: {short(exc)}", f"check {p.setting('api_base_url')}", data
        )
    if me_status == 401:
        return Finding(
            "fail",
            "Discord refused the token (401)",
            f"reset the token on the Bot page of the Discord Developer Portal and set {p.setting('token')}",
            data | {"reason": "token_refused", "status": 401},
        )
    if me_status == 429:
        return Finding("warn", "Discord is rate limiting this bot (429)", "wait a minute and run doctor again", data)
    if me_status != 200:
        return Finding(
            "fail",
            f"GET {api}/users/@me answered {me_status}",
            f"check {p.setting('api_base_url')} (it ends in /api/v10)",
            data | {"status": me_status},
        )
    who = f"{me.get('username')} (id {me.get('id')})"
    data |= {"bot": me.get("username"), "bot_id": me.get("id")}
    if gw_status != 200:
        return Finding(
            "fail",
            f"{who}; GET {api}/gateway/bot answered {gw_status}",
            "the token works but the gateway information did not come: try again later",
            data | {"status": gw_status},
        )
    gateway = cfg.gateway_url or str(gw.get("url") or "")
    recommended = int(gw.get("shards") or 1)
    limit = gw.get("session_start_limit") or {}
    data |= {"gateway_url": gateway, "shards_recommended": recommended, "shard_count": cfg.shard_count}
    data |= {"session_starts_remaining": limit.get("remaining")}
    try:
        await _tcp_reachable(gateway, p.timeout)
    except (OSError, TimeoutError) as exc:
        setting = p.setting("gateway_url") if cfg.gateway_url else "the network"
        why = f"no answer within {p.timeout:g} s" if isinstance(exc, TimeoutError) else short(exc)
        return Finding(
            "fail",
            f"{who}; the gateway {gateway} cannot be reached: {why}",
            f"check {setting} and any firewall or proxy (Discord's gateway is a websocket)",
            data | {"reason": "gateway_unreachable"},
        )
    status, said, hint = shard_advice(recommended, cfg.shard_count)
    detail = f"{who}; gateway {gateway} reachable; {said}"
    if limit.get("remaining") == 0:
        minutes = round(float(limit.get("reset_after") or 0) / 60_000)
        status, hint = "warn", f"Discord allows new sessions again in about {minutes} min: restarts fail until then"
        detail += "; no session starts left"
    elif "remaining" in limit and "total" in limit:
        detail += f"; {limit['remaining']:,}/{limit['total']:,} session starts left today"
    return Finding(status, detail, hint, data)
