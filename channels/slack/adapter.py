"""Slack adapter: slack-bolt's AsyncApp over Socket Mode (default) or the HTTP Events API.

Endpoints come from the config: every Web API call, apps.connections.open included, goes to
`api_base_url`; Socket Mode connects to the URL that apps.connections.open returns. In HTTP mode
the adapter mounts POST /slack/events on the shared aiohttp server and checks Slack's signature
itself (so a refusal is logged with its reason) before bolt sees the request.

Every request is acknowledged at once: listeners only normalize and hand the event to a
background task, so a slow turn never delays the ack Slack wants within 3 seconds.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from channels.slack.config import SlackChannelConfig
from channels.slack.errors import SlackStartError, to_delivery_error
from channels.slack.media import locate, media_origins
from channels.slack.normalize import BotIdentity, normalize_command, normalize_event
from channels.slack.reactions import reaction_name
from channels.slack.render import to_mrkdwn
from gateway.core.events import Attachment, ConversationRef, MessageReceived, MessageRef, OutboundMessage
from gateway.core.handoff import hand_off
from gateway.core.logs import event
from gateway.core.ports import Capabilities, ChannelServices, DeliveryError, EventSink, Health, Rate

log = logging.getLogger("clawgate.channels.slack")
EVENTS_PATH = "/slack/events"
MAX_SKEW_SECONDS = 300  # Slack: refuse requests whose timestamp is more than five minutes away


class SlackAdapter:
    # Socket Mode keep-alive: a connection that died without a close frame is noticed (and
    # replaced) within about this many seconds. A close frame or a `disconnect` message from
    # Slack reconnects at once.
    ping_interval: float = 10.0

    def __init__(self, name: str, config: SlackChannelConfig, services: ChannelServices) -> None:
        self.name = name
        self.config = config
        self.services = services
        # Slack recommends at most 4,000 characters per message; rendering adds a little (&amp;).
        self.capabilities = Capabilities(
            can_edit=True,
            typing=False,
            threads=True,
            max_length=3900,
            pacing=pacing,
            rendered=to_mrkdwn,
            final_edit_matters=False,  # an update shows its text, final or not
        )
        # Groups: an answer goes into the thread of the message it answers; a personal command's
        # answer is an ephemeral message (gateway/turn/replies.py).
        self.capabilities = replace(self.capabilities, threads_any_message=True, private_commands=True)
        self._web = AsyncWebClient(
            token=config.bot_token.get_secret_value(),
            base_url=config.api_base_url,
            timeout=config.request_timeout,  # type: ignore[arg-type]  # float works: aiohttp.ClientTimeout
            retry_handlers=[],  # the gateway decides retries; the SDK must not repeat a send
            logger=logging.getLogger("clawgate.channels.slack.sdk"),
        )
        secret = config.signing_secret.get_secret_value() if config.signing_secret else None
        self._verifier = SignatureVerifier(secret) if secret else None
        self._app = AsyncApp(
            client=self._web,
            signing_secret=secret or "",  # "" keeps bolt from reading SLACK_SIGNING_SECRET
            # Listeners only hand events to our own tasks, so running them before the ack is quick
            # and leaves no untracked tasks inside bolt.
            process_before_response=True,
            request_verification_enabled=secret is not None,
            logger=logging.getLogger("clawgate.channels.slack.bolt"),
            name=f"clawgate-{name}",
        )
        self._register_listeners()
        # Files are downloaded by gateway/media from Slack's file host only (docs/media.md).
        self.media_origins = media_origins(config)
        self._sink: EventSink | None = None
        self._bot: BotIdentity | None = None
        self._handler: AsyncSocketModeHandler | None = None
        self._hello: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._started = False
        if config.mode == "http":
            self._mount(services.http)

    # -- adapter port ---------------------------------------------------------------------------

    async def start(self, sink: EventSink) -> None:
        # One pooled session for Web API calls (edits stream every second); the total timeout is
        # what makes a hung send fail as "maybe delivered" instead of hanging the turn.
        self._web.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.config.request_timeout))
        try:
            self._bot = await self._auth_test()
            self._sink = sink
            if self.config.mode == "socket":
                await self._connect_socket()
        except BaseException:
            await self.stop()
            raise
        self._started = True
        event(log, "slack_started", channel=self.name, mode=self.config.mode, bot=self._bot.user_id)

    async def stop(self) -> None:
        self._started = False
        self._sink = None
        handler, self._handler = self._handler, None
        if handler is not None:
            await self._close_socket(handler)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2)
        session, self._web.session = self._web.session, None
        if session is not None:
            await session.close()

    async def send(self, msg: OutboundMessage) -> MessageRef:
        conv = msg.conversation
        args: dict[str, Any] = {"channel": conv.chat_id, "text": to_mrkdwn(msg.text), "mrkdwn": True}
        if conv.thread_id:
            args["thread_ts"] = conv.thread_id
            if msg.reply_to is not None:
                args["reply_broadcast"] = True  # reply_mode quote: in the thread, and shown in the channel
        if msg.private_to is not None:
            return await self._send_private(conv, msg.private_to, args)
        # No plain-text fallback: mrkdwn is never rejected as badly formatted (Slack shows any
        # text it cannot parse as it is), so there is no formatting error to recover from.
        response = await self._call("chat.postMessage", self._web.chat_postMessage, **args)
        return MessageRef(conv, str(response["ts"]))

    async def _send_private(self, conv: ConversationRef, identity: str, args: dict[str, Any]) -> MessageRef:
        """An ephemeral message: only `identity` sees it, in the channel (or thread) it asked in."""
        user = identity.rpartition("/")[2] if identity.startswith("slack:") else ""
        if not user:
            raise DeliveryError(f"slack ephemeral message for {identity!r}: not a Slack user", retryable=False)
        args.pop("reply_broadcast", None)
        response = await self._call("chat.postEphemeral", self._web.chat_postEphemeral, user=user, **args)
        return MessageRef(conv, str(response.get("message_ts") or ""))

    async def edit(self, ref: MessageRef, text: str, final: bool) -> None:
        await self._call(
            "chat.update",
            self._web.chat_update,
            channel=ref.conversation.chat_id,
            ts=ref.message_id,
            text=to_mrkdwn(text),
        )

    async def react(self, ref: MessageRef, reaction: str) -> None:
        await self._reaction("reactions.add", self._web.reactions_add, ref, reaction, done="already_reacted")

    async def unreact(self, ref: MessageRef, reaction: str) -> None:
        await self._reaction("reactions.remove", self._web.reactions_remove, ref, reaction, done="no_reaction")

    async def _reaction(
        self, method: str, fn: Callable[..., Awaitable[Any]], ref: MessageRef, reaction: str, *, done: str
    ) -> None:
        """`done`: the error code saying the reaction is already as asked (one a crashed turn left
        behind is then still taken away at the end of the resumed one)."""
        name = reaction_name(reaction)
        if name is None:  # the config check refuses these; a reload may not have been checked
            raise DeliveryError(f"slack {method} failed: no Slack name for {reaction!r}", retryable=False)
        try:
            await self._call(method, fn, channel=ref.conversation.chat_id, timestamp=ref.message_id, name=name)
        except DeliveryError as exc:
            if not (isinstance(exc.__cause__, SlackApiError) and _code(exc.__cause__) == done):
                raise

    @asynccontextmanager
    async def typing(self, conv: ConversationRef) -> AsyncIterator[None]:
        # Bot users have no typing indicator in the Web API or Events API.
        yield

    def health(self) -> Health:
        if not self._started:
            return Health(False, "stopped")
        if self._handler is None:
            return Health(True, "serving http events")
        session = self._handler.client.current_session
        if session is None or session.closed:
            return Health(False, "socket mode reconnecting")
        return Health(True, "socket mode connected")

    # -- Web API ----------------------------------------------------------------------------------

    async def _call(self, method: str, fn: Callable[..., Awaitable[Any]], **kwargs: Any) -> Any:
        try:
            return await fn(**kwargs)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            err = to_delivery_error(exc, method)
            event(
                log,
                "slack_call_failed",
                logging.WARNING,
                channel=self.name,
                method=method,
                error=type(exc).__name__,
                retryable=err.retryable,
                maybe_delivered=err.maybe_delivered,
            )
            raise err from exc

    async def _auth_test(self) -> BotIdentity:
        try:
            resp = await self._web.auth_test()
        except SlackApiError as exc:
            raise SlackStartError(f"slack channel {self.name!r}: auth.test refused: {_code(exc)}") from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise SlackStartError(f"slack channel {self.name!r}: auth.test failed: {type(exc).__name__}") from exc
        return BotIdentity(user_id=str(resp["user_id"]), bot_id=resp.get("bot_id"), team_id=resp.get("team_id"))

    async def locate_media(self, attachment: Attachment) -> tuple[str, dict[str, str]]:
        """Where a file of a message is: files.info's private URL and the bot token to fetch it with."""
        return await locate(self._web, self.config.bot_token.get_secret_value(), attachment)

    # -- Socket Mode ------------------------------------------------------------------------------

    async def _connect_socket(self) -> None:
        assert self.config.app_token is not None, "config check requires app_token in socket mode"
        app_token = self.config.app_token.get_secret_value()
        handler = AsyncSocketModeHandler(
            self._app,
            app_token,
            logger=logging.getLogger("clawgate.channels.slack.socket"),
            web_client=self._web,
            ping_interval=self.ping_interval,
        )
        self._handler = handler
        self._hello = asyncio.Event()
        handler.client.message_listeners.append(self._on_socket_message)
        # The SDK's connect() retries forever on any error, a revoked app token included; asking
        # for the first URL ourselves makes a bad token fail start() with its error code.
        try:
            opened = await self._web.apps_connections_open(app_token=app_token)
        except SlackApiError as exc:
            raise SlackStartError(f"slack channel {self.name!r}: apps.connections.open refused: {_code(exc)}") from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise SlackStartError(
                f"slack channel {self.name!r}: apps.connections.open failed: {type(exc).__name__}"
            ) from exc
        handler.client.wss_uri = str(opened["url"])
        try:
            async with asyncio.timeout(max(10.0, self.config.request_timeout)):
                await handler.connect_async()
                await self._hello.wait()
        except TimeoutError as exc:
            raise SlackStartError(f"slack channel {self.name!r}: no Socket Mode hello from Slack") from exc

    async def _on_socket_message(self, client: object, message: dict[str, Any], raw: str | None) -> None:
        kind = message.get("type")
        if kind == "hello":
            if self._hello is not None:
                self._hello.set()
            event(log, "slack_socket_hello", channel=self.name, connections=message.get("num_connections"))
        elif kind == "disconnect":
            event(log, "slack_socket_disconnect", channel=self.name, reason=message.get("reason"))

    async def _close_socket(self, handler: AsyncSocketModeHandler) -> None:
        try:
            # The close handshake waits for the server's answer; a dead peer must not hold stop().
            async with asyncio.timeout(2):
                await handler.close_async()
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
            event(log, "slack_socket_close_failed", logging.WARNING, channel=self.name, error=type(exc).__name__)
        finally:
            client = handler.client
            client.closed = True
            for task in (client.message_processor, client.current_session_monitor, client.message_receiver):
                if task is not None:
                    task.cancel()
            if not client.aiohttp_client_session.closed:
                await client.aiohttp_client_session.close()

    # -- HTTP Events API --------------------------------------------------------------------------

    def _mount(self, http: object) -> None:
        if not isinstance(http, web.Application):
            raise TypeError("services.http must be an aiohttp web.Application")
        if any(r.canonical == EVENTS_PATH for r in http.router.resources()):
            raise ValueError(f"slack channel {self.name!r}: {EVENTS_PATH} is already served by another Slack channel")
        http.router.add_post(EVENTS_PATH, self._http_events)

    def _signature_problem(self, raw: bytes, headers: Any) -> str | None:
        """Why Slack's signature does not hold, or None when it does."""
        if self._verifier is None:
            return "no_signing_secret"
        timestamp = headers.get("X-Slack-Request-Timestamp")
        signature = headers.get("X-Slack-Signature")
        if not timestamp or not signature:
            return "missing_signature"
        try:
            skew = abs(time.time() - int(timestamp))
        except ValueError:
            return "bad_timestamp"
        if skew > MAX_SKEW_SECONDS:
            return "stale_timestamp"
        expected = self._verifier.generate_signature(timestamp=timestamp, body=raw)
        if expected is None or not hmac.compare_digest(expected, signature):
            return "bad_signature"
        return None

    async def _http_events(self, request: web.Request) -> web.StreamResponse:
        if self._sink is None:
            return web.Response(status=503, text="not started", headers={"Retry-After": "1"})
        raw = await request.read()
        problem = self._signature_problem(raw, request.headers)
        if problem is not None:
            event(log, "slack_request_refused", logging.WARNING, channel=self.name, reason=problem)
            return web.Response(status=401, text="invalid request signature")
        try:
            bolt_req = AsyncBoltRequest(body=raw.decode("utf-8"), query=request.query_string, headers=request.headers)  # type: ignore[arg-type]
            if not isinstance(bolt_req.body, dict) or not bolt_req.body:
                raise ValueError("empty body")
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            event(log, "slack_request_malformed", logging.WARNING, channel=self.name, error=type(exc).__name__)
            return web.Response(status=400, text="malformed request body")
        retry = request.headers.get("X-Slack-Retry-Num")
        if retry is not None:
            event(
                log,
                "slack_event_redelivered",
                channel=self.name,
                retry=retry,
                reason=request.headers.get("X-Slack-Retry-Reason"),
            )
        return await to_aiohttp_response(await self._app.async_dispatch(bolt_req))

    # -- listeners (both modes) -------------------------------------------------------------------

    def _register_listeners(self) -> None:
        app = self._app
        # A mention comes as a `message` and an `app_mention` event (and a workspace may subscribe
        # to app_mention alone): both normalize to the message's own identity, so the journal
        # (`_accepted`) takes whichever comes first and refuses the other (see normalize.py).
        app.event("message")(self._on_message)
        app.event("app_mention")(self._on_message)
        for name, _summary in self.services.commands:
            app.command(f"/{name}")(self._on_command)
        # Anything else Slack sends must still be acked, or it keeps redelivering it.
        app.command(re.compile(".*"))(self._on_unknown_command)
        app.event(re.compile(".*"))(self._ack_only)

    async def _on_message(self, body: dict[str, Any]) -> None:
        if self._bot is None:
            return
        ev = normalize_event(body, channel=self.name, bot=self._bot)
        if ev is not None and await self._accepted(ev):
            self._deliver(ev)

    async def _ack_only(self) -> None:
        return None

    async def _on_command(self, ack: Callable[..., Awaitable[Any]], body: dict[str, Any]) -> None:
        ev = normalize_command(body, channel=self.name)
        if ev is not None and not await self._accepted(ev):
            ev = None  # a retry of a command we have
        await ack()
        if ev is not None:
            self._deliver(ev)

    async def _accepted(self, ev: MessageReceived) -> bool:
        """Journal the event before Slack gets its acknowledgement (listeners run before the
        response here), so an instance dying right after it loses nothing. False: seen before.
        A journal failure raises: Slack gets no acknowledgement and delivers the event again."""
        accept = self.services.accept
        return True if accept is None else await accept(ev)

    async def _on_unknown_command(self, ack: Callable[..., Awaitable[Any]], body: dict[str, Any]) -> None:
        # Slack shows the ack text to the person who typed it (only to them).
        hint = " Try /help." if any(name == "help" for name, _ in self.services.commands) else ""
        await ack(f"I don't know {body.get('command') or 'that command'}.{hint}")
        event(log, "slack_unknown_command", channel=self.name, command=body.get("command"))

    def _deliver(self, ev: MessageReceived) -> None:
        if self._sink is None:
            event(log, "slack_event_dropped_stopped", logging.WARNING, channel=self.name, event_id=ev.event_id)
            return
        hand_off(self._sink, ev, platform="slack", channel=self.name, log=log, tasks=self._tasks)


def pacing(conv: ConversationRef) -> tuple[Rate, ...]:
    """Slack: about one message a second per channel (chat.postMessage), and chat.update in Tier 3,
    50+ a minute per workspace for the app: 45 a minute here, shared by all its conversations, so a
    busy workspace stays under the tier with room for the final edits."""
    return (Rate(f"channel:{conv.chat_id}", 1.0, burst=2), Rate("chat.update", 45 / 60, burst=3, sends=False))


def _code(exc: SlackApiError) -> str:
    data = getattr(exc.response, "data", None)
    return str(data.get("error")) if isinstance(data, dict) else f"status {getattr(exc.response, 'status_code', '?')}"


def create(name: str, config: SlackChannelConfig, services: ChannelServices) -> SlackAdapter:
    return SlackAdapter(name, config, services)
