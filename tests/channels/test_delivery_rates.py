"""Rate-safe delivery on each platform: the real adapter (real SDK) against its local fake, Delivery
on a virtual clock that the fake also stamps its requests with, so waits of seconds take none.

- a 429 with retry_after=2 holds the first resend (stream send, stream edit, final send) >= 2 s;
- streamed edits keep to each platform's budget, in a private chat and in a group, and a busy Slack
  workspace stays under chat.update's tier;
- a short reply is one message: no edit that repeats it;
- the acknowledgement reaction goes on and comes off through the platform's own API.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.core.events import Actor, ConversationKind, ConversationRef, MessageReceived, MessageRef
from gateway.core.ports import Reacting
from gateway.llm.client import Restart, TextDelta
from gateway.turn.delivery import Delivery
from gateway.turn.engine import TurnResult
from memory.store.storage import Storage
from tests.contract.harness import Harness, Where
from tests.fakes.clock import VirtualClock
from tests.fakes.slack import RateLimited
from tests.fakes.telegram import Fail

HARNESSES = {
    "telegram": "tests.contract.harness_telegram:TelegramHarness",
    "discord": "tests.contract.harness_discord:DiscordHarness",
    "slack": "tests.contract.harness_slack:SlackHarness",
}
# The most streamed edits any 60 seconds may see: Telegram's private chats about one a second and
# groups 20 a minute; Discord's fixed 1.25 s spacing under its 5-per-5-s channel bucket; Slack's
# chat.update budget of 45 a minute (and a burst of 3) under Tier 3's 50.
EDITS_PER_MINUTE = {
    ("telegram", "dm"): 60,
    ("telegram", "group"): 20,
    ("discord", "dm"): 38,
    ("discord", "group"): 38,
    ("slack", "dm"): 48,
    ("slack", "group"): 48,
}

Stream = AsyncIterator[TextDelta | Restart | TurnResult]


@dataclass
class Probe:
    """What a test reads from, and scripts on, one platform's fake."""

    harness: Harness
    fake: Any

    @property
    def platform(self) -> str:
        return self.harness.platform

    def sends(self) -> list[float]:
        """When each send request arrived (refused ones included)."""
        if self.platform == "telegram":
            return [c.at for c in self.fake.calls_of("sendMessage")]
        if self.platform == "discord":
            return [c.at for c in self.fake.rest("POST", "/channels/") if c.path.endswith("/messages")]
        return [c.at for c in self.fake.calls_to("chat.postMessage")]

    def edits(self) -> list[float]:
        if self.platform == "telegram":
            return [c.at for c in self.fake.calls_of("editMessageText")]
        if self.platform == "discord":
            return [c.at for c in self.fake.rest("PATCH", "/channels/")]
        return [c.at for c in self.fake.calls_to("chat.update")]

    def fail_next_edit(self, retry_after: float) -> None:
        if self.platform == "telegram":
            self.fake.fail_next("editMessageText", Fail(429, retry_after=retry_after))
        elif self.platform == "discord":
            self.fake.fail_next("rate_limit", route="edit", retry_after=retry_after)
        else:
            self.fake.fail_next("chat.update", RateLimited(retry_after))

    def reaction(self, ref: MessageRef) -> str | None:
        if self.platform == "telegram":
            return self.fake.reactions.get((int(ref.conversation.chat_id), int(ref.message_id)))
        if self.platform == "discord":
            return next(iter(self.fake.reactions.get(ref.message_id, [])), None)
        return next(iter(self.fake.reactions.get((ref.conversation.chat_id, ref.message_id), set())), None)


@pytest.fixture(params=list(HARNESSES))
async def probe(request: pytest.FixtureRequest) -> AsyncIterator[Probe]:
    module, _, cls = HARNESSES[request.param].partition(":")
    harness: Harness = getattr(importlib.import_module(module), cls)()
    await harness.start()
    try:
        yield Probe(harness, harness.fake)  # type: ignore[attr-defined]
    finally:
        async with asyncio.timeout(10):
            await harness.stop()


@pytest.fixture
async def storage(tmp_path: Path) -> AsyncIterator[Storage]:
    s = await Storage.open(f"sqlite:///{tmp_path}/r.db")
    yield s
    await s.close()


def on_clock(probe: Probe, storage: Storage) -> tuple[Delivery, VirtualClock]:
    clock = VirtualClock()
    probe.fake.clock = clock
    return Delivery(storage.journal, clock=clock, sleep=clock.sleep), clock


async def model(clock: VirtualClock, pieces: list[str], every: float) -> Stream:
    """A model streaming `pieces`, one each `every` seconds of virtual time, then the whole text."""
    for piece in pieces:
        yield TextDelta(piece)
        clock.advance(every)
    yield TurnResult("".join(pieces))


def most_in_a_minute(times: list[float]) -> int:
    """The most requests within any 60 s (less a millisecond of rounding) of the virtual clock."""
    return max((sum(1 for t in times if start <= t < start + 59.999) for start in times), default=0)


async def test_a_429_on_the_first_send_holds_the_resend(probe: Probe, storage: Storage) -> None:
    delivery, clock = on_clock(probe, storage)
    probe.harness.fail_next_send("rate_limit", retry_after=2)
    conv = probe.harness.conversation("dm")
    await delivery.stream(probe.harness.adapter, conv, "e1", model(clock, ["Hello", " there", ", friend"], 0.1))
    refused, resend = probe.sends()
    assert resend - refused >= 2.0
    assert probe.edits() == []  # the deltas that came meanwhile waited too
    assert (await probe.harness.sent())[-1].text.endswith("friend")


