"""The Messenger adapter over real HTTP: its webhook served on loopback and called as Meta calls it
(tests/fakes/messenger.py signs the calls), its Send API calls answered by the same fake. Covers the
subscription check, signatures and hostile bodies (refused, nothing journaled), journaling before
the 200 and redelivery, sends inside and outside the 24-hour window, typing, Meta's errors, where
attachments may be fetched from, the start with a bad token, and `clawgate doctor`'s probe."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

import channels
from channels.messenger.adapter import MessengerAdapter
from channels.messenger.config import MessengerChannelConfig
from channels.messenger.errors import MessengerStartError, delivery_error
from gateway.core.events import Attachment, ConversationKind, ConversationRef, MessageReceived, OutboundMessage
from gateway.core.ports import ChannelServices, DeliveryError
from gateway.core.probe import Finding, Probe
from tests.fakes.conversations import MemoryConversations
from tests.fakes.messenger import PSID, Drop, FakeMessenger, GraphError, Hang, RateLimited, ServerError
from tests.fakes.serve import serve_loopback

LOGGER = "clawgate.channels.messenger"
DM = ConversationRef("messenger", PSID, None, ConversationKind.DM)
H = 3600.0


class Journal:
    """What the gateway's `accept` does for a webhook, in memory: a new event is kept, a seen one refused."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.broken = False

    async def accept(self, ev: MessageReceived) -> bool:
        if self.broken:
            raise RuntimeError("database is locked")
        if ev.event_id in self.ids:
            return False
        self.ids.append(ev.event_id)
        return True


@dataclass
class World:
    fake: FakeMessenger
    adapter: MessengerAdapter
    webhook: str
    journal: Journal
    store: MemoryConversations
    inbound: asyncio.Queue[MessageReceived] = field(default_factory=asyncio.Queue)

    async def post(self, raw: bytes, headers: dict[str, str]) -> int:
        status, _ = await self.fake.post(self.webhook, raw, headers)
        return status

    async def deliver(self, *events: dict[str, Any]) -> int:
        return await self.fake.deliver(self.webhook, *events)

    async def next(self) -> MessageReceived:
        return await asyncio.wait_for(self.inbound.get(), timeout=5)

    async def wrote(self, hours_ago: float, psid: str = PSID) -> None:
        """`psid` last wrote that long ago, as Meta and the gateway's store both know."""
        at = self.fake.clock() - hours_ago * H
        self.fake.last_inbound[psid] = at
        await self.store.save("messenger", psid, {"last_inbound": at})


async def _no_history(_conv: ConversationRef, _identity: str) -> list[Any]:
    return []


@asynccontextmanager
async def world(store: MemoryConversations | None = None, **config: Any) -> AsyncIterator[World]:
    fake = await FakeMessenger().start()
    app = web.Application()
    journal, store = Journal(), store or MemoryConversations()
    services = ChannelServices(
        http=app,
        authenticate=lambda _t, _a: None,
        history=_no_history,
        accept=journal.accept,
        conversations=store,
    )
    cfg = MessengerChannelConfig.model_validate(fake.config(**({"request_timeout": 1} | config)))
    adapter = channels.create("messenger", cfg, services)
    assert isinstance(adapter, MessengerAdapter)
    runner, url = await serve_loopback(app, shutdown_timeout=0.1)
    w = World(fake, adapter, url + cfg.webhook_path, journal, store)
    try:
        await adapter.start(w.inbound.put)
        yield w
    finally:
        await adapter.stop()
        await runner.cleanup()
        await fake.stop()


@pytest.fixture
async def w() -> AsyncIterator[World]:
    async with world() as it:
        yield it


# -- the subscription check -----------------------------------------------------------------------


async def test_the_subscription_check_echoes_the_challenge(w: World, caplog: pytest.LogCaptureFixture) -> None:
    assert await w.fake.verify(w.webhook, challenge="1158201444") == (200, "1158201444")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert (await w.fake.verify(w.webhook, token="not-the-verify-token"))[0] == 403
        assert (await w.fake.verify(w.webhook, mode="unsubscribe"))[0] == 403
    assert "reason=wrong_verify_token" in caplog.text and "reason=wrong_mode" in caplog.text
    assert w.fake.verify_token not in caplog.text


