"""Telegram channel on python-telegram-bot (PTB): long polling or a webhook on the shared server.

The gateway owns the event loop, so PTB runs piecewise: `initialize`/`start` and, when polling,
`updater.start_polling` (never `run_polling`). Every Bot API call goes to `api_base_url`, the test
seam that also serves self-hosted Bot API servers. PTB does not retry Bot API calls by itself (no
rate limiter is installed); only its polling loop retries getUpdates, with its own backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import hmac
import json
import logging
import re
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web
from telegram import Bot, BotCommand, Message, ReplyParameters, Update
from telegram.constants import ChatAction
from telegram.error import BadRequest, TelegramError
from telegram.ext import Application, ApplicationBuilder, ContextTypes, TypeHandler, Updater
from telegram.request import HTTPXRequest

from channels.telegram.config import TelegramChannelConfig
from channels.telegram.errors import TelegramStartError, delivery_error
from channels.telegram.media import download_limit, locate, media_origins
from channels.telegram.normalize import ALLOWED_UPDATES, BotIdentity, normalize_update
from channels.telegram.render import render
from gateway.core.events import (
    Attachment,
    ConversationKind,
    ConversationRef,
    MessageReceived,
    MessageRef,
    OutboundMessage,
)
from gateway.core.handoff import hand_off
from gateway.core.logs import event
from gateway.core.ports import Capabilities, ChannelServices, DeliveryError, EventSink, Health, Rate
from gateway.core.splitting import utf16_len

log = logging.getLogger("clawgate.channels.telegram")

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
_COMMAND_NAME = re.compile(r"^[a-z0-9_]{1,32}$")
_SHOWN_CAP = 1024  # edits remembered to skip no-op edits (Telegram rejects "message is not modified")


class _PollRequest(HTTPXRequest):
    """The getUpdates transport; remembers when Telegram last answered, for health()."""

    last_ok: float = 0.0

    async def do_request(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        code, payload = await super().do_request(*args, **kwargs)
        if 200 <= code < 300:
            self.last_ok = time.monotonic()
        return code, payload


class TelegramAdapter:
    def __init__(self, name: str, config: TelegramChannelConfig, services: ChannelServices) -> None:
        self.name = name
        self.config = config
        self.services = services
        # Markup (tags, escapes) does not count towards Telegram's 4096 limit, but headroom keeps a
        # chunk that grows a little in rendering (bullets, fallbacks) under it.
        self.capabilities = Capabilities(
            can_edit=True,
            typing=True,
            threads=True,
            max_length=4000,
            length=utf16_len,
            pacing=pacing,
            rendered=functools.partial(render, parse_mode=config.parse_mode),
            final_edit_matters=False,  # `final` only tidies the adapter's own memory of what is shown
        )
        self.typing_interval = 4.0  # Telegram shows "typing" for 5 s after each sendChatAction
        self.stop_grace = 1.0  # how long stop() lets PTB finish polling before cutting it short
        self.webhook_path = f"/telegram/{name}"
        # Attachments are downloaded by gateway/media from the Bot API's own origin only (docs/media.md).
        self.media_origins = media_origins(config)
        self.media_limit = download_limit(config)
        self._app: Application[Any, Any, Any, Any, Any, Any] | None = None
        self._request: HTTPXRequest | None = None
        self._poll_request: _PollRequest | None = None
        self._bot_identity: BotIdentity | None = None
        self._sink: EventSink | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._shown: OrderedDict[tuple[str, str], tuple[str, str | None]] = OrderedDict()
        self._started = False
        self._poll_error: tuple[float, str] | None = None
        if config.mode == "webhook":
            app = services.http
            if not isinstance(app, web.Application):
                raise TypeError("the telegram webhook needs the shared aiohttp application")
            app.router.add_post(self.webhook_path, self._webhook)

    # -- lifecycle ------------------------------------------------------------------------------

    def _build(self) -> Application[Any, Any, Any, Any, Any, Any]:
        timeout = self.config.request_timeout
        base = self.config.api_base_url.rstrip("/")
        builder = (
            ApplicationBuilder()
            .token(self.config.token.get_secret_value())
            .base_url(f"{base}/bot")
            .base_file_url(f"{base}/file/bot")
        )
        self._request = HTTPXRequest(
            connection_pool_size=32,
            read_timeout=timeout,
            write_timeout=timeout,
            connect_timeout=timeout,
            pool_timeout=timeout,
        )
        # No JobQueue: nothing here schedules jobs (PTB documents None; its type hints do not).
        builder = builder.request(self._request).job_queue(None)  # type: ignore[arg-type]
        if self.config.mode == "polling":
            # PTB adds the long-poll timeout to this read timeout for each getUpdates.
            self._poll_request = _PollRequest(
                connection_pool_size=1,
                read_timeout=timeout,
                write_timeout=timeout,
                connect_timeout=timeout,
                pool_timeout=timeout,
            )
            builder = builder.get_updates_request(self._poll_request)
        else:
            builder = builder.updater(None)
        app = builder.build()
        app.add_handler(TypeHandler(Update, self._on_update))
        return app

    async def start(self, sink: EventSink) -> None:
        self._sink = sink
        app = self._app = self._build()
        try:
            await app.initialize()  # getMe
            names = frozenset(n for n, _ in self.services.commands if _COMMAND_NAME.match(n))
            self._bot_identity = BotIdentity(app.bot.id, app.bot.username, names)
            await self._register_commands(app.bot)
            if self.config.mode == "webhook" and self.config.webhook_url:
                secret = self.config.webhook_secret
                await app.bot.set_webhook(
                    self.config.webhook_url,
                    secret_token=secret.get_secret_value() if secret else None,
                    allowed_updates=list(ALLOWED_UPDATES),
                )
            await app.start()
            if app.updater is not None:
                # Polling: PTB calls deleteWebhook first (a webhook would make getUpdates fail).
                poll_timeout = round(self.config.poll_timeout)  # the Bot API takes whole seconds
                await app.updater.start_polling(
                    timeout=dt.timedelta(seconds=poll_timeout),
                    poll_interval=0.0 if poll_timeout else 1.0,  # short polling: do not spin
                    bootstrap_retries=0,
                    allowed_updates=list(ALLOWED_UPDATES),
                    drop_pending_updates=False,
                    error_callback=self._on_poll_error,
                )
        except TelegramError as exc:
            event(log, "telegram_start_failed", logging.ERROR, channel=self.name, error=type(exc).__name__)
            await self._teardown()
            raise TelegramStartError(f"telegram channel {self.name!r} could not start: {exc.message}") from exc
        except BaseException:  # cancelled or a bug: still release the HTTP clients
            await self._teardown()
            raise
        self._started = True
        event(
            log,
            "telegram_started",
            channel=self.name,
            mode=self.config.mode,
            bot=self._bot_identity.username,
            webhook=self.webhook_path if self.config.mode == "webhook" else None,
        )

    async def stop(self) -> None:
        self._started = False
        await self._teardown()
        event(log, "telegram_stopped", channel=self.name)

    async def _teardown(self) -> None:
        app, self._app = self._app, None
        if app is not None and app.updater is not None and app.updater.running:
            await self._stop_updater(app.updater)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if app is not None:
            if app.running:
                await app.stop()
            await app.shutdown()  # closes the HTTP clients
        # After a failed initialize PTB leaves its HTTP clients open; closing twice is harmless.
        for request in (self._request, self._poll_request):
            if request is not None:
                await request.shutdown()

    async def _stop_updater(self, updater: Updater) -> None:
        """updater.stop(), bounded in time.

        It ends a pending long poll at once and acknowledges what was fetched (getUpdates with
        timeout 0). But PTB's retry loop sleeps its backoff (up to 30 s after repeated errors) without
        listening to stop(), and PTB swallows the first cancellation (it awaits its polling task under
        suppress(CancelledError)), so we cancel until it is done. Updates left unacknowledged come back
        on the next start with the same event_id, which the gateway deduplicates.
        """
        stopping = asyncio.ensure_future(updater.stop())
        await asyncio.wait({stopping}, timeout=self.stop_grace)
        for _ in range(3):
            if stopping.done():
                break
            stopping.cancel()
            await asyncio.wait({stopping}, timeout=self.stop_grace)
        if not stopping.done() or stopping.cancelled():
            event(log, "telegram_stop_forced", logging.WARNING, channel=self.name)
        elif (exc := stopping.exception()) is not None:
            event(log, "telegram_stop_failed", logging.WARNING, channel=self.name, error=type(exc).__name__)

    async def _register_commands(self, bot: Bot) -> None:
        commands = [BotCommand(n, d[:256]) for n, d in self.services.commands if _COMMAND_NAME.match(n) and d]
        if not commands:
            return
        try:
            await bot.set_my_commands(commands)
        except TelegramError as exc:
            # The menu is a convenience; the commands work when typed without it.
            event(log, "telegram_commands_failed", logging.WARNING, channel=self.name, error=type(exc).__name__)

    def health(self) -> Health:
        if not self._started:
            return Health(False, "stopped")
        if self._poll_error is not None and self._poll_request is not None:
            at, what = self._poll_error
            if at > self._poll_request.last_ok:
                return Health(False, f"polling failing: {what}")
        return Health(True, f"{self.config.mode} as @{self._bot_identity.username if self._bot_identity else '?'}")

    async def locate_media(self, attachment: Attachment) -> tuple[str, dict[str, str]]:
        """Where an attachment of an update is: getFile's URL (gateway/media downloads it)."""
        return await locate(self._bot(), attachment)

    # -- inbound --------------------------------------------------------------------------------

    def _on_poll_error(self, exc: TelegramError) -> None:
        # PTB keeps polling with its own backoff; we only record and log (a plain function, by PTB's rule).
        self._poll_error = (time.monotonic(), type(exc).__name__)
        event(log, "telegram_poll_error", logging.WARNING, channel=self.name, error=type(exc).__name__)

    async def _on_update(self, update: Update, _context: ContextTypes.DEFAULT_TYPE) -> None:
        self._dispatch(update.to_dict())

    def _dispatch(self, data: dict[str, Any]) -> None:
        """Normalize and hand to the sink in a task of its own: a slow turn never blocks receiving."""
        ev = self._event_of(data)
        if ev is not None:
            self._spawn(ev)

    def _event_of(self, data: dict[str, Any]) -> MessageReceived | None:
        if self._bot_identity is None or self._sink is None:
            return None
        try:
            ev = normalize_update(data, channel=self.name, bot=self._bot_identity)
        except Exception as exc:  # a payload shape we did not foresee must not stop the channel
            event(log, "telegram_update_unreadable", logging.ERROR, channel=self.name, error=type(exc).__name__)
            return None
        if ev is None:
            event(log, "telegram_update_ignored", logging.DEBUG, channel=self.name, update_id=data.get("update_id"))
            return None
        event(log, "telegram_inbound", logging.DEBUG, channel=self.name, event_id=ev.event_id, edited=ev.edited)
        return ev

    def _spawn(self, ev: MessageReceived) -> None:
        assert self._sink is not None
        hand_off(self._sink, ev, platform="telegram", channel=self.name, log=log, tasks=self._tasks)

    async def _webhook(self, request: web.Request) -> web.Response:
        app = self._app
        if not self._started or app is None:
            return web.Response(status=503, text="not ready")  # Telegram retries later
        expected = self.config.webhook_secret
        given = request.headers.get(SECRET_HEADER)
        if expected is None or given is None:
            reason = "no secret configured" if expected is None else "missing secret header"
            event(log, "telegram_webhook_refused", logging.WARNING, channel=self.name, reason=reason)
            return web.Response(status=403, text="forbidden")
        if not hmac.compare_digest(given.encode(), expected.get_secret_value().encode()):
            event(log, "telegram_webhook_refused", logging.WARNING, channel=self.name, reason="wrong secret")
            return web.Response(status=403, text="forbidden")
        try:
            data = json.loads(await request.read())
            if not isinstance(data, dict) or not isinstance(data.get("update_id"), int):
                raise ValueError("not an Update object")
            Update.de_json(data, app.bot)  # the shape PTB accepts; polling goes through it too
        except Exception as exc:
            event(log, "telegram_webhook_bad_request", logging.WARNING, channel=self.name, error=type(exc).__name__)
            return web.Response(status=400, text="malformed update")
        ev = self._event_of(data)
        if ev is None:
            return web.Response(text="ok")
        accept = self.services.accept
        if accept is not None:
            # Journaled before the 200: once Telegram forgets the update, it is in the database.
            try:
                if not await accept(ev):
                    return web.Response(text="ok")  # a redelivery of an update we have
            except Exception as exc:
                event(log, "telegram_webhook_not_journaled", logging.ERROR, channel=self.name, error=type(exc).__name__)
                return web.Response(status=503, text="try again")  # Telegram delivers it again
        self._spawn(ev)
        return web.Response(text="ok")

    # -- outbound -------------------------------------------------------------------------------

    def _bot(self) -> Bot:
        if self._app is None:
            raise DeliveryError(f"telegram channel {self.name!r} is not started", retryable=True)
        bot: Bot = self._app.bot
        return bot

    async def _formatted(
        self, op: str, markdown: str, call: Callable[[str, str | None], Awaitable[Message | bool]]
    ) -> tuple[Message | bool, tuple[str, str | None]]:
        """Send rendered text; if Telegram rejects it (BadRequest: bad entities), once as plain text."""
        mode = self.config.parse_mode
        rendered = render(markdown, mode)
        try:
            return await call(rendered, mode), (rendered, mode)
        except BadRequest as exc:
            # Every BadRequest is a refusal (nothing was posted), so trying the plain text costs one
            # call at most; it rescues the formatting case without matching error texts.
            event(log, "telegram_format_rejected", logging.WARNING, channel=self.name, op=op, error=exc.message)
        except TelegramError as exc:
            raise delivery_error(exc, op) from exc
        try:
            return await call(markdown, None), (markdown, None)
        except TelegramError as exc:
            raise delivery_error(exc, op) from exc

    async def send(self, msg: OutboundMessage) -> MessageRef:
        if msg.private_to is not None:
            # Telegram has no message only one member of a group sees: never post it for all.
            raise DeliveryError("telegram cannot send a private message in a group", retryable=False)
        bot = self._bot()
        conv = msg.conversation
        kwargs: dict[str, Any] = {}
        if conv.thread_id:
            kwargs["message_thread_id"] = int(conv.thread_id)
        if msg.reply_to is not None and msg.reply_to.message_id.isdigit():
            kwargs["reply_parameters"] = ReplyParameters(int(msg.reply_to.message_id), allow_sending_without_reply=True)

        async def call(text: str, mode: str | None) -> Message:
            return await bot.send_message(_chat_id(conv.chat_id), text, parse_mode=mode, **kwargs)

        sent, shown = await self._formatted("send", msg.text, call)
        assert isinstance(sent, Message)
        ref = MessageRef(conv, str(sent.message_id))
        if not msg.final:
            self._remember(ref, shown)
        return ref

    async def edit(self, ref: MessageRef, text: str, final: bool) -> None:
        bot = self._bot()
        key = (ref.conversation.chat_id, ref.message_id)
        mode = self.config.parse_mode
        # Telegram refuses an edit that changes nothing; streaming often ends with one.
        if self._shown.get(key) in ((render(text, mode), mode), (text, None)):
            if final:
                self._shown.pop(key, None)
            return

        async def call(body: str, parse_mode: str | None) -> Message | bool:
            return await bot.edit_message_text(
                body, chat_id=_chat_id(ref.conversation.chat_id), message_id=int(ref.message_id), parse_mode=parse_mode
            )

        _, shown = await self._formatted("edit", text, call)
        if final:
            self._shown.pop(key, None)
        else:
            self._remember(ref, shown)

    async def react(self, ref: MessageRef, reaction: str) -> None:
        await self._set_reaction(ref, reaction)

    async def unreact(self, ref: MessageRef, reaction: str) -> None:
        await self._set_reaction(ref, None)

    async def _set_reaction(self, ref: MessageRef, reaction: str | None) -> None:
        """setMessageReaction: a bot sets at most one reaction, and an empty list takes it away."""
        bot = self._bot()
        if not ref.message_id.isdigit():
            raise DeliveryError(f"telegram react failed: {ref.message_id!r} is not a message id", retryable=False)
        try:
            await bot.set_message_reaction(
                _chat_id(ref.conversation.chat_id), int(ref.message_id), [reaction] if reaction else []
            )
        except TelegramError as exc:
            raise delivery_error(exc, "react") from exc

    def _remember(self, ref: MessageRef, shown: tuple[str, str | None]) -> None:
        key = (ref.conversation.chat_id, ref.message_id)
        self._shown[key] = shown
        self._shown.move_to_end(key)
        while len(self._shown) > _SHOWN_CAP:
            self._shown.popitem(last=False)

    @contextlib.asynccontextmanager
    async def typing(self, conv: ConversationRef) -> AsyncIterator[None]:
        done = asyncio.Event()
        task = asyncio.create_task(self._typing_loop(conv, done), name=f"telegram-typing:{conv.session_key}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            yield
        finally:
            done.set()
            task.cancel()
            # gather (unlike a bare await) never swallows a cancellation of the caller itself.
            await asyncio.gather(task, return_exceptions=True)

    async def _typing_loop(self, conv: ConversationRef, done: asyncio.Event) -> None:
        thread = int(conv.thread_id) if conv.thread_id else None
        while not done.is_set():
            try:
                await self._bot().send_chat_action(_chat_id(conv.chat_id), ChatAction.TYPING, message_thread_id=thread)
            except (TelegramError, DeliveryError) as exc:
                # Typing is cosmetic: never fail a turn over it.
                event(log, "telegram_typing_failed", logging.DEBUG, channel=self.name, error=type(exc).__name__)
            with contextlib.suppress(TimeoutError):  # asyncio.timeout: wait_for may lose a cancel on 3.11
                async with asyncio.timeout(self.typing_interval):
                    await done.wait()


def pacing(conv: ConversationRef) -> tuple[Rate, ...]:
    """Telegram's limits (Bots FAQ): about one message a second in a chat, at most 20 a minute in a
    group, about 30 a second in all; an edit counts as a message. A group's budget lets 3 go at once
    and refills 17 a minute, so no minute holds more than 20 and a short reply (its first piece, then
    the final edit) is not held 3 s before its last words."""
    chat = f"chat:{conv.chat_id}"  # a forum's topics share their group's budget
    per_chat = Rate(chat, 1.0) if conv.kind == ConversationKind.DM else Rate(chat, 17 / 60, burst=3)
    return (per_chat, Rate("bot", 30.0, burst=30, hold=False))


def _chat_id(chat_id: str) -> int | str:
    """Numeric chat ids go out as integers; "@channelname" stays a string."""
    return int(chat_id) if chat_id.lstrip("-").isdigit() else chat_id


def create(name: str, config: TelegramChannelConfig, services: ChannelServices) -> TelegramAdapter:
    return TelegramAdapter(name, config, services)
