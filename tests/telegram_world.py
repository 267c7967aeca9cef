"""A gateway with a Telegram channel on the local Bot API fake and the fake model, started and
stopped around a test: the world of the access-flow and formation tests."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from gateway.app import Gateway
from gateway.config.load import parse_config
from tests.fakes.llm import FakeLLM
from tests.fakes.telegram import FakeTelegram


@contextlib.asynccontextmanager
async def telegram_world(
    tmp_path: Path,
    users: dict[str, Any],
    *,
    telegram: dict[str, Any] | None = None,
    clock: Callable[[], datetime] | None = None,
    **more: Any,
) -> AsyncIterator[tuple[Gateway, FakeTelegram, FakeLLM]]:
    """`users` as config.yaml declares them; `telegram`: more keys of the channel; `clock`: the
    gateway's wall clock for scheduled work (tests/fakes/clock.py WallClock); `more`: more top-level
    config sections (e.g. `session`)."""
    llm = await FakeLLM().start()
    tg = await FakeTelegram().start()
    config = parse_config(
        {
            "ai": {"model": "openai/fake-model", "api_base": llm.api_base, "api_key": "sk-test-0000000000000"},
            "storage": {"data_dir": str(tmp_path / "data")},
            "channels": {
                "web": {"port": 0},
                "telegram": {
                    "token": tg.token,
                    "api_base_url": tg.api_base_url,
                    "poll_timeout": 1,
                    "request_timeout": 5,  # a busy CI machine can take seconds to answer a fake
                    **(telegram or {}),
                },
            },
            "users": users,
            **more,
        },
        "t",
        env={},
    )
    gw = Gateway(config, clock=clock) if clock is not None else Gateway(config)
    await gw.start()
    await gw.llm.ready()
    try:
        yield gw, tg, llm
    finally:
        await gw.stop(deadline=1)
        await tg.stop()
        await llm.stop()
