"""The Slack adapter with the real slack-bolt / slack_sdk against the local fake Slack."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

import channels
from channels.slack.adapter import SlackAdapter
from channels.slack.config import SlackChannelConfig
from channels.slack.errors import SlackStartError
from gateway.core.events import ConversationKind, ConversationRef, MessageReceived, MessageRef, OutboundMessage
from gateway.core.ports import ChannelServices, DeliveryError
from tests.fakes.serve import serve_loopback
from tests.fakes.slack import ApiError, FakeSlack, Hang, RateLimited, ServerError

COMMANDS = (("help", "list commands"), ("new", "start a new conversation"), ("reset", "same as /new"))
DM = ConversationRef("slack", "D0DM1001", None, ConversationKind.DM)
THREAD = "1690000000.000100"


async def _no_history(_conv: ConversationRef, _identity: str) -> list[Any]:
    return []


class Running:
    """An adapter made through the registry, its inbound queue, and (HTTP mode) its server URL."""

    def __init__(self, adapter: SlackAdapter, http: web.Application) -> None:
        self.adapter = adapter
        self.http = http
        self.inbound: asyncio.Queue[MessageReceived] = asyncio.Queue()
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def sink(self, ev: MessageReceived) -> None:
        await self.inbound.put(ev)

    async def next(self, timeout: float = 5) -> MessageReceived:
        return await asyncio.wait_for(self.inbound.get(), timeout)

    async def serve(self) -> None:
        self._runner, base = await serve_loopback(self.http)
        self.url = f"{base}/slack/events"

    async def close(self) -> None:
        await self.adapter.stop()
        if self._runner is not None:
            await self._runner.cleanup()


Factory = Callable[..., Awaitable[Running]]


class Journal:
    """The gateway's journal as the adapter sees it (`ChannelServices.accept`): one event id once."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.refused: list[str] = []

    async def accept(self, ev: MessageReceived) -> bool:
        if ev.event_id in self.seen:
            self.refused.append(ev.event_id)
            return False
        self.seen.add(ev.event_id)
        return True


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    fake = await FakeSlack().start()
    yield fake
    await fake.stop()


@pytest.fixture
async def make(fake: FakeSlack) -> AsyncIterator[Factory]:
    made: list[Running] = []

    async def factory(
        mode: str = "socket",
        *,
        start: bool = True,
        ping_interval: float | None = None,
        accept: Callable[[MessageReceived], Awaitable[bool]] | None = None,
        **overrides: Any,
    ) -> Running:
        cfg: dict[str, Any] = {
            "bot_token": fake.bot_token,
            "app_token": fake.app_token,
            "signing_secret": fake.signing_secret,
            "mode": mode,
            "api_base_url": fake.api_base,
            # Roomy: bolt asks auth.test before it acks each event, and a busy CI machine can take
            # more than half a second to answer (an event went unacked so). The timeout test sets its own.
            "request_timeout": 5,
        }
        config = SlackChannelConfig(**(cfg | overrides))
        http = web.Application()
        services = ChannelServices(
            http=http, authenticate=lambda _t: None, history=_no_history, commands=COMMANDS, accept=accept
        )
        adapter = channels.create("slack", config, services)
        assert isinstance(adapter, SlackAdapter)
        if ping_interval is not None:
            adapter.ping_interval = ping_interval
        running = Running(adapter, http)
        made.append(running)
        if mode == "http":
            await running.serve()
        if start:
            await adapter.start(running.sink)
        return running

    yield factory
    for running in made:
        await running.close()


def out(conv: ConversationRef, text: str) -> OutboundMessage:
    return OutboundMessage(conversation=conv, text=text, idempotency_key=f"k-{time.monotonic_ns()}")


# -- Socket Mode: start, inbound -------------------------------------------------------------------


async def test_socket_start_checks_auth_then_connects(make: Factory, fake: FakeSlack) -> None:
    running = await make()
    assert [c.method for c in fake.calls[:2]] == ["auth.test", "apps.connections.open"]
    assert fake.calls[0].token == fake.bot_token
    assert fake.calls[1].token == fake.app_token
    assert fake.hellos == 1 and fake.connected == 1
    assert running.adapter.health().ok
    caps = running.adapter.capabilities
    assert (caps.can_edit, caps.typing, caps.threads, caps.max_length) == (True, False, True, 3900)
    async with running.adapter.typing(DM):  # no indicator for bots, but the port must work
        pass


