"""Retries, fallbacks, timeouts and clear failure messages against the fake, on both transports:
the direct OpenAI-wire client (`ai.transport: auto`) and litellm.acompletion (`litellm`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from gateway.app import Gateway
from tests.conftest import say
from tests.fakes.llm import BreakStream, Fail, FakeLLM, Hang, Reply


@pytest.fixture(params=["auto", "litellm"])
def gateway_factory(request: pytest.FixtureRequest, gateway_factory: Callable[..., Any]) -> Callable[..., Any]:
    async def factory(fake: FakeLLM | None, **overrides: Any) -> Gateway:
        overrides.setdefault("ai__transport", request.param)
        return await gateway_factory(fake, **overrides)

    return factory


def models_called(fake: FakeLLM) -> list[str]:
    return [r["model"] for r in fake.requests]


async def test_overload_is_retried(gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession) -> None:
    fake_llm.script(Fail(429, "slow down", {"Retry-After": "0"}), Reply("after retry"))
    assert await say(http, gateway, "hi") == "after retry"
    assert models_called(fake_llm) == ["fake-model", "fake-model"]


async def test_server_errors_walk_the_fallback_chain(
    gateway_factory,
    fake_llm: FakeLLM,  # type: ignore[no-untyped-def]
    http: aiohttp.ClientSession,
) -> None:
    gw = await gateway_factory(fake_llm, ai__fallback=["openai/backup-model"])
    try:
        fake_llm.script(Fail(500), Fail(503), model="fake-model")
        fake_llm.script(Reply("from backup"), model="backup-model")
        assert await say(http, gw, "hi") == "from backup"
        assert models_called(fake_llm) == ["fake-model", "fake-model", "backup-model"]
        metrics = await (await http.get(gw.url + "/metrics")).text()
        assert 'clawgate_llm_errors_total{kind="server"}' in metrics
        assert 'clawgate_llm_errors_total{kind="overloaded"}' in metrics
    finally:
        await gw.stop()


async def test_auth_errors_skip_retries(
    gateway_factory,
    fake_llm: FakeLLM,  # type: ignore[no-untyped-def]
    http: aiohttp.ClientSession,
) -> None:
    gw = await gateway_factory(fake_llm, ai__fallback=["openai/backup-model"])
    try:
        fake_llm.script(Fail(401, "invalid key"), model="fake-model")
        assert await say(http, gw, "hi") == "echo: hi"
        assert models_called(fake_llm) == ["fake-model", "backup-model"]
    finally:
        await gw.stop()


async def test_timeout_then_fallback(
    gateway_factory,
    fake_llm: FakeLLM,  # type: ignore[no-untyped-def]
    http: aiohttp.ClientSession,
) -> None:
    gw = await gateway_factory(fake_llm, ai__fallback=["openai/backup-model"], ai__timeout_seconds=0.5, ai__retries=0)
    try:
        fake_llm.script(Hang(), model="fake-model")
        assert await say(http, gw, "hi") == "echo: hi"
        assert models_called(fake_llm) == ["fake-model", "backup-model"]
    finally:
        await gw.stop()


async def test_every_model_failing_gives_a_clear_message(
    gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    fake_llm.script(Fail(500), Fail(500))
    reply = await say(http, gateway, "hi")
    assert "openai/fake-model" in reply and "config.yaml" in reply
    assert "sk-test" not in reply
    # The notice is shown in history but never fed back to the model as its own words.
    await say(http, gateway, "next")
    assert all("couldn't get an answer" not in str(m["content"]) for m in fake_llm.requests[-1]["messages"])


async def test_unreachable_model_still_answers(gateway_factory, http: aiohttp.ClientSession) -> None:  # type: ignore[no-untyped-def]
    gw = await gateway_factory(None, ai__retries=0)  # api_base points at a closed port
    try:
        reply = await say(http, gw, "hello?")
        assert "openai/fake-model" in reply and "could not be reached" in reply
        assert "ai.api_base" in reply
    finally:
        await gw.stop()


async def test_no_model_configured(gateway_factory, http: aiohttp.ClientSession) -> None:  # type: ignore[no-untyped-def]
    gw = await gateway_factory(None, ai__model=None)
    try:
        reply = await say(http, gw, "hello?")
        assert "No language model is configured" in reply and "ai.model" in reply
    finally:
        await gw.stop()


async def test_broken_stream_is_retried_without_duplicated_text(
    gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    fake_llm.script(BreakStream("half an ans"), Reply("whole answer"))
    async with http.ws_connect(gateway.url + "/ws") as ws:
        await ws.send_json({"type": "hello"})
        while (await ws.receive_json(timeout=10))["type"] != "ready":
            pass
        await ws.send_json({"type": "message", "text": "hi"})
        while not (frame := await ws.receive_json(timeout=10)).get("final"):
            pass
    assert frame["text"] == "whole answer"
    assert [r["stream"] for r in fake_llm.requests] == [True, True]


async def test_rest_requests_ask_the_model_for_one_answer(
    gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    fake_llm.script(Reply("not streamed"))
    assert await say(http, gateway, "hi") == "not streamed"
    assert not fake_llm.requests[-1].get("stream")


async def test_tool_calls_loop_and_are_bounded(
    gateway_factory,
    fake_llm: FakeLLM,  # type: ignore[no-untyped-def]
    http: aiohttp.ClientSession,
) -> None:
    from tests.fakes.llm import ToolCall

    gw = await gateway_factory(fake_llm, ai__max_tool_rounds=2)
    try:
        fake_llm.script(ToolCall("get_current_time", {"timezone": "Europe/Berlin"}), Reply("It is noon."))
        assert await say(http, gw, "what time is it?") == "It is noon."
        second = fake_llm.requests[-1]
        assert second["messages"][-1]["role"] == "tool"
        assert "Europe/Berlin" in second["messages"][-1]["content"]
        assert second["tools"][0]["function"]["name"] == "get_current_time"
        # A model that keeps calling tools is cut off after max_tool_rounds and must answer.
        fake_llm.script(ToolCall("get_current_time"), ToolCall("nope_tool"), Reply("done"))
        assert await say(http, gw, "loop") == "done"
        assert "tools" not in fake_llm.requests[-1]
        assert "unknown tool" in fake_llm.requests[-1]["messages"][-1]["content"]
    finally:
        await gw.stop()


async def test_each_transport_is_the_one_used(gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession) -> None:
    await say(http, gateway, "hi")
    agent = fake_llm.requests[-1]["_headers"].get("User-Agent", "")
    if gateway.config.ai.transport == "auto":
        assert "aiohttp" in agent, agent  # gateway/llm/openai_wire.py
    else:
        assert "OpenAI" in agent, agent  # the openai SDK inside litellm
