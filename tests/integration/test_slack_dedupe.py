"""One Slack message is answered once, however many envelopes Slack wraps it in.

A real Gateway with the Slack channel (slack-bolt) in HTTP Events API mode (signed requests to
/slack/events) and in Socket Mode, against the fake Slack and a fake LLM. Slack sends a mention as a
`message` event and an `app_mention` event with different event ids, and the same message once per
subscription or authorization; the gateway's journal keys them on the message's identity
(`slack:<channel id>:<ts>`), so whichever envelope comes first is answered and the others are
duplicates. An edit is an event of its own and is handled as edits are (not answered).

Both delivery paths return after the adapter journaled the event: bolt runs our listener before it
acknowledges (the HTTP response, the Socket Mode ack), and the fake waits for that acknowledgement.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from gateway.app import Gateway
from tests.fakes.llm import FakeLLM
from tests.fakes.slack import FakeSlack

CHANNEL = "C0GENERAL"
DM = "D0DM1001"
THREAD = "1690000000.000100"

Deliver = Callable[[dict[str, Any], str], Awaitable[None]]


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    fake = await FakeSlack().start()
    yield fake
    await fake.stop()


@pytest.fixture(params=["http", "socket"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def gw(
    gateway_factory: Callable[..., Awaitable[Gateway]], fake_llm: FakeLLM, slack: FakeSlack, mode: str
) -> Gateway:
    config: dict[str, Any] = {
        "mode": mode,
        "bot_token": slack.bot_token,
        "api_base_url": slack.api_base,
        "request_timeout": 2,
        "dm_policy": "open",
    }
    config |= {"signing_secret": slack.signing_secret} if mode == "http" else {"app_token": slack.app_token}
    return await gateway_factory(fake_llm, channels__slack=config)


@pytest.fixture
async def deliver(gw: Gateway, slack: FakeSlack, mode: str) -> AsyncIterator[Deliver]:
    """Deliver one Events API envelope the way `mode` does; returns once the gateway acknowledged it."""
    async with aiohttp.ClientSession() as http:

        async def by_http(event: dict[str, Any], event_id: str) -> None:
            body, headers = slack.signed_request(slack.event_body(event, event_id))
            async with http.post(gw.url + "/slack/events", data=body, headers=headers) as r:
                assert r.status == 200, await r.text()

        async def by_socket(event: dict[str, Any], event_id: str) -> None:
            await slack.push_event(event, event_id=event_id)

        yield by_http if mode == "http" else by_socket


def replies(slack: FakeSlack) -> list[str]:
    """The bot's messages as people see them: each post's final text (replies stream by edits)."""
    final: dict[str, str] = {}
    for p in slack.posted:
        final[p.ts] = p.text
    return list(final.values())


def duplicates(gw: Gateway) -> float:
    total = 0.0
    for line in gw.metrics.render().decode().splitlines():
        if line.startswith("clawgate_inbound_duplicates_total") and 'channel="slack"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


async def status(gw: Gateway, event_id: str) -> str | None:
    assert gw.storage is not None
    found = await gw.storage.journal.journaled(event_id)
    return None if found is None else found[0]


async def settled(gw: Gateway, event_id: str, timeout: float = 10) -> str:
    """The journal status of `event_id` once its turn is over (done, ignored, ...)."""
    async with asyncio.timeout(timeout):
        while (found := await status(gw, event_id)) in (None, "received"):  # noqa: ASYNC110
            await asyncio.sleep(0.02)  # the journal has no event to wait on
    assert found is not None
    return found


@pytest.mark.parametrize("order", ["message_first", "mention_first", "together"])
async def test_a_mention_pair_is_answered_once(
    gw: Gateway, slack: FakeSlack, fake_llm: FakeLLM, deliver: Deliver, order: str
) -> None:
    message = slack.message(CHANNEL, f"<@{slack.bot_user_id}> what's new?", user="U1001")
    pair = [(message, "Ev0PAIR00001"), (slack.app_mention(message), "Ev0PAIR00002")]
    if order == "together":  # Slack sends the two at once: the journal's insert decides
        await asyncio.gather(*(deliver(event, envelope_id) for event, envelope_id in pair))
    for event, envelope_id in {"message_first": pair, "mention_first": pair[::-1]}.get(order, []):
        await deliver(event, envelope_id)
    assert duplicates(gw) == 1  # the second of the pair, refused before it was acknowledged
    assert await settled(gw, f"slack:{CHANNEL}:{message['ts']}") == "done"
    assert len(fake_llm.requests) == 1
    assert len(replies(slack)) == 1 and "what's new?" in replies(slack)[0]
    assert slack.posted[0].channel == CHANNEL


async def test_one_message_under_two_envelopes_is_answered_once(
    gw: Gateway, slack: FakeSlack, fake_llm: FakeLLM, deliver: Deliver
) -> None:
    # Once per subscription or authorization that covers it: two event ids, one message.
    message = slack.message(DM, "are you there?", user="U1001")
    await deliver(message, "Ev0AUTH00001")
    await deliver(message, "Ev0AUTH00002")
    assert duplicates(gw) == 1
    assert await settled(gw, f"slack:{DM}:{message['ts']}") == "done"
    assert len(fake_llm.requests) == 1
    assert replies(slack) == ["echo: are you there?"]


@pytest.mark.parametrize("thread_ts", [None, THREAD], ids=["channel", "thread"])
async def test_an_app_mention_alone_is_answered(
    gw: Gateway, slack: FakeSlack, fake_llm: FakeLLM, deliver: Deliver, thread_ts: str | None
) -> None:
    # A workspace that subscribes to app_mention only (no message.channels) still gets answers.
    message = slack.message(CHANNEL, f"hey <@{slack.bot_user_id}>  what's new?", user="U1001", thread_ts=thread_ts)
    await deliver(slack.app_mention(message), "Ev0MENTION01")
    assert await settled(gw, f"slack:{CHANNEL}:{message['ts']}") == "done"
    # In the thread it was asked in, or in the thread of the question (reply_mode thread, Slack's default).
    assert {(p.channel, p.thread_ts) for p in slack.posted} == {(CHANNEL, thread_ts or message["ts"])}
    # Cleaned like a message event's text: the bot's own mention is gone before the model sees it.
    assert len(replies(slack)) == 1 and "hey what's new?" in replies(slack)[0]
    assert slack.bot_user_id not in str(fake_llm.requests[-1]["messages"])
    assert len(fake_llm.requests) == 1 and duplicates(gw) == 0


async def test_an_edit_is_not_a_duplicate_of_its_message(
    gw: Gateway, slack: FakeSlack, fake_llm: FakeLLM, deliver: Deliver
) -> None:
    original = slack.message(CHANNEL, f"<@{slack.bot_user_id}> helo", user="U1001")
    await deliver(original, "Ev0EDIT00001")
    message_id = f"slack:{CHANNEL}:{original['ts']}"
    assert await settled(gw, message_id) == "done"

    changed = slack.edited(original, f"<@{slack.bot_user_id}> hello")
    await deliver(changed, "Ev0EDIT00002")
    edit_id = f"{message_id}:edit:{changed['ts']}"
    assert duplicates(gw) == 0  # journaled as an event of its own
    assert await settled(gw, edit_id) == "ignored"  # edits are not answered

    # Slack also resends the app_mention of an edited mention, with the original's ts.
    await deliver(slack.edited_mention(changed), "Ev0EDIT00003")
    assert duplicates(gw) == 1  # the same edit, not the message it changed
    assert await status(gw, edit_id) == "ignored"
    assert len(fake_llm.requests) == 1
    assert replies(slack) == [replies(slack)[0]] and "helo" in replies(slack)[0]
