"""A local Telegram Bot API for tests (aiohttp, 127.0.0.1, port 0).

Routes `/bot<token>/<method>` and `/file/bot<token>/<path>` like api.telegram.org, reads what
python-telegram-bot sends (form-encoded fields with JSON-encoded non-string values; JSON and
multipart also accepted), and answers `{"ok": ..., "result": ...}` like Telegram:

- getMe, deleteWebhook, setWebhook, getWebhookInfo (queued updates, `webhook_error`), setMyCommands,
  sendChatAction, getFile, setMessageReaction (one standard reaction per message, kept in `reactions`);
- getUpdates as a real long poll: answers with the queued updates whose update_id >= offset,
  waits up to `timeout` seconds for new ones (an asyncio.Condition, no sleeping) and answers [] when
  none came; an `offset` acknowledges (forgets) every update below it; 409 while a webhook is set;
- sendMessage / editMessageText that parse HTML and MarkdownV2 the way Telegram does (strictly)
  and answer 400 "can't parse entities" for bad markup, "message is too long", "message is not
  modified", "message to edit not found";
- error injection per method (`fail_next`): a 429 with parameters.retry_after, any status, or a
  hang past the client's timeout (after the message was stored: "maybe delivered");
- `drop_poll()`: the pending long poll is answered 502, or its connection is closed;
- webhook delivery to the URL the adapter registered, with its secret header (`post_webhook`);
- builders for realistic updates (DM, group, forum topic, edit, the bot's own message);
- a journal of every call (`calls`) and of accepted messages (`sent`), with `wait_for`.
"""

from __future__ import annotations

import asyncio
import html
import itertools
import json
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from tests.fakes.serve import serve_loopback

BOT_ID = 7_000_001
BOT_USERNAME = "clawgate_test_bot"
TOKEN = f"{BOT_ID}:AAFakeTokenForLocalTestsOnly_0123456789"
GROUP_ID = -1_001_234_567_890
FORUM_ID = -1_009_876_543_210
TOPIC_ID = 77


# -- Telegram's markup parsers (strict) -------------------------------------------------------------


class EntityParseError(ValueError):
    """Text Telegram would refuse with "Bad Request: can't parse entities: ..."."""


