"""A local Facebook Messenger for tests: a Graph API on loopback (port 0) and a Meta that calls the
gateway's webhook.

Graph API, under `/{graph_version}/` like graph.facebook.com:
- `GET /me` answers the Page (id, name) for the Page token, error 190 for any other token;
- `POST /me/messages`, the Send API: a message (`message.text`, at most 2,000 characters) or a
  sender action (typing_on, typing_off, mark_seen), with `messaging_type` RESPONSE inside the
  24-hour window (the fake knows when each person last wrote: when it delivered their message) and
  MESSAGE_TAG with an allowed `tag` outside it; Meta's errors with their codes otherwise (10/2018278
  outside the window, 100 for a bad request, 551 for a person who blocked the Page);
- the token is read from `Authorization: Bearer`; one in the query string (`access_token`) is taken
  too, as Meta does, and counted in `tokens_in_url` so a test can show none was ever sent there.
Attachments are served from the fake's own host (`/cdn/...`, see `attach`), each download journaled
with the Authorization header it came with.

Failure injection for the next calls (`fail_next`): a Graph error body with its code and subcode, a
rate limit (429 or 613, with Retry-After or Meta's usage header), a 5xx, a connection closed with no
answer, or a hang until the fake stops. Everything is journaled; tests wait on it with `wait_for`
(an asyncio.Condition), never sleeping.

Meta's side of the webhook: builders for the events Meta sends (text, quick reply, postback,
attachments, echoes of the Page's messages, delivery and read receipts), `body` to wrap them in a
call, `signed` for its X-Hub-Signature-256, and `deliver` to POST it to the gateway as Meta would.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from tests.fakes.serve import serve_loopback

PAGE_ID = "104000000000001"
PAGE_NAME = "Clawgate Test Page"
PAGE_TOKEN = "EAAFakePageTokenForLocalTests0123456789abcdef"
APP_SECRET = "fake-app-secret-0123456789abcdef"
VERIFY_TOKEN = "fake-verify-token-0123"
GRAPH_VERSION = "v21.0"
PSID = "7000000000000001"
WINDOW_SECONDS = 24 * 3600
TAGS = frozenset({"ACCOUNT_UPDATE", "CONFIRMED_EVENT_UPDATE", "POST_PURCHASE_UPDATE", "HUMAN_AGENT"})
SENDER_ACTIONS = frozenset({"typing_on", "typing_off", "mark_seen"})


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    body: Any
    token: str | None
    at: float


@dataclass(frozen=True)
class Sent:
    """A message the Page sent through the Send API."""

    recipient: str
    text: str
    mid: str
    messaging_type: str
    tag: str | None = None


@dataclass(frozen=True)
class Action:
    recipient: str
    action: str


@dataclass(frozen=True)
class GraphError:
    """A refusal as Meta words it: `{"error": {...}}` with this HTTP status."""

    code: int
    subcode: int | None = None
    status: int = 400
    message: str = "An error occurred"


@dataclass(frozen=True)
class RateLimited:
    """A rate limit: by default HTTP 429, error 613, and a Retry-After header. `usage_minutes` puts
    Meta's X-Business-Use-Case-Usage header (estimated_time_to_regain_access) instead."""

    retry_after: float | None = 1.0
    code: int = 613
    status: int = 429
    usage_minutes: int | None = None


@dataclass(frozen=True)
class ServerError:
    status: int = 500


@dataclass(frozen=True)
class Hang:
    """Never answer (until the fake stops): the client's timeout must fire."""


@dataclass(frozen=True)
class Drop:
    """Close the connection once the request is read, with no answer (the request may have been acted on)."""


Behavior = GraphError | RateLimited | ServerError | Hang | Drop


