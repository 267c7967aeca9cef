"""Does Entra ID accept the bot's app id and secret: one client-credentials grant at `token_url`, as
the adapter asks before each reply (read only, like every probe: the token is not used). The app id
is shown masked and the secret never; Entra ID's answer is told apart by its error code."""

from __future__ import annotations

import asyncio
from typing import Any

from channels.teams.config import TeamsChannelConfig
from gateway.core.probe import Finding, Probe, needs_web_server, short

# Entra ID's errors for an app id or secret it does not take (AADSTS7000215: wrong secret,
# AADSTS7000222: expired secret, AADSTS700016: no such app in that tenant).
_REFUSED = frozenset({"invalid_client", "unauthorized_client", "invalid_request"})


async def probe(p: Probe, cfg: TeamsChannelConfig) -> Finding:
    import aiohttp

    from channels.teams.adapter import masked
    from channels.teams.errors import TokenError
    from channels.teams.token import BotToken, default_token_url

    if (missing := needs_web_server(p, "Teams activities")) is not None:
        return missing
    url = cfg.token_url or default_token_url(cfg.tenant_id)
    app = masked(cfg.app_id)
    data: dict[str, Any] = {"app_id": app, "token_url": url, "endpoint_path": cfg.endpoint_path}
    timeout = aiohttp.ClientTimeout(total=p.timeout)
    timed_out = Finding(
        "fail",
        f"no answer from {url} within {p.timeout:g} s",
        f"check {p.setting('token_url')}, the network and any proxy (clawgate doctor --timeout SECONDS waits longer)",
        data | {"reason": "timeout"},
    )
    try:
        async with aiohttp.ClientSession(timeout=timeout) as http, asyncio.timeout(p.timeout):
            await BotToken(url, cfg.app_id, cfg.app_password.get_secret_value(), lambda: http).token()
    except TimeoutError:
        return timed_out
    except TokenError as exc:
        if exc.code == "timeout":
            return timed_out
        data |= {"status": exc.status, "error": exc.code}
        said = str(exc).replace(cfg.app_id, app)  # Entra ID echoes the app id it did not find
        if exc.code == "invalid_client":
            return Finding(
                "fail",
                f"Entra ID refused the secret of app {app}: {said}",
                f"put a current client secret of the app (its Value, not its Secret ID, from the app registration's "
                f"Certificates & secrets) into {p.setting('app_password')}",
                data | {"reason": "credentials_refused"},
            )
        if exc.code in _REFUSED:
            where = f"the tenant {cfg.tenant_id}" if cfg.tenant_id else "a tenant (multi-tenant bots)"
            return Finding(
                "fail",
                f"Entra ID refused app {app}: {said}",
                f"copy the Azure Bot's Microsoft App ID into {p.setting('app_id')}; the app must be registered in "
                f"{where}, and a single-tenant bot needs its tenant in {p.setting('tenant_id')}",
                data | {"reason": "credentials_refused"},
            )
        if exc.status is None:
            return Finding(
                "fail",
                f"cannot reach {url}: {exc}",
                f"check {p.setting('token_url')}, the network and any proxy",
                data | {"reason": "connection"},
            )
        return Finding(
            "fail",
            f"{url}: {said}",
            f"check {p.setting('token_url')} and {p.setting('tenant_id')}",
            data | {"reason": "token_endpoint"},
        )
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        return Finding("fail", f"cannot ask {url}: {short(exc)}", f"check {p.setting('token_url')}", data)
    return Finding(
        "ok",
        f"app {app}: Entra ID issued a Bot Connector token; activities arrive at POST {cfg.endpoint_path}",
        data=data,
    )
