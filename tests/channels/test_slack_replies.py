"""Slack, with the real slack-bolt / slack_sdk against the local fake: answers go into the thread of
their trigger (shown in the channel too under reply_mode quote), a personal answer is an ephemeral
message (chat.postEphemeral) to its user, and events carry their ts and whether they can be
answered privately."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

import channels
from channels.slack.adapter import SlackAdapter
from channels.slack.config import SlackChannelConfig
from gateway.core.events import ConversationKind, ConversationRef, MessageReceived, MessageRef, OutboundMessage
from gateway.core.ports import ChannelServices, DeliveryError
from tests.fakes.slack import FakeSlack

CHANNEL = ConversationRef("slack", "C0GROUP", None, ConversationKind.GROUP)
TRIGGER = "1700000001.000001"


async def _no_history(_conv: ConversationRef, _identity: str) -> list[Any]:
    return []


class Live:
    def __init__(self, fake: FakeSlack, adapter: SlackAdapter) -> None:
        self.fake = fake
        self.adapter = adapter
        self.inbound: asyncio.Queue[MessageReceived] = asyncio.Queue()

    async def next(self) -> MessageReceived:
        return await asyncio.wait_for(self.inbound.get(), 5)


@pytest.fixture
async def live() -> AsyncIterator[Live]:
    fake = await FakeSlack().start()
    config = SlackChannelConfig(
        bot_token=fake.bot_token,  # type: ignore[arg-type]
        app_token=fake.app_token,  # type: ignore[arg-type]
        api_base_url=fake.api_base,
        request_timeout=1,
    )
    services = ChannelServices(
        http=web.Application(), authenticate=lambda _t: None, history=_no_history, commands=(("status", "size"),)
    )
    adapter = channels.create("slack", config, services)
    assert isinstance(adapter, SlackAdapter)
    world = Live(fake, adapter)
    await adapter.start(world.inbound.put)
    try:
        yield world
    finally:
        await adapter.stop()
        await fake.stop()


def test_slack_answers_in_threads_by_default() -> None:
    assert SlackChannelConfig(bot_token="xoxb-1").reply_mode == "thread"  # type: ignore[arg-type]


async def test_every_part_of_an_answer_goes_into_the_thread_of_its_trigger(live: Live) -> None:
    thread = ConversationRef("slack", "C0GROUP", TRIGGER, ConversationKind.GROUP)
    await live.adapter.send(OutboundMessage(thread, "first part", "k"))
    await live.adapter.send(OutboundMessage(thread, "second part", "k:1"))
    first, second = await live.fake.wait_posted(2)
    assert (first.thread_ts, second.thread_ts) == (TRIGGER, TRIGGER)
    assert not first.broadcast and not second.broadcast


async def test_quote_mode_also_shows_the_first_part_in_the_channel(live: Live) -> None:
    thread = ConversationRef("slack", "C0GROUP", TRIGGER, ConversationKind.GROUP)
    await live.adapter.send(OutboundMessage(thread, "answer", "k", reply_to=MessageRef(CHANNEL, TRIGGER)))
    (posted,) = await live.fake.wait_posted(1)
    assert (posted.thread_ts, posted.broadcast) == (TRIGGER, True)


async def test_a_private_answer_is_an_ephemeral_message_to_its_user(live: Live) -> None:
    fake = live.fake
    ref = await live.adapter.send(OutboundMessage(CHANNEL, "Session: x", "k", private_to="slack:T0FAKE/U1001"))
    (shown,) = fake.ephemeral
    assert (shown.channel, shown.user, shown.thread_ts, shown.text) == ("C0GROUP", "U1001", None, "Session: x")
    assert ref.message_id and fake.posted == []  # nobody else sees anything
    with pytest.raises(DeliveryError):
        await live.adapter.send(OutboundMessage(CHANNEL, "x", "k2", private_to="telegram:5"))
    assert len(fake.ephemeral) == 1


async def test_events_carry_their_ts_and_whether_they_can_be_answered_privately(live: Live) -> None:
    fake = live.fake
    channel_message = fake.message("C0GROUP", "hello all")
    await fake.push_event(channel_message)
    ev = await live.next()
    assert (ev.message_id, ev.private_reply, ev.ref.kind) == (channel_message["ts"], True, ConversationKind.GROUP)
    await fake.push_event(fake.message("D0DM1001", "hello you"))
    dm = await live.next()
    assert dm.private_reply is False and dm.message_id is not None
    await fake.push_command("/status", "", channel_id="C0GROUP", channel_name="general")
    command = await live.next()
    assert (command.text, command.private_reply, command.message_id) == ("/status", True, None)
