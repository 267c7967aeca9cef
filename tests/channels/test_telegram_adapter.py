"""The Telegram adapter with the real python-telegram-bot against the local Bot API fake."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from telegram.error import TelegramError

import channels
from channels.telegram.adapter import TelegramAdapter
from channels.telegram.config import TelegramChannelConfig
from channels.telegram.errors import TelegramStartError
from gateway.core.events import ConversationKind, ConversationRef, MessageReceived, MessageRef, OutboundMessage
from gateway.core.ports import DeliveryError, SessionBusy
from gateway.core.splitting import utf16_len
from tests.contract.harness_telegram import TelegramHarness, services
from tests.fakes.telegram import BOT_ID, FORUM_ID, GROUP_ID, TOPIC_ID, Fail, FakeTelegram, Hang

NAME = "tg"
SECRET = "s3cret-webhook-token-0123"
DM = ConversationRef(NAME, "1001", None, ConversationKind.DM)
TOPIC = ConversationRef(NAME, str(FORUM_ID), str(TOPIC_ID), ConversationKind.GROUP)

Inbox = asyncio.Queue[MessageReceived]

# PTB's own RetryAfter warns about its future retry_after type; the adapter handles both types.
pytestmark = pytest.mark.filterwarnings("ignore:.*`retry_after`.*:telegram.warnings.PTBDeprecationWarning")


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    f = await FakeTelegram().start()
    yield f
    await f.stop()


def make_config(fake: FakeTelegram, **overrides: Any) -> TelegramChannelConfig:
    values: dict[str, Any] = {
        "token": fake.token,
        "api_base_url": fake.api_base_url,
        "request_timeout": 1,
        "poll_timeout": 1,
    }
    return TelegramChannelConfig(**{**values, **overrides})


Start = Callable[..., Awaitable[tuple[TelegramAdapter, Inbox]]]


@pytest.fixture
async def start(fake: FakeTelegram) -> AsyncIterator[Start]:
    """Start a polling adapter (config overrides as keywords); stopped after the test."""
    started: list[TelegramAdapter] = []

    async def factory(**overrides: Any) -> tuple[TelegramAdapter, Inbox]:
        adapter = channels.create(NAME, make_config(fake, **overrides), services())
        assert isinstance(adapter, TelegramAdapter)
        inbox: Inbox = asyncio.Queue()
        await adapter.start(inbox.put)
        started.append(adapter)
        return adapter, inbox

    yield factory
    for adapter in started:
        await adapter.stop()


async def next_event(inbox: Inbox) -> MessageReceived:
    return await asyncio.wait_for(inbox.get(), 10)


def out(conv: ConversationRef, text: str, final: bool = True, **kw: Any) -> OutboundMessage:
    return OutboundMessage(conv, text, "idem-1", final=final, **kw)


# -- start and stop ---------------------------------------------------------------------------------


async def test_start_identifies_registers_commands_and_deletes_webhook(start: Start, fake: FakeTelegram) -> None:
    adapter, _ = await start()
    await fake.wait_calls("getUpdates")
    methods = [c.method for c in fake.calls]
    assert methods[0] == "getMe"
    assert {"setMyCommands", "deleteWebhook", "getUpdates"} <= set(methods)
    assert methods.index("deleteWebhook") < methods.index("getUpdates")
    assert fake.commands == [
        {"command": "help", "description": "list commands"},
        {"command": "new", "description": "start a new conversation"},
    ]
    assert adapter.health().ok
    assert adapter.capabilities.max_length <= 4096 and adapter.capabilities.length is utf16_len
    assert adapter.capabilities.can_edit and adapter.capabilities.typing and adapter.capabilities.threads


async def test_failing_set_my_commands_does_not_stop_start(start: Start, fake: FakeTelegram) -> None:
    fake.fail_next("setMyCommands", Fail(500))
    adapter, inbox = await start()
    await fake.dm("still works")
    assert (await next_event(inbox)).text == "still works"
    assert adapter.health().ok


async def test_invalid_token_fails_start_clearly(fake: FakeTelegram) -> None:
    adapter = channels.create(NAME, make_config(fake, token="123:wrong-token"), services())
    inbox: Inbox = asyncio.Queue()
    with pytest.raises(TelegramStartError, match="could not start"):
        await adapter.start(inbox.put)
    assert not adapter.health().ok
    await adapter.stop()  # harmless after a failed start


async def test_stop_is_prompt_during_a_long_poll(start: Start, fake: FakeTelegram) -> None:
    adapter, _ = await start(poll_timeout=30)
    await fake.wait_polling()
    began = time.monotonic()
    await adapter.stop()
    assert time.monotonic() - began < 2
    assert not adapter.health().ok
    # PTB acknowledged what it fetched with a last, non-waiting getUpdates.
    assert fake.calls_of("getUpdates")[-1].params.get("timeout") == 0


async def test_file_downloads_use_the_configured_base_url(start: Start, fake: FakeTelegram) -> None:
    """api_base_url also routes /file/bot<token>/... (PTB's base_file_url), e.g. for a self-hosted Bot API."""
    adapter, _ = await start()
    fake.add_file("BQACAgQAAxkBAAIBtGa-doc", b"%PDF-1.7 tiny", "documents/file_1.pdf")
    tg_file = await adapter._bot().get_file("BQACAgQAAxkBAAIBtGa-doc")
    assert tg_file.file_size == 13
    assert bytes(await tg_file.download_as_bytearray()) == b"%PDF-1.7 tiny"


async def test_stop_is_prompt_during_polling_backoff(fake: FakeTelegram) -> None:
    """PTB sleeps its retry backoff (up to 30 s) without listening to stop(); stop() cuts it short."""
    adapter = channels.create(NAME, make_config(fake), services())
    assert isinstance(adapter, TelegramAdapter)
    adapter.stop_grace = 0.2
    poll_failed = asyncio.Event()
    record = adapter._on_poll_error

    def on_poll_error(exc: TelegramError) -> None:
        record(exc)
        poll_failed.set()  # PTB calls this right before its backoff sleep, with no await between

    adapter._on_poll_error = on_poll_error  # type: ignore[method-assign]
    inbox: Inbox = asyncio.Queue()
    await adapter.start(inbox.put)
    await fake.drop_poll()
    await asyncio.wait_for(poll_failed.wait(), 10)
    began = time.monotonic()
    await adapter.stop()
    assert time.monotonic() - began < 0.8  # PTB alone would first sleep its 1 s backoff


# -- inbound ----------------------------------------------------------------------------------------


async def test_dm_is_normalized_and_delivered(start: Start, fake: FakeTelegram) -> None:
    _, inbox = await start()
    update = await fake.dm("hello **there**")
    ev = await next_event(inbox)
    assert ev.event_id == f"{NAME}:{update['update_id']}"
    assert ev.ref == DM
    assert ev.sender.identity == "telegram:1001" and ev.sender.display_name == "Ada"
    assert ev.text == "hello **there**"
    assert not ev.edited


async def test_group_mention_and_forum_topic(start: Start, fake: FakeTelegram) -> None:
    _, inbox = await start()
    await fake.group("what's up", mention=True)
    group = await next_event(inbox)
    assert group.ref == ConversationRef(NAME, str(GROUP_ID), None, ConversationKind.GROUP)
    assert group.mentions_bot and group.text == "what's up"
    await fake.group("just chatting", sender=1002)
    chatter = await next_event(inbox)
    assert not chatter.mentions_bot and chatter.sender.identity == "telegram:1002"
    await fake.topic("in the topic")
    topic = await next_event(inbox)
    assert topic.ref == TOPIC
    assert topic.reply_to is None  # the implicit reply to the topic root is not a reply


async def test_edit_gets_its_own_event(start: Start, fake: FakeTelegram) -> None:
    _, inbox = await start()
    original = await fake.dm("first words")
    first = await next_event(inbox)
    edited_update = await fake.edit(original, "better words")
    edited = await next_event(inbox)
    assert edited.edited and edited.text == "better words"
    assert edited.event_id == f"{NAME}:{edited_update['update_id']}" != first.event_id


async def test_redelivered_update_has_the_same_event_id(start: Start, fake: FakeTelegram) -> None:
    _, inbox = await start()
    update = await fake.dm("once")
    first = await next_event(inbox)
    await fake.redeliver(update)
    again = await next_event(inbox)
    assert again.event_id == first.event_id


async def test_own_and_other_bots_messages_are_ignored(start: Start, fake: FakeTelegram) -> None:
    _, inbox = await start()
    await fake.own(fake.group_chat(), "my own reply")
    other_bot = fake.user(6000002, "CI", "ci_bot", is_bot=True)
    await fake.enqueue({"message": fake.message(fake.group_chat(), other_bot, "build passed")})
    await fake.group("a person speaks")
    ev = await next_event(inbox)  # updates are handled in order: the two before were dropped
    assert ev.text == "a person speaks"
    assert inbox.empty()


async def test_slow_sink_does_not_block_receiving(fake: FakeTelegram) -> None:
    release = asyncio.Event()
    seen: Inbox = asyncio.Queue()

    async def slow_sink(ev: MessageReceived) -> None:
        await seen.put(ev)
        if ev.text == "slow":
            await release.wait()

    adapter = channels.create(NAME, make_config(fake), services())
    await adapter.start(slow_sink)
    try:
        await fake.dm("slow")
        await fake.dm("fast")
        assert [(await next_event(seen)).text for _ in range(2)] == ["slow", "fast"]
    finally:
        release.set()
        await adapter.stop()


async def test_busy_sink_is_logged_and_receiving_goes_on(fake: FakeTelegram, caplog: pytest.LogCaptureFixture) -> None:
    seen: Inbox = asyncio.Queue()

    async def sink(ev: MessageReceived) -> None:
        await seen.put(ev)
        if ev.text == "one too many":
            raise SessionBusy(ev.ref.session_key)

    adapter = channels.create(NAME, make_config(fake), services())
    await adapter.start(sink)
    try:
        await fake.dm("one too many")
        await fake.dm("next")
        assert [(await next_event(seen)).text for _ in range(2)] == ["one too many", "next"]
    finally:
        await adapter.stop()
    assert "telegram_inbound_busy" in caplog.text


@pytest.mark.parametrize("kind", ["502", "close"])
async def test_polling_survives_a_dropped_long_poll(start: Start, fake: FakeTelegram, kind: str) -> None:
    adapter, inbox = await start()
    await fake.drop_poll(kind)
    await fake.dm("after the drop")
    assert (await next_event(inbox)).text == "after the drop"
    assert adapter.health().ok


async def test_health_reports_failing_polls_and_recovers(start: Start, fake: FakeTelegram) -> None:
    adapter, inbox = await start(poll_timeout=30)  # a long poll only an update ends: no timing luck
    await fake.wait_polling()
    polls = len(fake.calls_of("getUpdates"))
    await fake.drop_poll()  # answered 502
    await fake.wait_calls("getUpdates", polls + 1)  # PTB's retry after its backoff
    health = adapter.health()
    assert not health.ok and "polling failing" in health.detail
    await fake.dm("back")
    await next_event(inbox)
    assert adapter.health().ok


# -- outbound ---------------------------------------------------------------------------------------


async def test_send_renders_html(start: Start, fake: FakeTelegram) -> None:
    adapter, _ = await start()
    ref = await adapter.send(out(DM, "Hi **Ada** <3 & `x < y`"))
    call = fake.calls_of("sendMessage")[-1]
    assert call.params["parse_mode"] == "HTML"
    assert call.params["text"] == "Hi <b>Ada</b> &lt;3 &amp; <code>x &lt; y</code>"
    assert call.params["chat_id"] == 1001
    sent = fake.sent[-1]
    assert sent.text == "Hi Ada <3 & x < y"
    assert ref == MessageRef(DM, str(sent.message_id))


async def test_send_markdown_v2(start: Start, fake: FakeTelegram) -> None:
    adapter, _ = await start(parse_mode="MarkdownV2")
    await adapter.send(out(DM, "Done. **v1.2** (ok)!"))
    call = fake.calls_of("sendMessage")[-1]
    assert call.params["parse_mode"] == "MarkdownV2"
    assert fake.sent[-1].text == "Done. v1.2 (ok)!"


async def test_send_to_topic_and_as_reply(start: Start, fake: FakeTelegram) -> None:
    adapter, _ = await start()
    ref = await adapter.send(out(TOPIC, "in topic", reply_to=MessageRef(TOPIC, "915")))
    call = fake.calls_of("sendMessage")[-1]
    assert call.params["message_thread_id"] == TOPIC_ID
    assert call.params["reply_parameters"] == {"message_id": 915, "allow_sending_without_reply": True}
    assert ref.conversation == TOPIC
    assert fake.sent[-1].thread_id == TOPIC_ID


async def test_longest_chunk_is_accepted(start: Start, fake: FakeTelegram) -> None:
    adapter, _ = await start()
    unit = "a<b & c🎉 "  # escapes grow the HTML, astral characters count twice in UTF-16
    text = (unit * 1000)[: adapter.capabilities.max_length]
    while utf16_len(text) > adapter.capabilities.max_length:
        text = text[:-1]
    await adapter.send(out(DM, text))
    assert fake.sent[-1].text == text


async def test_rejected_markup_is_resent_as_plain_text(start: Start, fake: FakeTelegram) -> None:
    adapter, _ = await start()
    fake.fail_next("sendMessage", Fail(400, "Bad Request: can't parse entities: Unsupported start tag"))
    ref = await adapter.send(out(DM, "**hi** there"))
    first, second = fake.calls_of("sendMessage")[-2:]
    assert first.params["parse_mode"] == "HTML"
    assert "parse_mode" not in second.params and second.params["text"] == "**hi** there"
    assert ref.message_id == str(fake.sent[-1].message_id)


async def test_edit_renders_falls_back_and_skips_no_op(start: Start, fake: FakeTelegram) -> None:
    adapter, _ = await start()
    ref = await adapter.send(out(DM, "draft", final=False))
    await adapter.edit(ref, "draft **more**", final=False)
    edit = fake.calls_of("editMessageText")[-1]
    assert edit.params["text"] == "draft <b>more</b>" and edit.params["message_id"] == int(ref.message_id)
    # Streaming often ends with the text already shown: Telegram would refuse that edit.
    await adapter.edit(ref, "draft **more**", final=True)
    assert len(fake.calls_of("editMessageText")) == 1
    fake.fail_next("editMessageText", Fail(400, "Bad Request: can't parse entities: Can't find end tag"))
    await adapter.edit(ref, "final **text**", final=True)
    assert fake.sent[-1].raw == "final **text**" and fake.sent[-1].parse_mode is None


async def test_edit_of_missing_message_is_not_retryable(start: Start) -> None:
    adapter, _ = await start()
    with pytest.raises(DeliveryError) as err:
        await adapter.edit(MessageRef(DM, "999999"), "x", final=True)
    assert not err.value.retryable and not err.value.maybe_delivered


async def test_rate_limit_gives_retry_after(start: Start, fake: FakeTelegram) -> None:
    adapter, _ = await start()
    fake.rate_limit_next("sendMessage", retry_after=7)
    with pytest.raises(DeliveryError) as err:
        await adapter.send(out(DM, "hi"))
    assert err.value.retryable and err.value.retry_after == 7 and not err.value.maybe_delivered
    assert len(fake.calls_of("sendMessage")) == 1  # PTB did not retry or sleep by itself


async def test_timed_out_send_is_maybe_delivered_and_not_repeated(start: Start, fake: FakeTelegram) -> None:
    adapter, _ = await start()
    fake.fail_next("sendMessage", Hang())
    began = time.monotonic()
    with pytest.raises(DeliveryError) as err:
        await adapter.send(out(DM, "hi"))
    assert time.monotonic() - began < 5
    assert err.value.maybe_delivered and not err.value.retryable
    assert len(fake.calls_of("sendMessage")) == 1
    assert len(fake.sent) == 1  # it did arrive: that is why it must never be sent again


@pytest.mark.parametrize(
    ("status", "retryable"),
    [(500, True), (502, True), (403, False), (400, False)],
)
async def test_http_errors_are_classified(start: Start, fake: FakeTelegram, status: int, retryable: bool) -> None:
    adapter, _ = await start()
    fake.fail_next("sendMessage", Fail(status))
    if status == 400:
        fake.fail_next("sendMessage", Fail(status))  # the plain-text retry fails the same way
    with pytest.raises(DeliveryError) as err:
        await adapter.send(out(DM, "hi"))
    assert err.value.retryable is retryable and not err.value.maybe_delivered


async def test_unreachable_api_is_retryable(start: Start, fake: FakeTelegram) -> None:
    adapter, _ = await start()
    await fake.stop()  # connection refused from now on
    with pytest.raises(DeliveryError) as err:
        await adapter.send(out(DM, "hi"))
    assert err.value.retryable and not err.value.maybe_delivered


async def test_send_before_start_fails_cleanly(fake: FakeTelegram) -> None:
    adapter = channels.create(NAME, make_config(fake), services())
    with pytest.raises(DeliveryError):
        await adapter.send(out(DM, "hi"))


async def test_typing_refreshes_until_exit_in_the_topic(start: Start, fake: FakeTelegram) -> None:
    adapter, _ = await start()
    adapter.typing_interval = 0.05
    async with adapter.typing(TOPIC):
        calls = await fake.wait_calls("sendChatAction", 3)
    assert calls[0].params == {"chat_id": FORUM_ID, "action": "typing", "message_thread_id": TOPIC_ID}
    assert not any(t.get_name().startswith("telegram-typing") for t in asyncio.all_tasks())
    await adapter.send(out(TOPIC, "round trip"))
    after_exit = len(fake.calls_of("sendChatAction"))
    await adapter.send(out(TOPIC, "another round trip"))
    assert len(fake.calls_of("sendChatAction")) == after_exit


async def test_typing_failures_never_break_the_turn(start: Start, fake: FakeTelegram) -> None:
    adapter, _ = await start()
    fake.fail_next("sendChatAction", Fail(403))
    async with adapter.typing(DM):
        await fake.wait_calls("sendChatAction")
    await adapter.send(out(DM, "still fine"))


# -- webhook mode -----------------------------------------------------------------------------------


@pytest.fixture
async def webhook(fake: FakeTelegram) -> AsyncIterator[tuple[TelegramAdapter, Inbox, str]]:
    """A webhook-mode adapter on a local aiohttp server; Telegram (the fake) knows its URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/telegram/{NAME}"
    svc = services()
    config = make_config(fake, mode="webhook", webhook_url=url, webhook_secret=SECRET)
    adapter = channels.create(NAME, config, svc)
    assert isinstance(adapter, TelegramAdapter)
    assert isinstance(svc.http, web.Application)
    runner = web.AppRunner(svc.http, access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    inbox: Inbox = asyncio.Queue()
    await adapter.start(inbox.put)
    yield adapter, inbox, url
    await adapter.stop()
    await runner.cleanup()


async def test_webhook_start_registers_the_url_and_secret(
    webhook: tuple[TelegramAdapter, Inbox, str], fake: FakeTelegram
) -> None:
    _, _, url = webhook
    assert fake.webhook_url == url and fake.webhook_secret == SECRET
    set_call = fake.calls_of("setWebhook")[-1]
    assert set_call.params["allowed_updates"] == ["message", "edited_message"]
    assert not fake.calls_of("getUpdates") and not fake.calls_of("deleteWebhook")


async def test_webhook_update_with_the_secret_is_processed(
    webhook: tuple[TelegramAdapter, Inbox, str], fake: FakeTelegram
) -> None:
    _, inbox, _ = webhook
    update = {"update_id": 900001, "message": fake.message(fake.group_chat(), fake.user(), "via webhook")}
    assert await fake.post_webhook(update) == 200
    ev = await next_event(inbox)
    assert ev.text == "via webhook" and ev.event_id == f"{NAME}:900001"
    # Telegram resends when it missed our answer: the same update is the same event.
    assert await fake.post_webhook(update) == 200
    assert (await next_event(inbox)).event_id == ev.event_id


async def test_webhook_refuses_wrong_or_missing_secret(
    webhook: tuple[TelegramAdapter, Inbox, str], fake: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    _, inbox, _ = webhook
    update = {"update_id": 900002, "message": fake.message(fake.private_chat(fake.user()), fake.user(), "evil")}
    assert await fake.post_webhook(update, secret="not-the-secret-at-all") == 403
    assert await fake.post_webhook(update, omit_secret=True) == 403
    assert inbox.empty()
    assert 'reason="wrong secret"' in caplog.text and 'reason="missing secret header"' in caplog.text
    assert SECRET not in caplog.text


@pytest.mark.parametrize(
    "body",
    [b"{not json", b"[1, 2]", b'{"update_id": "7"}', b'{"update_id": 7, "message": "nope"}', b"\xff\xfe"],
)
async def test_webhook_malformed_body_is_400(
    webhook: tuple[TelegramAdapter, Inbox, str], fake: FakeTelegram, body: bytes
) -> None:
    adapter, inbox, _ = webhook
    assert await fake.post_webhook(body=body) == 400
    assert inbox.empty()
    update = {"update_id": 900003, "message": fake.message(fake.private_chat(fake.user()), fake.user(), "ok")}
    assert await fake.post_webhook(update) == 200  # the channel is unharmed
    assert (await next_event(inbox)).text == "ok"
    assert adapter.health().ok


async def test_webhook_before_start_is_503(fake: FakeTelegram) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/telegram/{NAME}"
    svc = services()
    channels.create(NAME, make_config(fake, mode="webhook", webhook_secret=SECRET), svc)
    assert isinstance(svc.http, web.Application)
    runner = web.AppRunner(svc.http, access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    try:
        assert await fake.post_webhook({"update_id": 1}, secret=SECRET, url=url) == 503
    finally:
        await runner.cleanup()


# -- the contract harness ---------------------------------------------------------------------------


async def test_harness_round_trip() -> None:
    h = TelegramHarness()
    await h.start()
    try:
        for where in ("dm", "group", "thread"):
            await h.inject(where, f"hello {where}", mention=where != "dm")
            ev = await asyncio.wait_for(h.inbound.get(), 10)
            assert ev.ref == h.conversation(where)
            assert ev.text == f"hello {where}"
        await h.inject("group", "mine", from_self=True)
        await h.inject("group", "theirs")
        assert (await asyncio.wait_for(h.inbound.get(), 10)).text == "theirs"
        ref = await h.adapter.send(OutboundMessage(h.conversation("thread"), "**reply**", "k"))
        await h.adapter.edit(ref, "**reply** edited", final=True)
        sent = await h.wait_sent(2)
        assert [(s.text, s.edit, s.thread_id) for s in sent] == [
            ("reply", False, str(TOPIC_ID)),
            ("reply edited", True, str(TOPIC_ID)),
        ]
        h.fail_next_send("rate_limit", retry_after=2)
        with pytest.raises(DeliveryError) as err:
            await h.adapter.send(OutboundMessage(h.conversation("dm"), "x", "k2"))
        assert err.value.retry_after == 2
        await h.drop_connection()
        await h.inject("dm", "after drop")
        assert (await asyncio.wait_for(h.inbound.get(), 10)).text == "after drop"
        assert BOT_ID == h.fake.bot["id"]
    finally:
        began = time.monotonic()
        await h.stop()
        assert time.monotonic() - began < 3