async def test_dm_channel_and_thread_messages(make: Factory, fake: FakeSlack) -> None:
    running = await make()
    message = fake.message("D0DM1001", "hello there", user="U1001")
    await fake.push_event(message)
    dm = await running.next()
    assert dm.event_id == f"slack:D0DM1001:{message['ts']}"  # the message's identity, not the envelope's
    assert dm.ref == ConversationRef("slack", "D0DM1001", None, ConversationKind.DM)
    assert dm.sender.identity == f"slack:{fake.team_id}/U1001"
    assert dm.text == "hello there" and not dm.mentions_bot

    await fake.push_event(fake.message("C0GROUP", "just chatting", user="U1002"))
    group = await running.next()
    assert group.ref == ConversationRef("slack", "C0GROUP", None, ConversationKind.GROUP)
    assert not group.mentions_bot

    parent = "1690000000.000100"
    await fake.push_event(fake.message("C0GROUP", "in a thread", user="U1002", thread_ts=parent))
    reply = await running.next()
    assert reply.ref == ConversationRef("slack", "C0GROUP", parent, ConversationKind.GROUP)
    assert len(fake.acks) == 3  # every envelope acked


@pytest.mark.parametrize("mention_first", [False, True])
async def test_mention_arrives_twice_but_is_delivered_once(make: Factory, fake: FakeSlack, mention_first: bool) -> None:
    journal = Journal()
    running = await make(accept=journal.accept)
    message = fake.message("C0GROUP", f"<@{fake.bot_user_id}> what's new?", user="U1002")
    pair = [message, fake.app_mention(message)]
    for event in reversed(pair) if mention_first else pair:
        await fake.push_event(event)
    await fake.push_event(fake.message("D0DM1001", "sentinel"))
    first = await running.next()
    assert first.mentions_bot and first.text == "what's new?"
    assert first.event_id == f"slack:C0GROUP:{message['ts']}"
    assert (await running.next()).text == "sentinel"
    assert len(fake.acks) == 3
    assert journal.refused == [first.event_id]  # the second of the pair was journaled as seen


@pytest.mark.parametrize("mode", ["socket", "http"])
async def test_app_mention_alone_is_delivered(make: Factory, fake: FakeSlack, mode: str) -> None:
    # An app subscribed to app_mention only (no message.channels) still hears its mentions.
    running = await make(mode)
    message = fake.message("C0GROUP", f"hey <@{fake.bot_user_id}>  what's new?", user="U1002", thread_ts=THREAD)
    mention = fake.app_mention(message)
    if mode == "socket":
        await fake.push_event(mention)
    else:
        assert (await post(running.url, *fake.signed_request(fake.event_body(mention))))[0] == 200
    ev = await running.next()
    assert ev.mentions_bot and ev.text == "hey what's new?"
    assert ev.ref == ConversationRef("slack", "C0GROUP", THREAD, ConversationKind.GROUP)
    assert ev.event_id == f"slack:C0GROUP:{message['ts']}"


async def test_one_message_under_two_envelopes_is_one_event(make: Factory, fake: FakeSlack) -> None:
    # Slack delivers a message once per subscription or authorization that covers it.
    journal = Journal()
    running = await make(accept=journal.accept)
    message = fake.message("D0DM1001", "only once")
    await fake.push_event(message, event_id="Ev0AUTH00001")
    await fake.push_event(message, event_id="Ev0AUTH00002")
    await fake.push_event(fake.message("D0DM1001", "sentinel"))
    assert (await running.next()).text == "only once"
    assert (await running.next()).text == "sentinel"
    assert journal.refused == [f"slack:D0DM1001:{message['ts']}"]


async def test_edit_is_delivered_with_its_own_event_id(make: Factory, fake: FakeSlack) -> None:
    running = await make()
    original = fake.message("D0DM1001", "helo")
    await fake.push_event(original)
    first = await running.next()
    changed = fake.edited(original, "hello")
    await fake.push_event(changed)
    edit = await running.next()
    assert edit.edited and edit.text == "hello" and edit.event_id != first.event_id
    assert edit.event_id == f"{first.event_id}:edit:{changed['ts']}"
    assert edit.ref == first.ref


