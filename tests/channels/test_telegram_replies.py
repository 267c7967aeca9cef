"""Telegram, with the real python-telegram-bot against the local Bot API fake: an answer quotes its
trigger (reply_parameters), registered commands are addressed in groups, nothing is ever sent as
"private" in a group (Telegram cannot), and events carry their message id."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

import channels
from channels.telegram.adapter import TelegramAdapter
from channels.telegram.config import TelegramChannelConfig
from gateway.core.events import ConversationKind, ConversationRef, MessageReceived, MessageRef, OutboundMessage
from gateway.core.ports import DeliveryError
from tests.contract.harness_telegram import services
from tests.fakes.telegram import BOT_USERNAME, GROUP_ID, FakeTelegram, utf16_len

GROUP = ConversationRef("tg", str(GROUP_ID), None, ConversationKind.GROUP)


@pytest.fixture
async def live() -> AsyncIterator[tuple[TelegramAdapter, FakeTelegram, asyncio.Queue[MessageReceived]]]:
    fake = await FakeTelegram().start()
    config = TelegramChannelConfig(
        token=fake.token,  # type: ignore[arg-type]
        api_base_url=fake.api_base_url,
        request_timeout=1,
        poll_timeout=1,
    )
    adapter = channels.create("tg", config, services())
    assert isinstance(adapter, TelegramAdapter)
    inbox: asyncio.Queue[MessageReceived] = asyncio.Queue()
    await adapter.start(inbox.put)
    try:
        yield adapter, fake, inbox
    finally:
        await adapter.stop()
        await fake.stop()


async def test_a_reply_quotes_its_trigger_and_survives_its_deletion(live: Any) -> None:
    adapter, fake, _ = live
    await adapter.send(OutboundMessage(GROUP, "answer", "k1", reply_to=MessageRef(GROUP, "42")))
    await adapter.send(OutboundMessage(GROUP, "second part", "k1:1"))
    first, second = await fake.wait_sent(2)
    assert (first.reply_to, first.allow_without_reply) == (42, True)
    assert second.reply_to is None  # only the first part of a split answer quotes
    assert fake.calls_of("sendMessage")[0].params["reply_parameters"]["message_id"] == 42


async def test_a_private_answer_is_never_posted_to_the_group(live: Any) -> None:
    adapter, fake, _ = live
    with pytest.raises(DeliveryError) as raised:
        await adapter.send(OutboundMessage(GROUP, "your identities", "k2", private_to="telegram:1001"))
    assert not raised.value.retryable
    assert fake.calls_of("sendMessage") == []


def command(text: str) -> list[dict[str, Any]]:
    return [{"type": "bot_command", "offset": 0, "length": utf16_len(text.split()[0])}]


@pytest.mark.parametrize(
    ("text", "entities", "addressed", "seen_as"),
    [
        ("/tmp is full again", command("/tmp"), False, "/tmp is full again"),  # not ours: chatter
        ("/new", command("/new"), True, "/new"),  # registered: Telegram's menu sends it bare
        ("say /new later", [{"type": "bot_command", "offset": 4, "length": 4}], False, "say /new later"),
        (f"/whoami@{BOT_USERNAME}", command(f"/whoami@{BOT_USERNAME}"), True, "/whoami"),
        ("plain words", None, False, "plain words"),
    ],
)
async def test_in_groups_only_registered_or_addressed_commands_are_for_the_bot(
    live: Any, text: str, entities: list[dict[str, Any]] | None, addressed: bool, seen_as: str
) -> None:
    _adapter, fake, inbox = live
    message = fake.message(fake.group_chat(), fake.user(1001), text, entities=entities)
    update = await fake.enqueue({"message": message})
    ev = await asyncio.wait_for(inbox.get(), 10)
    assert (ev.text, ev.mentions_bot) == (seen_as, addressed)
    assert ev.message_id == str(update["message"]["message_id"])
    assert ev.private_reply is False
