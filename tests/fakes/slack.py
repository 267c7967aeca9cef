"""A local Slack for tests: Web API, Socket Mode websocket, and signed Events API requests.

- Web API at `{url}/api/<method>` (what `AsyncWebClient(base_url=fake.api_base)` calls), taking
  query, form or JSON arguments and the token from `Authorization: Bearer` as slack_sdk sends it:
  auth.test, apps.connections.open (single-use `ws://` URLs to /socket), chat.postMessage,
  chat.update, chat.postEphemeral (kept in `ephemeral`, apart from `posted`), reactions.add/remove
  (kept in `reactions`). Bad tokens get `invalid_auth`, unknown methods `unknown_method`.
- Socket Mode at /socket: `hello` on connect, envelopes pushed with an `envelope_id` whose ack
  (`{"envelope_id": ...}`) is journaled; the socket can be closed, aborted, or asked to refresh.
- Events API over HTTP: builders for Slack-shaped payloads and correctly signed request headers
  (v0 HMAC-SHA256 of `v0:<timestamp>:<body>`), plus bad-signature and stale variants.
- Failure injection for the next call of a method: 429 with Retry-After, a 5xx, an ok=false
  error code, or a hang until the fake stops.

Everything is journaled; tests wait on it with `wait_for` (an asyncio.Condition), never by sleeping.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import math
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from aiohttp import WSMsgType, web

BOT_TOKEN = "xoxb-0000000000-fake-bot-token"
APP_TOKEN = "xapp-1-A0FAKE-0000-fake-app-token"
SIGNING_SECRET = "fake-signing-secret-0123456789abcdef"


@dataclass(frozen=True)
class ApiCall:
    method: str
    args: dict[str, Any]
    token: str | None
    at: float = 0.0  # when it arrived, by the fake's `clock`


@dataclass(frozen=True)
class Posted:
    """A message the bot posted (chat.postMessage) or an edit of one (chat.update)."""

    channel: str
    thread_ts: str | None
    ts: str
    text: str
    edit: bool = False
    broadcast: bool = False  # reply_broadcast: a thread reply also shown in the channel


@dataclass(frozen=True)
class Ephemeral:
    """A message only `user` sees (chat.postEphemeral): never in `posted`, which everyone sees."""

    channel: str
    user: str
    thread_ts: str | None
    text: str


@dataclass(frozen=True)
class RateLimited:
    retry_after: float = 1.0


@dataclass(frozen=True)
class ServerError:
    status: int = 500


@dataclass(frozen=True)
class ApiError:
    """HTTP 200 with ok=false, as Slack answers most refusals."""

    error: str


@dataclass(frozen=True)
class Hang:
    """Never answer (until the fake stops): the client's timeout must fire."""


Behavior = RateLimited | ServerError | ApiError | Hang


@dataclass
class _Socket:
    ws: web.WebSocketResponse
    request: web.Request
    ticket: str


