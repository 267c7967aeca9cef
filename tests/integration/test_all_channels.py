"""Every channel in one gateway at once, against local protocol fakes and a fake LLM."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.app import Gateway
from gateway.config.load import parse_config
from tests.fakes.discord import FakeDiscord, user
from tests.fakes.llm import FakeLLM, Gate, Reply
from tests.fakes.slack import FakeSlack
from tests.fakes.slack import Hang as SlackHang
from tests.fakes.telegram import FakeTelegram
from tests.waits import until

TG_USER = 1001
SLACK_USER = "U1001"
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
                        "request_timeout": 2,
                        "dm_policy": "open",
                    },
                    "slack": {
                        "mode": "http",
                        "bot_token": self.slack.bot_token,
                        "signing_secret": self.slack.signing_secret,
                        "api_base_url": self.slack.api_base,
                        "request_timeout": 2,
                        "dm_policy": "open",
                    },
                    "discord": {
                        "token": self.discord_token,
                        "api_base_url": self.discord.api_base,
                        "gateway_url": self.discord.gateway_url,
                        "request_timeout": 2,
                        "dm_policy": "open",
                    },
                },
            },
            "world",
            env={},
        )

    async def start_gateway(self) -> Gateway:
        self.gw = Gateway(self.config())
        await self.gw.start()
        await self.gw.llm.ready()
        return self.gw

    async def slack_dm(
        self, text: str, *, event_id: str | None = None, retry_num: int | None = None, ts: str | None = None
    ) -> str:
        assert self.gw is not None
        event = self.slack.message("D0DM1001", text, user=SLACK_USER, ts=ts)
        event["channel_type"] = "im"
        body = self.slack.event_body(event, event_id)
        raw, headers = self.slack.signed_request(body, retry_num=retry_num)
        r = await self.http.post(self.gw.url + "/slack/events", data=raw, headers=headers)
        assert r.status == 200, await r.text()
        return str(body["event_id"])

    @property
    def discord_token(self) -> str:
        from tests.fakes.discord import TOKEN

        return TOKEN

    async def discord_dm(self, text: str) -> None:
        author = user(DISCORD_USER, "alex", global_name="Alex")
        await self.discord.inject(self.discord.message("dm", text, author=author))

    async def tg_replies(self, n: int, timeout: float = 10) -> list[str]:
        sent = await self.tg.wait_sent(n, timeout)
        return [s.text for s in sent]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    llm = await FakeLLM().start()
    tg = await FakeTelegram().start()
    slack = await FakeSlack().start()
    discord = await FakeDiscord().start()
    async with aiohttp.ClientSession() as http:
        w = World(llm, tg, slack, discord, http, tmp_path / "data")
        await w.start_gateway()
        try:
            yield w
        finally:
            if w.gw is not None:
                await w.gw.stop(deadline=1)
            await discord.stop()
            await slack.stop()
            await tg.stop()
            await llm.stop()


async def link_code(world: World) -> str:
    await world.tg.dm("/link", sender=TG_USER)
    reply = (await world.tg_replies(1))[-1]
    code = re.search(r"code is ([A-Z0-9]{4}-[A-Z0-9]{4})", reply)
    assert code, reply
    return code.group(1)


async def test_a_person_linked_across_telegram_and_discord_is_one_user(world: World) -> None:
    await world.discord_dm(f"/link {await link_code(world)}")
    linked = await world.discord.wait_outbox(1)
    assert "Linked" in linked[-1].content

    await world.tg.dm("/whoami", sender=TG_USER)
    tg_who = (await world.tg_replies(2))[-1]
    await world.discord_dm("/whoami")
    discord_who = (await world.discord.wait_outbox(2))[-1].content
    for who in (tg_who, discord_who):
        assert f"telegram:{TG_USER}" in who and f"discord:{DISCORD_USER}" in who
    user_line = re.search(r"User: (\S+)", tg_who)
    assert user_line and f"User: {user_line.group(1)}" in discord_who


async def test_linking_reaches_slack_too_and_codes_work_once(world: World) -> None:
    code = await link_code(world)
    await world.slack_dm(f"/link {code}")
    assert "Linked" in (await world.slack.wait_posted(1))[-1].text
    await world.discord_dm(f"/link {code}")
    assert "Could not link" in (await world.discord.wait_outbox(1))[-1].content
    await world.slack_dm("/whoami")
    assert f"telegram:{TG_USER}" in (await world.slack.wait_posted(2))[-1].text


async def test_a_stalled_slack_does_not_delay_telegram(world: World) -> None:
    world.slack.fail_next("chat.postMessage", SlackHang())
    await world.slack_dm("hello from slack")
    await world.llm.wait_requests(1)
    started = time.monotonic()
    await world.tg.dm("hello from telegram", sender=TG_USER)
    await until(lambda: any(s.text == "echo: hello from telegram" for s in world.tg.sent), timeout=3)
    assert time.monotonic() - started < 3
    assert not [p for p in world.slack.posted if "telegram" in p.text]


async def test_redelivered_telegram_update_gets_no_second_reply(world: World) -> None:
    update = await world.tg.dm("only once please", sender=TG_USER)
    await world.tg_replies(1)
    polls = len(world.tg.calls_of("getUpdates"))
    await world.tg.redeliver(update)
    await world.tg.wait_for(lambda calls: len([c for c in calls if c.method == "getUpdates"]) >= polls + 2)
    assert world.gw is not None
    await until(lambda: _metric(world.gw, "clawgate_inbound_duplicates_total", "telegram") >= 1)
    assert len(world.llm.requests) == 1
    assert len([s for s in world.tg.sent if not s.edit]) == 1


async def test_slack_retry_gets_no_second_reply(world: World) -> None:
    ts = world.slack.next_ts()  # a retry is the same event: the same message ts under the same event id
    event_id = await world.slack_dm("are you there?", ts=ts)
    await world.slack.wait_posted(1)
    await world.slack_dm("are you there?", event_id=event_id, retry_num=1, ts=ts)
    assert world.gw is not None
    await until(lambda: _metric(world.gw, "clawgate_inbound_duplicates_total", "slack") >= 1)
    assert len(world.llm.requests) == 1
    assert len([p for p in world.slack.posted if not p.edit]) == 1


async def test_restart_mid_reply_does_not_double_post(world: World) -> None:
    world.llm.script(Gate(then=Reply(" and the rest."), before="The first part"))
    await world.tg.dm("tell me a long story", sender=TG_USER)
    placeholder = await world.tg_replies(1)
    assert placeholder[-1] == "The first part"
    assert world.gw is not None and world.gw.storage is not None
    async with asyncio.timeout(10):  # the placeholder's id is journaled right after it is sent
        while await world.gw.storage.journal.outbound_status("telegram:100001:reply") != "streaming":  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    await world.gw.stop(deadline=0.2)  # the process goes away mid-reply
    world.gw = None
    world.llm.release()
    gw = await world.start_gateway()
    assert gw.router is not None
    await world.llm.wait_requests(2)
    await until(lambda: any(s.edit and "echo: tell me a long story" in s.text for s in world.tg.sent))
    sends = [s for s in world.tg.sent if not s.edit]
    assert len(sends) == 1  # the placeholder was finished in place, never posted again
    assert gw.storage is not None
    await until(lambda: _metric(gw, "clawgate_turns_total", "telegram") >= 1)
    assert await gw.storage.journal.unfinished() == []


def _metric(gw: Gateway | None, name: str, channel: str) -> float:
    assert gw is not None
    text = gw.metrics.render().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and f'channel="{channel}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total
