"""Rate budgets, rate-limit holds, unchanged edits and acknowledgement reactions in Delivery,
over a recording adapter and a virtual clock (no real waiting)."""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from channels.slack.reactions import reaction_name
from gateway.config.load import ConfigError, parse_config
from gateway.core.channel_config import ChatChannelConfig
from gateway.core.events import Actor, ConversationKind, ConversationRef, MessageReceived, MessageRef, OutboundMessage
from gateway.core.ports import Capabilities, DeliveryError, Health, Rate, Reacting
from gateway.llm.client import Restart, TextDelta
from gateway.turn.delivery import Delivery, ack_reaction
from gateway.turn.engine import TurnResult
from gateway.turn.pacing import Bucket, Pacer, tokens_at, wait_for_token
from memory.store.storage import Storage
from tests.fakes.clock import VirtualClock

CONV = ConversationRef("rec", "chat")
GROUP = ConversationRef("rec", "group", None, ConversationKind.GROUP)

# -- pure bucket arithmetic ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bucket", "rate", "now", "tokens"),
    [
        (None, Rate("k", 1.0, burst=3), 0.0, 3.0),  # never used: full
        (Bucket(0.0, 10.0), Rate("k", 0.5), 11.0, 0.5),
        (Bucket(0.0, 10.0), Rate("k", 0.5), 100.0, 1.0),  # never above the burst
        (Bucket(-2.0, 10.0), Rate("k", 1.0, burst=5), 11.0, -1.0),  # a debt left by sends
        (Bucket(0.0, 10.0), Rate("k", 1.0), 9.0, 0.0),  # a clock that went back adds nothing
        (Bucket(0.0, 10.0), Rate("k", math.inf), 10.0, 1.0),  # unlimited
    ],
)
def test_tokens_at(bucket: Bucket | None, rate: Rate, now: float, tokens: float) -> None:
    assert tokens_at(bucket, rate, now) == pytest.approx(tokens)


@pytest.mark.parametrize(
    ("tokens", "rate", "wait"),
    [
        (1.0, Rate("k", 1 / 3), 0.0),
        (0.0, Rate("k", 1 / 3), 3.0),  # a Telegram group: 20 a minute
        (0.5, Rate("k", 1.0), 0.5),
        (-1.0, Rate("k", 0.8), 2.5),
        (0.0, Rate("k", math.inf), 0.0),
    ],
)
def test_wait_for_token(tokens: float, rate: Rate, wait: float) -> None:
    assert wait_for_token(tokens, rate) == pytest.approx(wait)


@pytest.mark.parametrize(("per_second", "burst"), [(0, 1), (-1, 1), (1, 0.5)])
def test_a_rate_that_could_never_be_spent_is_refused(per_second: float, burst: float) -> None:
    with pytest.raises(ValueError, match="per_second"):
        Rate("k", per_second, burst=burst)


def test_default_rates_come_from_the_minimum_edit_interval() -> None:
    assert Capabilities(min_edit_interval=2.0).rates(CONV) == (Rate("chat:chat", 0.5),)
    assert Capabilities(min_edit_interval=0).rates(CONV)[0].per_second == math.inf


@pytest.mark.parametrize(("setting", "reaction"), [(False, None), (None, None), (True, "👀"), ("✅", "✅")])
def test_ack_reaction_setting(setting: bool | str | None, reaction: str | None) -> None:
    assert ack_reaction(setting) == reaction


@pytest.mark.parametrize(
    ("given", "name"),
    [("👀", "eyes"), ("✍️", "writing_hand"), ("eyes", "eyes"), (":white_check_mark:", "white_check_mark"), ("🦖", None)],
)
def test_slack_reaction_names(given: str, name: str | None) -> None:
    assert reaction_name(given) == name


# -- the pacer ------------------------------------------------------------------------------------------


def test_budget_spacing_and_burst() -> None:
    clock = VirtualClock()
    pacer = Pacer(clock, clock.sleep)
    rates = (Rate("chat", 1.0, burst=2),)
    assert pacer.delay("a", rates) == 0
    pacer.spend("a", rates, send=False)
    pacer.spend("a", rates, send=False)
    assert pacer.delay("a", rates) == pytest.approx(1.0)
    assert pacer.delay("b", rates) == 0  # another adapter's key of the same name is its own
    clock.advance(0.4)
    assert pacer.delay("a", rates) == pytest.approx(0.6)