@dataclass
class FakeSlack:
    bot_token: str = BOT_TOKEN
    app_token: str = APP_TOKEN
    signing_secret: str = SIGNING_SECRET
    team_id: str = "T0FAKE"
    bot_user_id: str = "U0BOT"
    bot_id: str = "B0BOT"
    app_id: str = "A0FAKE"

    calls: list[ApiCall] = field(default_factory=list)
    posted: list[Posted] = field(default_factory=list)
    ephemeral: list[Ephemeral] = field(default_factory=list)
    acks: list[dict[str, Any]] = field(default_factory=list)
    hellos: int = 0
    url: str = ""
    # Stamps `ApiCall.at`; a test on a virtual clock sets its clock here too.
    clock: Callable[[], float] = time.monotonic
    # The bot's reactions: (channel, message ts) -> reaction names.
    reactions: dict[tuple[str, str], set[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Files people shared (files.info answers for them) and each download of one, by path.
        self.files: dict[str, dict[str, Any]] = {}
        self.file_fetches: list[tuple[str, str | None]] = []  # (path, the bearer token it came with)
        self.files_read = True  # False: the app lacks the files:read scope (downloads get the sign-in page)
        self._changed = asyncio.Condition()
        self._scripts: dict[str, deque[Behavior]] = {}
        self._sockets: list[_Socket] = []
        self._tickets: set[str] = set()
        self._messages: dict[tuple[str, str], str] = {}
        self._stop = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._seq = itertools.count(1)
        self._sock: socket.socket | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def api_base(self) -> str:
        return f"{self.url}/api/"

    def bind(self) -> str:
        """Reserve the loopback port now (port 0), so `url` is known before `start()`."""
        if self._sock is None:
            self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._sock.bind(("127.0.0.1", 0))
            self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        return self.url

    async def start(self) -> FakeSlack:
        self.bind()
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/socket", self._socket)
        app.router.add_get("/files-pri/{path:.+}", self._private_file)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        await web.SockSite(self._runner, self._sock).start()  # type: ignore[arg-type]
        return self

    async def stop(self) -> None:
        self._stop.set()
        socks, self._sockets = self._sockets, []
        for sock in socks:
            if sock.request.transport is not None:
                sock.request.transport.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # -- journal and waits ----------------------------------------------------------------------

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def wait_for(self, predicate: Callable[[FakeSlack], bool], timeout: float = 10) -> None:
        async with asyncio.timeout(timeout):
            async with self._changed:
                await self._changed.wait_for(lambda: predicate(self))

    def calls_to(self, method: str) -> list[ApiCall]:
        return [c for c in self.calls if c.method == method]

    async def wait_calls(self, method: str, n: int, timeout: float = 10) -> list[ApiCall]:
        await self.wait_for(lambda f: len(f.calls_to(method)) >= n, timeout)
        return self.calls_to(method)

    async def wait_posted(self, n: int, timeout: float = 10) -> list[Posted]:
        await self.wait_for(lambda f: len(f.posted) >= n, timeout)
        return list(self.posted)

    def fail_next(self, method: str, *behaviors: Behavior) -> None:
        self._scripts.setdefault(method, deque()).extend(behaviors)

    # -- Web API --------------------------------------------------------------------------------

    def next_ts(self) -> str:
        n = next(self._seq)
        return f"{1_700_000_000 + n}.{n:06d}"

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        args: dict[str, Any] = dict(request.query)
        if request.method == "POST" and request.can_read_body:
            if request.content_type == "application/json":
                body = await request.json()
                args.update(body if isinstance(body, dict) else {})
            else:
                args.update(await request.post())
        auth = request.headers.get("Authorization", "")
        token = auth[7:] if auth.startswith("Bearer ") else args.pop("token", None)
        self.calls.append(ApiCall(method, args, token, self.clock()))
        await self._notify()

        script = self._scripts.get(method)
        if script:
            failure = await self._fail(script.popleft())
            if failure is not None:
                return failure
        expected = self.app_token if method == "apps.connections.open" else self.bot_token
        if token is None:
            return web.json_response({"ok": False, "error": "not_authed"})
        if token != expected:
            return web.json_response({"ok": False, "error": "invalid_auth"})
        handler = {
            "auth.test": self._auth_test,
            "apps.connections.open": self._connections_open,
            "chat.postMessage": self._post_message,
            "chat.update": self._update,
            "chat.postEphemeral": self._post_ephemeral,
            "files.info": self._files_info,
            "reactions.add": self._reactions_add,
            "reactions.remove": self._reactions_remove,
        }.get(method)
        if handler is None:
            return web.json_response({"ok": False, "error": "unknown_method"})
        return web.json_response(await handler(args))

    async def _fail(self, behavior: Behavior) -> web.Response | None:
        if isinstance(behavior, RateLimited):
            return web.json_response(
                {"ok": False, "error": "ratelimited"},
                status=429,
                headers={"Retry-After": str(math.ceil(behavior.retry_after))},
            )
        if isinstance(behavior, ServerError):
            return web.Response(status=behavior.status, text="upstream failure", content_type="text/html")
        if isinstance(behavior, ApiError):
            return web.json_response({"ok": False, "error": behavior.error})
        await self._stop.wait()  # Hang
        return web.Response(status=503)

    async def _auth_test(self, _args: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": "https://fake.slack.com/",
            "team": "Fake Team",
            "user": "clawbot",
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }

    async def _connections_open(self, _args: dict[str, Any]) -> dict[str, Any]:
        ticket = uuid.uuid4().hex
        self._tickets.add(ticket)
        ws_url = self.url.replace("http://", "ws://", 1)
        return {"ok": True, "url": f"{ws_url}/socket?ticket={ticket}&app_id={self.app_id}"}

    async def _post_message(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, text = args.get("channel"), args.get("text")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        if not text:
            return {"ok": False, "error": "no_text"}
        ts = self.next_ts()
        thread_ts = args.get("thread_ts") or None
        self._messages[(channel, ts)] = text
        broadcast = args.get("reply_broadcast") in (True, "true", "1", 1)
        self.posted.append(Posted(channel, thread_ts, ts, text, broadcast=broadcast))
        await self._notify()
        message = {"type": "message", "text": text, "user": self.bot_user_id, "bot_id": self.bot_id, "ts": ts}
        if thread_ts:
            message["thread_ts"] = thread_ts
        return {"ok": True, "channel": channel, "ts": ts, "message": message}

    async def _post_ephemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, user, text = args.get("channel"), args.get("user"), args.get("text")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        if not user:
            return {"ok": False, "error": "user_not_found"}
        if not text:
            return {"ok": False, "error": "no_text"}
        self.ephemeral.append(Ephemeral(str(channel), str(user), args.get("thread_ts") or None, str(text)))
        await self._notify()
        return {"ok": True, "message_ts": self.next_ts()}

    async def _update(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, ts, text = str(args.get("channel")), str(args.get("ts")), str(args.get("text") or "")
        if (channel, ts) not in self._messages:
            return {"ok": False, "error": "message_not_found"}
        self._messages[(channel, ts)] = text
        thread = next((p.thread_ts for p in self.posted if p.channel == channel and p.ts == ts), None)
        self.posted.append(Posted(channel, thread, ts, text, edit=True))
        await self._notify()
        return {"ok": True, "channel": channel, "ts": ts, "text": text}

    async def _reactions_add(self, args: dict[str, Any]) -> dict[str, Any]:
        where, name = (str(args.get("channel")), str(args.get("timestamp"))), str(args.get("name") or "")
        if not name or ":" in name:
            return {"ok": False, "error": "invalid_name"}
        if name in self.reactions.get(where, set()):
            return {"ok": False, "error": "already_reacted"}
        self.reactions.setdefault(where, set()).add(name)
        await self._notify()
        return {"ok": True}

    async def _reactions_remove(self, args: dict[str, Any]) -> dict[str, Any]:
        where, name = (str(args.get("channel")), str(args.get("timestamp"))), str(args.get("name") or "")
        if name not in self.reactions.get(where, set()):
            return {"ok": False, "error": "no_reaction"}
        self.reactions[where].discard(name)
        await self._notify()
        return {"ok": True}

    # -- files ----------------------------------------------------------------------------------

    def file(
        self,
        content: bytes,
        name: str,
        mimetype: str | None = None,
        *,
        filetype: str | None = None,
        size: int | None = None,
        duration_ms: int | None = None,
        download_url: str | None = None,
    ) -> dict[str, Any]:
        """A file as a `file_share` message carries it; files.info answers for it and its private URL
        serves `content` to the bot token only (`download_url` makes files.info point elsewhere)."""
        file_id = f"F0{len(self.files) + 1:08d}"
        path = f"/files-pri/{self.team_id}-{file_id}/{name}"
        private = f"{self.url}{path}"
        info: dict[str, Any] = {
            "id": file_id,
            "created": int(time.time()),
            "name": name,
            "title": name,
            "mimetype": mimetype or "application/octet-stream",
            "filetype": filetype or name.rsplit(".", 1)[-1],
            "user": "U1001",
            "mode": "hosted",
            "is_external": False,
            "size": len(content) if size is None else size,
            "url_private": private,
            "url_private_download": download_url or f"{private}?download=1",
        }
        if duration_ms is not None:
            info["duration_ms"] = duration_ms
        self.files[file_id] = {**info, "_content": content, "_path": path}
        return info

    async def _files_info(self, args: dict[str, Any]) -> dict[str, Any]:
        found = self.files.get(str(args.get("file")))
        if found is None:
            return {"ok": False, "error": "file_not_found"}
        return {"ok": True, "file": {k: v for k, v in found.items() if not k.startswith("_")}}

    async def _private_file(self, request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        token = auth[7:] if auth.startswith("Bearer ") else None
        self.file_fetches.append((request.path, token))
        await self._notify()
        if token != self.bot_token or not self.files_read:
            # What Slack does for a private URL without the right token or scope: its sign-in page.
            page = "<!DOCTYPE html><html><body>Sign in to Slack</body></html>"
            return web.Response(text=page, content_type="text/html")
        found = next((f for f in self.files.values() if f["_path"] == request.path), None)
        if found is None:
            return web.Response(status=404)
        return web.Response(body=found["_content"], content_type=found["mimetype"])

    # -- Socket Mode ----------------------------------------------------------------------------

    @property
    def connected(self) -> int:
        return sum(1 for s in self._sockets if not s.ws.closed)

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            return web.Response(status=403, text="invalid or used ticket")
        self._tickets.discard(ticket)  # like Slack's URLs: one connection each
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        sock = _Socket(ws, request, ticket)
        self._sockets.append(sock)
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": self.connected,
                "debug_info": {"host": "applink-fake", "build_number": 1, "approximate_connection_time": 18060},
                "connection_info": {"app_id": self.app_id},
            }
        )
        self.hellos += 1
        await self._notify()
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                try:
                    data = json.loads(msg.data)
                except ValueError:
                    continue
                if isinstance(data, dict) and "envelope_id" in data:
                    self.acks.append(data)
                    await self._notify()
        finally:
            if sock in self._sockets:
                self._sockets.remove(sock)
            await self._notify()
        return ws

    def acked(self, envelope_id: str) -> dict[str, Any] | None:
        return next((a for a in self.acks if a.get("envelope_id") == envelope_id), None)

    async def wait_ack(self, envelope_id: str, timeout: float = 10) -> dict[str, Any]:
        await self.wait_for(lambda f: f.acked(envelope_id) is not None, timeout)
        ack = self.acked(envelope_id)
        assert ack is not None
        return ack

    async def push(
        self,
        kind: str,
        payload: dict[str, Any],
        *,
        retry_attempt: int = 0,
        wait_ack: bool = True,
        timeout: float = 10,
    ) -> str:
        """Send an envelope on the newest live socket (waiting for one), and by default its ack."""
        await self.wait_for(lambda f: f.connected > 0, timeout)
        sock = next(s for s in reversed(self._sockets) if not s.ws.closed)
        envelope_id = str(uuid.uuid4())
        envelope: dict[str, Any] = {
            "envelope_id": envelope_id,
            "payload": payload,
            "type": kind,
            "accepts_response_payload": kind != "events_api",
        }
        if kind == "events_api":
            envelope["retry_attempt"] = retry_attempt
            envelope["retry_reason"] = "timeout" if retry_attempt else ""
        await sock.ws.send_json(envelope)
        if wait_ack:
            await self.wait_ack(envelope_id, timeout)
        return envelope_id

    async def push_event(self, event: dict[str, Any], *, event_id: str | None = None, retry_attempt: int = 0) -> str:
        """Deliver an Events API event over Socket Mode and wait for its ack; returns the event_id."""
        body = self.event_body(event, event_id)
        await self.push("events_api", body, retry_attempt=retry_attempt)
        return str(body["event_id"])

    async def push_command(self, command: str, text: str = "", **kwargs: Any) -> dict[str, Any]:
        payload = self.command_payload(command, text, **kwargs)
        await self.push("slash_commands", payload)
        return payload

    async def drop_socket(self, *, hard: bool = False) -> None:
        """Close every live socket: with a close frame, or (hard) by cutting the TCP connection."""
        socks, self._sockets = self._sockets, []
        for sock in socks:
            if hard:
                if sock.request.transport is not None:
                    sock.request.transport.close()
            else:
                await sock.ws.close(code=1001, message=b"going away")
        await self._notify()

    async def refresh_socket(self) -> None:
        """Slack's periodic `disconnect` (refresh_requested): the client must open a new connection."""
        for sock in list(self._sockets):
            await sock.ws.send_json(
                {"type": "disconnect", "reason": "refresh_requested", "debug_info": {"host": "applink-fake"}}
            )

    # -- payload builders (shaped like Slack's JSON) ---------------------------------------------

    def event_body(self, event: dict[str, Any], event_id: str | None = None) -> dict[str, Any]:
        return {
            "token": "legacy-verification-token",
            "team_id": self.team_id,
            "context_team_id": self.team_id,
            "context_enterprise_id": None,
            "api_app_id": self.app_id,
            "event": event,
            "type": "event_callback",
            "event_id": event_id or f"Ev{uuid.uuid4().hex[:10].upper()}",
            "event_time": int(time.time()),
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": self.team_id,
                    "user_id": self.bot_user_id,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
            "event_context": f"4-{uuid.uuid4().hex}",
        }

    def message(
        self,
        channel: str,
        text: str,
        *,
        user: str = "U1001",
        ts: str | None = None,
        thread_ts: str | None = None,
        parent_user_id: str | None = None,
        files: list[dict[str, Any]] | None = None,
        from_bot: bool = False,
    ) -> dict[str, Any]:
        """A `message` event as Slack sends it (a bot's own post when `from_bot`)."""
        ts = ts or self.next_ts()
        kind = {"D": "im", "G": "group"}.get(channel[:1], "channel")
        event: dict[str, Any] = {
            "type": "message",
            "text": text,
            "ts": ts,
            "team": self.team_id,
            "channel": channel,
            "event_ts": ts,
            "channel_type": kind,
        }
        if from_bot:
            event |= {
                "user": self.bot_user_id,
                "bot_id": self.bot_id,
                "app_id": self.app_id,
                "bot_profile": {"id": self.bot_id, "app_id": self.app_id, "name": "clawbot", "deleted": False},
            }
        else:
            event |= {
                "user": user,
                "client_msg_id": str(uuid.uuid4()),
                "blocks": [
                    {
                        "type": "rich_text",
                        "block_id": uuid.uuid4().hex[:5],
                        "elements": [{"type": "rich_text_section", "elements": [{"type": "text", "text": text}]}],
                    }
                ],
            }
        if thread_ts:
            event["thread_ts"] = thread_ts
            event["parent_user_id"] = parent_user_id or user
        if files:
            event["subtype"] = "file_share"
            event["files"] = files
            event["upload"] = False
        return event

    def edited(self, original: dict[str, Any], new_text: str) -> dict[str, Any]:
        """The `message_changed` event Slack sends when `original` is edited."""
        edit_ts = self.next_ts()
        message = {k: v for k, v in original.items() if k not in ("channel", "event_ts", "channel_type", "subtype")} | {
            "text": new_text,
            "edited": {"user": original.get("user"), "ts": edit_ts},
        }
        return {
            "type": "message",
            "subtype": "message_changed",
            "message": message,
            "previous_message": {k: v for k, v in original.items() if k not in ("channel", "event_ts", "channel_type")},
            "channel": original["channel"],
            "hidden": True,
            "ts": edit_ts,
            "event_ts": edit_ts,
            "channel_type": original.get("channel_type", "channel"),
        }

    def app_mention(self, message: dict[str, Any]) -> dict[str, Any]:
        """The `app_mention` event Slack sends alongside a channel message that mentions the bot."""
        keys = ("user", "text", "ts", "team", "channel", "event_ts", "client_msg_id", "blocks", "thread_ts")
        return {"type": "app_mention"} | {k: message[k] for k in keys if k in message}

    def edited_mention(self, edit: dict[str, Any]) -> dict[str, Any]:
        """The `app_mention` Slack sends again when a message that mentions the bot is edited
        (`edit` is the `message_changed` event): the original ts, the new text, an `edited` record."""
        changed = edit["message"] | {"channel": edit["channel"], "event_ts": edit["event_ts"]}
        return self.app_mention(changed) | {"edited": changed["edited"]}

    def command_payload(
        self,
        command: str,
        text: str = "",
        *,
        user: str = "U1001",
        user_name: str = "alice",
        channel_id: str = "D0DM1001",
        channel_name: str = "directmessage",
    ) -> dict[str, Any]:
        return {
            "token": "legacy-verification-token",
            "team_id": self.team_id,
            "team_domain": "fake",
            "channel_id": channel_id,
            "channel_name": channel_name,
            "user_id": user,
            "user_name": user_name,
            "command": command,
            "text": text,
            "api_app_id": self.app_id,
            "is_enterprise_install": "false",
            "response_url": f"https://hooks.slack.com/commands/{self.team_id}/1/{uuid.uuid4().hex}",
            "trigger_id": f"{next(self._seq)}.1.{uuid.uuid4().hex}",
        }

    # -- signed Events API requests ------------------------------------------------------------

    def signed_headers(
        self,
        body: bytes,
        *,
        secret: str | None = None,
        timestamp: int | None = None,
        retry_num: int | None = None,
        content_type: str = "application/json",
    ) -> dict[str, str]:
        """Headers Slack sends with an Events API request (v0 signature over `v0:<ts>:<body>`)."""
        ts = str(int(time.time()) if timestamp is None else timestamp)
        key = (self.signing_secret if secret is None else secret).encode()
        digest = hmac.new(key, b"v0:" + ts.encode() + b":" + body, hashlib.sha256).hexdigest()
        headers = {
            "Content-Type": content_type,
            "X-Slack-Request-Timestamp": ts,
            "X-Slack-Signature": f"v0={digest}",
            "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)",
        }
        if retry_num is not None:
            headers["X-Slack-Retry-Num"] = str(retry_num)
            headers["X-Slack-Retry-Reason"] = "http_timeout"
        return headers

    def signed_request(
        self,
        payload: dict[str, Any] | str,
        *,
        variant: str = "ok",
        retry_num: int | None = None,
        form: bool = False,
    ) -> tuple[bytes, dict[str, str]]:
        """A body and headers to POST to /slack/events. variant: ok | bad_signature | stale.

        Events come as JSON; slash commands (`form=True`) as a form, the way Slack sends each.
        """
        if isinstance(payload, str):
            body = payload.encode()
        elif form:
            body = urlencode(payload).encode()
        else:
            body = json.dumps(payload).encode()
        kw: dict[str, Any] = {
            "retry_num": retry_num,
            "content_type": "application/x-www-form-urlencoded" if form else "application/json",
        }
        if variant == "bad_signature":
            return body, self.signed_headers(body, secret="not-the-signing-secret", **kw)
        if variant == "stale":
            return body, self.signed_headers(body, timestamp=int(time.time()) - 6 * 60, **kw)
        return body, self.signed_headers(body, **kw)