_HTML_TAGS = {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "span", "tg-spoiler", "a", "code", "pre"}
_HTML_TAGS |= {"blockquote", "tg-emoji"}
_TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9-]*)((?:\s+[a-zA-Z-]+(?:=\"[^\"]*\"|='[^']*'|=[^\s>\"']+)?)*)\s*>")
_ATTR = re.compile(r"([a-zA-Z-]+)(?:=(\"[^\"]*\"|'[^']*'|[^\s>\"']+))?")
_HTML_ENTITY = re.compile(r"&(lt|gt|amp|quot|#[0-9]+|#x[0-9a-fA-F]+);")


def parse_html(text: str) -> str:
    """The plain text of a parse_mode=HTML message, or EntityParseError."""
    out: list[str] = []
    stack: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "<":
            m = _TAG.match(text, i)
            if not m:
                raise EntityParseError(f"Unsupported start tag at byte offset {i}")
            closing, name = m.group(1) == "/", m.group(2).lower()
            if name not in _HTML_TAGS:
                raise EntityParseError(f'Unsupported start tag "{name}" at byte offset {i}')
            if closing:
                if not stack or stack[-1] != name:
                    raise EntityParseError(f'Unmatched end tag at byte offset {i}, expected "</{stack[-1:]}>"')
                stack.pop()
            else:
                _check_open_tag(name, dict(_ATTR.findall(m.group(3))), stack)
                stack.append(name)
            i = m.end()
        elif c == "&":
            m = _HTML_ENTITY.match(text, i)
            if not m:
                raise EntityParseError(f"Character '&' at byte offset {i} must be escaped as &amp;")
            out.append(html.unescape(m.group(0)))
            i = m.end()
        elif c == ">":
            raise EntityParseError(f"Character '>' at byte offset {i} must be escaped as &gt;")
        else:
            out.append(c)
            i += 1
    if stack:
        raise EntityParseError(f'Can\'t find end tag corresponding to start tag "{stack[-1]}"')
    return "".join(out)


def _check_open_tag(name: str, attrs: dict[str, str], stack: list[str]) -> None:
    if stack and stack[-1] == "code":
        raise EntityParseError("code entities can't contain other entities")
    if stack and stack[-1] == "pre" and name != "code":
        raise EntityParseError("pre entities can contain only a code entity")
    if name == "blockquote" and "blockquote" in stack:
        raise EntityParseError("blockquote entities can't be nested")
    if name == "a":
        href = attrs.get("href", "").strip("\"'")
        if not re.match(r"^(https?://|tg://|mailto:)", html.unescape(href)):
            raise EntityParseError(f"Wrong HTTP URL {href!r}")
    if name == "span" and attrs.get("class", "").strip("\"'") != "tg-spoiler":
        raise EntityParseError('Tag "span" must have class "tg-spoiler"')


_V2_RESERVED = set("_*[]()~`>#+-=|{}.!")
_V2_TOGGLES = {"*": "bold", "~": "strikethrough"}


def parse_markdown_v2(text: str) -> str:
    """The plain text of a parse_mode=MarkdownV2 message, or EntityParseError."""
    out: list[str] = []
    stack: list[str] = []
    i, n = 0, len(text)

    def toggle(kind: str) -> None:
        if kind in stack:
            if stack[-1] != kind:
                raise EntityParseError(f"Can't find end of {stack[-1]} entity: entities overlap")
            stack.pop()
        else:
            stack.append(kind)

    while i < n:
        c = text[i]
        line_start = i == 0 or text[i - 1] == "\n"
        if c == "\\":
            if i + 1 >= n or not 1 <= ord(text[i + 1]) <= 126:
                raise EntityParseError(f"Character '\\' at byte offset {i} escapes nothing")
            out.append(text[i + 1])
            i += 2
        elif c == "\r":
            i += 1  # ignored by Telegram: it separates "_" from "__"
        elif c == "`":
            i = _v2_code(text, i, out)
        elif c in _V2_TOGGLES:
            toggle(_V2_TOGGLES[c])
            i += 1
        elif c == "_":
            if text.startswith("__", i):
                toggle("underline")
                i += 2
            else:
                toggle("italic")
                i += 1
        elif c == "|" and text.startswith("||", i):
            toggle("spoiler")
            i += 2
        elif c == "[":
            if "link" in stack:
                raise EntityParseError("links can't be nested")
            stack.append("link")
            i += 1
        elif c == "]" and stack and stack[-1] == "link":
            if not text.startswith("(", i + 1):
                raise EntityParseError(f"Character ']' at byte offset {i} must be followed by a URL")
            j = i + 2
            while j < n and text[j] != ")":
                j += 2 if text[j] == "\\" else 1
            if j >= n:
                raise EntityParseError("Can't find end of a URL")
            stack.pop()
            i = j + 1
        elif c == ">" and line_start:
            i += 1  # block quote marker
        elif c in _V2_RESERVED:
            raise EntityParseError(f"Character '{c}' is reserved and must be escaped with the preceding '\\'")
        else:
            out.append(c)
            i += 1
    if stack:
        raise EntityParseError(f"Can't find end of {stack[-1]} entity")
    return "".join(out)


def _v2_code(text: str, i: int, out: list[str]) -> int:
    """Parse `code` or ```pre``` at i; append its text; return the index after it."""
    fence = "```" if text.startswith("```", i) else "`"
    j = i + len(fence)
    if fence == "```":
        newline = text.find("\n", j)
        first_line = text[j:newline] if newline >= 0 else ""
        if newline >= 0 and re.fullmatch(r"[A-Za-z0-9_+#.\-]*", first_line):
            j = newline + 1  # the language line
    while j < len(text):
        if text[j] == "\\":
            if j + 1 >= len(text):
                raise EntityParseError("Can't find end of code entity")
            out.append(text[j + 1])
            j += 2
        elif text.startswith(fence, j):
            return j + len(fence)
        elif text[j] == "`":
            raise EntityParseError(f"Character '`' at byte offset {j} must be escaped inside code")
        else:
            out.append(text[j])
            j += 1
    raise EntityParseError("Can't find end of code entity")


def visible_text(text: str, parse_mode: str | None) -> str:
    if parse_mode is None or parse_mode == "":
        return text
    if parse_mode.upper() == "HTML":
        return parse_html(text)
    if parse_mode == "MarkdownV2":
        return parse_markdown_v2(text)
    raise EntityParseError(f"unsupported parse mode {parse_mode!r}")


_COMMAND = re.compile(r"/[A-Za-z0-9_]{1,32}(?:@[A-Za-z0-9_]{3,})?")


def command_entity(text: str) -> list[dict[str, Any]] | None:
    """The bot_command entity Telegram adds to a message that starts with "/word" (or
    "/word@botname"), as a list of entities; None for any other text."""
    found = _COMMAND.match(text)
    if found is None:
        return None
    return [{"type": "bot_command", "offset": 0, "length": utf16_len(found.group())}]


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


# -- journal and behaviors --------------------------------------------------------------------------


@dataclass
class Call:
    method: str  # as Telegram spells it: "sendMessage"
    params: dict[str, Any]
    status: int | None = None  # the HTTP status answered (None while hanging)
    at: float = 0.0  # when it arrived, by the fake's `clock`


@dataclass(frozen=True)
class SentMessage:
    """A message the fake accepted (a send, or an edit of one)."""

    chat_id: int
    thread_id: int | None
    message_id: int
    text: str  # what the person sees: markup parsed away
    raw: str  # what the bot sent
    parse_mode: str | None
    edit: bool = False
    reply_to: int | None = None  # reply_parameters.message_id: the message it quotes
    allow_without_reply: bool | None = None  # reply_parameters.allow_sending_without_reply


@dataclass
class Fail:
    status: int
    description: str | None = None
    retry_after: float | None = None  # 429: parameters.retry_after (Telegram sends whole seconds)


@dataclass
class Hang:
    """Act on the call, then never answer (until the fake stops): the client must time out."""


Behavior = Fail | Hang

_JSON_FIELDS = {"commands", "allowed_updates", "reply_parameters", "entities", "reply_markup", "scope"}
_JSON_FIELDS |= {"link_preview_options", "caption_entities"}
_JSON_FIELDS |= {"reaction"}
_INT_FIELDS = {"message_id", "message_thread_id", "offset", "limit", "max_connections"}
_FLOAT_FIELDS = {"timeout"}
_METHODS = {
    m.lower(): m
    for m in (
        "getMe",
        "getUpdates",
        "deleteWebhook",
        "setWebhook",
        "getWebhookInfo",
        "setMyCommands",
        "sendMessage",
        "editMessageText",
        "sendChatAction",
        "getFile",
    )
}
_METHODS["setmessagereaction"] = "setMessageReaction"
# What Telegram lets a bot react with (a few of its standard reactions are enough here).
REACTIONS = frozenset({"👀", "👍", "🔥", "🤔", "✍", "👌", "🙏", "❤"})


def _decode(name: str, value: str) -> Any:
    if name in _JSON_FIELDS:
        return json.loads(value)
    if name in _INT_FIELDS or (name == "chat_id" and re.fullmatch(r"-?\d+", value)):
        return int(value)
    if name in _FLOAT_FIELDS:
        return float(value)
    if value in ("true", "false") and name not in {"text", "caption", "url", "secret_token"}:
        return value == "true"
    return value


class FakeTelegram:
    def __init__(self, token: str = TOKEN, bot_id: int = BOT_ID, username: str = BOT_USERNAME) -> None:
        self.token = token
        self.bot = {
            "id": bot_id,
            "is_bot": True,
            "first_name": "Clawgate Test",
            "username": username,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }
        self.calls: list[Call] = []
        self.sent: list[SentMessage] = []
        self.commands: list[dict[str, Any]] = []
        self.webhook_url = ""
        self.webhook_secret: str | None = None
        # What getWebhookInfo reports as Telegram's last failed delivery: (unix time, message).
        self.webhook_error: tuple[int, str] | None = None
        self.files: dict[str, dict[str, Any]] = {}
        self.downloads: list[str] = []  # file paths fetched under /file/bot<token>/ (media, docs/media.md)
        self.url = ""
        self.polls_waiting = 0
        self._updates: deque[dict[str, Any]] = deque()
        self._forced: list[dict[str, Any]] = []
        self._update_ids = itertools.count(100_001)
        self._message_ids = itertools.count(501)
        self._messages: dict[tuple[int, int], SentMessage] = {}
        self._behaviors: dict[str, deque[Behavior]] = {}
        self._poll_epoch = 0
        self._drop_kind = "502"
        self._changed = asyncio.Condition()
        self._stopping = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._client: aiohttp.ClientSession | None = None
        # Stamps `Call.at`; a test on a virtual clock sets its clock here too.
        self.clock: Callable[[], float] = time.monotonic
        # The bot's reaction on each message, (chat_id, message_id) -> emoji; removed ones are gone.
        self.reactions: dict[tuple[int, int], str] = {}

    @property
    def api_base_url(self) -> str:
        """What goes into TelegramChannelConfig.api_base_url."""
        return self.url

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> FakeTelegram:
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._api)
        app.router.add_get("/file/bot{token}/{path:.+}", self._file)
        self._runner, self.url = await serve_loopback(app, shutdown_timeout=1)
        return self

    async def stop(self) -> None:
        self._stopping.set()
        async with self._changed:
            self._changed.notify_all()
        client, self._client = self._client, None
        runner, self._runner = self._runner, None
        if client is not None:
            await client.close()
        if runner is not None:
            await runner.cleanup()

    # -- waiting ----------------------------------------------------------------------------------

    async def wait_for(self, predicate: Callable[[list[Call]], bool], timeout: float = 10) -> None:
        async with asyncio.timeout(timeout):
            async with self._changed:
                await self._changed.wait_for(lambda: predicate(self.calls))

    def texts_to(self, chat_id: int) -> list[str]:
        """The messages sent to `chat_id` (edits left out), oldest first."""
        return [s.text for s in self.sent if s.chat_id == chat_id and not s.edit]

    def calls_of(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    async def wait_calls(self, method: str, n: int = 1, timeout: float = 10) -> list[Call]:
        await self.wait_for(lambda _: len(self.calls_of(method)) >= n, timeout)
        return self.calls_of(method)

    async def wait_sent(self, n: int, timeout: float = 10) -> list[SentMessage]:
        await self.wait_for(lambda _: len(self.sent) >= n, timeout)
        return list(self.sent)

    async def wait_polling(self, timeout: float = 10) -> None:
        """Until a getUpdates long poll is waiting for updates."""
        await self.wait_for(lambda _: self.polls_waiting > 0, timeout)

    # -- error injection --------------------------------------------------------------------------

    def fail_next(self, method: str, behavior: Behavior) -> None:
        """The next call of `method` gets `behavior` instead of its normal answer."""
        self._behaviors.setdefault(method.lower(), deque()).append(behavior)

    def heal(self) -> None:
        """Forget every failure still queued by fail_next: the next calls succeed."""
        self._behaviors.clear()

    def rate_limit_next(self, method: str, retry_after: float = 3) -> None:
        self.fail_next(method, Fail(429, retry_after=retry_after))

    async def drop_poll(self, kind: str = "502") -> None:
        """Wait for a pending long poll, then answer it 502 ("502") or cut its connection ("close")."""
        await self.wait_polling()
        async with self._changed:
            self._drop_kind = kind
            self._poll_epoch += 1
            self._changed.notify_all()

    # -- inbound: update builders -----------------------------------------------------------------

    @staticmethod
    def user(
        user_id: int = 1001, first_name: str = "Ada", username: str | None = "ada", **extra: Any
    ) -> dict[str, Any]:
        u: dict[str, Any] = {"id": user_id, "is_bot": False, "first_name": first_name, "language_code": "en"}
        if username:
            u["username"] = username
        return {**u, **extra}

    @staticmethod
    def private_chat(user: dict[str, Any]) -> dict[str, Any]:
        chat = {"id": user["id"], "type": "private", "first_name": user["first_name"]}
        if "username" in user:
            chat["username"] = user["username"]
        return chat

    @staticmethod
    def group_chat(chat_id: int = GROUP_ID, title: str = "Team", forum: bool = False) -> dict[str, Any]:
        chat: dict[str, Any] = {"id": chat_id, "title": title, "type": "supergroup"}
        if forum:
            chat["is_forum"] = True
        return chat

    def message(
        self,
        chat: dict[str, Any],
        sender: dict[str, Any],
        text: str | None,
        *,
        entities: list[dict[str, Any]] | None = None,
        thread_id: int | None = None,
        reply_to: dict[str, Any] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """A Message object as Telegram sends it."""
        msg: dict[str, Any] = {
            "message_id": next(self._message_ids),
            "from": sender,
            "chat": chat,
            "date": int(time.time()),
        }
        if thread_id is not None:
            msg["message_thread_id"] = thread_id
            msg["is_topic_message"] = True
            # Telegram makes every topic message a reply to the topic's creation message.
            reply_to = reply_to or self.topic_root(chat, thread_id)
        if reply_to is not None:
            msg["reply_to_message"] = reply_to
        if text is not None:
            msg["text"] = text
        if entities is None and text is not None:
            entities = command_entity(text)  # Telegram marks a leading /command itself
        if entities:
            msg["entities"] = entities
        return {**msg, **extra}

    def topic_root(self, chat: dict[str, Any], thread_id: int) -> dict[str, Any]:
        return {
            "message_id": thread_id,
            "from": self.user(1002, "Grace", "grace"),
            "chat": chat,
            "date": int(time.time()) - 3600,
            "message_thread_id": thread_id,
            "forum_topic_created": {"name": "Planning", "icon_color": 7322096},
        }

    def mention(self, text: str) -> tuple[str, list[dict[str, Any]]]:
        """`@bot text` and its mention entity."""
        handle = f"@{self.bot['username']}"
        return f"{handle} {text}", [{"offset": 0, "length": utf16_len(handle), "type": "mention"}]

    async def enqueue(self, update: dict[str, Any]) -> dict[str, Any]:
        """Queue an update for getUpdates (an update_id is assigned when missing)."""
        update = {"update_id": next(self._update_ids), **update}
        async with self._changed:
            self._updates.append(update)
            self._changed.notify_all()
        return update

    async def dm(self, text: str, *, sender: int = 1001, **extra: Any) -> dict[str, Any]:
        user = self.user(sender)
        return await self.enqueue({"message": self.message(self.private_chat(user), user, text, **extra)})

    async def group(
        self, text: str, *, sender: int = 1001, chat_id: int = GROUP_ID, mention: bool = False, **extra: Any
    ) -> dict[str, Any]:
        entities = None
        if mention:
            text, entities = self.mention(text)
        msg = self.message(self.group_chat(chat_id), self.user(sender), text, entities=entities, **extra)
        return await self.enqueue({"message": msg})

    async def topic(
        self,
        text: str,
        *,
        sender: int = 1001,
        chat_id: int = FORUM_ID,
        thread_id: int = TOPIC_ID,
        mention: bool = False,
    ) -> dict[str, Any]:
        entities = None
        if mention:
            text, entities = self.mention(text)
        chat = self.group_chat(chat_id, "Forum", forum=True)
        msg = self.message(chat, self.user(sender), text, entities=entities, thread_id=thread_id)
        return await self.enqueue({"message": msg})

    async def edit(self, update: dict[str, Any], text: str) -> dict[str, Any]:
        """An edited_message update for the message of `update` (a new update_id)."""
        msg = {**update["message"], "text": text, "edit_date": int(time.time())}
        msg.pop("entities", None)
        return await self.enqueue({"edited_message": msg})

    async def own(self, chat: dict[str, Any], text: str, thread_id: int | None = None) -> dict[str, Any]:
        """The bot's own message, as a group with privacy mode off shows it."""
        sender = {k: self.bot[k] for k in ("id", "is_bot", "first_name", "username")}
        return await self.enqueue({"message": self.message(chat, sender, text, thread_id=thread_id)})

    # -- media: files a message carries, served by getFile and the file URL ------------------------

    def stored_file(
        self, content: bytes, folder: str = "documents", *, declared_size: int | None = None
    ) -> dict[str, Any]:
        """Register `content` for getFile; the File fields a message's photo, voice or document carries
        (`declared_size`: a file_size that differs from the content, as a lying client's would)."""
        n = len(self.files)
        file_id = f"{folder[:3].upper()}FileId{n:04d}"
        self.add_file(file_id, content, path=f"{folder}/file_{n}.bin")
        size = len(content) if declared_size is None else declared_size
        self.files[file_id]["file_size"] = size
        return {"file_id": file_id, "file_unique_id": f"u{file_id}", "file_size": size}

    async def media_dm(
        self,
        field: str,
        content: bytes,
        *,
        caption: str | None = None,
        sender: int = 1001,
        declared_size: int | None = None,
        **meta: Any,
    ) -> dict[str, Any]:
        """A DM carrying a file as Telegram sends it: `field` is photo (every size of it, the largest
        is `content`), voice (with `duration`), audio, document (with `file_name`, `mime_type`)..."""
        folder = {"photo": "photos", "voice": "voice", "audio": "music"}.get(field, "documents")
        stored = self.stored_file(content, folder, declared_size=declared_size)
        user = self.user(sender)
        msg = self.message(self.private_chat(user), user, None)
        if field == "photo":
            thumb = self.stored_file(content[:64] or b"x", "thumbnails")
            msg["photo"] = [{**thumb, "width": 90, "height": 90}, {**stored, "width": 1280, "height": 960, **meta}]
        else:
            msg[field] = {**stored, **meta}
        if caption is not None:
            msg["caption"] = caption
        return await self.enqueue({"message": msg})

    async def redeliver(self, update: dict[str, Any]) -> None:
        """Send an update again on the next poll, as Telegram does when a confirmation was lost."""
        async with self._changed:
            self._forced.append(update)
            self._changed.notify_all()

    async def post_webhook(
        self,
        update: dict[str, Any] | None = None,
        *,
        secret: str | None = None,
        omit_secret: bool = False,
        body: bytes | None = None,
        url: str | None = None,
    ) -> int:
        """POST an update to the registered webhook as Telegram would; returns the HTTP status.

        The registered secret goes in the header unless `secret` overrides it or `omit_secret`;
        `body` sends raw bytes instead of the update's JSON.
        """
        if self._client is None:
            self._client = aiohttp.ClientSession()
        headers = {"Content-Type": "application/json"}
        token = secret if secret is not None else self.webhook_secret
        if token is not None and not omit_secret:
            headers["X-Telegram-Bot-Api-Secret-Token"] = token
        data = body if body is not None else json.dumps(update).encode()
        async with self._client.post(url or self.webhook_url, data=data, headers=headers) as resp:
            return resp.status

    # -- HTTP -------------------------------------------------------------------------------------

    async def _params(self, request: web.Request) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if request.method == "POST" and request.content_type == "application/json":
            raw = await request.read()
            params = json.loads(raw) if raw else {}
        elif request.method == "POST":
            form = await request.post()
            params = {k: _decode(k, v) for k, v in form.items() if isinstance(v, str)}
        for k, v in request.query.items():
            params.setdefault(k, _decode(k, v))
        return params

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = _METHODS.get(request.match_info["method"].lower(), request.match_info["method"])
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        try:
            params = await self._params(request)
        except ValueError:
            return _error(400, "Bad Request: can't parse request parameters")
        call = Call(method, params, at=self.clock())
        async with self._changed:
            self.calls.append(call)
            self._changed.notify_all()
        behaviors = self._behaviors.get(method.lower())
        behavior = behaviors.popleft() if behaviors else None
        if isinstance(behavior, Fail):
            resp = _failure(behavior)
        else:
            handler = getattr(self, f"_m_{method}", None)
            resp = await handler(request, params) if handler else _error(404, "Not Found")
            if isinstance(behavior, Hang):
                await self._stopping.wait()
                resp = _error(500, "fake stopped")
        call.status = resp.status
        async with self._changed:
            self._changed.notify_all()
        return resp

    async def _file(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return web.Response(status=401)
        for meta in self.files.values():
            if meta["file_path"] == request.match_info["path"]:
                async with self._changed:
                    self.downloads.append(meta["file_path"])
                    self._changed.notify_all()
                return web.Response(body=meta["_content"], content_type="application/octet-stream")
        return web.Response(status=404)

    # -- methods ----------------------------------------------------------------------------------

    async def _m_getMe(self, _r: web.Request, _p: dict[str, Any]) -> web.Response:
        return _ok(self.bot)

    async def _m_deleteWebhook(self, _r: web.Request, params: dict[str, Any]) -> web.Response:
        self.webhook_url, self.webhook_secret = "", None
        if params.get("drop_pending_updates"):
            self._updates.clear()
        return _ok(True)

    async def _m_setWebhook(self, _r: web.Request, params: dict[str, Any]) -> web.Response:
        url = params.get("url", "")
        if url and not re.match(r"^https?://", url):
            return _error(400, "Bad Request: bad webhook: An HTTPS URL must be provided for webhook")
        self.webhook_url, self.webhook_secret = url, params.get("secret_token")
        return _ok(True)

    async def _m_getWebhookInfo(self, _r: web.Request, _p: dict[str, Any]) -> web.Response:
        info: dict[str, Any] = {"url": self.webhook_url, "has_custom_certificate": False}
        info["pending_update_count"] = len(self._updates)
        if self.webhook_error is not None:
            info["last_error_date"], info["last_error_message"] = self.webhook_error
        return _ok(info)

    async def _m_setMyCommands(self, _r: web.Request, params: dict[str, Any]) -> web.Response:
        commands = params.get("commands")
        if not isinstance(commands, list) or not all(isinstance(c, dict) for c in commands):
            return _error(400, "Bad Request: can't parse commands JSON object")
        self.commands = commands
        return _ok(True)

    async def _m_sendChatAction(self, _r: web.Request, params: dict[str, Any]) -> web.Response:
        if "chat_id" not in params or not params.get("action"):
            return _error(400, "Bad Request: chat_id and action are required")
        return _ok(True)

    async def _m_getFile(self, _r: web.Request, params: dict[str, Any]) -> web.Response:
        meta = self.files.get(str(params.get("file_id")))
        if meta is None:
            return _error(400, "Bad Request: invalid file_id")
        return _ok({k: v for k, v in meta.items() if not k.startswith("_")})

    def add_file(self, file_id: str, content: bytes, path: str = "documents/file_0.bin") -> None:
        self.files[file_id] = {
            "file_id": file_id,
            "file_unique_id": f"u{file_id}",
            "file_size": len(content),
            "file_path": path,
            "_content": content,
        }

    async def _m_getUpdates(self, request: web.Request, params: dict[str, Any]) -> web.Response:
        if self.webhook_url:
            return _error(409, "Conflict: can't use getUpdates method while webhook is active")
        offset = params.get("offset")
        limit = int(params.get("limit") or 100)
        timeout = float(params.get("timeout") or 0)
        async with self._changed:
            if isinstance(offset, int):
                while self._updates and self._updates[0]["update_id"] < offset:
                    self._updates.popleft()  # acknowledged
            epoch = self._poll_epoch
            self.polls_waiting += 1
            self._changed.notify_all()

            def answerable() -> bool:
                return bool(self._updates or self._forced) or self._poll_epoch != epoch or self._stopping.is_set()

            try:
                async with asyncio.timeout(timeout):
                    await self._changed.wait_for(answerable)
            except TimeoutError:
                pass
            finally:
                self.polls_waiting -= 1
            if self._poll_epoch != epoch:
                return self._dropped(request)
            batch = self._forced + list(self._updates)[:limit]
            self._forced = []
        return _ok(batch)

    def _dropped(self, request: web.Request) -> web.Response:
        if self._drop_kind == "close" and request.transport is not None:
            request.transport.close()
        return _error(502, "Bad Gateway")

    def _check_text(self, text: Any, parse_mode: Any) -> tuple[str | None, web.Response | None]:
        if not isinstance(text, str) or not text.strip():
            return None, _error(400, "Bad Request: message text is empty")
        try:
            plain = visible_text(text, parse_mode)
        except EntityParseError as exc:
            return None, _error(400, f"Bad Request: can't parse entities: {exc}")
        if not plain.strip():
            return None, _error(400, "Bad Request: text must be non-empty")
        if utf16_len(plain) > 4096:
            return None, _error(400, "Bad Request: message is too long")
        return plain, None

    def _message_json(self, m: SentMessage) -> dict[str, Any]:
        chat: dict[str, Any] = (
            {"id": m.chat_id, "type": "private", "first_name": "Ada"}
            if m.chat_id > 0
            else {"id": m.chat_id, "type": "supergroup", "title": "Team"}
        )
        msg: dict[str, Any] = {
            "message_id": m.message_id,
            "from": {k: self.bot[k] for k in ("id", "is_bot", "first_name", "username")},
            "chat": chat,
            "date": int(time.time()),
            "text": m.text,
        }
        if m.thread_id is not None:
            msg["message_thread_id"] = m.thread_id
            msg["is_topic_message"] = True
        if m.edit:
            msg["edit_date"] = int(time.time())
        return msg

    async def _m_sendMessage(self, _r: web.Request, params: dict[str, Any]) -> web.Response:
        chat_id = params.get("chat_id")
        if not isinstance(chat_id, int):
            return _error(400, "Bad Request: chat not found")
        plain, problem = self._check_text(params.get("text"), params.get("parse_mode"))
        if problem is not None:
            return problem
        assert plain is not None
        quoted = params.get("reply_parameters") or {}
        m = SentMessage(
            chat_id,
            params.get("message_thread_id"),
            next(self._message_ids),
            plain,
            params["text"],
            params.get("parse_mode"),
            reply_to=quoted.get("message_id"),
            allow_without_reply=quoted.get("allow_sending_without_reply"),
        )
        async with self._changed:
            self._messages[(chat_id, m.message_id)] = m
            self.sent.append(m)
            self._changed.notify_all()
        return _ok(self._message_json(m))

    async def _m_editMessageText(self, _r: web.Request, params: dict[str, Any]) -> web.Response:
        key = (params.get("chat_id"), params.get("message_id"))
        old = self._messages.get(key)  # type: ignore[arg-type]
        if old is None:
            return _error(400, "Bad Request: message to edit not found")
        plain, problem = self._check_text(params.get("text"), params.get("parse_mode"))
        if problem is not None:
            return problem
        assert plain is not None
        if params["text"] == old.raw and params.get("parse_mode") == old.parse_mode:
            return _error(
                400,
                "Bad Request: message is not modified: specified new message content and reply markup are "
                "exactly the same as a current content and reply markup of the message",
            )
        m = SentMessage(
            old.chat_id, old.thread_id, old.message_id, plain, params["text"], params.get("parse_mode"), True
        )
        async with self._changed:
            self._messages[(m.chat_id, m.message_id)] = m
            self.sent.append(m)
            self._changed.notify_all()
        return _ok(self._message_json(m))

    async def _m_setMessageReaction(self, _r: web.Request, params: dict[str, Any]) -> web.Response:
        """A bot sets one reaction at most; an empty or missing list takes its reaction away."""
        chat_id, message_id = params.get("chat_id"), params.get("message_id")
        if not isinstance(chat_id, int) or not isinstance(message_id, int):
            return _error(400, "Bad Request: message to react not found")
        reaction = params.get("reaction") or []
        if len(reaction) > 1:
            return _error(400, "Bad Request: REACTIONS_TOO_MANY")
        if reaction and (reaction[0].get("type") != "emoji" or reaction[0].get("emoji") not in REACTIONS):
            return _error(400, "Bad Request: REACTION_INVALID")
        async with self._changed:
            if reaction:
                self.reactions[(chat_id, message_id)] = reaction[0]["emoji"]
            else:
                self.reactions.pop((chat_id, message_id), None)
            self._changed.notify_all()
        return _ok(True)


def _ok(result: Any) -> web.Response:
    return web.json_response({"ok": True, "result": result})


def _error(status: int, description: str, parameters: dict[str, Any] | None = None) -> web.Response:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if parameters:
        body["parameters"] = parameters
    return web.json_response(body, status=status)


def _failure(f: Fail) -> web.Response:
    if f.status == 429:
        after = max(1, round(f.retry_after or 1))
        return _error(429, f.description or f"Too Many Requests: retry after {after}", {"retry_after": after})
    default = {500: "Internal Server Error", 403: "Forbidden: bot was blocked by the user"}
    return _error(f.status, f.description or default.get(f.status, "Bad Request: injected failure"))