async def test_a_429_on_a_streamed_edit_holds_the_final_edit(probe: Probe, storage: Storage) -> None:
    delivery, clock = on_clock(probe, storage)
    conv = probe.harness.conversation("dm")

    async def stream() -> Stream:
        yield TextDelta("one")
        clock.advance(1.5)  # past every platform's spacing: the next delta is an edit
        probe.fail_next_edit(2)
        yield TextDelta(" two")
        clock.advance(0.1)
        yield TextDelta(" three")
        yield TurnResult("one two three")

    await delivery.stream(probe.harness.adapter, conv, "e1", stream())
    refused, final = probe.edits()
    assert final - refused >= 2.0
    assert (await probe.harness.sent())[-1].text == "one two three"


async def test_a_429_on_a_one_shot_reply_holds_its_retry(probe: Probe, storage: Storage) -> None:
    delivery, _clock = on_clock(probe, storage)
    probe.harness.fail_next_send("rate_limit", retry_after=2)
    await delivery.notice(probe.harness.adapter, probe.harness.conversation("group"), "e1", "/help: the commands")
    refused, retried = probe.sends()
    assert retried - refused >= 2.0


@pytest.mark.parametrize("text", ["Hi there!", "**Done**: the `deploy` moved to 17:30 & it's <fine>."])
async def test_a_short_reply_is_one_message_and_no_edit(probe: Probe, storage: Storage, text: str) -> None:
    delivery, clock = on_clock(probe, storage)
    await delivery.stream(probe.harness.adapter, probe.harness.conversation("dm"), "e1", model(clock, [text], 0))
    assert len(probe.sends()) == 1
    assert probe.edits() == []


@pytest.mark.parametrize("where", ["dm", "group"])
async def test_streamed_edits_keep_to_the_platform_budget(probe: Probe, storage: Storage, where: Where) -> None:
    delivery, clock = on_clock(probe, storage)
    conv = probe.harness.conversation(where)
    await delivery.stream(probe.harness.adapter, conv, "e1", model(clock, ["x"] * 1200, 0.1))  # 120 s
    edits = probe.edits()
    limit = EDITS_PER_MINUTE[(probe.platform, where)]
    assert limit - 3 <= most_in_a_minute(edits) <= limit  # under the budget, and using it
    assert (await probe.harness.sent())[-1].text == "x" * 1200  # the final edit went out


async def test_a_busy_slack_workspace_stays_under_the_update_tier(storage: Storage) -> None:
    module = importlib.import_module("tests.contract.harness_slack")
    harness = module.SlackHarness()
    await harness.start()
    try:
        probe = Probe(harness, harness.fake)
        delivery, clock = on_clock(probe, storage)
        ticks = [asyncio.Barrier(4), asyncio.Barrier(4)]

        async def in_step(i: int) -> Stream:
            for _ in range(900):  # 90 s, the four streams' deltas at the same instants
                yield TextDelta("y")
                await ticks[0].wait()
                if i == 0:
                    clock.advance(0.1)
                await ticks[1].wait()
            yield TurnResult("y" * 900)

        convs = [ConversationRef("slack", f"C0BUSY{i}", None, ConversationKind.GROUP) for i in range(4)]
        await asyncio.gather(*(delivery.stream(harness.adapter, c, f"e{i}", in_step(i)) for i, c in enumerate(convs)))
        assert most_in_a_minute(probe.edits()) <= 48
        assert all(p.text == "y" * 900 for p in harness.fake.posted[-4:])  # every final edit went out
    finally:
        await harness.stop()


async def test_the_acknowledgement_reaction_comes_and_goes(probe: Probe, storage: Storage) -> None:
    delivery, _clock = on_clock(probe, storage)
    adapter = probe.harness.adapter
    assert isinstance(adapter, Reacting)
    conv = probe.harness.conversation("group")
    message_id = "1690000000.000200" if probe.platform == "slack" else "1200000000000000077"
    if probe.platform == "telegram":
        message_id = "501"
    ev = MessageReceived("e1", conv, Actor("x:1"), "hello", message_id=message_id)
    ref = MessageRef(conv, message_id)
    async with delivery.acknowledged(adapter, ev, "👀"):
        assert probe.reaction(ref) in ("👀", "eyes")
    assert probe.reaction(ref) is None


async def test_a_slack_reaction_left_by_a_crashed_turn_is_taken_away(storage: Storage) -> None:
    module = importlib.import_module("tests.contract.harness_slack")
    harness = module.SlackHarness()
    await harness.start()
    try:
        conv = harness.conversation("dm")
        ts = "1690000000.000300"
        harness.fake.reactions[(conv.chat_id, ts)] = {"eyes"}  # the turn before the crash put it there
        ev = MessageReceived("e1", conv, Actor("slack:T/U1"), "hello", message_id=ts)
        async with Delivery(storage.journal).acknowledged(harness.adapter, ev, "👀"):
            assert harness.fake.reactions[(conv.chat_id, ts)] == {"eyes"}
        assert harness.fake.reactions[(conv.chat_id, ts)] == set()
        assert [c.method for c in harness.fake.calls if c.method.startswith("reactions.")] == [
            "reactions.add",
            "reactions.remove",
        ]
    finally:
        await harness.stop()
