"""A local Microsoft Teams for tests: Azure Bot Service's side of a bot, on 127.0.0.1 (port 0).

- OpenID metadata (`/v1/.well-known/openidconfiguration`) naming a JWKS (`/v1/.well-known/keys`)
  whose RSA keys carry `endorsements` like Bot Framework's; `rotate_keys()` announces a new one.
- Signed activities: `token()` makes the JWT Bot Service sends (iss https://api.botframework.com, aud
  the app id, exp, nbf, serviceurl), with any claim changed or left out, or signed with another
  key, for attacks; `post()` delivers an activity to the gateway's endpoint as Bot Service does.
- Entra ID's token endpoint (`/<tenant>/oauth2/v2.0/token`): a client-credentials grant for the app
  id and secret gives an opaque token; a wrong secret gets `invalid_client` (AADSTS7000215), an
  unknown app `unauthorized_client` (AADSTS700016), as Entra ID answers.
- The Bot Connector REST API under the service URL (`/smba/<region>/`), what the SDK's ConversationsOperations
  calls: send to a conversation, reply to an activity, update an activity (typing is a send of type
  `typing`). Each needs a token the token endpoint issued. Every posted activity is journaled in
  `sent`, with event-driven waits (`wait_for`, `wait_sent`).
- Failure injection for the next call of an operation (`fail_next`): 429 with Retry-After, any
  status, or a hang until the fake stops.
- Activity builders shaped like Teams': personal chat, group chat, a channel post or a reply in its
  thread, mentions with their `<at>` text and entity, the bot's own message, an installation.
"""

from __future__ import annotations

import asyncio
import functools
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

import aiohttp
import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa

APP_ID = "0b07a11e-0000-4000-8000-00000000c1a0"
APP_PASSWORD = "fake~teams~client~secret~0123456789"
TENANT_ID = "7e4a47e1-0000-4000-8000-0000000000aa"
BOT_NAME = "clawbot"
ISSUER = "https://api.botframework.com"
GROUP_CHAT = "19:groupchat-0001@thread.v2"
CHANNEL = "19:general-0001@thread.tacv2"


@functools.cache
def private_key(name: str) -> rsa.RSAPrivateKey:
    """A test RSA key, made once per process (each takes a moment to make)."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def jwk_of(kid: str, key: rsa.RSAPrivateKey, endorsements: list[str]) -> dict[str, Any]:
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    return public | {"kid": kid, "use": "sig", "x5t": kid, "endorsements": endorsements}


@dataclass(frozen=True)
class Sent:
    """An activity the bot sent: op is "send", "reply" or "update"."""

    op: str
    conversation_id: str
    activity_id: str
    type: str
    text: str | None
    text_format: str | None = None
    reply_to_id: str | None = None
    body: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def chat_id(self) -> str:
        return self.conversation_id.partition(";messageid=")[0]

    @property
    def thread_id(self) -> str | None:
        return self.conversation_id.partition(";messageid=")[2] or None

    @property
    def edit(self) -> bool:
        return self.op == "update"


@dataclass(frozen=True)
class RateLimited:
    retry_after: float = 1.0


@dataclass(frozen=True)
class Status:
    """Answer this HTTP status with an error body (500, 401, 403, 404, 413...)."""

    status: int = 500


@dataclass(frozen=True)
class Hang:
    """Never answer (until the fake stops): the client's timeout must fire."""


Behavior = RateLimited | Status | Hang


