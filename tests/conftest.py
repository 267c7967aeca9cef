from __future__ import annotations

import os
import tempfile

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# The ONNX graphs the local embedder builds (memory.embed.onnx_bert) go to a cache of the tests' own, kept
# between runs (its key rebuilds a stale one), never into the user's ~/.cache.
os.environ.setdefault("CLAWGATE_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"clawgate-tests-{os.getuid()}"))

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.app import Gateway
from gateway.config.load import parse_config
from gateway.config.model import Config
from tests.fakes.llm import FakeLLM

ALICE_TOKEN = "alice-token-0123456789"
BOB_TOKEN = "bob-token-0123456789ab"
ROOT_TOKEN = "root-token-0123456789"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # The PostgreSQL server some storage tests started (tests/postgres.py), stopped while pytest's
    # output is still open (at interpreter exit its log lines would meet closed streams).
    from tests import postgres

    postgres.stop()


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLM]:
    fake = await FakeLLM().start()
    yield fake
    await fake.stop()


def make_config(tmp_path: Path, fake: FakeLLM | None, **overrides: Any) -> Config:
    return parse_config(config_data(tmp_path, fake, **overrides), "test-config", env={})


def config_data(tmp_path: Path, fake: FakeLLM | None, **overrides: Any) -> dict[str, Any]:
    """The tests' config.yaml as data: `overrides` set dotted__keys (`storage__data_dir=...`)."""
    data: dict[str, Any] = {
        "ai": {
            "model": "openai/fake-model",
            "api_base": fake.api_base if fake else "http://127.0.0.1:9/v1",
            "api_key": "sk-test-not-a-real-key-000000",
            "retries": 1,
            "retry_backoff_seconds": 0.01,
            "timeout_seconds": 5,
        },
        "storage": {"data_dir": str(tmp_path / "data")},
        "channels": {"web": {"host": "127.0.0.1", "port": 0}},
        "users": {
            "alice": {"roles": ["user"], "tokens": [ALICE_TOKEN], "identities": ["telegram:1"]},
            "bob": {"roles": ["user"], "tokens": [BOB_TOKEN]},
            "root": {"roles": ["admin"], "tokens": [ROOT_TOKEN]},
        },
        # The daily merge would run at start in any test after 03:00 UTC: the tests that want it say so.
        "memory": {"merge": {"enabled": False}},
    }
    for dotted, value in overrides.items():
        node = data
        *parents, last = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return data


@pytest.fixture
async def gateway_factory(tmp_path: Path) -> AsyncIterator[Any]:
    started: list[Gateway] = []

    async def factory(fake: FakeLLM | None, **overrides: Any) -> Gateway:
        gw = Gateway(make_config(tmp_path, fake, **overrides))
        await gw.start()
        await gw.llm.ready()
        started.append(gw)
        return gw

    yield factory
    for gw in started:
        await gw.stop()


@pytest.fixture
async def gateway(gateway_factory: Callable[..., Any], fake_llm: FakeLLM) -> AsyncIterator[Gateway]:
    gw = await gateway_factory(fake_llm)
    yield gw
    await gw.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def auth(token: str = ALICE_TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def say(http: aiohttp.ClientSession, gw: Gateway, text: str, token: str = ALICE_TOKEN) -> str:
    """One message through the REST API (as alice unless `token` says otherwise); the reply."""
    r = await http.post(gw.url + "/api/v1/messages", json={"text": text}, headers=auth(token))
    assert r.status == 200, await r.text()
    return str((await r.json())["reply"])