# -- receiving ------------------------------------------------------------------------------------


async def test_a_message_is_journaled_handed_over_and_opens_the_window(w: World) -> None:
    event = w.fake.text("hello there", mid="m_hello")
    assert await w.deliver(event) == 200
    ev = await w.next()
    assert (ev.event_id, ev.text, ev.ref) == ("messenger:m_hello", "hello there", DM)
    assert ev.sender.identity == f"messenger:{w.fake.page_id}/{PSID}"
    assert w.journal.ids == ["messenger:m_hello"]
    stored = await w.store.load("messenger", PSID)
    assert stored == {"last_inbound": event["timestamp"] / 1000}


async def test_a_redelivered_call_is_handed_over_once(w: World) -> None:
    event = w.fake.text("only once", mid="m_once")
    assert await w.deliver(event) == 200
    assert await w.deliver(event) == 200
    await w.deliver(w.fake.text("next"))
    assert [(await w.next()).text, (await w.next()).text] == ["only once", "next"]
    assert w.journal.ids.count("messenger:m_once") == 1


@pytest.mark.parametrize("variant", ["no signature", "another secret", "body changed", "sha1", "no prefix", "not hex"])
async def test_unsigned_or_forged_calls_are_refused_and_nothing_is_kept(
    w: World, caplog: pytest.LogCaptureFixture, variant: str
) -> None:
    raw = json.dumps(w.fake.body(w.fake.text("forged"))).encode()
    good = w.fake.signed(raw)["X-Hub-Signature-256"]
    headers = {
        "no signature": {},
        "another secret": w.fake.signed(raw, secret="someone-elses-secret"),
        "body changed": w.fake.signed(raw + b" "),
        "sha1": {"X-Hub-Signature-256": good.replace("sha256=", "sha1=")},
        "no prefix": {"X-Hub-Signature-256": good.removeprefix("sha256=")},
        "not hex": {"X-Hub-Signature-256": "sha256=" + "g" * 64},
    }[variant]
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert await w.post(raw, {"Content-Type": "application/json", **headers}) == 403
    assert "messenger_webhook_refused" in caplog.text
    assert w.journal.ids == [] and w.inbound.empty()
    assert await w.store.load("messenger", PSID) is None


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b'"page"', b"\xff\xfe", b""])
async def test_malformed_bodies_are_refused_with_400(w: World, caplog: pytest.LogCaptureFixture, raw: bytes) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert await w.post(raw, w.fake.signed(raw)) == 400
    assert "messenger_webhook_malformed" in caplog.text
    assert w.journal.ids == [] and w.inbound.empty()


async def test_a_huge_body_is_refused_before_its_signature_is_checked(
    w: World, caplog: pytest.LogCaptureFixture
) -> None:
    raw = json.dumps(w.fake.body(w.fake.text("x" * 1_100_000))).encode()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert await w.post(raw, w.fake.signed(raw)) == 413
    assert "reason=body_too_large" in caplog.text
    assert w.journal.ids == []


async def test_a_long_message_is_kept_whole_for_the_gateway_to_refuse(w: World) -> None:
    await w.deliver(w.fake.text("y" * 50_000))
    assert (await w.next()).text == "y" * 50_000


async def test_what_has_nothing_to_answer_is_acknowledged_and_dropped(w: World) -> None:
    events = [w.fake.echo("the Page's words"), w.fake.delivery("m_1"), w.fake.read()]
    assert await w.deliver(*events) == 200
    raw = json.dumps({"object": "instagram", "entry": []}).encode()
    assert await w.post(raw, w.fake.signed(raw)) == 200
    raw = json.dumps(w.fake.body(w.fake.text("to another Page"), page_id="999")).encode()
    assert await w.post(raw, w.fake.signed(raw)) == 200
    assert w.journal.ids == [] and w.inbound.empty()