@dataclass
class FakeMessenger:
    page_id: str = PAGE_ID
    page_name: str = PAGE_NAME
    token: str = PAGE_TOKEN
    app_secret: str = APP_SECRET
    verify_token: str = VERIFY_TOKEN
    graph_version: str = GRAPH_VERSION
    url: str = ""
    # The fake's clock for the 24-hour window and timestamps; a test may move it.
    clock: Callable[[], float] = time.time
    calls: list[Call] = field(default_factory=list)
    sent: list[Sent] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    # (path, the Authorization header it came with) of each attachment download.
    downloads: list[tuple[str, str | None]] = field(default_factory=list)
    tokens_in_url: int = 0
    # When each person last wrote, as the fake delivered it (what Meta's window is measured from).
    last_inbound: dict[str, float] = field(default_factory=dict)
    blocked: set[str] = field(default_factory=set)  # people who blocked the Page: sends get 551

    def __post_init__(self) -> None:
        self._changed = asyncio.Condition()
        self._scripts: dict[str, deque[Behavior]] = {}
        self._files: dict[str, tuple[bytes, str]] = {}
        self._seq = itertools.count(1)
        self._stop = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._http: aiohttp.ClientSession | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def api_base_url(self) -> str:
        return self.url

    async def start(self) -> FakeMessenger:
        app = web.Application()
        app.router.add_get(f"/{self.graph_version}/me", self._me)
        app.router.add_post(f"/{self.graph_version}/me/messages", self._messages)
        app.router.add_get("/cdn/{path:.+}", self._file)
        self._runner, self.url = await serve_loopback(app, shutdown_timeout=0.1)
        self._http = aiohttp.ClientSession()
        return self

    async def stop(self) -> None:
        self._stop.set()
        if self._http is not None:
            await self._http.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def config(self, **more: Any) -> dict[str, Any]:
        """A `channels:` entry for a Messenger channel pointed at this fake (dm_policy and the rest in `more`)."""
        return {
            "type": "messenger",
            "page_access_token": self.token,
            "app_secret": self.app_secret,
            "verify_token": self.verify_token,
            "api_base_url": self.url,
            "graph_version": self.graph_version,
            "request_timeout": 5,  # a busy CI machine can take seconds to answer; timeout tests set 1
            **more,
        }

    async def drop_connections(self) -> None:
        """Close every connection to the fake (kept-alive ones too), and Meta's to the gateway."""
        assert self._runner is not None
        server = self._runner.server
        if server is not None:
            for handler in list(server.connections):
                handler.force_close()
                if handler.transport is not None:
                    handler.transport.close()
        if self._http is not None:
            await self._http.close()
            self._http = aiohttp.ClientSession()

    # -- journal and waits ----------------------------------------------------------------------

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def wait_for(self, predicate: Callable[[FakeMessenger], bool], timeout: float = 10) -> None:
        async with asyncio.timeout(timeout):
            async with self._changed:
                await self._changed.wait_for(lambda: predicate(self))

    async def wait_sent(self, n: int, timeout: float = 10) -> list[Sent]:
        await self.wait_for(lambda f: len(f.sent) >= n, timeout)
        return list(self.sent)

    def texts_to(self, psid: str) -> list[str]:
        return [s.text for s in self.sent if s.recipient == psid]

    def fail_next(self, kind: str, *behaviors: Behavior) -> None:
        """`kind`: "send" (messages), "action" (sender actions) or "me"."""
        self._scripts.setdefault(kind, deque()).extend(behaviors)

    # -- Graph API ------------------------------------------------------------------------------

    def _token(self, request: web.Request) -> str | None:
        if "access_token" in request.query:
            self.tokens_in_url += 1
            return request.query["access_token"]
        auth = request.headers.get("Authorization", "")
        return auth[7:] if auth.startswith("Bearer ") else None

    @staticmethod
    def _error(
        code: int, message: str, *, subcode: int | None = None, status: int = 400, headers: dict[str, str] | None = None
    ) -> web.Response:
        error: dict[str, Any] = {"message": message, "type": "OAuthException", "code": code, "fbtrace_id": "AFake0"}
        if subcode is not None:
            error["error_subcode"] = subcode
        return web.json_response({"error": error}, status=status, headers=headers)

    async def _scripted(self, kind: str, request: web.Request | None = None) -> web.Response | None:
        script = self._scripts.get(kind)
        if not script:
            return None
        behavior = script.popleft()
        if isinstance(behavior, GraphError):
            return self._error(behavior.code, behavior.message, subcode=behavior.subcode, status=behavior.status)
        if isinstance(behavior, RateLimited):
            headers: dict[str, str] = {}
            if behavior.retry_after is not None:
                headers["Retry-After"] = str(round(behavior.retry_after))
            if behavior.usage_minutes is not None:
                usage = [
                    {"type": "messenger", "call_count": 100, "estimated_time_to_regain_access": behavior.usage_minutes}
                ]
                headers["X-Business-Use-Case-Usage"] = json.dumps({self.page_id: usage})
            return self._error(
                behavior.code,
                "Calls to this API have exceeded the rate limit.",
                status=behavior.status,
                headers=headers,
            )
        if isinstance(behavior, ServerError):
            return self._error(
                2, "An unexpected error has occurred. Please retry your request later.", status=behavior.status
            )
        if isinstance(behavior, Drop) and request is not None and request.transport is not None:
            request.transport.close()
            return web.Response(status=500)  # never reaches the client: the connection is gone
        await self._stop.wait()  # Hang
        return web.Response(status=503)

    async def _journal(self, request: web.Request, body: Any) -> str | None:
        token = self._token(request)
        self.calls.append(Call(request.method, request.path, body, token, self.clock()))
        await self._notify()
        return token

    async def _me(self, request: web.Request) -> web.Response:
        token = await self._journal(request, None)
        if (failure := await self._scripted("me", request)) is not None:
            return failure
        if token != self.token:
            return self._error(190, "Invalid OAuth access token - Cannot parse access token", status=400)
        return web.json_response({"id": self.page_id, "name": self.page_name})

    async def _messages(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            body = None
        token = await self._journal(request, body)
        if token != self.token:
            return self._error(190, "Invalid OAuth access token - Cannot parse access token")
        if not isinstance(body, dict) or not isinstance(body.get("recipient"), dict):
            return self._error(100, "(#100) The parameter recipient is required")
        psid = str(body["recipient"].get("id") or "")
        action = body.get("sender_action")
        if action is not None:
            if (failure := await self._scripted("action", request)) is not None:
                return failure
            return await self._action(psid, action, body)
        if (failure := await self._scripted("send", request)) is not None:
            return failure
        return await self._message(psid, body)

    def _window_refusal(self, psid: str, body: dict[str, Any]) -> web.Response | None:
        last = self.last_inbound.get(psid)
        inside = last is not None and self.clock() - last < WINDOW_SECONDS
        kind = body.get("messaging_type", "RESPONSE")
        if kind == "MESSAGE_TAG":
            if body.get("tag") not in TAGS:
                return self._error(100, "(#100) Param tag must be one of the allowed message tags")
            return None
        if kind not in ("RESPONSE", "UPDATE"):
            return self._error(100, "(#100) Param messaging_type must be one of RESPONSE, UPDATE, MESSAGE_TAG")
        if not inside:
            return self._error(10, "(#10) This message is sent outside of allowed window.", subcode=2018278)
        return None

    async def _action(self, psid: str, action: Any, body: dict[str, Any]) -> web.Response:
        if action not in SENDER_ACTIONS:
            return self._error(100, "(#100) Param sender_action must be one of typing_on, typing_off, mark_seen")
        if "message" in body:
            return self._error(100, "(#100) Cannot send both message and sender_action")
        if (refusal := self._window_refusal(psid, body)) is not None:
            return refusal
        self.actions.append(Action(psid, str(action)))
        await self._notify()
        return web.json_response({"recipient_id": psid})

    async def _message(self, psid: str, body: dict[str, Any]) -> web.Response:
        message = body.get("message")
        text = message.get("text") if isinstance(message, dict) else None
        if not isinstance(text, str) or not text:
            return self._error(100, "(#100) The parameter message[text] is required")
        if len(text) > 2000:
            return self._error(100, "(#100) Length of param message[text] must be less than or equal to 2000")
        if psid in self.blocked:
            return self._error(551, "This person isn't available right now.", subcode=1545041)
        if (refusal := self._window_refusal(psid, body)) is not None:
            return refusal
        mid = f"m_fake{next(self._seq):08d}"
        self.sent.append(Sent(psid, text, mid, str(body.get("messaging_type", "RESPONSE")), body.get("tag")))
        await self._notify()
        return web.json_response({"recipient_id": psid, "message_id": mid})

    # -- attachments ----------------------------------------------------------------------------

    def attach(self, data: bytes, name: str, content_type: str = "application/octet-stream") -> str:
        """Serve `data` from the fake's own host, as Meta's CDN would; its URL (signed-looking, no token)."""
        path = f"v/t{next(self._seq)}/{name}"
        self._files[path] = (data, content_type)
        return f"{self.url}/cdn/{path}?_nc_sig=fake&oe=FFFFFFFF"

    async def _file(self, request: web.Request) -> web.Response:
        path = request.match_info["path"]
        self.downloads.append((path, request.headers.get("Authorization")))
        await self._notify()
        found = self._files.get(path)
        if found is None:
            return web.Response(status=404, text="URL signature expired")
        data, content_type = found
        return web.Response(body=data, content_type=content_type)

    # -- Meta's side of the webhook -------------------------------------------------------------

    def _mid(self) -> str:
        return f"m_in{next(self._seq):08d}"

    def _event(self, psid: str, timestamp: float | None, **payload: Any) -> dict[str, Any]:
        at = self.clock() if timestamp is None else timestamp
        return {"sender": {"id": psid}, "recipient": {"id": self.page_id}, "timestamp": int(at * 1000), **payload}

    def text(
        self, text: str, *, psid: str = PSID, mid: str | None = None, timestamp: float | None = None
    ) -> dict[str, Any]:
        return self._event(psid, timestamp, message={"mid": mid or self._mid(), "text": text})

    def quick_reply(self, title: str, payload: str, *, psid: str = PSID) -> dict[str, Any]:
        return self._event(psid, None, message={"mid": self._mid(), "text": title, "quick_reply": {"payload": payload}})

    def postback(
        self, title: str, payload: str, *, psid: str = PSID, mid: str | None = None, with_mid: bool = True
    ) -> dict[str, Any]:
        postback: dict[str, Any] = {"title": title, "payload": payload}
        if with_mid:
            postback["mid"] = mid or self._mid()
        return self._event(psid, None, postback=postback)

    def attachments(self, *items: tuple[str, str], text: str | None = None, psid: str = PSID) -> dict[str, Any]:
        """A message with attachments: (Meta's type: image|audio|video|file, URL) each."""
        message: dict[str, Any] = {
            "mid": self._mid(),
            "attachments": [{"type": kind, "payload": {"url": url}} for kind, url in items],
        }
        if text is not None:
            message["text"] = text
        return self._event(psid, None, message=message)

    def echo(self, text: str, *, psid: str = PSID) -> dict[str, Any]:
        """The echo of a message the Page sent (sender and recipient swapped, is_echo set)."""
        return {
            "sender": {"id": self.page_id},
            "recipient": {"id": psid},
            "timestamp": int(self.clock() * 1000),
            "message": {"mid": self._mid(), "is_echo": True, "app_id": 1517776481860111, "text": text},
        }

    def delivery(self, *mids: str, psid: str = PSID) -> dict[str, Any]:
        watermark = int(self.clock() * 1000)
        return self._event(psid, None, delivery={"mids": list(mids), "watermark": watermark})

    def read(self, *, psid: str = PSID) -> dict[str, Any]:
        return self._event(psid, None, read={"watermark": int(self.clock() * 1000)})

    def body(self, *events: dict[str, Any], page_id: str | None = None) -> dict[str, Any]:
        """One webhook call: an entry of the Page holding `events`."""
        entry = {"id": page_id or self.page_id, "time": int(self.clock() * 1000), "messaging": list(events)}
        return {"object": "page", "entry": [entry]}

    def signed(self, raw: bytes, *, secret: str | None = None) -> dict[str, str]:
        digest = hmac.new((secret or self.app_secret).encode(), raw, hashlib.sha256).hexdigest()
        return {"Content-Type": "application/json", "X-Hub-Signature-256": f"sha256={digest}"}

    async def post(self, url: str, raw: bytes, headers: dict[str, str]) -> tuple[int, str]:
        """POST `raw` to the webhook at `url` as it is: (status, body)."""
        assert self._http is not None, "start() the fake first"
        async with self._http.post(url, data=raw, headers=headers) as resp:
            return resp.status, await resp.text()

    async def deliver(self, url: str, *events: dict[str, Any]) -> int:
        """Deliver `events` as Meta does (one signed call) to the webhook at `url`; its HTTP status.

        The people who wrote get their 24-hour window opened at the fake (as Meta's is)."""
        for ev in events:
            if ("message" in ev and not ev["message"].get("is_echo")) or "postback" in ev:
                psid = ev["sender"]["id"]
                self.last_inbound[psid] = max(self.last_inbound.get(psid, 0.0), ev["timestamp"] / 1000)
        raw = json.dumps(self.body(*events)).encode()
        status, _ = await self.post(url, raw, self.signed(raw))
        return status

    async def verify(
        self, url: str, *, mode: str = "subscribe", token: str | None = None, challenge: str = "1158201444"
    ) -> tuple[int, str]:
        """Meta's subscription check (GET with hub.mode, hub.verify_token, hub.challenge)."""
        assert self._http is not None, "start() the fake first"
        query = {"hub.mode": mode, "hub.verify_token": token or self.verify_token, "hub.challenge": challenge}
        async with self._http.get(url, params=query) as resp:
            return resp.status, await resp.text()
