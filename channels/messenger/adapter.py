"""Facebook Messenger channel: Meta's webhook on the shared aiohttp server, the Send API over aiohttp
(there is no maintained official Python SDK; Meta's own samples call the HTTP API directly).

Inbound: `GET webhook_path` answers the subscription check; `POST webhook_path` is verified
(X-Hub-Signature-256) on the raw bytes before anything is parsed, each event is journaled through
`services.accept` before Meta gets its 200 (a journal failure answers 503, so Meta delivers again),
and then handed to the sink in a task of its own. The journal keys events on the message's `mid`,
so a redelivered call is answered once.

Outbound: plain text (render.py) through the Send API, inside the 24-hour window (window.py), with
a typing indicator while a turn runs. Messenger cannot edit a sent message: the gateway sends the
finished text only, split at 2,000 characters.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from channels.messenger.config import MessengerChannelConfig
from channels.messenger.errors import GraphError, MessengerStartError, delivery_error
from channels.messenger.graph import GraphClient
from channels.messenger.media import MediaHosts
from channels.messenger.normalize import Incoming, normalize_body
from channels.messenger.render import render
from channels.messenger.signature import HEADER, problem
from channels.messenger.webhook import MAX_BODY_BYTES, subscription
from channels.messenger.window import Window, masked
from gateway.core.events import Attachment, ConversationRef, MessageReceived, MessageRef, OutboundMessage
from gateway.core.handoff import hand_off
from gateway.core.http_input import read_capped
from gateway.core.logs import event
from gateway.core.ports import (
    Capabilities,
    ChannelServices,
    DeliveryError,
    EventSink,
    Health,
    Rate,
    Unavailable,
    retry_after,
)
from gateway.core.splitting import utf16_len

log = logging.getLogger("clawgate.channels.messenger")

MAX_LENGTH = 2000  # Send API: message.text is at most 2,000 characters
_SENT_CAP = 10_000


class MessengerAdapter:
    def __init__(self, name: str, config: MessengerChannelConfig, services: ChannelServices) -> None:
        self.name = name
        self.config = config
        self.services = services
        self.capabilities = Capabilities(
            can_edit=False,
            typing=True,
            threads=False,
            max_length=MAX_LENGTH,
            length=utf16_len,  # never fewer than Meta's characters: a piece that fits here fits there
            pacing=pacing,
            rendered=render,
        )
        # Messenger shows "typing" for 20 s after typing_on, or until the Page's next message.
        self.typing_interval = 15.0
        self.clock = time.time
        self.window = Window(name, services.conversations, config.message_tag, clock=lambda: self.clock())
        self._media = MediaHosts(config)
        self._graph: GraphClient | None = None
        self._page_id: str | None = None
        self._page_name: str | None = None
        self._sink: EventSink | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # Per person, the number of the last message sent to them (typing_off is skipped after one).
        self._sent: OrderedDict[str, int] = OrderedDict()
        self._sends = itertools.count(1)
        self._started = False
        self._mount(services.http)

    # -- lifecycle ------------------------------------------------------------------------------

    def _mount(self, http: object) -> None:
        if not isinstance(http, web.Application):
            raise TypeError("the messenger webhook needs the shared aiohttp application")
        path = self.config.webhook_path
        if any(r.canonical == path for r in http.router.resources()):
            raise ValueError(f"messenger channel {self.name!r}: {path} is already served; give it its own webhook_path")
        http.router.add_get(path, self._verify)
        http.router.add_post(path, self._receive)

    async def start(self, sink: EventSink) -> None:
        cfg = self.config
        graph = GraphClient(
            cfg.api_base_url, cfg.graph_version, cfg.page_access_token.get_secret_value(), cfg.request_timeout
        )
        try:
            me = await graph.me()
        except GraphError as exc:
            await graph.close()
            event(log, "messenger_start_failed", logging.ERROR, channel=self.name, status=exc.status, error=exc.code)
            hint = " (the Page access token is expired, revoked or wrong)" if exc.code == 190 else ""
            raise MessengerStartError(f"messenger channel {self.name!r}: GET /me refused: {exc}{hint}") from exc
        except Exception as exc:
            await graph.close()
            event(log, "messenger_start_failed", logging.ERROR, channel=self.name, error=type(exc).__name__)
            raise MessengerStartError(
                f"messenger channel {self.name!r}: cannot reach {graph.base}: {type(exc).__name__}"
            ) from exc
        except BaseException:  # cancelled while asking: still release the HTTP client
            await graph.close()
            raise
        page = me.get("id")
        if not isinstance(page, str | int) or isinstance(page, bool) or not str(page):
            await graph.close()
            raise MessengerStartError(f"messenger channel {self.name!r}: GET /me named no Page id")
        self._graph, self._sink = graph, sink
        self._page_id, self._page_name = str(page), str(me.get("name") or "")
        self._started = True
        event(
            log,
            "messenger_started",
            channel=self.name,
            page=self._page_name,
            page_id=self._page_id,
            webhook=cfg.webhook_path,
        )

    async def stop(self) -> None:
        self._started = False
        self._sink = None
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        graph, self._graph = self._graph, None
        if graph is not None:
            await graph.close()
        event(log, "messenger_stopped", channel=self.name)

    def health(self) -> Health:
        if not self._started:
            return Health(False, "stopped")
        return Health(True, f"webhook at {self.config.webhook_path} for Page {self._page_name} ({self._page_id})")

    # -- media ----------------------------------------------------------------------------------

    @property
    def media_origins(self) -> frozenset[str]:
        return self._media.origins

    async def locate_media(self, attachment: Attachment) -> tuple[str, dict[str, str]]:
        return self._media.locate(attachment)

    # -- inbound --------------------------------------------------------------------------------

    async def _verify(self, request: web.Request) -> web.Response:
        challenge, why = subscription(request.query, self.config.verify_token.get_secret_value())
        if challenge is None:
            event(log, "messenger_subscription_refused", logging.WARNING, channel=self.name, reason=why)
            return web.Response(status=403, text="forbidden")
        event(log, "messenger_subscription_verified", channel=self.name)
        return web.Response(text=challenge, headers={"X-Content-Type-Options": "nosniff"})

    async def _receive(self, request: web.Request) -> web.Response:
        if not self._started:
            return web.Response(status=503, text="not ready", headers=retry_after(1))  # Meta delivers again
        raw = await read_capped(request, MAX_BODY_BYTES)
        if raw is None:
            event(log, "messenger_webhook_refused", logging.WARNING, channel=self.name, reason="body_too_large")
            return web.Response(status=413, text="too large")
        why = problem(self.config.app_secret.get_secret_value(), raw, request.headers.get(HEADER))
        if why is not None:
            event(log, "messenger_webhook_refused", logging.WARNING, channel=self.name, reason=why)
            return web.Response(status=403, text="forbidden")
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError included
            event(log, "messenger_webhook_malformed", logging.WARNING, channel=self.name, error=type(exc).__name__)
            return web.Response(status=400, text="malformed body")
        if body.get("object") != "page":
            event(log, "messenger_webhook_ignored", channel=self.name, object=str(body.get("object"))[:40])
            return web.Response(text="EVENT_RECEIVED")
        batch = normalize_body(body, channel=self.name, page_id=self._page_id, now=self.clock())
        if batch.foreign:
            event(log, "messenger_other_page", logging.WARNING, channel=self.name, events=batch.foreign)
        return await self._take(batch.incoming)

    async def _take(self, incoming: tuple[Incoming, ...]) -> web.Response:
        """Journal each event, then run the new ones; 503 if any could not be journaled (Meta sends the
        whole call again, and the ones journaled already are duplicates then)."""
        fresh: list[MessageReceived] = []
        failed: BaseException | None = None
        for item in incoming:
            await self.window.seen(item.psid, item.sent_at)
            ev = item.event
            try:
                if self.services.accept is None or await self.services.accept(ev):
                    fresh.append(ev)
                    event(log, "messenger_inbound", logging.DEBUG, channel=self.name, event_id=ev.event_id)
            except Exception as exc:
                failed = exc
                event(log, "messenger_not_journaled", logging.ERROR, channel=self.name, error=type(exc).__name__)
                break
        for ev in fresh:
            self._spawn(ev)
        if failed is not None:
            wait = failed.retry_after if isinstance(failed, Unavailable) else 5.0
            return web.Response(status=503, text="try again", headers=retry_after(wait))
        return web.Response(text="EVENT_RECEIVED")

    def _spawn(self, ev: MessageReceived) -> None:
        if self._sink is not None:
            hand_off(self._sink, ev, platform="messenger", channel=self.name, log=log, tasks=self._tasks)

    # -- outbound -------------------------------------------------------------------------------

    def _client(self) -> GraphClient:
        if self._graph is None:
            raise DeliveryError(f"messenger channel {self.name!r} is not started", retryable=True)
        return self._graph

    async def _call(self, op: str, body: dict[str, Any]) -> dict[str, Any]:
        graph = self._client()
        try:
            return await graph.send(body)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            err = delivery_error(exc, op)
            event(
                log,
                "messenger_call_failed",
                logging.WARNING,
                channel=self.name,
                op=op,
                recipient=masked(str(body.get("recipient", {}).get("id", ""))),
                error=str(exc)[:200] or type(exc).__name__,
                retryable=err.retryable,
                maybe_delivered=err.maybe_delivered,
            )
            raise err from exc

    async def send(self, msg: OutboundMessage) -> MessageRef:
        # A Messenger conversation is one person and the Page: a message `private_to` them is private anyway.
        conv = msg.conversation
        psid = conv.chat_id
        how = await self.window.decision(psid)
        text = render(msg.text)
        if not text.strip():
            text = msg.text if msg.text.strip() else "…"  # Meta refuses an empty message
        body: dict[str, Any] = {
            "recipient": {"id": psid},
            "messaging_type": how.messaging_type,
            "message": {"text": text},
        }
        if how.tag is not None:
            body["tag"] = how.tag
        answer = await self._call("send", body)
        self._sent[psid] = next(self._sends)
        self._sent.move_to_end(psid)
        while len(self._sent) > _SENT_CAP:
            self._sent.popitem(last=False)
        mid = answer.get("message_id")
        if not isinstance(mid, str) or not mid:
            # Meta took it (HTTP 200) but named no message: it was sent, and there is no id to keep.
            event(log, "messenger_send_without_id", logging.WARNING, channel=self.name, recipient=masked(psid))
            mid = msg.idempotency_key
        return MessageRef(conv, mid)

    async def edit(self, ref: MessageRef, text: str, final: bool) -> None:
        # can_edit is False: the gateway never asks. A caller that does gets a clear refusal.
        raise DeliveryError("messenger cannot edit a message once it is sent", retryable=False)

    async def _action(self, psid: str, action: str) -> None:
        try:
            await self._call("typing", {"recipient": {"id": psid}, "sender_action": action})
        except DeliveryError as exc:  # typing is cosmetic: never fail a turn over it
            event(log, "messenger_typing_failed", logging.DEBUG, channel=self.name, error=str(exc)[:200])

    @contextlib.asynccontextmanager
    async def typing(self, conv: ConversationRef) -> AsyncIterator[None]:
        psid = conv.chat_id
        if not await self.window.allows(psid):
            yield  # outside the window nothing may be sent, typing included
            return
        sent_before = self._sent.get(psid)
        done = asyncio.Event()
        task = asyncio.create_task(self._typing_loop(psid, done), name=f"messenger-typing:{conv.session_key}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            yield
        finally:
            done.set()
            await asyncio.gather(task, return_exceptions=True)
            # A message from the Page ends the indicator by itself; without one it would linger 20 s.
            if self._sent.get(psid) == sent_before and self._graph is not None:
                await self._action(psid, "typing_off")

    async def _typing_loop(self, psid: str, done: asyncio.Event) -> None:
        while not done.is_set():
            await self._action(psid, "typing_on")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.typing_interval):
                    await done.wait()


def pacing(conv: ConversationRef) -> tuple[Rate, ...]:
    """Meta publishes no per-second Send API rate, only daily ones per Page: a conservative pace per
    person (a message a second, three at once) and for the Page (40 a second). A rate limit is the
    app's or the Page's, so a refusal with a wait holds every conversation of the channel."""
    return (Rate(f"psid:{conv.chat_id}", 1.0, burst=3), Rate("page", 40.0, burst=40))


def create(name: str, config: MessengerChannelConfig, services: ChannelServices) -> MessengerAdapter:
    return MessengerAdapter(name, config, services)