def test_sends_spend_only_budgets_that_count_them() -> None:
    clock = VirtualClock()
    pacer = Pacer(clock, clock.sleep)
    chat, tier = Rate("chat", 1.0), Rate("chat.update", 0.5, sends=False)
    pacer.spend("a", (chat, tier), send=True)
    assert pacer.delay("a", (tier,)) == 0
    assert pacer.delay("a", (chat,)) == pytest.approx(1.0)


def test_a_hold_covers_every_call_and_only_holding_budgets() -> None:
    clock = VirtualClock()
    pacer = Pacer(clock, clock.sleep)
    chat, everyone = Rate("chat", math.inf), Rate("bot", 30, burst=30, hold=False)
    pacer.hold("a", (chat, everyone), 2.0)
    assert pacer.delay("a", (chat,), budget=False) == pytest.approx(2.0)
    assert pacer.delay("a", (everyone,)) == 0  # one chat's 429 does not stop the others
    pacer.hold("a", (chat,), 0.5)  # a shorter hold never shortens a longer one
    assert pacer.delay("a", (chat,)) == pytest.approx(2.0)


async def test_take_sleeps_until_the_budget_allows_and_wait_only_for_holds() -> None:
    clock = VirtualClock()
    pacer = Pacer(clock, clock.sleep)
    rates = (Rate("chat", 1 / 3),)
    pacer.spend("a", rates, send=False)
    assert await pacer.wait("a", rates) == 0  # a send waits for holds, not for a token
    start = clock.now
    assert await pacer.take("a", rates) == pytest.approx(3.0)
    assert clock.now - start == pytest.approx(3.0)
    assert pacer.delay("a", rates) == pytest.approx(3.0)  # its token is spent


async def test_a_waiting_edit_keeps_its_place_while_others_keep_sending() -> None:
    """Sends spend a shared budget without waiting; an edit waiting for a token is served in the
    order it came, not after the sends stop (it used to wait as long as they went on)."""
    clock = VirtualClock()
    pacer = Pacer(clock, clock.sleep)
    rates = (Rate("chat:shared", 20.0),)
    for _ in range(5):  # the full bucket's token, then a quarter of a second's worth of debt
        pacer.spend("web", rates, send=True)

    async def others_keep_sending() -> None:
        for _ in range(2_000):  # 100 sends a second for 20 s, five times the budget
            pacer.spend("web", rates, send=True)
            await clock.sleep(0.01)

    sending = asyncio.create_task(others_keep_sending())
    start = clock.now
    await pacer.take("web", rates)
    assert 0.25 <= clock.now - start < 0.3  # the debt it found (and a step of the sender), not 20 s
    assert not sending.done()
    sending.cancel()


def test_idle_budgets_are_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gateway.turn.pacing.MAX_KEYS", 3)
    clock = VirtualClock()
    pacer = Pacer(clock, clock.sleep)
    for i in range(3):
        pacer.spend("a", (Rate(f"chat:{i}", 1.0),), send=False)
    clock.advance(5)  # all full again
    pacer.spend("a", (Rate("chat:new", 1.0),), send=False)
    assert set(pacer._buckets) == {("a", "chat:new")}


# -- Delivery over a recording adapter ------------------------------------------------------------------


class RecordingAdapter:
    """A real implementation of the adapter port, with reactions, recording what it was asked and when."""

    name = "rec"

    def __init__(self, caps: Capabilities, clock: VirtualClock) -> None:
        self.capabilities = caps
        self.clock = clock
        self.ops: list[tuple[str, str, float]] = []  # (op, text, virtual time)
        self.failures: dict[str, list[DeliveryError]] = {}
        self._n = 0

    def _fail(self, op: str, text: str) -> None:
        self.ops.append((op, text, self.clock.now))
        queued = self.failures.get(op)
        if queued:
            raise queued.pop(0)

    async def start(self, sink: object) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, msg: OutboundMessage) -> MessageRef:
        self._fail("send", msg.text)
        self._n += 1
        return MessageRef(msg.conversation, str(self._n))

    async def edit(self, ref: MessageRef, text: str, final: bool) -> None:
        self._fail("edit" if not final else "final", text)

    async def react(self, ref: MessageRef, reaction: str) -> None:
        self._fail("react", reaction)

    async def unreact(self, ref: MessageRef, reaction: str) -> None:
        self._fail("unreact", reaction)

    @asynccontextmanager
    async def typing(self, conv: ConversationRef) -> AsyncIterator[None]:
        yield

    def health(self) -> Health:
        return Health(True)


