"""Exactly once across instances (DESIGN §13): two gateways on one PostgreSQL, both running the same
`schedules:` entry on one virtual clock, each with its own Telegram fake. Every due time is posted
once in all, whichever instance's worker claims it; a restart of both in the middle changes nothing."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.clock import WallClock
from tests.fakes.telegram import GROUP_ID, FakeTelegram
from tests.postgres import fresh_database_url
from tests.telegram_world import telegram_world
from tests.waits import until

pytestmark = pytest.mark.timeout(120)

SCHEDULES = {
    "hourly": {
        "every": "1h",
        "prompt": "Post the hourly check.",
        "target": {"channel": "telegram", "conversation": str(GROUP_ID), "kind": "group"},
    }
}


def posted(*fakes: FakeTelegram) -> int:
    return sum(1 for tg in fakes for s in tg.sent if s.chat_id == GROUP_ID and not s.edit)


@contextlib.asynccontextmanager
async def instance(tmp_path: Path, name: str, url: str, clock: WallClock) -> Any:
    storage = {"data_dir": str(tmp_path / name), "database_url": url, "instance_name": name}
    async with telegram_world(tmp_path / name, {}, clock=clock, storage=storage, schedules=SCHEDULES) as world:
        yield world


async def test_each_due_time_fires_once_across_two_instances_and_their_restarts(tmp_path: Path) -> None:
    url = fresh_database_url()
    clock = WallClock()
    fakes: list[FakeTelegram] = []
    for round_ in range(2):  # both instances, then both again after a restart
        async with (
            instance(tmp_path, "a", url, clock) as (gw_a, tg_a, _),
            instance(tmp_path, "b", url, clock) as (gw_b, tg_b, _),
        ):
            fakes += [tg_a, tg_b]
            for _hour in range(2):
                before = posted(*fakes)
                clock.advance(hours=1)
                assert gw_a.jobs is not None and gw_b.jobs is not None
                gw_a.jobs.wake()
                gw_b.jobs.wake()
                await until(lambda before=before, seen=tuple(fakes): posted(*seen) >= before + 1)
                await gw_a.jobs.idle()
                await gw_b.jobs.idle()
                assert posted(*fakes) == before + 1, f"round {round_}: a due time fired twice"
            assert gw_a.storage is not None
            hourly = await gw_a.storage.schedules.named("hourly")
            assert hourly is not None and hourly.runs == 2 * (round_ + 1)
    assert posted(*fakes) == 4
