"""The whole gateway with `ack_reaction` on Telegram, Discord and Slack, against the local fakes and
a fake LLM: the message being answered carries 👀 while the model works and loses it when the reply
is out, a reaction the platform refuses costs nothing but a log line, and a short reply is one
message with no edit repeating it (docs/channels.md, "Delivery: rate limits, edits and reactions")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.app import Gateway
from gateway.config.load import parse_config
from tests.fakes.discord import TOKEN as DISCORD_TOKEN
from tests.fakes.discord import FakeDiscord, user
from tests.fakes.llm import FakeLLM, Gate, Reply
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import Fail, FakeTelegram
from tests.waits import until

TG_USER = 1001
SLACK_USER = "U1001"
SLACK_DM = "D0DM1001"
DISCORD_USER = "1400000000000000001"


@dataclass
class World:
    llm: FakeLLM
    tg: FakeTelegram
    slack: FakeSlack
    discord: FakeDiscord
    http: aiohttp.ClientSession
    data_dir: Path
    gw: Gateway | None = None

    def config(self) -> Any:
        # 5 s: on a busy CI machine a fake's answer (bolt's auth.test) took over 2 s.
        common = {"request_timeout": 5, "dm_policy": "open", "ack_reaction": True}
        return parse_config(
            {
                "ai": {
                    "model": "openai/fake-model",
                    "api_base": self.llm.api_base,
                    "api_key": "sk-test-00000000000000",
                    "retries": 0,
                    "timeout_seconds": 10,
                },
                "storage": {"data_dir": str(self.data_dir)},
                "channels": {
                    "web": {"host": "127.0.0.1", "port": 0},
                    "telegram": {
                        "token": self.tg.token,
                        "api_base_url": self.tg.api_base_url,
                        "poll_timeout": 1,
                        **common,
                    },
                    "slack": {
                        "mode": "http",
                        "bot_token": self.slack.bot_token,
                        "signing_secret": self.slack.signing_secret,
                        "api_base_url": self.slack.api_base,
                        **common,
                        "ack_reaction": "eyes",  # Slack's own name for 👀 works as well
                    },
                    "discord": {
                        "token": DISCORD_TOKEN,
                        "api_base_url": self.discord.api_base,
                        "gateway_url": self.discord.gateway_url,
                        **common,
                    },
                },
            },
            "world",
            env={},
        )

    async def slack_dm(self, text: str) -> str:
        """A DM to the bot over the Events API; returns the message's ts."""
        assert self.gw is not None
        event = self.slack.message(SLACK_DM, text, user=SLACK_USER)
        event["channel_type"] = "im"
        raw, headers = self.slack.signed_request(self.slack.event_body(event))
        r = await self.http.post(self.gw.url + "/slack/events", data=raw, headers=headers)
        assert r.status == 200, await r.text()
        return str(event["ts"])


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    llm = await FakeLLM().start()
    tg = await FakeTelegram().start()
    slack = await FakeSlack().start()
    discord = await FakeDiscord().start()
    async with aiohttp.ClientSession() as http:
        w = World(llm, tg, slack, discord, http, tmp_path / "data")
        w.gw = Gateway(w.config())
        await w.gw.start()
        await w.gw.llm.ready()
        try:
            yield w
        finally:
            await w.gw.stop(deadline=1)
            await discord.stop()
            await slack.stop()
            await tg.stop()
            await llm.stop()


async def test_telegram_reacts_while_the_turn_runs(world: World) -> None:
    world.llm.script(Gate(then=Reply("Done.", chunks=1)))
    update = await world.tg.dm("deploy the docs please", sender=TG_USER)
    trigger = (TG_USER, update["message"]["message_id"])
    await world.llm.wait_requests(1)
    await until(lambda: world.tg.reactions.get(trigger) == "👀")
    world.llm.release()
    await world.tg.wait_sent(1)
    await until(lambda: trigger not in world.tg.reactions)
    assert [s.text for s in world.tg.sent] == ["Done."]  # one message, no edit repeating it
    assert world.tg.calls_of("editMessageText") == []


async def test_discord_reacts_while_the_turn_runs(world: World) -> None:
    world.llm.script(Gate(then=Reply("Done.", chunks=1)))
    message = world.discord.message("dm", "deploy the docs please", author=user(DISCORD_USER, "alex"))
    await world.discord.inject(message)
    await world.llm.wait_requests(1)
    await until(lambda: world.discord.reactions.get(message["id"]) == ["👀"])
    world.llm.release()
    await world.discord.wait_outbox(1)
    await until(lambda: world.discord.reactions.get(message["id"]) == [])
    assert [(o.content, o.edit) for o in world.discord.outbox] == [("Done.", False)]


async def test_slack_reacts_while_the_turn_runs(world: World) -> None:
    world.llm.script(Gate(then=Reply("Done.", chunks=1)))
    ts = await world.slack_dm("deploy the docs please")
    await world.llm.wait_requests(1)
    await until(lambda: world.slack.reactions.get((SLACK_DM, ts)) == {"eyes"})
    world.llm.release()
    await world.slack.wait_posted(1)
    await until(lambda: world.slack.reactions.get((SLACK_DM, ts)) == set())
    assert [(p.text, p.edit) for p in world.slack.posted] == [("Done.", False)]


async def test_a_refused_reaction_never_costs_the_reply(world: World, caplog: pytest.LogCaptureFixture) -> None:
    world.tg.fail_next("setMessageReaction", Fail(400, "Bad Request: REACTION_INVALID"))
    world.llm.script(Reply("Answered.", chunks=1))
    await world.tg.dm("still answer me", sender=TG_USER)
    assert [s.text for s in await world.tg.wait_sent(1)] == ["Answered."]
    await until(lambda: turns_done(world) >= 1)
    assert "delivery_reaction_failed" in caplog.text
    assert len(world.tg.calls_of("setMessageReaction")) == 1  # nothing to take away afterwards
    assert not world.tg.reactions


def turns_done(world: World) -> float:
    """Turns the gateway finished on Telegram (its turns counter): the reaction is off by then."""
    assert world.gw is not None
    lines = world.gw.metrics.render().decode().splitlines()
    return sum(float(x.rsplit(" ", 1)[1]) for x in lines if x.startswith("clawgate_turns_total") and "telegram" in x)