@pytest.fixture
async def storage(tmp_path: Path) -> AsyncIterator[Storage]:
    s = await Storage.open(f"sqlite:///{tmp_path}/p.db")
    yield s
    await s.close()


def rate_limited(after: float) -> DeliveryError:
    return DeliveryError("429", retryable=True, retry_after=after)


async def paced(
    clock: VirtualClock, pieces: list[str], every: float
) -> AsyncIterator[TextDelta | Restart | TurnResult]:
    """A model streaming `pieces`, one each `every` seconds of virtual time."""
    for piece in pieces:
        yield TextDelta(piece)
        clock.advance(every)
    yield TurnResult("".join(pieces))


def times(ad: RecordingAdapter, *ops: str) -> list[float]:
    return [t for op, _, t in ad.ops if op in ops]


async def test_a_refused_stream_send_holds_the_final_send(storage: Storage) -> None:
    clock = VirtualClock()
    ad = RecordingAdapter(Capabilities(can_edit=True, min_edit_interval=0), clock)
    ad.failures["send"] = [rate_limited(2.0)]
    delivery = Delivery(storage.journal, clock=clock, sleep=clock.sleep)
    await delivery.stream(ad, CONV, "e1", paced(clock, ["a", "b", "c"], 0.1))
    first, resend = times(ad, "send")
    assert resend - first >= 2.0
    assert [op for op, _, _ in ad.ops] == ["send", "send"]  # nothing in between, though deltas came


async def test_a_refused_stream_edit_holds_the_final_edit(storage: Storage) -> None:
    clock = VirtualClock()
    ad = RecordingAdapter(Capabilities(can_edit=True, min_edit_interval=0), clock)
    ad.failures["edit"] = [rate_limited(2.0)]
    delivery = Delivery(storage.journal, clock=clock, sleep=clock.sleep)
    await delivery.stream(ad, CONV, "e1", paced(clock, ["a", "b", "c"], 0.01))
    refused = times(ad, "edit")[0]
    assert times(ad, "final")[0] - refused >= 2.0


async def test_a_refusal_in_one_reply_holds_the_next_reply_in_that_chat(storage: Storage) -> None:
    clock = VirtualClock()
    ad = RecordingAdapter(Capabilities(can_edit=False), clock)
    ad.failures["send"] = [rate_limited(2.0), DeliveryError("bad", retryable=False)]
    delivery = Delivery(storage.journal, send_retries=0, clock=clock, sleep=clock.sleep)
    with pytest.raises(DeliveryError):
        await delivery.notice(ad, CONV, "e1", "one")
    with pytest.raises(DeliveryError):
        await delivery.notice(ad, CONV, "e2", "two")
    assert times(ad, "send")[1] - times(ad, "send")[0] >= 2.0
    await delivery.notice(ad, ConversationRef("rec", "elsewhere"), "e3", "three")
    assert times(ad, "send")[2] == times(ad, "send")[1]  # another chat is not held


async def test_stream_edits_keep_to_the_budget_and_the_final_edit_waits_for_it(storage: Storage) -> None:
    clock = VirtualClock()
    group = Capabilities(can_edit=True, pacing=lambda conv: (Rate(f"chat:{conv.chat_id}", 1 / 3),))
    ad = RecordingAdapter(group, clock)
    delivery = Delivery(storage.journal, clock=clock, sleep=clock.sleep)
    await delivery.stream(ad, GROUP, "e1", paced(clock, [f"w{i} " for i in range(200)], 0.1))  # 20 s
    sent = times(ad, "send", "edit", "final")
    assert all(b - a >= 3.0 - 1e-9 for a, b in itertools.pairwise(sent))
    assert len(times(ad, "edit")) == 6  # at 3, 6, ... 18 s; the final one at 21 s
    assert ad.ops[-1][0] == "final"


async def test_an_edit_that_changes_nothing_is_not_sent(storage: Storage) -> None:
    clock = VirtualClock()
    caps = Capabilities(can_edit=True, min_edit_interval=0, rendered=str.rstrip, final_edit_matters=False)
    ad = RecordingAdapter(caps, clock)
    delivery = Delivery(storage.journal, clock=clock, sleep=clock.sleep)
    await delivery.stream(ad, CONV, "e1", paced(clock, ["Hello", "\n", " world"], 1))
    assert [op for op, _, _ in ad.ops] == ["send", "edit"]  # "Hello\n" renders as "Hello"; the final is shown
    assert ad.ops[-1][1] == "Hello\n world"


