"""Web channel: the chat page, its WebSocket, and the REST message API, on the shared server."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web

from channels.web.config import WebChannelConfig
from channels.web.media import UploadError, Uploads, body_cap, parse_files, upload_budget
from channels.web.render import rendered
from channels.web.sockets import Sockets
from gateway.core.events import (
    Actor,
    Attachment,
    ConversationKind,
    ConversationRef,
    MessageReceived,
    MessageRef,
    OutboundMessage,
)
from gateway.core.http_input import BadJson, BodyTooLarge, is_local_request, parse_json, read_body
from gateway.core.logs import event
from gateway.core.ports import (
    Capabilities,
    ChannelServices,
    EventSink,
    Health,
    HistoryItem,
    KeyReused,
    SessionBusy,
    Throttled,
    Unavailable,
    retry_after,
)

log = logging.getLogger("clawgate.channels.web")
STATIC = Path(__file__).with_name("static")
# The chat page's script and styles are files of their own: nothing inline runs or applies.
PAGE_HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": "default-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
_CONV_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
# A body or frame this large (a message with files) is decoded off the event loop.
_LARGE_JSON = 1024 * 1024
# Rendering Markdown costs 2-5 ms per KB (render.py, measured: 20 KB of dense Markdown with lists,
# tables and code ~80-95 ms, 20 KB of prose ~40 ms, 8 KB dense ~40 ms). A streamed update carries HTML
# up to _LIVE_HTML characters (~20 ms at worst); past that the page shows the update's text until the
# final frame, which always carries it. Longer texts render in a thread, so other sockets get turns.
_LIVE_HTML = 4 * 1024
_TITLE_CHARS = 60  # a conversation's title in the list: the start of its first message


def valid_conversation(conv: object) -> str | None:
    """A client-chosen conversation id: 1-64 safe characters. None when absent."""
    if conv is None or conv == "":
        return None
    if not isinstance(conv, str) or len(conv) > 64 or not set(conv) <= _CONV_CHARS:
        raise ValueError("conversation must be 1-64 characters of letters, digits, '-', '_' or '.'")
    return conv


@dataclass(slots=True)
class _Pending:
    future: asyncio.Future[tuple[str, str]]
    ref_id: str | None = None


class WebAdapter:
    def __init__(self, name: str, config: WebChannelConfig, services: ChannelServices) -> None:
        self.name = name
        self.config = config
        self.services = services
        # Not durable: a reply lives in the session history, and a send only pushes it to the open
        # page or the waiting request, so nothing needs claiming before it goes out.
        self.capabilities = Capabilities(
            can_edit=True,
            typing=True,
            threads=True,
            max_length=1_000_000,
            min_edit_interval=0.05,
            durable_sends=False,
            shows_history=True,
        )
        self._sink: EventSink | None = None
        self._pending: dict[str, _Pending] = {}
        self._ref_event: dict[str, str] = {}
        self._sockets = Sockets()
        self._tasks: set[asyncio.Task[None]] = set()
        self._running: dict[str, set[str]] = {}  # session key -> event ids of the page's turns running
        self._started = False
        # Files sent with a message live here until its turn ends (docs/media.md); nothing is downloaded.
        self._uploads = Uploads()
        self.media_origins: frozenset[str] = frozenset()
        self._upload_budget = upload_budget(config.media)
        self._body_cap = body_cap(config)
        app = services.http
        assert isinstance(app, web.Application)
        app.router.add_get("/", self._index)
        app.router.add_get("/chat.js", self._script)
        app.router.add_get("/chat.css", self._style)
        app.router.add_get("/favicon.ico", self._favicon)
        app.router.add_get("/ws", self._ws)
        app.router.add_post("/api/v1/messages", self._post_message)
        app.router.add_get("/api/v1/messages", self._get_messages)

    # -- adapter port ---------------------------------------------------------------------------

    async def start(self, sink: EventSink) -> None:
        self._sink = sink
        self._started = True

    async def stop(self) -> None:
        self._started = False
        for group in list(self._sockets.by_conv.values()):
            for ws in list(group):
                await ws.close(code=1001, message=b"server shutting down")
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)

    async def send(self, msg: OutboundMessage) -> MessageRef:
        pending = self._pending.get(msg.in_reply_to_event or "")
        first = pending is not None and pending.ref_id is None
        # A request's reply is named after the request, so that a replay of it (a retry with the
        # same Idempotency-Key) names the same message; anything else gets a random id.
        ref = MessageRef(msg.conversation, _reply_id(msg.in_reply_to_event) if first else uuid.uuid4().hex)
        if msg.in_reply_to_event:
            self._ref_event[ref.message_id] = msg.in_reply_to_event
            if pending is not None:
                pending.ref_id = ref.message_id
        await self._deliver(ref, msg.text, msg.final, msg.in_reply_to_event)
        return ref

    async def edit(self, ref: MessageRef, text: str, final: bool) -> None:
        await self._deliver(ref, text, final, self._ref_event.get(ref.message_id))

    async def _deliver(self, ref: MessageRef, text: str, final: bool, event_id: str | None) -> None:
        # The page shows `html`, never `text`, as HTML: it is rendered and cleaned here (render.py).
        # A REST call or a page that went away has no socket here: nothing to render for.
        frame = {"type": "reply", "id": ref.message_id, "text": text, "final": final, "event": event_id}
        key = ref.conversation.session_key
        if self._sockets.watched(key) and (final or len(text) <= _LIVE_HTML):
            frame["html"] = await rendered(text)
        await self._sockets.push(key, frame)
        if final:
            self._ref_event.pop(ref.message_id, None)
            pending = self._pending.get(event_id or "")
            if pending is not None and not pending.future.done():
                pending.future.set_result((text, ref.message_id))

    @asynccontextmanager
    async def typing(self, conv: ConversationRef) -> AsyncIterator[None]:
        await self._sockets.push(conv.session_key, {"type": "typing", "on": True})
        try:
            yield
        finally:
            await self._sockets.push(conv.session_key, {"type": "typing", "on": False})

    def health(self) -> Health:
        return Health(self._started, "serving" if self._started else "stopped")

    async def locate_media(self, attachment: Attachment) -> bytes:
        """A file sent with a message whose turn is running: its bytes (gateway/media reads them)."""
        return self._uploads.get(attachment)

    # -- helpers ---------------------------------------------------------------------------------

    def _conversation(self, user_id: str, conv: str | None) -> ConversationRef:
        return ConversationRef(self.name, user_id, conv, ConversationKind.DM)

    def _bearer(self, request: web.Request) -> str | None:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        return token.strip() if scheme.lower() == "bearer" and token.strip() else None

    def _api_user(self, request: web.Request) -> str:
        try:
            user = self.services.authenticate(self._bearer(request), request.remote)
        except Throttled as exc:
            raise _json_error(429, str(exc), retry_after(exc.retry_after)) from None
        if user is None:
            raise _json_error(401, "missing or invalid bearer token", {"WWW-Authenticate": "Bearer"})
        return user

    def _local_visitor(self, request: web.Request) -> bool:
        """A visitor on this machine, who may chat without a token: a loopback peer that asked for
        a loopback name (a DNS-rebinding page is a loopback peer too, under a name of its own)."""
        return self.config.allow_local_anonymous and self.config.is_loopback and is_local_request(request)

    def _event(
        self,
        user_id: str,
        conv: str | None,
        text: str,
        event_id: str | None,
        wants_stream: bool = True,
        files: list[tuple[Attachment, bytes]] | None = None,
    ) -> MessageReceived:
        return MessageReceived(
            event_id=f"{self.name}:{user_id}:{event_id or uuid.uuid4().hex}",
            ref=self._conversation(user_id, conv),
            sender=Actor(f"web:{user_id}", user_id),
            text=text,
            mentions_bot=True,
            wants_stream=wants_stream,
            attachments=tuple(att for att, _ in files or ()),
        )

    async def _run(self, ev: MessageReceived, files: list[tuple[Attachment, bytes]] | None = None) -> _Reply:
        """Hand an event to the gateway and wait for its final reply. An event seen before (a
        retry with the same idempotency key) gets the reply recorded for it (`replayed`), once the
        first try is over; _DuplicateEvent when there is none to give."""
        if self._sink is None:
            raise _json_error(503, "the gateway is starting; try again shortly", {"Retry-After": "1"})
        first = self._pending.get(ev.event_id)
        if first is not None:  # the same request is being answered here right now: share its answer
            try:
                text, message_id = await asyncio.shield(first.future)
                return _Reply(text, message_id, replayed=True)
            except asyncio.CancelledError:
                if not first.future.cancelled():
                    raise  # this request was cancelled, not the first one's wait
        loop = asyncio.get_running_loop()
        pending = self._pending[ev.event_id] = _Pending(loop.create_future())
        self._uploads.keep(ev.event_id, files or [])
        try:
            await self._sink(ev)
            recorded = None
            if not pending.future.done() and self.services.replay is not None:
                recorded = await self.services.replay(ev)  # may answer the event itself (see Router.replay)
            if pending.future.done():
                text, message_id = pending.future.result()
                return _Reply(text, message_id)
            if recorded is None:
                raise _DuplicateEvent()
            return _Reply(recorded.text, recorded.message_id or _reply_id(ev.event_id), replayed=True)
        finally:
            if self._pending.get(ev.event_id) is pending:
                del self._pending[ev.event_id]
                self._uploads.drop(ev.event_id)  # the turn is over: the files' bytes go with it
            if not pending.future.done():
                pending.future.cancel()  # a retry waiting on it goes its own way (see above)

    # -- HTTP handlers ---------------------------------------------------------------------------

    async def _index(self, request: web.Request) -> web.StreamResponse:
        return self._static("index.html")

    async def _script(self, request: web.Request) -> web.StreamResponse:
        return self._static("chat.js")

    async def _style(self, request: web.Request) -> web.StreamResponse:
        return self._static("chat.css")

    def _static(self, name: str) -> web.StreamResponse:
        return web.FileResponse(STATIC / name, headers=PAGE_HEADERS)

    async def _favicon(self, request: web.Request) -> web.Response:
        return web.Response(status=204, headers={"Cache-Control": "max-age=86400"})

    async def _read_json(self, request: web.Request) -> dict[str, Any]:
        try:
            raw = await read_body(request, self._body_cap)
        except BodyTooLarge:
            raise _json_error(413, f"message too large: the limit is {self._body_cap} bytes with its files") from None
        try:
            body = await _parsed(raw)
        except BadJson as exc:
            raise _json_error(400, str(exc)) from None
        if not isinstance(body, dict):
            raise _json_error(400, "the body must be a JSON object")
        return body

    def _text(self, value: object, *, with_files: bool = False) -> str:
        if with_files and (value is None or (isinstance(value, str) and not value.strip())):
            return ""  # a picture or a file alone is a message
        if not isinstance(value, str) or not value.strip():
            raise _json_error(400, "'text' must be a non-empty string")
        if len(value.encode("utf-8", "surrogatepass")) > self.config.max_message_bytes:
            raise _json_error(413, f"message too large: the limit is {self.config.max_message_bytes} bytes")
        if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
            raise _json_error(400, "'text' contains invalid Unicode (lone surrogates)")
        return value

    def _files(self, value: object) -> list[tuple[Attachment, bytes]]:
        try:
            return parse_files(value, self._upload_budget)
        except UploadError as exc:
            raise _json_error(exc.status, str(exc)) from None

    async def _post_message(self, request: web.Request) -> web.Response:
        user_id = self._api_user(request)
        body = await self._read_json(request)
        files = self._files(body.get("files"))
        text = self._text(body.get("text"), with_files=bool(files))
        try:
            conv = valid_conversation(body.get("conversation"))
        except ValueError as exc:
            raise _json_error(400, str(exc)) from None
        idem = request.headers.get("Idempotency-Key")
        if idem is not None and not (0 < len(idem) <= 128):
            raise _json_error(400, "Idempotency-Key must be 1-128 characters")
        ev = self._event(user_id, conv, text, idem, wants_stream=False, files=files)
        try:
            reply = await self._run(ev, files)
        except _DuplicateEvent:
            raise _json_error(409, "a request with this Idempotency-Key was already processed") from None
        except KeyReused:
            raise _json_error(422, "this Idempotency-Key was already used for a different message") from None
        except SessionBusy:
            raise _json_error(429, "too many messages waiting in this conversation", {"Retry-After": "2"}) from None
        except Unavailable as exc:
            raise _json_error(503, exc.reason, retry_after(exc.retry_after)) from None
        return web.json_response(
            {"reply": reply.text, "session": ev.ref.session_key, "message_id": reply.message_id},
            headers={"Idempotent-Replayed": "true"} if reply.replayed else None,
        )

    async def _get_messages(self, request: web.Request) -> web.Response:
        user_id = self._api_user(request)
        try:
            conv = valid_conversation(request.query.get("conversation"))
        except ValueError as exc:
            raise _json_error(400, str(exc)) from None
        items = await self.services.history(self._conversation(user_id, conv), f"web:{user_id}")
        return web.json_response({"messages": [{"role": i.role, "text": i.text} for i in items]})

    async def _page_history(self, ref: ConversationRef, user_id: str) -> list[dict[str, Any]]:
        """The conversation as the page showed it: the assistant's and the gateway's words with their HTML."""
        items = await self.services.history(ref, f"web:{user_id}")
        return [await _history_item(i) for i in items]

    async def _conversation_list(self, user_id: str) -> list[dict[str, Any]]:
        """This person's web conversations, most recent first (in `ready` and `conversations` frames)."""
        if self.services.threads is None:
            return []
        found = await self.services.threads(self._conversation(user_id, None), f"web:{user_id}")
        return [{"id": c.thread_id, "title": _title(c.title), "updated_at": c.updated_at} for c in found]

    def _stop(self, key: str) -> bool:
        """Stop the replies running in conversation `key` (the page's Stop button); False: none ran."""
        running = self._running.get(key)
        if not running or self.services.stop_turn is None:
            return False
        for event_id in running:
            self.services.stop_turn(event_id)
        return True

    async def _ws(self, request: web.Request) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        allowed = _allowed_origins(request) | ({self.config.public_url} if self.config.public_url else set())
        if origin is not None and origin.rstrip("/") not in allowed:
            event(log, "web_ws_origin_refused", logging.WARNING, origin=origin)
            raise web.HTTPForbidden(text="cross-origin WebSocket refused")
        ws = web.WebSocketResponse(heartbeat=30, max_msg_size=self._body_cap)
        await ws.prepare(request)
        user_id: str | None = None
        token: str | None = None
        key: str | None = None
        conv: str | None = None
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    if msg.type == WSMsgType.ERROR:
                        break
                    continue
                try:
                    frame = await _parsed(msg.data, what="the frame")
                except BadJson as exc:
                    await ws.send_json({"type": "error", "error": f"malformed frame: {exc}"})
                    continue
                if not isinstance(frame, dict):
                    await ws.send_json({"type": "error", "error": "malformed frame: send JSON objects"})
                    continue
                kind = frame.get("type")
                if kind == "hello":
                    token = frame.get("token") or None
                    if token is not None and not isinstance(token, str):
                        token = str(token)
                    try:
                        user_id = self.services.authenticate(token, request.remote) if token else None
                    except Throttled as exc:
                        await ws.send_json({"type": "error", "error": f"unauthorized: {exc}", "fatal": True})
                        break
                    if user_id is None and token is None and self._local_visitor(request):
                        user_id = self.config.local_user
                    if user_id is None:
                        await ws.send_json(
                            {"type": "error", "error": "unauthorized: a valid token is required", "fatal": True}
                        )
                        break
                    try:
                        conv = valid_conversation(frame.get("conversation"))
                    except ValueError as exc:
                        await ws.send_json({"type": "error", "error": str(exc), "fatal": True})
                        break
                    if key is not None:
                        self._sockets.remove(key, ws)
                    ref = self._conversation(user_id, conv)
                    key = ref.session_key
                    self._sockets.add(key, ws)
                    await ws.send_json(
                        {
                            "type": "ready",
                            "user": user_id,
                            "conversation": conv,
                            "history": await self._page_history(ref, user_id),
                            "max_upload_bytes": self._upload_budget,
                            "running": bool(self._running.get(key)),
                            "conversations": await self._conversation_list(user_id),
                        }
                    )
                elif kind == "conversations":
                    if user_id is None:
                        await ws.send_json({"type": "error", "error": "say hello first"})
                        continue
                    await ws.send_json(
                        {"type": "conversations", "conversations": await self._conversation_list(user_id)}
                    )
                elif kind == "stop":
                    if user_id is None or key is None:
                        await ws.send_json({"type": "error", "error": "say hello first"})
                        continue
                    await ws.send_json({"type": "stopping", "running": self._stop(key)})
                elif kind == "message":
                    if user_id is None:
                        await ws.send_json({"type": "error", "error": "say hello first"})
                        continue
                    if token is not None and self._revoked(token, user_id, request):
                        # The token was taken out of the config (a reload) since this socket said hello.
                        event(log, "web_ws_token_revoked", logging.WARNING, user=user_id)
                        await ws.send_json(
                            {"type": "error", "error": "unauthorized: this token is no longer valid", "fatal": True}
                        )
                        break
                    try:
                        files = self._files(frame.get("files"))
                        text = self._text(frame.get("text"), with_files=bool(files))
                    except web.HTTPException as exc:
                        await ws.send_json({"type": "error", "error": json.loads(exc.text or "{}").get("error")})
                        continue
                    client_id = frame.get("id")
                    client_id = client_id if isinstance(client_id, str) and 0 < len(client_id) <= 64 else None
                    ev = self._event(user_id, conv, text, client_id, files=files)
                    task = asyncio.create_task(self._ws_turn(ws, ev, files))
                    running = self._running.setdefault(ev.ref.session_key, set())
                    running.add(ev.event_id)
                    task.add_done_callback(functools.partial(self._turn_over, ev.ref.session_key, ev.event_id))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                else:
                    await ws.send_json({"type": "error", "error": f"unknown frame type {kind!r}"})
        finally:
            if key is not None:
                self._sockets.remove(key, ws)
        return ws

    async def _ws_turn(
        self, ws: web.WebSocketResponse, ev: MessageReceived, files: list[tuple[Attachment, bytes]]
    ) -> None:
        try:
            # A message id sent again is not answered again: its reply reached this conversation's
            # sockets when it was made, and a reconnecting page gets it with the history.
            await self._run(ev, files)
        except (_DuplicateEvent, KeyReused):
            pass
        except SessionBusy:
            await self._ws_error(ws, "busy: too many messages waiting, try again shortly", ev)
        except Unavailable as exc:
            await self._ws_error(ws, exc.reason, ev)
        except Exception as exc:
            event(log, "web_turn_failed", logging.ERROR, error=type(exc).__name__)
            await self._ws_error(ws, "internal error", ev)

    def _turn_over(self, key: str, event_id: str, _task: object) -> None:
        running = self._running.get(key)
        if running is not None:
            running.discard(event_id)
            if not running:
                del self._running[key]

    def _revoked(self, token: str, user_id: str, request: web.Request) -> bool:
        """Whether a socket's token stopped being `user_id`'s since it said hello (a reload)."""
        try:
            return self.services.authenticate(token, request.remote) != user_id
        except Throttled:
            return True

    async def _ws_error(self, ws: web.WebSocketResponse, reason: str, ev: MessageReceived) -> None:
        if not ws.closed:
            await ws.send_json({"type": "error", "error": reason, "event": ev.event_id})


