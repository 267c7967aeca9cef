"""Discord, with the real discord.py against the local fake: an answer references its trigger
(message_reference, fail_if_not_exists false), a slash command can be answered so only its user sees
it (an ephemeral follow-up through the interaction's token), and nothing private ever lands in the
channel."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp.web
import pytest

import channels
from channels.discord.adapter import DiscordAdapter
from channels.discord.config import DiscordChannelConfig
from gateway.core.events import ConversationKind, ConversationRef, MessageReceived, MessageRef, OutboundMessage
from gateway.core.ports import ChannelServices, DeliveryError
from tests.fakes.discord import TEXT_CHANNEL_ID, TOKEN, FakeDiscord

GROUP = ConversationRef("discord", TEXT_CHANNEL_ID, None, ConversationKind.GROUP)


async def _no_history(*_args: object) -> list[object]:
    return []


class Live:
    def __init__(self, fake: FakeDiscord, adapter: DiscordAdapter) -> None:
        self.fake = fake
        self.adapter = adapter
        self.inbound: asyncio.Queue[MessageReceived] = asyncio.Queue()

    async def next(self) -> MessageReceived:
        return await asyncio.wait_for(self.inbound.get(), 5)


@pytest.fixture
async def live() -> AsyncIterator[Live]:
    fake = await FakeDiscord().start()
    services = ChannelServices(
        http=aiohttp.web.Application(),
        authenticate=lambda _t: None,
        history=_no_history,
        commands=(("status", "model and session size"), ("help", "list commands")),
    )
    config = DiscordChannelConfig(token=TOKEN, api_base_url=fake.api_base, request_timeout=1.0)  # type: ignore[arg-type]
    adapter = channels.create("discord", config, services)
    assert isinstance(adapter, DiscordAdapter)
    world = Live(fake, adapter)
    await adapter.start(world.inbound.put)
    try:
        yield world
    finally:
        await adapter.stop()
        await fake.stop()


async def test_an_answer_references_its_trigger_even_if_it_is_deleted(live: Live) -> None:
    fake = live.fake
    await fake.inject(fake.message("group", "hi bot"))
    ev = await live.next()
    assert ev.message_id is not None and ev.private_reply is False  # typed: no ephemeral answer to it
    await live.adapter.send(OutboundMessage(GROUP, "hello", "k", reply_to=MessageRef(GROUP, ev.message_id)))
    (sent,) = await fake.wait_outbox(1)
    assert sent.reference == ev.message_id
    (post,) = fake.rest("POST", f"/channels/{TEXT_CHANNEL_ID}/messages")
    assert post.body["message_reference"]["fail_if_not_exists"] is False


async def test_a_slash_command_is_answered_ephemerally_to_its_user(live: Live) -> None:
    fake = live.fake
    interaction = fake.interaction("group", "status")
    await fake.inject_interaction(interaction)
    ev = await live.next()
    assert (ev.private_reply, ev.message_id) == (True, None)  # nothing to quote: an interaction
    sent = await live.adapter.send(
        OutboundMessage(ev.ref, "Model: x\nSession: y", "k", in_reply_to_event=ev.event_id, private_to="discord:1001")
    )
    (followup,) = fake.followups
    assert (followup.interaction_id, followup.ephemeral, followup.content) == (
        interaction["id"],
        True,
        "Model: x\nSession: y",
    )
    assert sent.message_id == followup.message_id
    assert fake.outbox == []  # nothing in the channel


async def test_a_private_answer_without_its_interaction_is_refused_not_posted(live: Live) -> None:
    fake = live.fake
    with pytest.raises(DeliveryError) as raised:
        await live.adapter.send(
            OutboundMessage(GROUP, "Identities: …", "k", in_reply_to_event="discord:gone", private_to="discord:1001")
        )
    assert not raised.value.retryable
    assert fake.outbox == [] and fake.followups == []