async def test_edited_mention_is_an_edit_not_its_message(make: Factory, fake: FakeSlack) -> None:
    # Slack resends app_mention, with the original ts, when a message that mentions the bot is edited.
    running = await make()
    original = fake.message("C0GROUP", f"<@{fake.bot_user_id}> helo")
    await fake.push_event(fake.app_mention(original))
    first = await running.next()
    await fake.push_event(fake.edited_mention(fake.edited(original, f"<@{fake.bot_user_id}> hello")))
    edit = await running.next()
    assert edit.edited and edit.mentions_bot and edit.text == "hello"
    assert edit.event_id.startswith(f"{first.event_id}:edit:") and not first.edited


async def test_own_and_other_bot_messages_are_ignored_but_acked(make: Factory, fake: FakeSlack) -> None:
    running = await make()
    await fake.push_event(fake.message("D0DM1001", "my own reply", from_bot=True))
    other = fake.message("C0GROUP", "deploy done") | {"subtype": "bot_message", "bot_id": "B0OTHER"}
    other.pop("user")
    await fake.push_event(other)
    await fake.push_event(fake.message("D0DM1001", "sentinel"))
    assert (await running.next()).text == "sentinel"
    assert len(fake.acks) == 3


async def test_socket_redelivery_keeps_the_event_id(make: Factory, fake: FakeSlack) -> None:
    running = await make()
    event = fake.message("D0DM1001", "once")
    await fake.push_event(event, event_id="Ev0SAME0001")
    await fake.push_event(event, event_id="Ev0SAME0001", retry_attempt=1)
    first, second = await running.next(), await running.next()
    assert first.event_id == second.event_id == f"slack:D0DM1001:{event['ts']}"  # the gateway dedupes on it


async def test_slash_command_is_acked_and_delivered(make: Factory, fake: FakeSlack) -> None:
    running = await make()
    payload = await fake.push_command("/new", "", channel_id="D0DM1001", channel_name="directmessage")
    ev = await running.next()
    assert ev.text == "/new"
    assert ev.event_id == f"slack:{payload['trigger_id']}"
    assert ev.ref == ConversationRef("slack", "D0DM1001", None, ConversationKind.DM)
    assert ev.mentions_bot
    assert fake.acks[-1].get("payload") in (None, {})  # an empty ack: the answer comes as a message

    await fake.push_command("/help", "memory", channel_id="C0GROUP", channel_name="general")
    ev = await running.next()
    assert ev.text == "/help memory" and ev.ref.kind == ConversationKind.GROUP


async def test_unknown_slash_command_is_acked_not_delivered(make: Factory, fake: FakeSlack) -> None:
    running = await make()
    await fake.push_command("/weather", "paris")
    assert fake.acks[-1]["payload"] == {"text": "I don't know /weather. Try /help."}
    await fake.push_event(fake.message("D0DM1001", "sentinel"))
    assert (await running.next()).text == "sentinel"


# -- sending ---------------------------------------------------------------------------------------


async def test_send_and_edit_in_a_thread(make: Factory, fake: FakeSlack) -> None:
    running = await make()
    conv = ConversationRef("slack", "C0GROUP", "1690000000.000100", ConversationKind.GROUP)
    ref = await running.adapter.send(out(conv, "**Hi** <you> & [docs](https://x.y)"))
    posted = (await fake.wait_posted(1))[0]
    assert ref == MessageRef(conv, posted.ts)
    assert posted.channel == "C0GROUP" and posted.thread_ts == "1690000000.000100"
    assert posted.text == "*Hi* &lt;you&gt; &amp; <https://x.y|docs>"
    call = fake.calls_to("chat.postMessage")[0]
    assert call.args["mrkdwn"] is True and call.token == fake.bot_token

    await running.adapter.edit(ref, "**Hi** again", final=True)
    edit = (await fake.wait_posted(2))[1]
    assert edit.edit and edit.ts == posted.ts and edit.text == "*Hi* again"


async def test_send_to_a_dm_has_no_thread(make: Factory, fake: FakeSlack) -> None:
    running = await make()
    await running.adapter.send(out(DM, "hello"))
    assert "thread_ts" not in fake.calls_to("chat.postMessage")[0].args


async def test_rate_limit_carries_retry_after(make: Factory, fake: FakeSlack) -> None:
    running = await make()
    fake.fail_next("chat.postMessage", RateLimited(retry_after=3))
    with pytest.raises(DeliveryError) as info:
        await running.adapter.send(out(DM, "hi"))
    assert info.value.retryable and info.value.retry_after == 3.0 and not info.value.maybe_delivered
    assert len(fake.calls_to("chat.postMessage")) == 1  # the SDK did not sleep and retry by itself


