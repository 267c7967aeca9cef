"""Microsoft Teams adapter on the Microsoft 365 Agents SDK: the messaging endpoint on the shared
aiohttp server, and the SDK's Bot Connector client for replies.

Inbound, in this order: the JWT is checked (auth.py), the body parsed into the SDK's Activity model
(malformed: 400), the token tied to the activity, the conversation reference kept (references.py),
the activity normalized, the event journaled (`services.accept`) and only then answered 200 — Bot
Service gives a bot 15 seconds, so the turn runs afterwards, in a task of its own. A redelivery (the
same activity id) is answered once.

Outbound, every call goes to the conversation's service URL (or `api_base_url`) through the SDK's
ConversationsOperations, with the bot's token (token.py) in the Authorization header. The SDK never
retries; the gateway decides (errors.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
from aiohttp import web
from microsoft_agents.activity import Activity, ChannelAccount, ConversationAccount
from microsoft_agents.hosting.core.authorization import AgentAuthConfiguration
from microsoft_agents.hosting.core.connector.client.connector_client import (
    ConversationsOperations,
)
from pydantic import ValidationError

from channels.teams.auth import AuthError, KeysUnavailable, SigningKeys, TeamsTokenValidator, bearer, check_activity
from channels.teams.config import TeamsChannelConfig
from channels.teams.errors import TeamsStartError, delivery_error
from channels.teams.normalize import (
    Ignored,
    file_attachments,
    normalize_activity,
    reference_of,
    tenant_of,
    threaded,
)
from channels.teams.references import Reference, References
from channels.teams.render import render, rendered_length
from channels.teams.token import BotToken, default_token_url
from gateway.core.events import ConversationRef, MessageReceived, MessageRef, OutboundMessage
from gateway.core.handoff import hand_off
from gateway.core.logs import event
from gateway.core.ports import Capabilities, ChannelServices, DeliveryError, EventSink, Health, Rate

log = logging.getLogger("clawgate.channels.teams")
# The SDK's connector logs every call at INFO and every refusal at ERROR with a stack; the adapter
# logs each failure once, as one line (teams_call_failed), so the SDK's own lines are only noise.
logging.getLogger("microsoft_agents.hosting.core.connector").setLevel(logging.CRITICAL)

T = TypeVar("T")
# A message's text is at most this many UTF-16 units once rendered: the oldest documented size limit
# of a bot message is 28 KB of UTF-16 for the whole activity (later docs say 40 KB, then 100 KB), and
# 12,000 units are 24 KB, leaving room for the rest of the activity on any tenant.
MAX_LENGTH = 12_000
# Conversation ids can run past 150 characters; the SDK cuts longer ones (a rule meant for agentic
# requests), which would post to a conversation that does not exist.
MAX_CONVERSATION_ID = 4096
# An activity is a few kilobytes (Teams sends files as links); anything near this is not from Teams.
MAX_ACTIVITY_BYTES = 1024 * 1024


class TeamsAdapter:
    def __init__(self, name: str, config: TeamsChannelConfig, services: ChannelServices) -> None:
        self.name = name
        self.config = config
        self.services = services
        self.capabilities = Capabilities(
            can_edit=True,
            typing=True,
            threads=True,
            max_length=MAX_LENGTH,
            length=rendered_length,
            pacing=pacing,
            rendered=render,
            final_edit_matters=False,  # an update shows its text, final or not
        )
        self.typing_interval = 3.0  # a typing indicator fades after a few seconds unless renewed
        self._http: aiohttp.ClientSession | None = None
        self._connector: aiohttp.TCPConnector | None = None
        self._clients: dict[str, tuple[aiohttp.ClientSession, Any]] = {}
        auth = AgentAuthConfiguration(client_id=config.app_id, tenant_id=config.tenant_id)
        self.keys = SigningKeys(config.openid_metadata_url, self._session, timeout=config.request_timeout)
        self.validator = TeamsTokenValidator(auth, self.keys)
        self.token = BotToken(
            config.token_url or default_token_url(config.tenant_id),
            config.app_id,
            config.app_password.get_secret_value(),
            self._session,
        )
        self.references = References(name, services.conversations)
        self._sink: EventSink | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._typing: dict[str, set[asyncio.Event]] = {}  # session key -> its typing loops' stop signals
        self._started = False
        self._mount(services.http)

    # -- lifecycle ------------------------------------------------------------------------------

    def _mount(self, http: object) -> None:
        if not isinstance(http, web.Application):
            raise TypeError("the teams endpoint needs the shared aiohttp application")
        path = self.config.endpoint_path
        if any(r.canonical == path for r in http.router.resources()):
            raise TeamsStartError(f"teams channel {self.name!r}: {path} is already served by another channel")
        http.router.add_post(path, self._endpoint)

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None:
            raise DeliveryError(f"teams channel {self.name!r} is not started", retryable=True)
        return self._http

    async def start(self, sink: EventSink) -> None:
        timeout = aiohttp.ClientTimeout(total=self.config.request_timeout)
        self._connector = aiohttp.TCPConnector(limit=64)
        self._http = aiohttp.ClientSession(connector=self._connector, connector_owner=False, timeout=timeout)
        self._sink = sink
        self._started = True
        event(
            log, "teams_started", channel=self.name, endpoint=self.config.endpoint_path, app=masked(self.config.app_id)
        )

    async def stop(self) -> None:
        self._started = False
        self._sink = None
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        clients, self._clients = list(self._clients.values()), {}
        sessions = [s for s, _ in clients] + ([self._http] if self._http is not None else [])
        self._http = None
        for session in sessions:
            await session.close()
        if self._connector is not None:
            await self._connector.close()
            self._connector = None
        event(log, "teams_stopped", channel=self.name)

    def health(self) -> Health:
        if not self._started:
            return Health(False, "stopped")
        return Health(True, f"endpoint {self.config.endpoint_path}, app {masked(self.config.app_id)}")

    # -- inbound --------------------------------------------------------------------------------

    def _refuse(self, status: int, reason: str, request: web.Request) -> web.Response:
        """Refuse with `status`. The reason goes to the log; a caller without a valid token is told
        nothing about what was wrong with it."""
        event(
            log,
            "teams_request_refused",
            logging.WARNING,
            channel=self.name,
            status=status,
            reason=reason,
            peer=request.remote,
        )
        return web.json_response({"error": "unauthorized" if status == 401 else reason}, status=status)

    async def _endpoint(self, request: web.Request) -> web.Response:
        if not self._started:
            return web.json_response({"error": "not ready"}, status=503)  # Bot Service retries later
        try:
            verified = await self.validator.verify(bearer(request.headers.get("Authorization")))
        except AuthError as exc:
            return self._refuse(401, exc.reason, request)
        except KeysUnavailable:
            return self._refuse(503, "signing keys unavailable", request)
        try:
            raw = await request.read()  # at most the shared server's client_max_size
        except web.HTTPRequestEntityTooLarge:
            return self._refuse(413, "activity too large", request)
        if len(raw) > MAX_ACTIVITY_BYTES:
            return self._refuse(413, "activity too large", request)
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("not a JSON object")
            activity = Activity.model_validate(body)  # the shape the SDK accepts
            if not activity.type or activity.conversation is None:
                raise ValueError("an activity needs a type and a conversation")
        except (ValueError, ValidationError) as exc:
            return self._refuse(400, f"malformed activity ({type(exc).__name__})", request)
        try:
            check_activity(verified, body)
        except AuthError as exc:
            return self._refuse(401, exc.reason, request)
        tenant, theirs = self.config.tenant_id, tenant_of(body)
        if tenant and theirs and theirs.lower() != tenant.lower():  # a single-tenant bot talks to its own
            return self._refuse(403, "activity from another tenant", request)
        if (found := reference_of(body)) is not None:
            await self.references.remember(*found)
        normalized = normalize_activity(body, channel=self.name)
        if isinstance(normalized, Ignored):
            event(log, "teams_activity_ignored", logging.DEBUG, channel=self.name, reason=normalized.reason)
            return web.Response(status=200)
        if files := file_attachments(body):
            event(log, "teams_attachments_ignored", logging.DEBUG, channel=self.name, count=files)
        return await self._accept(normalized)

    async def _accept(self, ev: MessageReceived) -> web.Response:
        accept = self.services.accept
        if accept is not None:
            # Journaled before the 200: once Bot Service forgets the activity, it is in the database.
            try:
                if not await accept(ev):
                    event(log, "teams_redelivery", logging.DEBUG, channel=self.name, event_id=ev.event_id)
                    return web.Response(status=200)
            except Exception as exc:
                event(log, "teams_not_journaled", logging.ERROR, channel=self.name, error=type(exc).__name__)
                return web.json_response({"error": "try again"}, status=503)
        event(log, "teams_inbound", logging.DEBUG, channel=self.name, event_id=ev.event_id, kind=ev.ref.kind.value)
        self._spawn(ev)
        return web.Response(status=200)

    def _spawn(self, ev: MessageReceived) -> None:
        sink = self._sink
        if sink is None:
            return
        hand_off(sink, ev, platform="teams", channel=self.name, log=log, tasks=self._tasks)

    # -- outbound -------------------------------------------------------------------------------

    async def _reference(self, conv: ConversationRef) -> Reference:
        found = await self.references.find(conv.chat_id)
        if found is None:
            raise DeliveryError(
                f"teams channel {self.name!r}: no conversation reference for {conv.chat_id!r}; "
                "the bot can write only where it has received a message or been installed",
                retryable=False,
            )
        return found

    def _operations(self, ref: Reference) -> tuple[aiohttp.ClientSession, Any]:
        base = (self.config.api_base_url or ref.service_url).rstrip("/") + "/"
        found = self._clients.get(base)
        if found is None:
            if self._connector is None or self._http is None:
                raise DeliveryError(f"teams channel {self.name!r} is not started", retryable=True)
            session = aiohttp.ClientSession(
                base_url=base,
                connector=self._connector,
                connector_owner=False,
                timeout=self._http.timeout,
                headers={"Accept": "application/json"},
            )
            found = self._clients[base] = (
                session,
                ConversationsOperations(session, max_conversation_id_length=MAX_CONVERSATION_ID),
            )
        return found

    async def _call(self, op: str, conv: ConversationRef, fn: Callable[[Any, Reference], Awaitable[T]]) -> T:
        """One Bot Connector call with the bot's token; a token refused (401) is renewed once."""
        try:
            ref = await self._reference(conv)
            session, operations = self._operations(ref)

            async def attempt(token: str) -> T:
                session.headers["Authorization"] = f"Bearer {token}"
                return await fn(operations, ref)

            token = await self.token.token()
            try:
                return await attempt(token)
            except aiohttp.ClientResponseError as exc:
                if exc.status != 401:
                    raise
            self.token.forget(token)  # revoked or expired early: a 401 means nothing was done
            return await attempt(await self.token.token())
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            err = delivery_error(exc, op)
            event(
                log,
                "teams_call_failed",
                logging.WARNING,
                channel=self.name,
                op=op,
                error=str(err),
                retryable=err.retryable,
                maybe_delivered=err.maybe_delivered,
            )
            raise err from exc

    def _activity(self, ref: Reference, conv: ConversationRef, **fields: Any) -> Any:
        return Activity(
            from_property=ChannelAccount(id=ref.bot_id, name=ref.bot_name),
            conversation=ConversationAccount(id=threaded(ref.conversation_id, conv.thread_id), tenant_id=ref.tenant_id),
            channel_id="msteams",
            **fields,
        )

    async def send(self, msg: OutboundMessage) -> MessageRef:
        if msg.private_to is not None:
            # Teams has no message only one member of a chat sees: never post it for all.
            raise DeliveryError("teams cannot send a private message in a group", retryable=False)
        conv = msg.conversation
        reply_to = msg.reply_to.message_id if msg.reply_to is not None else None

        async def call(operations: Any, ref: Reference) -> Any:
            fields: dict[str, Any] = {"type": "message", "text": render(msg.text), "text_format": "markdown"}
            target = threaded(ref.conversation_id, conv.thread_id)
            if reply_to:  # Bot Framework's reply: in a channel's thread, and pointing at the question
                return await operations.reply_to_activity(
                    target, reply_to, self._activity(ref, conv, reply_to_id=reply_to, **fields)
                )
            return await operations.send_to_conversation(target, self._activity(ref, conv, **fields))

        sent = await self._call("send", conv, call)
        self._note_sent(conv)
        return MessageRef(conv, str(sent.id or ""))

    async def edit(self, ref: MessageRef, text: str, final: bool) -> None:
        conv = ref.conversation

        async def call(operations: Any, found: Reference) -> Any:
            activity = self._activity(
                found, conv, type="message", id=ref.message_id, text=render(text), text_format="markdown"
            )
            return await operations.update_activity(
                threaded(found.conversation_id, conv.thread_id), ref.message_id, activity
            )

        await self._call("edit", conv, call)

    def _note_sent(self, conv: ConversationRef) -> None:
        for first_message in self._typing.get(conv.session_key, ()):
            first_message.set()

    @contextlib.asynccontextmanager
    async def typing(self, conv: ConversationRef) -> AsyncIterator[None]:
        """Show the bot typing until the reply's first message is out: Teams hides the indicator when a
        message arrives, and each one spends the conversation's rate budget that the edits need."""
        stop = asyncio.Event()
        waiting = self._typing.setdefault(conv.session_key, set())
        waiting.add(stop)
        task = asyncio.create_task(self._typing_loop(conv, stop), name=f"teams-typing:{conv.session_key}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            yield
        finally:
            stop.set()
            waiting.discard(stop)
            if not waiting:
                self._typing.pop(conv.session_key, None)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _typing_loop(self, conv: ConversationRef, stop: asyncio.Event) -> None:
        async def call(operations: Any, ref: Reference) -> Any:
            return await operations.send_to_conversation(
                threaded(ref.conversation_id, conv.thread_id), self._activity(ref, conv, type="typing")
            )

        while not stop.is_set():
            try:
                await self._call("typing", conv, call)
            except DeliveryError:
                return  # cosmetic, and logged: never fail a turn over it, nor keep trying
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.typing_interval):
                    await stop.wait()


def pacing(conv: ConversationRef) -> tuple[Rate, ...]:
    """Teams' limits per bot per conversation (a chat, or a whole channel with all its threads):
    7 operations a second, 8 in 2 s, 60 in 30 s, 1800 an hour ("Optimize your bot with rate limiting",
    per bot per thread), and 30 requests a second per app per tenant. The hour's budget binds a long
    reply: 5 at once, then one every 2.2 s, stays within each window (5 + 0.45 t <= the window's
    count). The app's budget is held to 15 a second with 15 at once: never 30 in any second."""
    return (Rate(f"conversation:{conv.chat_id}", 0.45, burst=5), Rate("app", 15.0, burst=15, hold=False))


def masked(app_id: str) -> str:
    """An app id as logs and the doctor show it: enough to tell two apart, not to copy."""
    app_id = app_id.strip()
    return f"{app_id[:4]}…{app_id[-4:]}" if len(app_id) > 12 else "…"


def create(name: str, config: TeamsChannelConfig, services: ChannelServices) -> TeamsAdapter:
    return TeamsAdapter(name, config, services)
