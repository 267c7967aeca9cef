"""Does Slack accept the app's tokens: auth.test with the bot token, and in Socket Mode
apps.connections.open with the app-level token (the websocket URL it returns is never opened),
asked through slack_sdk at `api_base_url`. Read only, like every probe; the SDK loads only when
the probe runs. Errors are told apart by Slack's error code and the HTTP status, never by text."""

from __future__ import annotations

import asyncio
from typing import Any

from channels.slack.config import SlackChannelConfig
from gateway.core.probe import Finding, Probe, needs_web_server, timed_out, unreachable

# Slack answers these (HTTP 200, ok=false) for a token it does not take.
_REFUSED = frozenset(
    {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired", "not_allowed_token_type"}
)


def _slack_error(exc: Any) -> tuple[int | None, str | None]:
    response = exc.response
    data = getattr(response, "data", None)
    return getattr(response, "status_code", None), data.get("error") if isinstance(data, dict) else None


async def probe(p: Probe, cfg: SlackChannelConfig) -> Finding:
    import aiohttp
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_client import AsyncWebClient

    if cfg.mode == "http" and (missing := needs_web_server(p, "Events API requests")) is not None:
        return missing
    base = cfg.api_base_url
    data: dict[str, Any] = {"api_base_url": base, "mode": cfg.mode}
    options: dict[str, Any] = {"base_url": base, "timeout": p.timeout, "retry_handlers": []}
    step, token_key = "auth.test", "bot_token"
    try:
        async with asyncio.timeout(p.timeout):
            auth = await AsyncWebClient(token=cfg.bot_token.get_secret_value(), **options).auth_test()
            if cfg.mode == "socket" and cfg.app_token is not None:
                step, token_key = "apps.connections.open", "app_token"
                app_token = cfg.app_token.get_secret_value()
                await AsyncWebClient(**options).apps_connections_open(app_token=app_token)
    except SlackApiError as exc:
        status, code = _slack_error(exc)
        data |= {"step": step, "error": code, "status": status}
        if code in _REFUSED:
            which = "app-level token (xapp-...)" if token_key == "app_token" else "bot token (xoxb-...)"
            where = "Basic Information > App-Level Tokens" if token_key == "app_token" else "OAuth & Permissions"
            return Finding(
                "fail",
                f"Slack refused the {which}: {step} said {code}",
                f"copy it from the app's page ({where}) on api.slack.com into {p.setting(token_key)}",
                data | {"reason": "token_refused"},
            )
        if status == 429 or code == "ratelimited":
            return Finding("warn", f"Slack is rate limiting {step} (429)", "wait a minute and run doctor again", data)
        return Finding(
            "fail",
            f"{step} failed: HTTP {status}, {code or 'no error code'}",
            f"check {p.setting('api_base_url')} (it ends in /api/) and the app's settings",
            data,
        )
    except TimeoutError:
        return timed_out(p, base)
    except (aiohttp.ClientError, OSError) as exc:
        return unreachable(p, base, exc)
    team, bot = auth.get("team"), auth.get("user")
    data |= {"team": team, "team_id": auth.get("team_id"), "bot_user_id": auth.get("user_id")}
    who = f"team {team} ({auth.get('team_id')}), bot @{bot} ({auth.get('user_id')})"
    if cfg.mode == "socket":
        return Finding("ok", f"{who}; socket mode: the app token opens connections", data=data)
    return Finding("ok", f"{who}; http mode: signing secret set, events at POST /slack/events", data=data)