async def test_quick_replies_postbacks_and_several_events_in_one_call(w: World) -> None:
    other = "7000000000000002"
    events = [
        w.fake.quick_reply("Red", "COLOR_RED"),
        w.fake.postback("Start over", "/new", psid=other),
        w.fake.postback("Get Started", "GET_STARTED", with_mid=False),
    ]
    assert await w.deliver(*events) == 200
    got = [await w.next() for _ in events]
    assert [(e.text, e.ref.chat_id) for e in got] == [("Red", PSID), ("/new", other), ("Get Started", PSID)]
    assert len(set(w.journal.ids)) == 3


async def test_a_journal_failure_answers_503_so_meta_delivers_again(w: World, caplog: pytest.LogCaptureFixture) -> None:
    w.journal.broken = True
    event = w.fake.text("keep me", mid="m_keep")
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        assert await w.deliver(event) == 503
    assert "messenger_not_journaled" in caplog.text and w.inbound.empty()
    w.journal.broken = False
    assert await w.deliver(event) == 200  # Meta's redelivery
    assert (await w.next()).text == "keep me"


async def test_before_start_calls_are_answered_503(caplog: pytest.LogCaptureFixture) -> None:
    fake = await FakeMessenger().start()
    app = web.Application()
    cfg = MessengerChannelConfig.model_validate(fake.config())
    channels.create("messenger", cfg, ChannelServices(http=app, authenticate=lambda _t, _a: None, history=_no_history))
    runner, url = await serve_loopback(app)
    try:
        assert await fake.deliver(url + cfg.webhook_path, fake.text("too early")) == 503
    finally:
        await runner.cleanup()
        await fake.stop()


def test_two_channels_cannot_share_a_webhook_path() -> None:
    app = web.Application()
    services = ChannelServices(http=app, authenticate=lambda _t, _a: None, history=_no_history)
    cfg = MessengerChannelConfig.model_validate(
        {"page_access_token": "t", "app_secret": "s", "verify_token": "12345678"}
    )
    channels.create("fb1", cfg, services)
    with pytest.raises(ValueError, match="already served"):
        channels.create("fb2", cfg, services)


# -- sending --------------------------------------------------------------------------------------


async def test_a_reply_goes_out_as_plain_text_with_the_token_in_the_header(w: World) -> None:
    await w.wrote(hours_ago=1)
    ref = await w.adapter.send(OutboundMessage(DM, "**Hi** see [docs](https://x.y)", "k1"))
    [sent] = w.fake.sent
    assert (sent.recipient, sent.text, sent.messaging_type, sent.tag) == (
        PSID,
        "Hi see docs (https://x.y)",
        "RESPONSE",
        None,
    )
    assert ref.message_id == sent.mid
    call = w.fake.calls[-1]
    assert call.path == "/v21.0/me/messages" and call.token == w.fake.token
    assert w.fake.tokens_in_url == 0


async def test_edits_are_refused_and_not_offered(w: World) -> None:
    assert not w.adapter.capabilities.can_edit and w.adapter.capabilities.max_length == 2000
    await w.wrote(hours_ago=1)
    ref = await w.adapter.send(OutboundMessage(DM, "hello", "k1"))
    with pytest.raises(DeliveryError) as info:
        await w.adapter.edit(ref, "changed", final=True)
    assert not info.value.retryable


async def test_typing_shows_while_a_turn_runs_and_stops_by_itself_after_a_reply(w: World) -> None:
    await w.wrote(hours_ago=1)
    async with w.adapter.typing(DM):
        await w.fake.wait_for(lambda f: len(f.actions) == 1)
    assert [a.action for a in w.fake.actions] == ["typing_on", "typing_off"]  # nothing was sent: turned off
    async with w.adapter.typing(DM):
        await w.fake.wait_for(lambda f: len(f.actions) == 3)
        await w.adapter.send(OutboundMessage(DM, "done", "k1"))
    assert [a.action for a in w.fake.actions[2:]] == ["typing_on"]  # the message ended it


async def test_typing_outside_the_window_sends_nothing(w: World) -> None:
    async with w.adapter.typing(DM):
        pass
    assert w.fake.actions == [] and w.fake.calls[-1].path.endswith("/me")


