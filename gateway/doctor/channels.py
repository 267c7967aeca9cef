"""The doctor's channel checks: for each configured channel, does its platform accept the
credentials, and can it be reached, asked the way the adapter asks (the same SDK and the configured
`api_base_url` / Discord `gateway_url`) within a short timeout.

Every check only reads. The platforms are asked by their own packages' probes
(`channels/<platform>/probe.py`, through `channels.probe`): a platform SDK is imported only there.
The web channel asks no platform; it is checked here: can its host and port be bound, or is a
gateway already serving them (GET /healthz), and can anybody sign in.

A check returns a `Finding`; the doctor names it and removes every configured secret from it.
"""

from __future__ import annotations

import asyncio
import errno
import socket

import channels
from channels.messenger.config import MessengerChannelConfig
from channels.slack.config import SlackChannelConfig
from channels.teams.config import TeamsChannelConfig
from channels.telegram.config import TelegramChannelConfig
from channels.web.config import WebChannelConfig
from gateway.config.model import AnyChannelConfig
from gateway.core.probe import ConfigView, Finding, FindingStatus, Probe, short

NETWORK_TYPES = channels.PROBED_TYPES  # probes that ask a platform


async def _bind_error(host: str, port: int) -> OSError | None:
    """Why (host, port) cannot be listened on, or None: bound and released at once, each address
    the host resolves to, as the gateway's server binds them (SO_REUSEADDR)."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        return exc
    for family, kind, proto, _name, address in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
                sock.listen(1)
            except OSError as exc:
                return exc
    return None


async def _served_by_gateway(host: str, port: int, timeout: float) -> str | None:
    """None when a clawgate answers GET /healthz there, else what answered instead."""
    import aiohttp

    target = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    shown = f"[{target}]" if ":" in target else target
    try:
        async with (
            asyncio.timeout(timeout),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as http,
            http.get(f"http://{shown}:{port}/healthz") as resp,
        ):
            body = await resp.json(content_type=None) if resp.status == 200 else None
    except TimeoutError:
        return f"no HTTP answer within {timeout:g} s"
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        return short(exc)
    if isinstance(body, dict) and body.get("status") == "ok":
        return None
    return f"GET /healthz answered {resp.status}, not a gateway's {{'status': 'ok'}}"


def web_access(config: ConfigView, cfg: WebChannelConfig) -> tuple[bool, str]:
    """(whether anyone can sign in, who can) for the web channel."""
    holders = sum(1 for user in config.users.values() if user.tokens)
    parts = [f"{holders} user(s) with tokens"]
    local = cfg.is_loopback and cfg.allow_local_anonymous
    if local:
        parts.append(f"visitors on this machine chat as {cfg.local_user!r}")
    return bool(holders or local), ", ".join(parts)


async def _listening(p: Probe, cfg: WebChannelConfig) -> tuple[str, FindingStatus, str, str | None]:
    """(state, status, what to say, hint) about the web channel's host and port."""
    where = f"{cfg.host}:{cfg.port}"
    if cfg.port == 0:
        return "any_port", "ok", f"{cfg.host}, port 0: a free port is picked at each start", None
    failure = await _bind_error(cfg.host, cfg.port)
    if failure is None:
        return "free", "ok", f"{where} is free for the gateway", None
    elsewhere = f"set {p.setting('host')} to an address of this machine (0.0.0.0 for all of them)"
    if isinstance(failure, socket.gaierror):
        return "bad_host", "fail", f"{cfg.host} does not resolve ({failure.strerror})", elsewhere
    if failure.errno == errno.EADDRNOTAVAIL:
        return "bad_host", "fail", f"{cfg.host} is not an address of this machine", elsewhere
    if failure.errno == errno.EACCES:
        hint = "ports below 1024 need privileges: use 8080 behind a reverse proxy, or grant CAP_NET_BIND_SERVICE"
        return "denied", "fail", f"not allowed to listen on {where}", hint
    if failure.errno != errno.EADDRINUSE:
        return "error", "fail", f"cannot listen on {where}: {short(failure)}", f"check {p.setting('port')}"
    other = await _served_by_gateway(cfg.host, cfg.port, p.timeout)
    if other is None:
        return "gateway", "ok", f"{where} is served by a running gateway (/healthz ok)", None
    hint = f"stop that program, or set {p.setting('port')} to a free port"
    return "in_use", "fail", f"{where} is taken by another program ({other})", hint


def unpublished(p: Probe, cfg: WebChannelConfig) -> str | None:
    """A hint when people or platforms reach this web channel at an address it does not know: it
    answers only loopback names, its own address and public_url's host (DNS rebinding)."""
    if cfg.public_url:
        return None
    if not cfg.is_loopback:
        return (
            f"bound beyond loopback without {p.setting('public_url')}: set it to the https:// address people "
            "open, or a TLS proxy in front cannot sign in to the console and requests for that name are refused (421)"
        )
    called = [name for name, c in p.config.channels.items() if getattr(c, "enabled", True) and _called_back(c)]
    if called and not cfg.allowed_hosts:
        return (
            f"{', '.join(called)}: the platform calls the gateway at its public address: set "
            f"{p.setting('public_url')} to it (or list its host in {p.setting('allowed_hosts')}), or the gateway "
            "refuses those calls (421)"
        )
    return None


def _called_back(cfg: AnyChannelConfig) -> bool:
    """Whether the platform delivers this channel's events by calling the gateway's web server."""
    if isinstance(cfg, SlackChannelConfig):
        return cfg.mode == "http"
    if isinstance(cfg, TelegramChannelConfig):
        return cfg.mode == "webhook"
    return isinstance(cfg, TeamsChannelConfig | MessengerChannelConfig)


async def probe_web(p: Probe, cfg: WebChannelConfig) -> Finding:
    state, status, place, hint = await _listening(p, cfg)
    anyone, who = web_access(p.config, cfg)
    if status == "ok" and not anyone:
        status = "warn"
        hint = f"nobody can sign in: give a user tokens (users.<id>.tokens) or set {p.setting('allow_local_anonymous')}"
    elif status == "ok" and (missing := unpublished(p, cfg)) is not None:
        status, hint = "warn", missing
    return Finding(status, f"{place}; {who}", hint, {"host": cfg.host, "port": cfg.port, "state": state})


async def probe_channel(p: Probe, cfg: AnyChannelConfig) -> Finding:
    if not cfg.enabled:
        return Finding("info", f"disabled (channels.{p.name}.enabled: false): not checked")
    if isinstance(cfg, WebChannelConfig):
        return await probe_web(p, cfg)
    return await channels.probe(p, cfg)
