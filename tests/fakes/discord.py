"""A local Discord for tests: REST under /api/v10 and the gateway websocket, for the real discord.py.

REST: GET /users/@me, GET /oauth2/applications/@me (discord.py's login asks for it), GET /gateway,
GET /gateway/bot, GET /channels/{id}, POST /channels/{id}/messages, PATCH
/channels/{id}/messages/{mid}, PUT/DELETE /channels/{id}/messages/{mid}/reactions/{emoji}/@me (the
bot's own reactions, kept in `reactions`), POST /channels/{id}/typing, PUT /applications/{id}/commands (bulk
overwrite of the global commands, kept in `commands`), POST /interactions/{id}/{token}/callback
(no Authorization, like Discord; one answer per interaction, kept in `acks`; `with_response`
answers with the callback object, otherwise 204), POST /webhooks/{app}/{token} (an interaction's
follow-up, after its answer; kept in `followups`).
Gateway (JSON text frames; discord.py asks for zlib/zstd-stream in the query string but reads
text frames as plain JSON): HELLO, IDENTIFY -> READY + GUILD_CREATE (one guild, one text channel,
one thread), HEARTBEAT -> HEARTBEAT_ACK, RESUME -> replay of the missed events + RESUMED, sequence
numbers on every dispatch. One gateway session at a time (one shard).

Tests inject MESSAGE_CREATE / MESSAGE_UPDATE / INTERACTION_CREATE, make the next REST call fail (429 with Discord's
headers and body, 500, 403, 404, or a hang past the client's timeout), drop the websocket, and
hold new connections. Everything is journaled; `wait_for` waits on the journal without sleeping.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from aiohttp import WSMsgType, web

from tests.fakes.serve import serve_loopback

TOKEN = "fake-discord-bot-token.0123456789"
BOT_ID = "1100000000000000001"
APP_ID = BOT_ID  # a bot user's id is its application's id
OWNER_ID = "1100000000000000002"
GUILD_ID = "1200000000000000001"
TEXT_CHANNEL_ID = "1200000000000000002"
THREAD_ID = "1200000000000000003"
BOT_ROLE_ID = "1200000000000000004"
DM_CHANNEL_ID = "1300000000000000001"
DISCORD_EPOCH_MS = 1_420_070_400_000

Where = Literal["dm", "group", "thread"]
FailKind = Literal["rate_limit", "global_rate_limit", "server", "timeout", "forbidden", "not_found", "bad_request"]
Route = Literal["send", "edit", "typing", "commands", "callback", "any"]
BODY = web.RequestKey("discord_json_body", object)
CHANNEL_OF: dict[str, str] = {"dm": DM_CHANNEL_ID, "group": TEXT_CHANNEL_ID, "thread": THREAD_ID}


@dataclass
class Call:
    """One journal entry: a REST request (`kind="rest"`) or a gateway frame from the client."""

    kind: Literal["rest", "gateway", "connect"]
    method: str  # HTTP method; "WS" for gateway frames and connections
    path: str  # REST path after /api/v10, or the websocket's path and query
    body: Any = None
    op: int | None = None
    status: int = 0
    at: float = 0.0  # when it arrived, by the fake's `clock`


@dataclass
class Outgoing:
    """A message the bot created or edited (what a person in the channel would see)."""

    channel_id: str
    message_id: str
    content: str
    edit: bool = False
    reference: str | None = None


@dataclass
class Followup:
    """A follow-up message to an interaction (what its user, or everyone, sees after the ack)."""

    interaction_id: str
    message_id: str
    content: str
    ephemeral: bool


@dataclass
class _Failure:
    kind: FailKind
    route: Route
    retry_after: float = 1.0


@dataclass
class _Session:
    session_id: str
    shard: list[int] | None
    seq: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)


def iso(ts: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if ts is None else ts, UTC).isoformat()


def user(user_id: str, name: str, *, bot: bool = False, global_name: str | None = None) -> dict[str, Any]:
    return {
        "id": user_id,
        "username": name,
        "global_name": global_name,
        "discriminator": "0",
        "avatar": None,
        "public_flags": 0,
        "flags": 0,
        "bot": bot,
        "banner": None,
        "accent_color": None,
        "avatar_decoration_data": None,
        "clan": None,
        "primary_guild": None,
    }


def member(nick: str | None = None) -> dict[str, Any]:
    return {
        "roles": [],
        "premium_since": None,
        "pending": False,
        "nick": nick,
        "mute": False,
        "joined_at": "2024-01-01T00:00:00.000000+00:00",
        "flags": 0,
        "deaf": False,
        "communication_disabled_until": None,
        "banner": None,
        "avatar": None,
    }


BOT_USER = user(BOT_ID, "clawgate", bot=True, global_name="Clawgate")


class FakeDiscord:
    def __init__(self, *, token: str = TOKEN, heartbeat_interval_ms: int = 41_250) -> None:
        self.token = token
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.journal: list[Call] = []
        self.outbox: list[Outgoing] = []
        self.messages: dict[str, dict[str, Any]] = {}
        self.commands: list[dict[str, Any]] = []
        self.interactions: dict[str, dict[str, Any]] = {}
        self.acks: dict[str, dict[str, Any]] = {}  # interaction id -> the callback body it got
        # Follow-up messages to interactions (POST /webhooks/{app}/{token}), with the interaction id
        # they answer and whether only its user sees them (flags 64).
        self.followups: list[Followup] = []
        # Close code to answer IDENTIFY with (e.g. 4014 disallowed intents); None accepts it.
        self.close_on_identify: int | None = None
        self._failures: deque[_Failure] = deque()
        self._changed = asyncio.Condition()
        self._release = asyncio.Event()
        self._accepting = asyncio.Event()
        self._accepting.set()
        self._session: _Session | None = None
        self._ws: web.WebSocketResponse | None = None
        self._sockets: dict[web.WebSocketResponse, web.Request] = {}
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.url = ""
        # Attachments served as Discord's CDN serves them (no Authorization), by path; and each fetch.
        self.cdn: dict[str, tuple[bytes, str | None]] = {}
        self.cdn_fetches: list[str] = []
        # Stamps `Call.at`; a test on a virtual clock sets its clock here too.
        self.clock: Callable[[], float] = time.monotonic
        # The bot's own reactions: message id -> emoji, in the order they were added.
        self.reactions: dict[str, list[str]] = {}

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def api_base(self) -> str:
        return f"{self.url}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"{self.url.replace('http://', 'ws://')}/gateway"

    async def start(self) -> FakeDiscord:
        app = web.Application(middlewares=[self._auth_and_journal])
        api = "/api/v10"
        app.router.add_get(f"{api}/users/@me", self._me)
        app.router.add_get(f"{api}/oauth2/applications/@me", self._application)
        app.router.add_get(f"{api}/gateway", self._gateway_info)
        app.router.add_get(f"{api}/gateway/bot", self._gateway_bot)
        app.router.add_get(f"{api}/channels/{{cid}}", self._get_channel)
        app.router.add_post(f"{api}/channels/{{cid}}/messages", self._create_message)
        app.router.add_patch(f"{api}/channels/{{cid}}/messages/{{mid}}", self._edit_message)
        app.router.add_post(f"{api}/channels/{{cid}}/typing", self._typing)
        app.router.add_put(f"{api}/channels/{{cid}}/messages/{{mid}}/reactions/{{emoji}}/@me", self._react)
        app.router.add_delete(f"{api}/channels/{{cid}}/messages/{{mid}}/reactions/{{emoji}}/@me", self._unreact)
        app.router.add_put(f"{api}/applications/{{app}}/commands", self._put_commands)
        app.router.add_post(f"{api}/interactions/{{iid}}/{{token}}/callback", self._interaction_callback)
        app.router.add_post(f"{api}/webhooks/{{app}}/{{token}}", self._followup)
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/attachments/{cid}/{aid}/{name}", self._cdn)
        self._runner, self.url = await serve_loopback(app, shutdown_timeout=1.0)
        return self

    async def stop(self) -> None:
        self._release.set()
        self._accepting.set()
        for ws in list(self._sockets):
            await ws.close(code=1001)
        if self._runner is not None:
            await self._runner.cleanup()

    # -- test controls ---------------------------------------------------------------------------

    def fail_next(self, kind: FailKind, *, route: Route = "send", retry_after: float = 1.0) -> None:
        """The next matching REST call fails: 429 (per-route or global), 500, 403, 404, 400, or a hang.

        Routes: "send", "edit", "typing", "commands" (the bulk overwrite), "callback" (an
        interaction's answer), or "any" request.

        A hang on a send creates the message first and never answers: it arrived, the client
        cannot know.
        """
        self._failures.append(_Failure(kind, route, retry_after))

    def hold_connections(self) -> None:
        """New websocket connections wait (before HELLO) until `release_connections`."""
        self._accepting.clear()

    def release_connections(self) -> None:
        self._accepting.set()

    async def drop_connection(self, *, code: int | None = None) -> None:
        """Sever the live gateway socket: abruptly (no close frame) or with a close `code`."""
        ws = self._ws
        self._ws = None
        if ws is None:
            return
        if code is not None:
            await ws.close(code=code, message=b"dropped by the test")
            return
        request = self._sockets.get(ws)
        transport = request.transport if request is not None else None
        if transport is not None:
            transport.abort()

    async def wait_for(self, predicate: Callable[[list[Call]], bool], timeout: float = 10) -> list[Call]:
        async with asyncio.timeout(timeout):
            async with self._changed:
                await self._changed.wait_for(lambda: predicate(self.journal))
        return list(self.journal)

    async def wait_outbox(self, n: int, timeout: float = 10) -> list[Outgoing]:
        async with asyncio.timeout(timeout):
            async with self._changed:
                await self._changed.wait_for(lambda: len(self.outbox) >= n)
        return list(self.outbox)

    def rest(self, method: str, path_prefix: str = "") -> list[Call]:
        return [c for c in self.journal if c.kind == "rest" and c.method == method and c.path.startswith(path_prefix)]

    def ops(self, op: int) -> list[Call]:
        return [c for c in self.journal if c.kind == "gateway" and c.op == op]

    @property
    def connected(self) -> bool:
        return self._ws is not None and not self._ws.closed

    # -- injecting platform events ---------------------------------------------------------------

    def snowflake(self) -> str:
        return str(((int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22) | (next(self._ids) & 0x3FFFFF))

    def message(
        self,
        where: Where,
        text: str,
        *,
        author: dict[str, Any] | None = None,
        nick: str | None = None,
        mentions: list[dict[str, Any]] | None = None,
        mention_roles: list[str] | None = None,
        reply_to: str | None = None,
        attachments: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """A MESSAGE_CREATE payload as Discord sends it (guild messages carry `guild_id` and `member`)."""
        author = author or user("1001", "alice", global_name="Alice")
        channel_id = CHANNEL_OF[where]
        data: dict[str, Any] = {
            "type": 19 if reply_to else 0,
            "tts": False,
            "timestamp": iso(),
            "pinned": False,
            "nonce": self.snowflake(),
            "mentions": [dict(m) for m in mentions or ()],
            "mention_roles": mention_roles or [],
            "mention_everyone": False,
            "id": self.snowflake(),
            "flags": 0,
            "embeds": [],
            "edited_timestamp": None,
            "content": text,
            "components": [],
            "channel_id": channel_id,
            "author": author,
            "attachments": attachments or [],
        }
        if where != "dm":
            data["guild_id"] = GUILD_ID
            data["member"] = member(nick)
            for m in data["mentions"]:
                m["member"] = member()
        if where == "thread":
            data["position"] = 1
        if reply_to is not None:
            data["message_reference"] = {"type": 0, "channel_id": channel_id, "message_id": reply_to}
            if where != "dm":
                data["message_reference"]["guild_id"] = GUILD_ID
            data["referenced_message"] = self.messages.get(reply_to)
        return data

    def attachment(
        self,
        content: bytes,
        filename: str,
        content_type: str | None = None,
        *,
        where: Where = "dm",
        size: int | None = None,
        duration_secs: float | None = None,
        url: str | None = None,
    ) -> dict[str, Any]:
        """An attachment object as a message carries it, its file served at a signed CDN-style URL on
        this fake (`url` overrides where it points: another host, for the refusal tests)."""
        attachment_id = self.snowflake()
        path = f"/attachments/{CHANNEL_OF[where]}/{attachment_id}/{filename}"
        self.cdn[path] = (content, content_type)
        signed = f"{self.url}{path}?ex=67d5&is=67d4&hm=ab12"
        data: dict[str, Any] = {
            "id": attachment_id,
            "filename": filename,
            "size": len(content) if size is None else size,
            "url": url or signed,
            "proxy_url": url or signed,
            "content_scan_version": 0,
        }
        if content_type is not None:
            data["content_type"] = content_type
        if duration_secs is not None:  # a voice message
            data |= {"duration_secs": duration_secs, "waveform": "AAAA"}
        return data

    async def _cdn(self, request: web.Request) -> web.Response:
        async with self._changed:
            self.cdn_fetches.append(request.path)
            self._changed.notify_all()
        found = self.cdn.get(request.path)
        if found is None or "hm" not in request.query:
            return web.Response(status=404, text="This content is no longer available.")
        content, content_type = found
        return web.Response(body=content, content_type=content_type or "application/octet-stream")

    async def inject(self, data: dict[str, Any]) -> int:
        """Dispatch MESSAGE_CREATE; returns its sequence number."""
        self.messages[data["id"]] = data
        return await self.dispatch("MESSAGE_CREATE", data)

    async def inject_edit(self, message_id: str, text: str) -> dict[str, Any]:
        """Dispatch MESSAGE_UPDATE for a known message, as Discord does: the full message, new text."""
        data = dict(self.messages[message_id], content=text, edited_timestamp=iso())
        self.messages[message_id] = data
        await self.dispatch("MESSAGE_UPDATE", data)
        return data

    def interaction(
        self,
        where: Where,
        name: str,
        text: str | None = None,
        *,
        author: dict[str, Any] | None = None,
        nick: str | None = None,
        command_type: int = 1,
    ) -> dict[str, Any]:
        """An INTERACTION_CREATE payload for a slash command (type 2) as Discord sends it.

        `text` fills the command's "text" option (left out when None, as when a person skips it);
        guild uses carry `member` (with the user inside) and the guild, DMs carry `user`.
        """
        author = author or user("1001", "alice", global_name="Alice")
        channel = self._channels()[CHANNEL_OF[where]]
        registered = next((c for c in self.commands if c["name"] == name), None)
        command: dict[str, Any] = {
            "type": command_type,
            "name": name,
            "id": registered["id"] if registered else self.snowflake(),
        }
        if text is not None:
            command["options"] = [{"type": 3, "name": "text", "value": text}]
        data: dict[str, Any] = {
            "version": 1,
            "type": 2,
            "token": f"aW50ZXJhY3Rpb246{uuid.uuid4().hex}",
            "id": self.snowflake(),
            "application_id": APP_ID,
            "app_permissions": "2248473465835073",
            "locale": "en-US",
            "entitlements": [],
            "entitlement_sku_ids": [],
            "attachment_size_limit": 10_485_760,
            "data": command,
            "channel_id": channel["id"],
            "channel": channel,
        }
        if where == "dm":
            data.update(user=author, context=1, authorizing_integration_owners={"0": "0"})
        else:
            data.update(
                guild_id=GUILD_ID,
                guild={"id": GUILD_ID, "locale": "en-US", "features": []},
                guild_locale="en-US",
                member=dict(member(nick), user=author, permissions="2248473465835073"),
                context=0,
                authorizing_integration_owners={"0": GUILD_ID},
            )
        return data

    async def inject_interaction(self, data: dict[str, Any]) -> int:
        """Dispatch INTERACTION_CREATE; the callback route then accepts one answer for it."""
        self.interactions[data["id"]] = data
        return await self.dispatch("INTERACTION_CREATE", data)

    async def dispatch(self, event_type: str, data: dict[str, Any]) -> int:
        """Send a DISPATCH to the live session (or keep it for RESUME if the socket is down)."""
        session = self._session
        assert session is not None, "no gateway session: has the client identified?"
        session.seq += 1
        frame = {"op": 0, "t": event_type, "s": session.seq, "d": data}
        session.events.append(frame)
        ws = self._ws
        if ws is not None and not ws.closed:
            try:
                await ws.send_str(json.dumps(frame))
            except (ConnectionError, RuntimeError):
                pass  # the client will RESUME and get it replayed
        return session.seq

    # -- gateway ---------------------------------------------------------------------------------

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        await self._accepting.wait()
        ws = web.WebSocketResponse(autoping=True, max_msg_size=0)
        await ws.prepare(request)
        self._sockets[ws] = request
        await self._record(Call("connect", "WS", request.path_qs))
        try:
            await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": self.heartbeat_interval_ms}}))
            async for msg in ws:
                if msg.type is not WSMsgType.TEXT:
                    continue
                frame = json.loads(msg.data)
                await self._record(Call("gateway", "WS", request.path, frame.get("d"), frame.get("op")))
                await self._on_frame(ws, frame)
        except (ConnectionError, RuntimeError):
            pass
        finally:
            self._sockets.pop(ws, None)
            if self._ws is ws:
                self._ws = None
        return ws

    async def _on_frame(self, ws: web.WebSocketResponse, frame: dict[str, Any]) -> None:
        op, d = frame.get("op"), frame.get("d") or {}
        if op == 1:
            await ws.send_str(json.dumps({"op": 11}))
        elif op == 2:
            await self._identify(ws, d)
        elif op == 6:
            await self._resume(ws, d)

    async def _identify(self, ws: web.WebSocketResponse, d: dict[str, Any]) -> None:
        if d.get("token") != self.token:
            await ws.close(code=4004, message=b"Authentication failed.")
            return
        if self.close_on_identify is not None:
            await ws.close(code=self.close_on_identify, message=b"Disallowed intent(s).")
            return
        session = self._session = _Session(uuid.uuid4().hex, d.get("shard"))
        self._ws = ws
        ready: dict[str, Any] = {
            "v": 10,
            "user": dict(BOT_USER, verified=True, mfa_enabled=False, email=None),
            "guilds": [{"id": GUILD_ID, "unavailable": True}],
            "session_id": session.session_id,
            "session_type": "normal",
            "resume_gateway_url": self.gateway_url,
            "private_channels": [],
            "relationships": [],
            "presences": [],
            "guild_join_requests": [],
            "geo_ordered_rtc_regions": ["local"],
            "user_settings": {},
            "application": {"id": APP_ID, "flags": 0},
            "_trace": ["fake-discord"],
        }
        if session.shard is not None:
            ready["shard"] = session.shard
        await self.dispatch("READY", ready)
        await self.dispatch("GUILD_CREATE", self._guild())

    async def _resume(self, ws: web.WebSocketResponse, d: dict[str, Any]) -> None:
        session = self._session
        if session is None or d.get("session_id") != session.session_id or d.get("token") != self.token:
            await ws.send_str(json.dumps({"op": 9, "d": False}))
            return
        self._ws = ws
        seen = d.get("seq") or 0
        for frame in session.events:
            if frame["s"] > seen:
                await ws.send_str(json.dumps(frame))
        await self.dispatch("RESUMED", {"_trace": ["fake-discord"]})

    # -- REST ------------------------------------------------------------------------------------

    @web.middleware
    async def _auth_and_journal(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path == "/gateway" or request.path.startswith("/attachments/"):
            return await handler(request)  # the websocket; the CDN, which takes no credentials
        path = request.path.removeprefix("/api/v10")
        body: Any = None
        if request.can_read_body:
            raw = await request.read()
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
        call = Call("rest", request.method, path, body, at=self.clock())
        await self._record(call)
        # Interaction callbacks and follow-ups are authorized by the interaction's token in the path.
        needs_auth = not path.startswith(("/interactions/", "/webhooks/"))
        if needs_auth and request.headers.get("Authorization") != f"Bot {self.token}":
            call.status = 401
            return _json({"message": "401: Unauthorized", "code": 0}, status=401)
        request[BODY] = body
        response = await self._injected(request, call) or await handler(request)
        call.status = response.status
        return response

    async def _injected(self, request: web.Request, call: Call) -> web.StreamResponse | None:
        failure = self._failures[0] if self._failures else None
        if failure is None or not _matches(failure.route, request):
            return None
        self._failures.popleft()
        if failure.kind == "timeout":
            if request.method == "POST" and call.path.endswith("/messages"):
                await self._create_message(request)  # it arrived; the answer never will
            await self._release.wait()
            return _json({"message": "fake stopped"}, status=503)
        if failure.kind in ("rate_limit", "global_rate_limit"):
            return _rate_limited(failure.retry_after, is_global=failure.kind == "global_rate_limit")
        status, code, message = {
            "server": (500, 0, "500: Internal Server Error"),
            "forbidden": (403, 50013, "Missing Permissions"),
            "not_found": (404, 10003, "Unknown Channel"),
            "bad_request": (400, 50035, "Invalid Form Body"),
        }[failure.kind]
        return _json({"message": message, "code": code}, status=status)

    async def _me(self, _request: web.Request) -> web.Response:
        return _json(dict(BOT_USER, verified=True, mfa_enabled=False, email=None, locale="en-US"))

    async def _application(self, _request: web.Request) -> web.Response:
        return _json(
            {
                "id": APP_ID,
                "name": "clawgate",
                "icon": None,
                "description": "",
                "summary": "",
                "type": None,
                "hook": True,
                "bot_public": False,
                "bot_require_code_grant": False,
                "verify_key": "0" * 64,
                "flags": 0,
                "owner": user(OWNER_ID, "owner"),
                "team": None,
                "bot": BOT_USER,
                "interactions_endpoint_url": None,
                "redirect_uris": [],
                "tags": [],
            }
        )

    async def _gateway_info(self, _request: web.Request) -> web.Response:
        return _json({"url": self.gateway_url})

    async def _gateway_bot(self, _request: web.Request) -> web.Response:
        return _json(
            {
                "url": self.gateway_url,
                "shards": 1,
                "session_start_limit": {
                    "total": 1000,
                    "remaining": 999,
                    "reset_after": 14_400_000,
                    "max_concurrency": 1,
                },
            }
        )

    async def _get_channel(self, request: web.Request) -> web.Response:
        cid = request.match_info["cid"]
        channel = self._channels().get(cid)
        if channel is None:
            return _json({"message": "Unknown Channel", "code": 10003}, status=404)
        return _json(channel)

    async def _create_message(self, request: web.Request) -> web.Response:
        cid = request.match_info["cid"]
        body = request.get(BODY) or {}
        if cid not in self._channels():
            return _json({"message": "Unknown Channel", "code": 10003}, status=404)
        content = body.get("content") or ""
        error = _content_error(content)
        if error is not None:
            return error
        reference = (body.get("message_reference") or {}).get("message_id")
        data: dict[str, Any] = {
            "type": 19 if reference else 0,
            "tts": False,
            "timestamp": iso(),
            "pinned": False,
            "mentions": [],
            "mention_roles": [],
            "mention_everyone": False,
            "id": self.snowflake(),
            "flags": 0,
            "embeds": [],
            "edited_timestamp": None,
            "content": content,
            "components": [],
            "channel_id": cid,
            "author": BOT_USER,
            "attachments": [],
        }
        if reference:
            data["message_reference"] = {"type": 0, "channel_id": cid, "message_id": str(reference)}
            data["referenced_message"] = self.messages.get(str(reference))
        self.messages[data["id"]] = data
        await self._add_outgoing(Outgoing(cid, data["id"], content, reference=str(reference) if reference else None))
        return _json(data)

    async def _edit_message(self, request: web.Request) -> web.Response:
        cid, mid = request.match_info["cid"], request.match_info["mid"]
        message = self.messages.get(mid)
        if message is None or message["channel_id"] != cid:
            return _json({"message": "Unknown Message", "code": 10008}, status=404)
        if message["author"]["id"] != BOT_ID:
            return _json({"message": "Cannot edit a message authored by another user", "code": 50005}, status=403)
        content = (request.get(BODY) or {}).get("content") or ""
        error = _content_error(content)
        if error is not None:
            return error
        message = self.messages[mid] = dict(message, content=content, edited_timestamp=iso())
        await self._add_outgoing(Outgoing(cid, mid, content, edit=True))
        return _json(message)

    async def _react(self, request: web.Request) -> web.Response:
        if request.match_info["cid"] not in self._channels():
            return _json({"message": "Unknown Channel", "code": 10003}, status=404)
        mine = self.reactions.setdefault(request.match_info["mid"], [])
        if request.match_info["emoji"] not in mine:
            mine.append(request.match_info["emoji"])
        await self._notify()
        return web.Response(status=204)

    async def _unreact(self, request: web.Request) -> web.Response:
        mine = self.reactions.get(request.match_info["mid"], [])
        if request.match_info["emoji"] in mine:
            mine.remove(request.match_info["emoji"])
        await self._notify()
        return web.Response(status=204)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _typing(self, request: web.Request) -> web.Response:
        if request.match_info["cid"] not in self._channels():
            return _json({"message": "Unknown Channel", "code": 10003}, status=404)
        return web.Response(status=204)

    async def _put_commands(self, request: web.Request) -> web.Response:
        commands = request.get(BODY) or []
        self.commands = [
            dict(
                c, id=self.snowflake(), application_id=APP_ID, version=self.snowflake(), default_member_permissions=None
            )
            for c in commands
        ]
        return _json(self.commands)

    async def _interaction_callback(self, request: web.Request) -> web.Response:
        iid = request.match_info["iid"]
        interaction = self.interactions.get(iid)
        if interaction is None or interaction["token"] != request.match_info["token"]:
            return _json({"message": "Unknown interaction", "code": 10062}, status=404)
        if iid in self.acks:
            return _json({"message": "Interaction has already been acknowledged.", "code": 40060}, status=400)
        body = request.get(BODY) or {}
        self.acks[iid] = body
        if request.query.get("with_response", "").lower() not in ("1", "true"):
            return web.Response(status=204)
        answer = body.get("data") or {}
        flags = answer.get("flags") or 0
        message: dict[str, Any] = {
            "type": 20,  # CHAT_INPUT_COMMAND
            "tts": False,
            "timestamp": iso(),
            "pinned": False,
            "mentions": [],
            "mention_roles": [],
            "mention_everyone": False,
            "id": self.snowflake(),
            "flags": flags,
            "embeds": [],
            "edited_timestamp": None,
            "content": answer.get("content") or "",
            "components": [],
            "channel_id": interaction["channel_id"],
            "author": BOT_USER,
            "attachments": [],
            "webhook_id": APP_ID,
            "application_id": APP_ID,
            "interaction_metadata": {
                "id": iid,
                "type": 2,
                "name": interaction["data"]["name"],
                "command_type": interaction["data"]["type"],
                "user": interaction.get("user") or interaction["member"]["user"],
                "authorizing_integration_owners": interaction.get("authorizing_integration_owners", {}),
            },
        }
        return _json(
            {
                "interaction": {
                    "id": iid,
                    "type": 2,
                    "response_message_id": message["id"],
                    "response_message_loading": False,
                    "response_message_ephemeral": bool(flags & 64),
                },
                "resource": {"type": body.get("type"), "message": message},
            }
        )

    async def _followup(self, request: web.Request) -> web.Response:
        """Execute the interaction's webhook: only after the interaction was answered, within its token."""
        token = request.match_info["token"]
        interaction = next((i for i in self.interactions.values() if i["token"] == token), None)
        if request.match_info["app"] != APP_ID or interaction is None:
            return _json({"message": "Unknown Webhook", "code": 10015}, status=404)
        if interaction["id"] not in self.acks:
            return _json({"message": "Unknown interaction", "code": 10062}, status=404)
        body = request.get(BODY) or {}
        content = body.get("content") or ""
        error = _content_error(content)
        if error is not None:
            return error
        flags = body.get("flags") or 0
        data: dict[str, Any] = {
            "type": 20,
            "tts": False,
            "timestamp": iso(),
            "pinned": False,
            "mentions": [],
            "mention_roles": [],
            "mention_everyone": False,
            "id": self.snowflake(),
            "flags": flags,
            "embeds": [],
            "edited_timestamp": None,
            "content": content,
            "components": [],
            "channel_id": interaction["channel_id"],
            "author": BOT_USER,
            "attachments": [],
            "webhook_id": APP_ID,
            "application_id": APP_ID,
        }
        async with self._changed:
            self.followups.append(Followup(interaction["id"], data["id"], content, bool(flags & 64)))
            self._changed.notify_all()
        return _json(data)

    # -- data ------------------------------------------------------------------------------------

    def _channels(self) -> dict[str, dict[str, Any]]:
        guild = self._guild()
        found = {c["id"]: c for c in guild["channels"] + guild["threads"]}
        found[DM_CHANNEL_ID] = {
            "id": DM_CHANNEL_ID,
            "type": 1,
            "last_message_id": None,
            "flags": 0,
            "recipients": [user("1001", "alice", global_name="Alice")],
        }
        return found

    def _guild(self) -> dict[str, Any]:
        everyone = {
            "id": GUILD_ID,
            "name": "@everyone",
            "permissions": "1071698660929",
            "position": 0,
            "color": 0,
            "hoist": False,
            "managed": False,
            "mentionable": False,
            "icon": None,
            "unicode_emoji": None,
            "flags": 0,
        }
        bot_role = dict(everyone, id=BOT_ROLE_ID, name="clawgate", position=1, managed=True, tags={"bot_id": BOT_ID})
        return {
            "id": GUILD_ID,
            "name": "Test Guild",
            "icon": None,
            "description": None,
            "splash": None,
            "discovery_splash": None,
            "banner": None,
            "owner_id": OWNER_ID,
            "region": None,
            "afk_channel_id": None,
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "roles": [everyone, bot_role],
            "emojis": [],
            "stickers": [],
            "features": [],
            "mfa_level": 0,
            "system_channel_id": TEXT_CHANNEL_ID,
            "system_channel_flags": 0,
            "rules_channel_id": None,
            "vanity_url_code": None,
            "premium_tier": 0,
            "premium_subscription_count": 0,
            "preferred_locale": "en-US",
            "public_updates_channel_id": None,
            "nsfw_level": 0,
            "premium_progress_bar_enabled": False,
            "joined_at": "2024-01-01T00:00:00.000000+00:00",
            "large": False,
            "unavailable": False,
            "member_count": 2,
            "members": [dict(member(), user=BOT_USER, roles=[BOT_ROLE_ID])],
            "voice_states": [],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
            "channels": [
                {
                    "id": TEXT_CHANNEL_ID,
                    "type": 0,
                    "guild_id": GUILD_ID,
                    "name": "general",
                    "position": 0,
                    "permission_overwrites": [],
                    "parent_id": None,
                    "topic": None,
                    "nsfw": False,
                    "rate_limit_per_user": 0,
                    "last_message_id": None,
                    "flags": 0,
                }
            ],
            "threads": [
                {
                    "id": THREAD_ID,
                    "type": 11,
                    "guild_id": GUILD_ID,
                    "parent_id": TEXT_CHANNEL_ID,
                    "owner_id": "1001",
                    "name": "help thread",
                    "last_message_id": None,
                    "rate_limit_per_user": 0,
                    "message_count": 0,
                    "member_count": 2,
                    "total_message_sent": 0,
                    "flags": 0,
                    "thread_metadata": {
                        "archived": False,
                        "auto_archive_duration": 1440,
                        "archive_timestamp": "2024-01-01T00:00:00.000000+00:00",
                        "locked": False,
                        "create_timestamp": "2024-01-01T00:00:00.000000+00:00",
                    },
                }
            ],
        }

    async def _record(self, call: Call) -> None:
        async with self._changed:
            self.journal.append(call)
            self._changed.notify_all()

    async def _add_outgoing(self, item: Outgoing) -> None:
        async with self._changed:
            self.outbox.append(item)
            self._changed.notify_all()


def _json(body: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """Exactly `Content-Type: application/json` like Discord: discord.py parses JSON only on that string."""
    return web.Response(
        body=json.dumps(body).encode(), status=status, headers={**(headers or {}), "Content-Type": "application/json"}
    )


def _matches(route: Route, request: web.Request) -> bool:
    path = request.path
    if route == "any":
        return True
    if route == "send":
        return request.method == "POST" and path.endswith("/messages")
    if route == "edit":
        return request.method == "PATCH" and "/messages/" in path
    if route == "commands":
        return request.method == "PUT" and path.endswith("/commands")
    if route == "callback":
        return request.method == "POST" and path.endswith("/callback")
    return request.method == "POST" and path.endswith("/typing")


def _rate_limited(retry_after: float, *, is_global: bool) -> web.Response:
    """A 429 shaped like Discord's: JSON body with a float retry_after, X-RateLimit-* and Retry-After."""
    headers = {
        "Retry-After": str(math.ceil(retry_after)),
        "X-RateLimit-Limit": "5",
        "X-RateLimit-Remaining": "0",
        "X-RateLimit-Reset": f"{time.time() + retry_after:.3f}",
        "X-RateLimit-Reset-After": f"{retry_after:.3f}",
        "X-RateLimit-Bucket": "fake0bucket0hash",
        "X-RateLimit-Scope": "global" if is_global else "user",
        "Via": "1.1 google",  # discord.py treats a 429 without Via as a Cloudflare ban
    }
    if is_global:
        headers["X-RateLimit-Global"] = "true"
    body = {"message": "You are being rate limited.", "retry_after": retry_after, "global": is_global, "code": 0}
    return _json(body, status=429, headers=headers)


def _content_error(content: str) -> web.Response | None:
    if not content:
        return _json({"message": "Cannot send an empty message", "code": 50006}, status=400)
    if len(content) > 2000:
        return _json(
            {
                "message": "Invalid Form Body",
                "code": 50035,
                "errors": {
                    "content": {
                        "_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}]
                    }
                },
            },
            status=400,
        )
    return None