async def test_server_error_is_retryable(make: Factory, fake: FakeSlack) -> None:
    running = await make()
    fake.fail_next("chat.postMessage", ServerError(503))
    with pytest.raises(DeliveryError) as info:
        await running.adapter.send(out(DM, "hi"))
    assert info.value.retryable and not info.value.maybe_delivered
    assert len(fake.calls_to("chat.postMessage")) == 1


async def test_timeout_may_have_delivered(make: Factory, fake: FakeSlack) -> None:
    running = await make(request_timeout=0.5)
    fake.fail_next("chat.postMessage", Hang())
    with pytest.raises(DeliveryError) as info:
        await running.adapter.send(out(DM, "hi"))
    assert info.value.maybe_delivered and not info.value.retryable
    assert len(fake.calls_to("chat.postMessage")) == 1


@pytest.mark.parametrize("code", ["channel_not_found", "not_in_channel", "invalid_auth", "msg_too_long"])
async def test_refusals_are_not_retryable(make: Factory, fake: FakeSlack, code: str) -> None:
    running = await make()
    fake.fail_next("chat.postMessage", ApiError(code))
    with pytest.raises(DeliveryError) as info:
        await running.adapter.send(out(DM, "hi"))
    assert not info.value.retryable and not info.value.maybe_delivered
    assert code in str(info.value) and fake.bot_token not in str(info.value)


async def test_edit_of_unknown_message_is_not_retryable(make: Factory, fake: FakeSlack) -> None:
    running = await make()
    with pytest.raises(DeliveryError) as info:
        await running.adapter.edit(MessageRef(DM, "1.000001"), "x", final=True)
    assert not info.value.retryable and "message_not_found" in str(info.value)


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/api/"


async def test_unreachable_slack_fails_start(make: Factory) -> None:
    with pytest.raises(SlackStartError, match=r"auth\.test failed"):
        await make(api_base_url=closed_port_url())


async def test_connection_refused_is_retryable(make: Factory) -> None:
    # Not started (start() would fail on auth.test first): the send meets a refused connection.
    running = await make("http", start=False, api_base_url=closed_port_url())
    with pytest.raises(DeliveryError) as info:
        await running.adapter.send(out(DM, "hi"))
    assert info.value.retryable and not info.value.maybe_delivered


# -- Socket Mode: connection life ------------------------------------------------------------------


async def test_closed_socket_reconnects_through_connections_open(make: Factory, fake: FakeSlack) -> None:
    running = await make()
    await fake.drop_socket()
    await fake.wait_for(lambda f: f.hellos == 2 and f.connected == 1)
    assert len(fake.calls_to("apps.connections.open")) == 2  # a fresh URL: the old one is single-use
    await fake.push_event(fake.message("D0DM1001", "after reconnect"))
    assert (await running.next()).text == "after reconnect"


async def test_cut_connection_is_noticed_and_replaced(make: Factory, fake: FakeSlack) -> None:
    # No close frame (a dead network): the SDK's keep-alive monitor notices within ping_interval.
    running = await make(ping_interval=0.2)
    await fake.drop_socket(hard=True)
    await fake.wait_for(lambda f: f.hellos == 2 and f.connected == 1)
    await fake.push_event(fake.message("D0DM1001", "after a cut"))
    assert (await running.next()).text == "after a cut"


async def test_refresh_requested_moves_to_a_new_connection(make: Factory, fake: FakeSlack) -> None:
    running = await make()
    await fake.refresh_socket()
    await fake.wait_for(lambda f: f.hellos == 2)
    await fake.push_event(fake.message("D0DM1001", "after refresh"))
    assert (await running.next()).text == "after refresh"


async def test_stop_is_prompt_with_a_turn_in_flight(make: Factory, fake: FakeSlack) -> None:
    running = await make()
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def slow_sink(_ev: MessageReceived) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    running.adapter._sink = slow_sink  # a turn that never ends
    await fake.push_event(fake.message("D0DM1001", "think forever"))
    await asyncio.wait_for(started.wait(), 5)
    began = time.monotonic()
    await running.adapter.stop()
    assert time.monotonic() - began < 3
    assert cancelled.is_set() and not running.adapter.health().ok
    await fake.wait_for(lambda f: f.connected == 0)


