"""Groups on Slack and Discord end to end (docs/channels.md, "Groups"): unaddressed messages become
context, answers thread or quote, and personal commands are answered only to their sender (Slack
ephemeral messages, Discord's ephemeral follow-ups), or not in the group at all."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.app import Gateway
from gateway.config.load import parse_config
from gateway.turn.engine import CLOSE, OPEN
from tests.fakes.discord import BOT_ID, BOT_USER, TEXT_CHANNEL_ID, TOKEN, FakeDiscord, user
from tests.fakes.llm import FakeLLM
from tests.fakes.slack import FakeSlack
from tests.waits import until

CHANNEL = "C0GROUP"
ALICE, BOB = "U1001", "U2002"


@dataclass
class World:
    gw: Gateway
    llm: FakeLLM
    slack: FakeSlack
    discord: FakeDiscord
    http: aiohttp.ClientSession

    async def slack_event(self, event: dict[str, Any]) -> None:
        raw, headers = self.slack.signed_request(self.slack.event_body(event))
        r = await self.http.post(self.gw.url + "/slack/events", data=raw, headers=headers)
        assert r.status == 200, await r.text()

    async def slack_command(self, command: str, text: str = "") -> None:
        payload = self.slack.command_payload(command, text, channel_id=CHANNEL, channel_name="general")
        raw, headers = self.slack.signed_request(payload, form=True)
        r = await self.http.post(self.gw.url + "/slack/events", data=raw, headers=headers)
        assert r.status == 200, await r.text()


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    llm = await FakeLLM().start()
    slack = await FakeSlack().start()
    discord = await FakeDiscord().start()
    config = parse_config(
        {
            "ai": {"model": "openai/fake-model", "api_base": llm.api_base, "api_key": "sk-test-00000000000000"},
            "storage": {"data_dir": str(tmp_path / "data")},
            "channels": {
                "web": {"host": "127.0.0.1", "port": 0},
                "slack": {
                    "mode": "http",
                    "bot_token": slack.bot_token,
                    "signing_secret": slack.signing_secret,
                    "api_base_url": slack.api_base,
                    "request_timeout": 2,
                    "dm_policy": "open",
                },
                "discord": {
                    "token": TOKEN,
                    "api_base_url": discord.api_base,
                    "gateway_url": discord.gateway_url,
                    "request_timeout": 2,
                    "dm_policy": "open",
                },
            },
        },
        "groups",
        env={},
    )
    gw = Gateway(config)
    await gw.start()
    await gw.llm.ready()
    async with aiohttp.ClientSession() as http:
        try:
            yield World(gw, llm, slack, discord, http)
        finally:
            await gw.stop(deadline=1)
            await discord.stop()
            await slack.stop()
            await llm.stop()


def newest_user_text(request: dict[str, Any]) -> str:
    return str(next(m for m in reversed(request["messages"]) if m["role"] == "user")["content"])


async def test_slack_context_then_an_answer_in_the_thread_of_the_question(world: World) -> None:
    slack, llm = world.slack, world.llm
    await world.slack_event(slack.message(CHANNEL, "the deploy window moved to 17:30", user=BOB))
    question = slack.message(CHANNEL, f"<@{slack.bot_user_id}> when is the deploy window?", user=ALICE)
    await world.slack_event(question)
    await until(lambda: any(p.text == "echo: when is the deploy window?" for p in slack.posted))
    prompt = newest_user_text(llm.requests[-1])
    assert f"slack:T0FAKE/{BOB}: the deploy window moved to 17:30" in prompt  # no profile: named by identity
    answer = next(p for p in slack.posted if not p.edit)
    assert (answer.channel, answer.thread_ts, answer.broadcast) == (CHANNEL, question["ts"], False)

    # The channel's conversation goes on at the top level: the next question there has this one as history.
    await world.slack_event(slack.message(CHANNEL, f"<@{slack.bot_user_id}> and the rollback?", user=ALICE))
    await until(lambda: any(p.text == "echo: and the rollback?" for p in slack.posted))
    history = str(llm.requests[-1]["messages"][:-1])
    assert "when is the deploy window?" in history and "echo: when is the deploy window?" in history
    # A question inside a thread is answered in that thread.
    inside = slack.message(
        CHANNEL, f"<@{slack.bot_user_id}> in here?", user=ALICE, thread_ts=question["ts"], parent_user_id=ALICE
    )
    await world.slack_event(inside)
    await until(lambda: any(p.text == "echo: in here?" for p in slack.posted))
    assert {p.thread_ts for p in slack.posted if p.text == "echo: in here?"} == {question["ts"]}


async def test_slack_personal_commands_are_ephemeral_and_slash_chatter_is_ignored(world: World) -> None:
    slack, llm = world.slack, world.llm
    await world.slack_command("/status")
    await slack.wait_for(lambda f: bool(f.ephemeral))
    (shown,) = slack.ephemeral
    assert (shown.channel, shown.user) == (CHANNEL, slack.command_payload("/x")["user_id"])
    assert "Session:" in shown.text and "Model:" in shown.text
    # Typed (not as Slack's slash command) and unaddressed: chatter, kept as context, not answered.
    await world.slack_event(slack.message(CHANNEL, "/tmp is full again", user=BOB))
    await world.slack_event(slack.message(CHANNEL, f"<@{slack.bot_user_id}> can you help?", user=ALICE))
    await until(lambda: any(p.text == "echo: can you help?" for p in slack.posted))
    assert "/tmp is full again" in newest_user_text(llm.requests[-1])
    assert not any("Unknown command" in p.text or "Session:" in p.text for p in slack.posted)


async def test_discord_context_a_referenced_answer_and_private_commands(world: World) -> None:
    discord, llm = world.discord, world.llm
    bob = user("1400000000000000002", "bob", global_name="Bob")
    alice = user("1400000000000000001", "alice", global_name="Alice")
    await discord.inject(discord.message("group", "the deploy window moved to 17:30", author=bob))
    question = discord.message("group", f"<@{BOT_ID}> when is the deploy window?", author=alice, mentions=[BOT_USER])
    await discord.inject(question)
    await until(lambda: any(o.content == "echo: when is the deploy window?" for o in discord.outbox))
    line = next(x for x in newest_user_text(llm.requests[-1]).split("\n") if "17:30" in x)
    assert line.startswith(OPEN) and line.endswith(f"{CLOSE} Bob: the deploy window moved to 17:30")
    first = next(o for o in discord.outbox if not o.edit)
    assert (first.channel_id, first.reference) == (TEXT_CHANNEL_ID, question["id"])

    # As a slash command: answered ephemerally to Alice; typed with a mention: a hint, no details.
    await discord.inject_interaction(discord.interaction("group", "whoami", author=alice))
    await discord.wait_for(lambda _j: bool(discord.followups))
    (followup,) = discord.followups
    assert followup.ephemeral and "Identities:" in followup.content
    await discord.inject(discord.message("group", f"<@{BOT_ID}> /whoami", author=alice, mentions=[BOT_USER]))
    await until(lambda: any("slash command" in o.content for o in discord.outbox))
    assert not any("Identities:" in o.content for o in discord.outbox)


async def test_slack_memory_trace_is_private_and_shows_only_the_callers_turns_in_the_channel(world: World) -> None:
    slack = world.slack
    await world.slack_command("/remember", "--channel the team deploys on Tuesdays")
    await until(lambda: any("Remembered" in p.text for p in slack.posted))
    for who, text in ((ALICE, "when does the team deploy?"), (BOB, "when do we deploy again?")):
        await world.slack_event(slack.message(CHANNEL, f"<@{slack.bot_user_id}> {text}", user=who))
        await until(lambda text=text: any(p.text == f"echo: {text}" for p in slack.posted))
    assert world.gw.traces is not None
    await world.gw.traces.settle()
    await world.slack_command("/memory", "trace 10")  # by Alice (the command payload's user)
    await slack.wait_for(lambda f: bool(f.ephemeral))
    (shown,) = slack.ephemeral
    assert shown.user == ALICE
    assert "when does the team deploy?" in shown.text and "deploy again" not in shown.text
    assert not any("trace" in p.text.lower() for p in slack.posted)
