"""Sessions survive restarts; a turn cut by a crash is answered once on restart; turns are
serialized per session and parallel across sessions, under the global LLM cap."""

from __future__ import annotations

import asyncio
import itertools
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import yaml

from gateway.app import Gateway
from tests.conftest import ALICE_TOKEN, auth, make_config
from tests.fakes.llm import FakeLLM, Gate, Reply
from tests.process import GatewayProcess
from tests.waits import until


async def say(http: aiohttp.ClientSession, gw: Gateway | str, text: str, conv: str | None = None) -> str:
    url = gw if isinstance(gw, str) else gw.url
    body = {"text": text} if conv is None else {"text": text, "conversation": conv}
    r = await http.post(url + "/api/v1/messages", json=body, headers=auth())
    assert r.status == 200, await r.text()
    return str((await r.json())["reply"])


async def test_sessions_survive_a_restart(tmp_path: Path, fake_llm: FakeLLM, http: aiohttp.ClientSession) -> None:
    gw = Gateway(make_config(tmp_path, fake_llm))
    await gw.start()
    await say(http, gw, "my favourite colour is teal")
    await gw.stop()
    gw = Gateway(make_config(tmp_path, fake_llm))
    await gw.start()
    try:
        await say(http, gw, "what is my favourite colour?")
        contents = [m["content"] for m in fake_llm.requests[-1]["messages"]]
        assert "my favourite colour is teal" in contents
    finally:
        await gw.stop()


async def test_crash_mid_turn_is_answered_once_after_restart(
    tmp_path: Path, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    cfg = make_config(tmp_path, fake_llm)
    config_path = tmp_path / "config.yaml"
    config_path.write_text(
        yaml.safe_dump(
            {
                "ai": {
                    "model": "openai/fake-model",
                    "api_base": fake_llm.api_base,
                    "api_key": "sk-test-000000000000000",
                },
                "storage": {"data_dir": str(cfg.storage.data_dir)},
                "channels": {"web": {"host": "127.0.0.1", "port": 0}},
                "users": {"alice": {"tokens": [ALICE_TOKEN]}},
            }
        )
    )
    fake_llm.script(Gate())  # the first call hangs until we have killed the gateway
    gateway = await GatewayProcess.start(config_path)
    pending = asyncio.create_task(say(http, gateway.url, "survive the crash"))
    try:
        await fake_llm.wait_requests(1, timeout=30)
    finally:
        await gateway.stop(signal.SIGKILL)
    try:
        await pending
    except (aiohttp.ClientError, AssertionError):
        pass
    fake_llm.release()

    gw = Gateway(make_config(tmp_path, fake_llm))
    await gw.start()
    assert gw.router is not None and gw.storage is not None
    await fake_llm.wait_requests(2)
    await gw.router.drain(10)
    history = await gw.storage.sessions.history("web:dm:alice")
    assert [(m.role, m.content) for m in history] == [
        ("user", "survive the crash"),
        ("assistant", "echo: survive the crash"),
    ]
    assert await gw.storage.journal.unfinished() == []
    await gw.stop()

    gw = Gateway(make_config(tmp_path, fake_llm))
    await gw.start()
    await gw.stop()
    assert len(fake_llm.requests) == 2  # nothing is answered twice


async def test_turns_serialize_per_session_and_run_in_parallel_across_sessions(
    gateway: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    fake_llm.script(*[Gate(Reply(f"r{i}")) for i in range(4)])
    a = [asyncio.create_task(say(http, gateway, f"a{i}", conv="a")) for i in range(3)]
    await fake_llm.wait_requests(1)
    b = asyncio.create_task(say(http, gateway, "b0", conv="b"))
    await fake_llm.wait_requests(2)  # session b runs while session a is busy
    assert fake_llm.in_flight == 2
    fake_llm.release()
    await asyncio.gather(*a, b)
    assert fake_llm.max_in_flight == 2
    a_prompts = [r["messages"] for r in fake_llm.requests if r["messages"][-1]["content"].startswith("a")]
    # Each later turn of session a saw the complete earlier exchange: they never overlapped.
    for earlier, later in itertools.pairwise(a_prompts):
        assert len(later) == len(earlier) + 2


async def test_global_cap_on_concurrent_llm_calls(
    gateway_factory: Callable[..., Awaitable[Gateway]], fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    gw = await gateway_factory(fake_llm, ai__max_concurrent_calls=1)
    try:
        fake_llm.script(Gate(), Gate())
        tasks = [asyncio.create_task(say(http, gw, "x", conv=f"s{i}")) for i in range(2)]
        await fake_llm.wait_requests(1)
        assert gw.router is not None
        await until(lambda: len(gw.router._line) == 2)  # both turns are under way
        assert len(fake_llm.requests) == 1
        fake_llm.release()
        await asyncio.gather(*tasks)
        assert fake_llm.max_in_flight == 1
    finally:
        await gw.stop()


async def test_back_pressure_when_a_session_queue_is_full(
    gateway_factory: Callable[..., Awaitable[Gateway]], fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    gw = await gateway_factory(fake_llm, session__max_pending_per_session=1)
    try:
        fake_llm.script(Gate())
        first = asyncio.create_task(say(http, gw, "slow"))
        await fake_llm.wait_requests(1)
        r = await http.post(gw.url + "/api/v1/messages", json={"text": "more"}, headers=auth())
        assert r.status == 429 and r.headers["Retry-After"]
        fake_llm.release()
        await first
        assert await say(http, gw, "later") == "echo: later"
    finally:
        await gw.stop()