async def test_a_failing_typing_indicator_does_not_fail_the_turn(w: World) -> None:
    await w.wrote(hours_ago=1)
    w.fake.fail_next("action", ServerError(500), ServerError(500))
    async with w.adapter.typing(DM):
        await w.fake.wait_for(lambda f: len(f.calls) >= 2)
    assert w.fake.actions == []


@pytest.mark.parametrize(
    ("behavior", "retry_after"),
    [
        (RateLimited(retry_after=2), 2.0),
        (RateLimited(retry_after=None, status=400, code=613, usage_minutes=3), 180.0),
        (RateLimited(retry_after=None, status=400, code=4), 60.0),
    ],
)
async def test_rate_limits_are_retryable_after_metas_wait(w: World, behavior: RateLimited, retry_after: float) -> None:
    await w.wrote(hours_ago=1)
    w.fake.fail_next("send", behavior)
    with pytest.raises(DeliveryError) as info:
        await w.adapter.send(OutboundMessage(DM, "hello", "k1"))
    assert info.value.retryable and info.value.retry_after == retry_after and not info.value.maybe_delivered
    assert w.fake.sent == []


async def test_server_errors_retry_and_timeouts_may_have_delivered(w: World) -> None:
    await w.wrote(hours_ago=1)
    w.fake.fail_next("send", ServerError(502), Hang())
    with pytest.raises(DeliveryError) as info:
        await w.adapter.send(OutboundMessage(DM, "hello", "k1"))
    assert info.value.retryable
    with pytest.raises(DeliveryError) as info:
        await w.adapter.send(OutboundMessage(DM, "hello", "k2"))
    assert info.value.maybe_delivered and not info.value.retryable


async def test_a_cut_connection_may_have_delivered(w: World) -> None:
    await w.wrote(hours_ago=1)
    w.fake.fail_next("send", Drop())
    with pytest.raises(DeliveryError) as info:
        await w.adapter.send(OutboundMessage(DM, "hello", "k1"))
    assert info.value.maybe_delivered and not info.value.retryable


async def test_a_refused_connection_is_retryable() -> None:
    fake = await FakeMessenger().start()
    url = fake.url
    await fake.stop()  # nothing listens there any more
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.ClientError) as info:
            await http.post(f"{url}/v21.0/me/messages", json={})
    err = delivery_error(info.value, "send")
    assert err.retryable and not err.maybe_delivered


@pytest.mark.parametrize(
    ("error", "says"),
    [
        (GraphError(551, 1545041, message="This person isn't available right now."), "not available"),
        (GraphError(190, 463, message="Error validating access token: Session has expired"), "page_access_token"),
        (GraphError(200, message="(#200) Permissions error"), "pages_messaging"),
    ],
)
async def test_refusals_are_final_and_say_why(w: World, error: GraphError, says: str) -> None:
    await w.wrote(hours_ago=1)
    w.fake.fail_next("send", error)
    with pytest.raises(DeliveryError) as info:
        await w.adapter.send(OutboundMessage(DM, "hello", "k1"))
    assert not info.value.retryable and says in str(info.value)
    assert w.fake.token not in str(info.value)


# -- the 24-hour window ---------------------------------------------------------------------------


async def test_outside_the_window_nothing_is_sent_and_a_line_says_why(
    w: World, caplog: pytest.LogCaptureFixture
) -> None:
    await w.wrote(hours_ago=25)
    calls = len(w.fake.calls)
    with caplog.at_level(logging.WARNING, logger=LOGGER), pytest.raises(DeliveryError) as info:
        await w.adapter.send(OutboundMessage(DM, "late answer", "k1"))
    assert not info.value.retryable and "24-hour window" in str(info.value) and "message_tag" in str(info.value)
    assert "messenger_window_closed" in caplog.text and "hours_since_last_message=25.0" in caplog.text
    assert PSID not in caplog.text  # the person is masked
    assert len(w.fake.calls) == calls and w.fake.sent == []