@dataclass
class FakeTeams:
    app_id: str = APP_ID
    app_password: str = APP_PASSWORD
    tenant_id: str = TENANT_ID
    bot_name: str = BOT_NAME

    url: str = ""
    sent: list[Sent] = field(default_factory=list)
    # (method, path, bearer token) of every Bot Connector call, refused ones included.
    calls: list[tuple[str, str, str | None]] = field(default_factory=list)
    token_requests: list[dict[str, str]] = field(default_factory=list)
    metadata_fetches: int = 0
    jwks_fetches: int = 0

    def __post_init__(self) -> None:
        self._changed = asyncio.Condition()
        self._scripts: dict[str, deque[Behavior]] = {}
        self._stop = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._sock: socket.socket | None = None
        self._ids = itertools.count(1)
        self._messages: dict[tuple[str, str], str] = {}
        self._issued: set[str] = set()
        self.signing_kid = "fake-key-1"
        self.announced: dict[str, list[str]] = {"fake-key-1": ["msteams"]}  # kid -> endorsements

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def bot_id(self) -> str:
        return f"28:{self.app_id}"

    @property
    def service_url(self) -> str:
        """Where Teams' activities say to answer: a region under the Bot Connector's host, like
        https://smba.trafficmanager.net/amer/; `service_url_in` names another region."""
        return self.service_url_in("amer")

    def service_url_in(self, region: str) -> str:
        return f"{self.url}/smba/{region}/"

    @property
    def metadata_url(self) -> str:
        return f"{self.url}/v1/.well-known/openidconfiguration"

    @property
    def token_url(self) -> str:
        return f"{self.url}/{self.tenant_id}/oauth2/v2.0/token"

    def bind(self) -> str:
        """Reserve the loopback port now (port 0), so `url` is known before `start()`."""
        if self._sock is None:
            self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._sock.bind(("127.0.0.1", 0))
            self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        return self.url

    async def start(self) -> FakeTeams:
        self.bind()
        app = web.Application()
        app.router.add_get("/v1/.well-known/openidconfiguration", self._metadata)
        app.router.add_get("/v1/.well-known/keys", self._jwks)
        app.router.add_post("/{tenant}/oauth2/v2.0/token", self._token)
        app.router.add_post("/smba/{region}/v3/conversations/{cid}/activities", self._send)
        app.router.add_post("/smba/{region}/v3/conversations/{cid}/activities/{aid}", self._reply)
        app.router.add_put("/smba/{region}/v3/conversations/{cid}/activities/{aid}", self._update)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        await web.SockSite(self._runner, self._sock).start()  # type: ignore[arg-type]
        return self

    async def stop(self) -> None:
        self._stop.set()
        if self._runner is not None:
            await self._runner.cleanup()

    # -- journal and waits ----------------------------------------------------------------------

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def wait_for(self, predicate: Callable[[FakeTeams], bool], timeout: float = 10) -> None:
        async with asyncio.timeout(timeout):
            async with self._changed:
                await self._changed.wait_for(lambda: predicate(self))

    @property
    def messages(self) -> list[Sent]:
        """What the bot posted or edited (typing left out), oldest first."""
        return [s for s in self.sent if s.type == "message"]

    @property
    def typing(self) -> list[Sent]:
        return [s for s in self.sent if s.type == "typing"]

    async def wait_sent(self, n: int, timeout: float = 10) -> list[Sent]:
        """Wait until the bot posted or edited at least `n` messages."""
        await self.wait_for(lambda f: len(f.messages) >= n, timeout)
        return self.messages

    def shown(self) -> dict[str, str]:
        """Each message the bot posted, as it reads now (after its edits): activity id -> text."""
        return {aid: text for (_cid, aid), text in self._messages.items()}

    def fail_next(self, op: str, *behaviors: Behavior) -> None:
        """op: "send", "reply", "update", "typing" (a send of a typing activity), "token" or "metadata"."""
        self._scripts.setdefault(op, deque()).extend(behaviors)

    async def _scripted(self, op: str) -> web.Response | None:
        script = self._scripts.get(op)
        if not script:
            return None
        behavior = script.popleft()
        if isinstance(behavior, RateLimited):
            return web.json_response(
                {"error": {"code": "TooManyRequests", "message": "Too many requests"}},
                status=429,
                headers={"Retry-After": str(math.ceil(behavior.retry_after))},
            )
        if isinstance(behavior, Status):
            return web.json_response(
                {"error": {"code": "ServiceError", "message": "fake failure"}}, status=behavior.status
            )
        await self._stop.wait()  # Hang
        return web.Response(status=503)

    # -- OpenID metadata and keys ---------------------------------------------------------------

    def rotate_keys(self, kid: str = "fake-key-2", *, keep_old: bool = True) -> str:
        """Announce a new signing key and sign with it from now on."""
        self.announced = (self.announced if keep_old else {}) | {kid: ["msteams"]}
        self.signing_kid = kid
        return kid

    async def _metadata(self, _request: web.Request) -> web.Response:
        self.metadata_fetches += 1
        await self._notify()
        if (failure := await self._scripted("metadata")) is not None:
            return failure
        return web.json_response(
            {
                "issuer": ISSUER,
                "authorization_endpoint": "https://invalid.botframework.com",
                "jwks_uri": f"{self.url}/v1/.well-known/keys",
                "id_token_signing_alg_values_supported": ["RS256"],
                "token_endpoint_auth_methods_supported": ["private_key_jwt"],
            }
        )

    async def _jwks(self, _request: web.Request) -> web.Response:
        self.jwks_fetches += 1
        await self._notify()
        keys = [jwk_of(kid, private_key(kid), endorsements) for kid, endorsements in self.announced.items()]
        return web.json_response({"keys": keys})

    def token(
        self,
        *,
        service_url: str | None = None,
        kid: str | None = None,
        key: str | None = None,
        lifetime: float = 3600,
        **claims: Any,
    ) -> str:
        """The JWT Bot Service sends with an activity. `claims` override (None leaves one out);
        `key` signs with another key than the one `kid` names (a forgery)."""
        now = int(time.time())
        payload: dict[str, Any] = {
            "iss": ISSUER,
            "aud": self.app_id,
            "nbf": now - 60,
            "iat": now - 60,
            "exp": now + int(lifetime),
            "serviceurl": service_url or self.service_url,
        }
        payload = {k: v for k, v in (payload | claims).items() if v is not None}
        kid = kid or self.signing_kid
        return jwt.encode(payload, private_key(key or kid), algorithm="RS256", headers={"kid": kid})

    # -- Entra ID's token endpoint --------------------------------------------------------------

    async def _token(self, request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        self.token_requests.append(form)
        await self._notify()
        if (failure := await self._scripted("token")) is not None:
            return failure
        if form.get("grant_type") != "client_credentials":
            return web.json_response({"error": "unsupported_grant_type"}, status=400)
        if form.get("client_id") != self.app_id:
            description = f"AADSTS700016: Application with identifier '{form.get('client_id')}' was not found."
            return web.json_response({"error": "unauthorized_client", "error_description": description}, status=400)
        if form.get("client_secret") != self.app_password:
            description = "AADSTS7000215: Invalid client secret provided. Ensure the secret being sent is correct."
            return web.json_response({"error": "invalid_client", "error_description": description}, status=401)
        token = f"fake-bot-token-{uuid.uuid4().hex}"
        self._issued.add(token)
        return web.json_response(
            {"token_type": "Bearer", "expires_in": 3599, "ext_expires_in": 3599, "access_token": token}
        )

    def revoke_tokens(self) -> None:
        """Every token issued so far stops working (the Bot Connector answers 401)."""
        self._issued.clear()

    # -- the Bot Connector ----------------------------------------------------------------------

    async def _connector_call(self, request: web.Request) -> tuple[str | None, dict[str, Any] | web.Response]:
        auth = request.headers.get("Authorization", "")
        token = auth[7:] if auth.startswith("Bearer ") else None
        self.calls.append((request.method, request.path, token))
        await self._notify()
        if token is None or token not in self._issued:
            return token, web.json_response({"message": "Authorization has been denied for this request."}, status=401)
        try:
            body = await request.json()
        except ValueError:
            return token, web.json_response({"error": {"code": "BadSyntax"}}, status=400)
        return token, body if isinstance(body, dict) else web.json_response({}, status=400)

    def _new_id(self) -> str:
        return str(1_710_000_000_000 + next(self._ids))

    async def _record(self, op: str, cid: str, aid: str, body: dict[str, Any]) -> None:
        text = body.get("text")
        if body.get("type") == "message":
            self._messages[(cid.partition(";messageid=")[0], aid)] = str(text or "")
        self.sent.append(
            Sent(op, cid, aid, str(body.get("type")), text, body.get("textFormat"), body.get("replyToId"), body)
        )
        await self._notify()

    async def _send(self, request: web.Request) -> web.Response:
        _, body = await self._connector_call(request)
        if isinstance(body, web.Response):
            return body
        op = "typing" if body.get("type") == "typing" else "send"
        if (failure := await self._scripted(op)) is not None:
            return failure
        aid = self._new_id()
        await self._record("send", request.match_info["cid"], aid, body)
        return web.json_response({"id": aid}, status=201)

    async def _reply(self, request: web.Request) -> web.Response:
        _, body = await self._connector_call(request)
        if isinstance(body, web.Response):
            return body
        if (failure := await self._scripted("reply")) is not None:
            return failure
        aid = self._new_id()
        await self._record("reply", request.match_info["cid"], aid, body)
        return web.json_response({"id": aid}, status=201)

    async def _update(self, request: web.Request) -> web.Response:
        _, body = await self._connector_call(request)
        if isinstance(body, web.Response):
            return body
        if (failure := await self._scripted("update")) is not None:
            return failure
        cid, aid = request.match_info["cid"], request.match_info["aid"]
        if (cid.partition(";messageid=")[0], aid) not in self._messages:
            return web.json_response({"error": {"code": "NotFound", "message": "activity not found"}}, status=404)
        await self._record("update", cid, aid, body)
        return web.json_response({"id": aid})

    # -- activities, shaped like Teams' ----------------------------------------------------------

    def activity(
        self,
        conversation: dict[str, Any],
        text: str | None,
        *,
        user: str = "1001",
        name: str = "Ann Example",
        aad: bool = True,
        mention: bool = False,
        mentions: tuple[tuple[str, str], ...] = (),
        from_self: bool = False,
        kind: str = "message",
        activity_id: str | None = None,
        channel_data: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A message from user `user` (their Teams id is `29:<user>`, their Entra ID object
        `aad-<user>`). `mention`: "<at>bot</at>" first, with its entity; `mentions`: (id, name) of
        other people mentioned after the text."""
        entities: list[dict[str, Any]] = [{"type": "clientInfo", "locale": "en-US", "platform": "Web"}]
        if text is not None and mention:
            text = f"<at>{self.bot_name}</at> {text}"
            entities.append(
                {
                    "type": "mention",
                    "text": f"<at>{self.bot_name}</at>",
                    "mentioned": {"id": self.bot_id, "name": self.bot_name},
                }
            )
        for who, who_name in mentions:
            text = f"{text or ''} <at>{who_name}</at>"
            entities.append(
                {"type": "mention", "text": f"<at>{who_name}</at>", "mentioned": {"id": who, "name": who_name}}
            )
        sender: dict[str, Any] = (
            {"id": self.bot_id, "name": self.bot_name} if from_self else {"id": f"29:{user}", "name": name}
        )
        if aad and not from_self:
            sender["aadObjectId"] = f"aad-{user}"
        activity: dict[str, Any] = {
            "type": kind,
            "id": activity_id or self._new_id(),
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
            "localTimestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000+00:00", time.gmtime()),
            "serviceUrl": self.service_url,
            "channelId": "msteams",
            "from": sender,
            "conversation": conversation | {"tenantId": self.tenant_id},
            "recipient": {"id": self.bot_id, "name": self.bot_name},
            "entities": entities,
            "channelData": {"tenant": {"id": self.tenant_id}} | (channel_data or {}),
            "locale": "en-US",
        }
        if text is not None:
            activity |= {"text": text, "textFormat": "plain"}
            activity["attachments"] = [{"contentType": "text/html", "content": f"<p>{text}</p>"}]
        return activity

    def personal(self, text: str, *, user: str = "1001", **kw: Any) -> dict[str, Any]:
        conversation = {"conversationType": "personal", "id": f"a:1personal-chat-{user}"}
        return self.activity(conversation, text, user=user, **kw)

    def group_chat(self, text: str, **kw: Any) -> dict[str, Any]:
        conversation = {"isGroup": True, "conversationType": "groupChat", "id": GROUP_CHAT}
        return self.activity(conversation, text, **kw)

    def channel(self, text: str, *, thread: str | None = None, **kw: Any) -> dict[str, Any]:
        """A post in the team's channel (a new thread), or with `thread` a reply inside that thread."""
        activity_id = kw.pop("activity_id", None) or self._new_id()
        root = thread or activity_id
        conversation = {"isGroup": True, "conversationType": "channel", "id": f"{CHANNEL};messageid={root}"}
        data = {"teamsChannelId": CHANNEL, "teamsTeamId": "19:team-0001@thread.tacv2", "channel": {"id": CHANNEL}}
        made = self.activity(conversation, text, activity_id=activity_id, channel_data=data, **kw)
        if thread:
            made["replyToId"] = thread
        return made

    def installed(self, conversation: dict[str, Any]) -> dict[str, Any]:
        """The conversationUpdate Teams sends when the bot is added to a conversation."""
        made = self.activity(conversation, None, kind="conversationUpdate")
        made["membersAdded"] = [{"id": self.bot_id}]
        return made

    # -- delivering to the gateway ---------------------------------------------------------------

    async def post(
        self,
        endpoint: str,
        activity: dict[str, Any] | str | bytes,
        *,
        token: str | None = "",
        headers: dict[str, str] | None = None,
    ) -> tuple[int, str]:
        """POST an activity to the bot's messaging endpoint, signed as Bot Service signs it
        (`token=None`: no Authorization header; a string: that token). Returns (status, body)."""
        if isinstance(activity, dict):
            body: bytes = json.dumps(activity).encode()
        else:
            body = activity.encode() if isinstance(activity, str) else activity
        sent = {
            "Content-Type": "application/json; charset=utf-8",
            "User-Agent": "Microsoft-SkypeBotApi (Microsoft-BotFramework/3.0)",
        }
        if token == "":
            service = activity.get("serviceUrl") if isinstance(activity, dict) else None
            token = self.token(service_url=service if isinstance(service, str) else None)
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        async with (
            aiohttp.ClientSession() as http,
            http.post(endpoint, data=body, headers=sent | (headers or {})) as resp,
        ):
            return resp.status, await resp.text()


def channel_config(fake: FakeTeams, **more: Any) -> dict[str, Any]:
    """A `channels.<name>` entry of config.yaml for a Teams channel on this fake."""
    return {
        "type": "teams",
        "app_id": fake.app_id,
        "app_password": fake.app_password,
        "tenant_id": fake.tenant_id,
        "openid_metadata_url": fake.metadata_url,
        "token_url": fake.token_url,
        "request_timeout": 2,
        **more,
    }
