"""Does Telegram accept the bot's token, and where does it deliver updates: getMe, and in webhook
mode getWebhookInfo, asked through python-telegram-bot at `api_base_url` (read only, like every
probe). The SDK loads only when the probe runs; `webhook_state` is pure."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any
from urllib.parse import urlsplit

from channels.telegram.config import TelegramChannelConfig
from gateway.core.probe import Finding, FindingStatus, Probe, needs_web_server, short, timed_out, unreachable


def webhook_state(
    name: str, expected: str | None, actual: str, pending: int, last_error: str | None
) -> tuple[FindingStatus, str, str | None]:
    """(status, what to say, hint) about Telegram's webhook as getWebhookInfo reports it."""
    queued = f"{pending:,} update(s) waiting"
    if not actual:
        if expected:
            return (
                "warn",
                f"no webhook is set, {queued}",
                f"start the gateway: it registers {expected} (Telegram delivers nothing until then)",
            )
        return (
            "warn",
            f"no webhook is set and channels.{name}.webhook_url is empty, {queued}",
            f"set channels.{name}.webhook_url to the public URL ending in /telegram/{name}",
        )
    if expected and actual != expected:
        return (
            "warn",
            f"Telegram delivers to {actual}, not to channels.{name}.webhook_url {expected}, {queued}",
            "another deployment of this bot set it, or the URL changed: starting the gateway sets it again",
        )
    if last_error:
        return (
            "warn",
            f"webhook {actual}, {queued}; Telegram's last delivery failed: {last_error}",
            f"check that {actual} is reachable from the internet with a valid certificate",
        )
    return "ok", f"webhook {actual}, {queued}", None


async def probe(p: Probe, cfg: TelegramChannelConfig) -> Finding:
    from telegram import Bot
    from telegram.error import InvalidToken, NetworkError, RetryAfter, TelegramError, TimedOut
    from telegram.request import HTTPXRequest

    token = cfg.token.get_secret_value().strip()
    if not token:
        return Finding("fail", "no token", f"set {p.setting('token')} to the token @BotFather gave the bot")
    base = cfg.api_base_url.rstrip("/")
    if cfg.mode == "webhook" and (missing := needs_web_server(p, "webhook updates")) is not None:
        return missing
    statuses: list[int] = []

    class Recorded(HTTPXRequest):
        """Keeps each answer's HTTP status: PTB raises InvalidToken for both 401 and 404."""

        async def do_request(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
            code, payload = await super().do_request(*args, **kwargs)
            statuses.append(code)
            return code, payload

    t = p.timeout
    request = Recorded(connection_pool_size=1, connect_timeout=t, read_timeout=t, write_timeout=t, pool_timeout=t)
    bot = Bot(token, base_url=f"{base}/bot", base_file_url=f"{base}/file/bot", request=request)
    data: dict[str, Any] = {"api_base_url": base, "mode": cfg.mode}
    try:
        async with asyncio.timeout(t):
            await bot.initialize()  # getMe
            me = bot.bot
            info = await bot.get_webhook_info() if cfg.mode == "webhook" else None
    except InvalidToken:
        code = statuses[-1] if statuses else None
        if code == 404:
            return Finding(
                "fail",
                "Telegram answered 404 to getMe: the token is malformed, or the URL is not a Bot API server",
                f"copy the token from @BotFather (it looks like 123456789:AA...) into {p.setting('token')}; "
                f"check {p.setting('api_base_url')}",
                data | {"reason": "token_refused", "status": code},
            )
        return Finding(
            "fail",
            f"Telegram refused the token ({code or 401})",
            f"create a new token with @BotFather (/token) and set {p.setting('token')}",
            data | {"reason": "token_refused", "status": code or 401},
        )
    except RetryAfter:
        return Finding(
            "warn",
            "Telegram is rate limiting this bot (429)",
            "wait, and check that no other process polls with the same token",
            data | {"reason": "rate_limited"},
        )
    except (TimedOut, TimeoutError):
        return timed_out(p, base)
    except NetworkError as exc:
        if statuses and statuses[-1] >= 500:
            return Finding(
                "fail",
                f"{base} answered {statuses[-1]}: {short(exc)}",
                f"the Bot API server has trouble: try again later, or check the one at {p.setting('api_base_url')}",
                data | {"reason": "server", "status": statuses[-1]},
            )
        return unreachable(p, base, exc.__cause__ or exc)
    except TelegramError as exc:
        return Finding("fail", f"getMe failed: {short(exc)}", "see the message; check the bot's token", data)
    finally:
        with contextlib.suppress(Exception):
            await bot.shutdown()
    who = f"@{me.username} ({me.first_name}, id {me.id})"
    data |= {"bot": me.username, "bot_id": me.id}
    if info is None:
        return Finding("ok", f"{who}, polling", data=data)
    last_error = None
    if info.last_error_message:
        when = f" (at {info.last_error_date:%Y-%m-%d %H:%M} UTC)" if info.last_error_date else ""
        last_error = f"{info.last_error_message}{when}"
    status, said, hint = webhook_state(p.name, cfg.webhook_url, info.url or "", info.pending_update_count, last_error)
    data |= {
        "webhook_url": info.url or None,
        "pending_updates": info.pending_update_count,
        "last_error": info.last_error_message,
    }
    if status == "ok" and cfg.webhook_url and not urlsplit(cfg.webhook_url).path.endswith(f"/telegram/{p.name}"):
        status, hint = (
            "warn",
            f"the gateway listens at /telegram/{p.name}: end channels.{p.name}.webhook_url with it "
            "(unless a proxy rewrites the path)",
        )
    return Finding(status, f"{who}, {said}", hint, data)