_REPLY_IDS = uuid.UUID("5f0c3a4e-8d7b-4c52-9a61-3b2f7e9d1c08")  # a namespace of this adapter's own


def _reply_id(event_id: str | None) -> str:
    return uuid.uuid5(_REPLY_IDS, event_id or "").hex


class _DuplicateEvent(Exception):
    pass


@dataclass(frozen=True, slots=True)
class _Reply:
    text: str
    message_id: str | None
    replayed: bool = False  # the reply recorded for an earlier try with the same idempotency key


async def _history_item(item: HistoryItem) -> dict[str, Any]:
    out: dict[str, Any] = {"role": item.role, "text": item.text}
    if item.role in ("assistant", "notice"):
        out["html"] = await rendered(item.text)
    return out


def _title(text: str) -> str:
    """A conversation's title: its first message on one line, cut at a word near _TITLE_CHARS."""
    line = " ".join(text.split())
    if len(line) <= _TITLE_CHARS:
        return line
    cut = line[:_TITLE_CHARS].rsplit(" ", 1)[0] or line[:_TITLE_CHARS]
    return cut.rstrip(" ,.;:") + "…"


async def _parsed(raw: bytes | str, what: str = "the body") -> Any:
    """parse_json, off the event loop for a large document (a message with files in base64)."""
    if len(raw) < _LARGE_JSON:
        return parse_json(raw, what=what)
    return await asyncio.to_thread(parse_json, raw, what=what)


def _allowed_origins(request: web.Request) -> set[str]:
    host = request.headers.get("Host", "")
    return {f"http://{host}", f"https://{host}"}


def _json_error(status: int, message: str, headers: dict[str, str] | None = None) -> web.HTTPException:
    cls = {
        400: web.HTTPBadRequest,
        401: web.HTTPUnauthorized,
        409: web.HTTPConflict,
        413: web.HTTPRequestEntityTooLarge,
        422: web.HTTPUnprocessableEntity,
        429: web.HTTPTooManyRequests,
        503: web.HTTPServiceUnavailable,
    }[status]
    body = json.dumps({"error": message})
    if cls is web.HTTPRequestEntityTooLarge:
        return web.HTTPRequestEntityTooLarge(
            max_size=0, actual_size=0, text=body, content_type="application/json", headers=headers
        )
    return cls(text=body, content_type="application/json", headers=headers)


def create(name: str, config: WebChannelConfig, services: ChannelServices) -> WebAdapter:
    return WebAdapter(name, config, services)
