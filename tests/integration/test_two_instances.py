"""Two gateway processes on one PostgreSQL, behind a "load balancer" that splits Telegram webhooks
and Slack events between them (DESIGN §9).

500 messages in 50 sessions (25 Telegram chats, 25 Slack DMs, 10 messages each) go to either
instance at random, some delivered twice (to both). Halfway through, instance B is killed while
turns are running on it (its model calls hang) and events are journaled on it but not yet answered.
Every message must be answered exactly once, in order per session, by whichever instance is left.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import yaml
from sqlalchemy import func, select

from memory.store.db import Database
from memory.store.schema import inbound_events, outbound
from tests.fakes.llm import FakeLLM, Gate
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram
from tests.postgres import fresh_database_url
from tests.process import GatewayProcess
from tests.waits import until

SECRET = "webhook-secret-0123456789"
CHATS = 25  # per platform
MESSAGES = 10  # per session
TELEGRAM_PATH = "/telegram/telegram"
SLACK_PATH = "/slack/events"

pytestmark = pytest.mark.timeout(300)


def _config(tmp_path: Path, name: str, db_url: str, llm: FakeLLM, tg: FakeTelegram, slack: FakeSlack) -> Path:
    data = {
        "ai": {
            "model": "openai/fake-model",
            "api_base": llm.api_base,
            "api_key": "sk-test-not-a-real-key-000000",
            "retries": 1,
            "retry_backoff_seconds": 0.01,
            "timeout_seconds": 60,
        },
        "storage": {
            "data_dir": str(tmp_path / "data"),  # one shared volume, as in deploy/
            "database_url": db_url,
            "session_lease_seconds": 5,
            "instance_name": name,
        },
        "channels": {
            "web": {"type": "web", "host": "127.0.0.1", "port": 0},
            "telegram": {
                "type": "telegram",
                "token": tg.token,
                "mode": "webhook",
                "api_base_url": tg.api_base_url,
                "webhook_secret": SECRET,
                "dm_policy": "open",
                "request_timeout": 10,
            },
            "slack": {
                "type": "slack",
                "bot_token": slack.bot_token,
                "signing_secret": slack.signing_secret,
                "mode": "http",
                "api_base_url": slack.api_base,
                "dm_policy": "open",
                "request_timeout": 10,
            },
        },
        "memory": {"merge": {"enabled": False}},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


async def _start(name: str, config: Path) -> GatewayProcess:
    instance = await GatewayProcess.start(config, name=name)
    # Ready, and LiteLLM imported: the import holds the GIL for seconds on a busy machine.
    await instance.wait_log("llm_loaded", timeout=60)
    # `clawgate run` then takes what it loaded out of the garbage collector's walks (Gateway._freeze_heap).
    line = await instance.wait_log("heap_frozen", timeout=30)
    assert int(line.split("objects=")[1].split()[0]) > 100_000, line  # LiteLLM alone makes that many
    return instance


@pytest.fixture
async def fakes() -> AsyncIterator[tuple[FakeTelegram, FakeSlack, FakeLLM, FakeLLM]]:
    tg = await FakeTelegram().start()
    slack = await FakeSlack().start()
    llm_a, llm_b = await FakeLLM().start(), await FakeLLM().start()
    yield tg, slack, llm_a, llm_b
    for fake in (llm_a, llm_b):
        fake.release()
        await fake.stop()
    await slack.stop()
    await tg.stop()


class Balancer:
    """Sends each delivery to one instance, the other when that one does not answer (as a load
    balancer's retry, or the platform's redelivery, would); counts what it did."""

    def __init__(self, http: aiohttp.ClientSession, instances: list[GatewayProcess], rng: random.Random) -> None:
        self.http = http
        self.instances = instances
        self.rng = rng
        self.by_instance: dict[str, int] = defaultdict(int)
        self.redelivered = 0
        self.failed_over = 0

    async def post(self, path: str, body: bytes, headers: dict[str, str], *, to: GatewayProcess | None = None) -> None:
        alive = [i for i in self.instances if i.alive()]
        first = to if to is not None and to.alive() else self.rng.choice(alive)
        for target in [first, *(i for i in alive if i is not first)]:
            try:
                async with self.http.post(target.url + path, data=body, headers=headers) as resp:
                    if resp.status == 200:
                        self.by_instance[target.name] += 1
                        return
            except aiohttp.ClientError:
                pass
            self.failed_over += 1
        raise AssertionError(f"no instance took a delivery to {path}")


def _telegram_delivery(tg: FakeTelegram, chat: int, text: str, update_id: int) -> tuple[bytes, dict[str, str]]:
    user = tg.user(chat, f"User{chat}", f"user{chat}")
    update = {"update_id": update_id, "message": tg.message(tg.private_chat(user), user, text)}
    headers = {"Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": SECRET}
    return json.dumps(update).encode(), headers


def _slack_delivery(
    slack: FakeSlack, channel: str, user: str, text: str, event_id: str
) -> tuple[bytes, dict[str, str]]:
    return slack.signed_request(slack.event_body(slack.message(channel, text, user=user), event_id))


def _answers(tg: FakeTelegram, slack: FakeSlack) -> dict[str, list[str]]:
    """What each session shows: the final text of every bot message, in the order they were posted."""
    final: dict[tuple[str, str], str] = {}
    order: dict[tuple[str, str], tuple[int, float]] = {}
    for m in tg.sent:
        key = (f"tg:{m.chat_id}", str(m.message_id))
        final[key] = m.text
        order.setdefault(key, (0, m.message_id))
    for p in slack.posted:
        key = (f"slack:{p.channel}", p.ts)
        final[key] = p.text
        order.setdefault(key, (0, float(p.ts)))
    shown: dict[str, list[str]] = defaultdict(list)
    for key in sorted(final, key=lambda k: (k[0], order[k])):
        shown[key[0]].append(final[key])
    return shown


async def test_two_instances_answer_every_message_once_in_order_even_when_one_is_killed(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeSlack, FakeLLM, FakeLLM]
) -> None:
    tg, slack, llm_a, llm_b = fakes
    db_url = fresh_database_url()
    a = await _start("a", _config(tmp_path, "a", db_url, llm_a, tg, slack))
    b = await _start("b", _config(tmp_path, "b", db_url, llm_b, tg, slack))
    rng = random.Random(9)
    sessions = [f"tg:{7000 + n}" for n in range(CHATS)] + [f"slack:D0S{n:04d}" for n in range(CHATS)]
    expected = {s: [f"echo: {s} says {i}" for i in range(MESSAGES)] for s in sessions}
    sent: dict[str, list[tuple[str, bytes, dict[str, str]]]] = defaultdict(list)
    update_ids = iter(range(1_000_000, 2_000_000))

    def delivery(session: str, i: int) -> tuple[str, bytes, dict[str, str]]:
        text = f"{session} says {i}"
        if session.startswith("tg:"):
            body, headers = _telegram_delivery(tg, int(session[3:]), text, next(update_ids))
            return TELEGRAM_PATH, body, headers
        channel = session.split(":", 1)[1]
        body, headers = _slack_delivery(slack, channel, "U" + channel[3:], text, f"Ev{session[-4:]}{i:02d}")
        return SLACK_PATH, body, headers

    try:
        async with aiohttp.ClientSession() as http:
            lb = Balancer(http, [a, b], rng)

            async def push(session: str, numbers: range) -> None:
                for i in numbers:
                    path, body, headers = delivery(session, i)
                    sent[session].append((path, body, headers))
                    await lb.post(path, body, headers)
                    if rng.random() < 0.15:  # the platform delivers it again, maybe to the other one
                        await lb.post(path, body, headers)
                        lb.redelivered += 1
                    await asyncio.sleep(rng.random() * 0.02)

            # 1. Both instances answer the first half.
            await asyncio.gather(*(push(s, range(0, 5)) for s in sessions))
            first_half = len(sessions) * 5
            await until(lambda: sum(map(len, _answers(tg, slack).values())) >= first_half, timeout=60)

            # 2. B's model calls start to hang: B is mid-turn in several sessions, and events it
            #    acknowledged wait behind them. Then B is killed.
            llm_b.default = lambda _request: Gate()
            await asyncio.gather(*(push(s, range(5, 8)) for s in sessions))
            await until(lambda: llm_b.in_flight >= 3, timeout=30)
            hanging = llm_b.in_flight
            await b.stop(signal.SIGKILL)

            # 3. The rest goes to A, and B's last deliveries are delivered again (to A now).
            await asyncio.gather(*(push(s, range(8, MESSAGES)) for s in sessions))
            for s in sessions:
                path, body, headers = sent[s][6]
                await lb.post(path, body, headers, to=a)

            total = len(sessions) * MESSAGES

            await until(lambda: sum(map(len, _answers(tg, slack).values())) >= total, timeout=120)
            await asyncio.sleep(1.0)  # anything answered twice would show up now
    finally:
        await asyncio.gather(a.stop(), b.stop())

    shown = _answers(tg, slack)
    wrong = {s: shown.get(s) for s in sessions if shown.get(s) != expected[s]}
    assert not wrong, f"sessions answered wrongly: {json.dumps(wrong, indent=1)[:3000]}"
    assert lb.by_instance["a"] > 0 and lb.by_instance["b"] > 0
    assert hanging >= 3 and lb.redelivered > 0

    db = Database(db_url)
    try:
        inbound = select(inbound_events.c.status, func.count()).group_by(inbound_events.c.status)
        counts = await db.read(lambda c: dict(c.execute(inbound).all()))
        replies = select(outbound.c.status, func.count()).group_by(outbound.c.status)
        statuses = await db.read(lambda c: dict(c.execute(replies).all()))
    finally:
        await db.close()
    assert counts == {"done": total}
    assert statuses == {"sent": total}
    survivor = a.text
    assert "resume_event" in survivor  # B's turns cut by the kill were taken on by A
    # Serialized: no instance ever found a reply already claimed by the other one.
    assert "delivery_skipped_duplicate" not in survivor + b.text