async def test_bad_bot_token_fails_start(make: Factory, fake: FakeSlack) -> None:
    with pytest.raises(SlackStartError, match="invalid_auth"):
        await make(bot_token="xoxb-wrong-token-000")
    assert fake.connected == 0


async def test_bad_app_token_fails_start(make: Factory, fake: FakeSlack) -> None:
    with pytest.raises(SlackStartError, match="invalid_auth"):
        await make(app_token="xapp-wrong-token-000")
    assert fake.connected == 0


# -- HTTP Events API -------------------------------------------------------------------------------


async def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.post(url, data=body, headers=headers) as resp:
        return resp.status, await resp.text()


async def test_http_signed_event_is_processed(make: Factory, fake: FakeSlack) -> None:
    running = await make("http")
    assert fake.connected == 0 and not fake.calls_to("apps.connections.open")
    message = fake.message("D0DM1001", "over http")
    body, headers = fake.signed_request(fake.event_body(message, "Ev0HTTP0001"))
    status, _ = await post(running.url, body, headers)
    assert status == 200
    ev = await running.next()
    assert ev.text == "over http" and ev.event_id == f"slack:D0DM1001:{message['ts']}"


async def test_http_retry_has_the_same_event_id(make: Factory, fake: FakeSlack) -> None:
    running = await make("http")
    message = fake.message("C0GROUP", "retry me")
    payload = fake.event_body(message, "Ev0HTTP0002")
    for retry in (None, 1):
        body, headers = fake.signed_request(payload, retry_num=retry)
        assert (await post(running.url, body, headers))[0] == 200
    event_ids = {(await running.next()).event_id, (await running.next()).event_id}
    assert event_ids == {f"slack:C0GROUP:{message['ts']}"}


@pytest.mark.parametrize("variant", ["bad_signature", "stale"])
async def test_http_unverified_requests_are_refused(
    make: Factory, fake: FakeSlack, variant: str, caplog: pytest.LogCaptureFixture
) -> None:
    running = await make("http")
    body, headers = fake.signed_request(fake.event_body(fake.message("D0DM1001", "forged")), variant=variant)
    assert (await post(running.url, body, headers))[0] == 401
    assert {"bad_signature": "reason=bad_signature", "stale": "reason=stale_timestamp"}[variant] in caplog.text
    body, headers = fake.signed_request(fake.event_body(fake.message("D0DM1001", "sentinel")))
    assert (await post(running.url, body, headers))[0] == 200
    assert (await running.next()).text == "sentinel"  # the forged one was never processed


async def test_http_unsigned_request_is_refused(make: Factory, fake: FakeSlack) -> None:
    running = await make("http")
    body = json.dumps(fake.event_body(fake.message("D0DM1001", "no headers"))).encode()
    assert (await post(running.url, body, {"Content-Type": "application/json"}))[0] == 401


async def test_http_url_verification_is_answered(make: Factory, fake: FakeSlack) -> None:
    running = await make("http")
    payload = {
        "token": "legacy",
        "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
        "type": "url_verification",
    }
    status, text = await post(running.url, *fake.signed_request(payload))
    assert status == 200 and payload["challenge"] in text


@pytest.mark.parametrize("raw", ["{not json", "[1, 2]", ""])
async def test_http_malformed_body_is_a_400(make: Factory, fake: FakeSlack, raw: str) -> None:
    running = await make("http")
    assert (await post(running.url, *fake.signed_request(raw)))[0] == 400
    body, headers = fake.signed_request(fake.event_body(fake.message("D0DM1001", "still alive")))
    assert (await post(running.url, body, headers))[0] == 200
    assert (await running.next()).text == "still alive"


async def test_http_slash_command_form(make: Factory, fake: FakeSlack) -> None:
    running = await make("http")
    payload = fake.command_payload("/reset", "", channel_id="C0GROUP", channel_name="general")
    status, _ = await post(running.url, *fake.signed_request(payload, form=True))
    assert status == 200
    ev = await running.next()
    assert ev.text == "/reset" and ev.ref.kind == ConversationKind.GROUP


async def test_http_before_start_is_unavailable(make: Factory, fake: FakeSlack) -> None:
    running = await make("http", start=False)
    body, headers = fake.signed_request(fake.event_body(fake.message("D0DM1001", "early")))
    assert (await post(running.url, body, headers))[0] == 503