async def test_someone_who_never_wrote_cannot_be_messaged(w: World) -> None:
    with pytest.raises(DeliveryError, match="has not written"):
        await w.adapter.send(OutboundMessage(DM, "hello stranger", "k1"))
    assert w.fake.sent == []


async def test_a_message_tag_lets_an_update_through() -> None:
    async with world(message_tag="ACCOUNT_UPDATE") as w:
        await w.wrote(hours_ago=30)
        await w.adapter.send(OutboundMessage(DM, "your order shipped", "k1"))
        await w.wrote(hours_ago=1)
        await w.adapter.send(OutboundMessage(DM, "and now a reply", "k2"))
        assert [(s.messaging_type, s.tag) for s in w.fake.sent] == [
            ("MESSAGE_TAG", "ACCOUNT_UPDATE"),
            ("RESPONSE", None),
        ]


async def test_human_agent_reaches_people_for_seven_days_only() -> None:
    async with world(message_tag="HUMAN_AGENT") as w:
        await w.wrote(hours_ago=3 * 24)
        await w.adapter.send(OutboundMessage(DM, "an agent follows up", "k1"))
        other = "7000000000000009"
        await w.wrote(hours_ago=8 * 24, psid=other)
        with pytest.raises(DeliveryError, match="7 days"):
            await w.adapter.send(OutboundMessage(ConversationRef("messenger", other), "too late", "k2"))
        assert [(s.messaging_type, s.tag) for s in w.fake.sent] == [("MESSAGE_TAG", "HUMAN_AGENT")]


async def test_metas_own_window_refusal_is_final(w: World) -> None:
    # The gateway believes the window open (a clock far off, a store restored from a backup); Meta does not.
    await w.store.save("messenger", PSID, {"last_inbound": w.fake.clock() - H})
    with pytest.raises(DeliveryError) as info:
        await w.adapter.send(OutboundMessage(DM, "hello", "k1"))
    assert not info.value.retryable and "24-hour window" in str(info.value)


async def test_the_window_survives_a_restart_and_is_shared_by_instances() -> None:
    store = MemoryConversations()
    async with world(store) as first:
        await first.deliver(first.fake.text("remember me"))
        await first.next()
    async with world(store) as second:  # a new process (or another instance) on the same store
        second.fake.last_inbound[PSID] = second.fake.clock()
        await second.adapter.send(OutboundMessage(DM, "I still can answer", "k1"))
        assert second.fake.texts_to(PSID) == ["I still can answer"]


async def test_a_newer_message_seen_by_another_instance_reopens_the_window() -> None:
    store = MemoryConversations()
    async with world(store) as w:
        await w.wrote(hours_ago=30)
        with pytest.raises(DeliveryError):
            await w.adapter.send(OutboundMessage(DM, "closed", "k1"))
        await w.wrote(hours_ago=0.1)  # the other instance stored it; this one's memory is older
        await w.adapter.send(OutboundMessage(DM, "open again", "k2"))
        assert w.fake.texts_to(PSID) == ["open again"]


# -- attachments ----------------------------------------------------------------------------------


async def test_attachments_come_from_facebooks_hosts_only_and_without_the_token(w: World) -> None:
    url = w.fake.attach(b"%PDF-1.4 fake", "report.pdf", "application/pdf")
    await w.deliver(w.fake.attachments(("file", url)))
    ev = await w.next()
    [att] = ev.attachments
    assert (att.kind, att.name, att.ref) == ("file", "report.pdf", url)
    located = await w.adapter.locate_media(att)
    assert located == (url, {})  # no credentials: the URL is Meta's signed one
    origin = w.fake.url.replace("http://127.0.0.1", "http://127.0.0.1")
    assert any(o == origin for o in w.adapter.media_origins)  # the configured API base's own origin
    cdn = Attachment("image", "a.jpg", ref="https://scontent-iad3-2.xx.fbcdn.net/v/a.jpg?oh=1")
    await w.adapter.locate_media(cdn)
    assert "https://scontent-iad3-2.xx.fbcdn.net:443" in w.adapter.media_origins
    elsewhere = Attachment("image", "a.jpg", ref="https://attacker.example/a.jpg")
    await w.adapter.locate_media(elsewhere)
    assert not any("attacker" in o for o in w.adapter.media_origins)
    with pytest.raises(FileNotFoundError):
        await w.adapter.locate_media(Attachment("image"))