async def test_a_final_edit_that_matters_goes_out_even_unchanged(storage: Storage) -> None:
    clock = VirtualClock()
    ad = RecordingAdapter(Capabilities(can_edit=True, min_edit_interval=0), clock)  # the web chat's kind
    delivery = Delivery(storage.journal, clock=clock, sleep=clock.sleep)
    await delivery.stream(ad, CONV, "e1", paced(clock, ["Hi there"], 0))
    assert [op for op, _, _ in ad.ops] == ["send", "final"]


def trigger(message_id: str | None = "42") -> MessageReceived:
    return MessageReceived("rec:1", CONV, Actor("rec:u"), "hi", message_id=message_id)


async def test_the_trigger_carries_the_reaction_while_the_turn_runs(storage: Storage) -> None:
    clock = VirtualClock()
    ad = RecordingAdapter(Capabilities(), clock)
    assert isinstance(ad, Reacting)
    delivery = Delivery(storage.journal, clock=clock, sleep=clock.sleep)
    async with delivery.acknowledged(ad, trigger(), "👀"):
        assert [op for op, _, _ in ad.ops] == ["react"]
    assert [op for op, _, _ in ad.ops] == ["react", "unreact"]
    with pytest.raises(RuntimeError):
        async with delivery.acknowledged(ad, trigger(), "👀"):
            raise RuntimeError("the turn failed")
    assert [op for op, _, _ in ad.ops][-1] == "unreact"  # removed when the turn fails too


async def test_a_reaction_that_fails_never_fails_the_turn(storage: Storage, caplog: pytest.LogCaptureFixture) -> None:
    clock = VirtualClock()
    ad = RecordingAdapter(Capabilities(), clock)
    ad.failures["react"] = [DeliveryError("REACTION_INVALID", retryable=False)]
    delivery = Delivery(storage.journal, clock=clock, sleep=clock.sleep)
    async with delivery.acknowledged(ad, trigger(), "🦖"):
        pass
    assert [op for op, _, _ in ad.ops] == ["react"]  # nothing to take away
    assert "delivery_reaction_failed" in caplog.text
    ad.failures["unreact"] = [DeliveryError("gone", retryable=False)]
    async with delivery.acknowledged(ad, trigger(), "👀"):
        pass
    assert [op for op, _, _ in ad.ops][-2:] == ["react", "unreact"]


@pytest.mark.parametrize(("reaction", "message_id"), [(None, "42"), ("👀", None)])
async def test_no_reaction_when_off_or_nothing_to_react_to(
    storage: Storage, reaction: str | None, message_id: str | None
) -> None:
    clock = VirtualClock()
    ad = RecordingAdapter(Capabilities(), clock)
    async with Delivery(storage.journal).acknowledged(ad, trigger(message_id), reaction):
        pass
    assert ad.ops == []


# -- the ack_reaction key ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("channel", "value", "accepted"),
    [
        ({"type": "telegram", "token": "123:abc"}, True, True),
        ({"type": "telegram", "token": "123:abc"}, "👀", True),
        ({"type": "telegram", "token": "123:abc"}, "🦖", False),  # not one of Telegram's reactions
        ({"type": "slack", "bot_token": "xoxb-1", "app_token": "xapp-1"}, "eyes", True),
        ({"type": "slack", "bot_token": "xoxb-1", "app_token": "xapp-1"}, "👀", True),
        ({"type": "slack", "bot_token": "xoxb-1", "app_token": "xapp-1"}, "🦖", False),  # no name known for it
        ({"type": "discord", "token": "t"}, "🦖", True),
        ({"type": "discord", "token": "t"}, "two words", False),
        ({"type": "discord", "token": "t"}, 3, False),
    ],
)
def test_ack_reaction_config(channel: dict[str, object], value: object, accepted: bool) -> None:
    data = {"channels": {"chat": {**channel, "ack_reaction": value}}}
    if accepted:
        cfg = parse_config(data, env={}).channels["chat"]
        assert isinstance(cfg, ChatChannelConfig) and cfg.ack_reaction == value
        return
    with pytest.raises(ConfigError) as info:
        parse_config(data, env={})
    (problem,) = info.value.problems
    assert problem.path == "channels.chat.ack_reaction"
    assert "reaction" in problem.reason or "emoji" in problem.reason  # plain words, not pydantic's