# -- start and health -----------------------------------------------------------------------------


async def test_health_names_the_page(w: World) -> None:
    health = w.adapter.health()
    assert health.ok and w.fake.page_name in health.detail and w.fake.page_id in health.detail


async def test_a_bad_token_fails_start_clearly(caplog: pytest.LogCaptureFixture) -> None:
    fake = await FakeMessenger().start()
    cfg = MessengerChannelConfig.model_validate(fake.config(page_access_token="EAAWrongToken0000"))
    services = ChannelServices(http=web.Application(), authenticate=lambda _t, _a: None, history=_no_history)
    adapter = channels.create("messenger", cfg, services)
    try:
        with caplog.at_level(logging.ERROR, logger=LOGGER), pytest.raises(MessengerStartError) as info:
            await adapter.start(asyncio.Queue[MessageReceived]().put)
        assert "190" in str(info.value) and "expired, revoked or wrong" in str(info.value)
        assert "EAAWrongToken0000" not in str(info.value) + caplog.text
        assert not adapter.health().ok
    finally:
        await adapter.stop()
        await fake.stop()


async def test_an_unreachable_graph_api_fails_start() -> None:
    fake = await FakeMessenger().start()
    cfg = MessengerChannelConfig.model_validate(fake.config())
    await fake.stop()
    adapter = channels.create(
        "messenger", cfg, ChannelServices(http=web.Application(), authenticate=lambda _t, _a: None, history=_no_history)
    )
    with pytest.raises(MessengerStartError, match="cannot reach"):
        await adapter.start(asyncio.Queue[MessageReceived]().put)


# -- clawgate doctor ------------------------------------------------------------------------------


@dataclass
class View:
    """What a probe reads of the whole config (gateway.core.probe.ConfigView)."""

    channels: Mapping[str, Any]
    users: Mapping[str, Any] = field(default_factory=dict)
    web: bool = True

    def web_channels(self) -> Mapping[str, Any]:
        return {"web": object()} if self.web else {}


async def probe(cfg: MessengerChannelConfig, *, web_served: bool = True) -> Finding:
    p = Probe("fb", View({"fb": cfg}, web=web_served), 2, {"channels.fb.page_access_token": "FB_PAGE_TOKEN"})
    return await channels.probe(p, cfg)


async def test_doctor_names_the_page() -> None:
    fake = await FakeMessenger().start()
    try:
        found = await probe(MessengerChannelConfig.model_validate(fake.config()))
        assert found.status == "ok" and fake.page_name in found.detail and fake.page_id in found.detail
        assert fake.calls[-1].token == fake.token and fake.tokens_in_url == 0
        assert fake.token not in repr(found)
    finally:
        await fake.stop()


async def test_doctor_fails_a_refused_token_with_a_hint() -> None:
    fake = await FakeMessenger().start()
    try:
        found = await probe(MessengerChannelConfig.model_validate(fake.config(page_access_token="EAAOldToken999")))
        assert found.status == "fail" and "refused the Page access token" in found.detail
        assert found.hint is not None and "FB_PAGE_TOKEN" in found.hint
        assert "EAAOldToken999" not in repr(found)
        fake.fail_next("me", RateLimited(retry_after=5))
        assert (await probe(MessengerChannelConfig.model_validate(fake.config()))).status == "warn"
        fake.fail_next("me", ServerError(503))
        assert (await probe(MessengerChannelConfig.model_validate(fake.config()))).data["reason"] == "server"
    finally:
        await fake.stop()


async def test_doctor_without_a_web_server_or_a_reachable_api() -> None:
    fake = await FakeMessenger().start()
    cfg = MessengerChannelConfig.model_validate(fake.config())
    try:
        assert (await probe(cfg, web_served=False)).data["reason"] == "no_web_server"
    finally:
        await fake.stop()
    assert (await probe(cfg)).data["reason"] == "connection"
