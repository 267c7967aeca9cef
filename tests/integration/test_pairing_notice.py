"""A person approved through pairing is told on their platform (docs/onboarding.md, "Pairing
notice"), exactly once, whichever way the approval came: the console in this process, or the
database from another one (`clawgate pairing approve`, another instance)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import insert
from sqlalchemy.engine import Connection

from gateway.app import Gateway
from gateway.pairing_notice import APPROVED_TEXT, PairingNotices
from gateway.web.console.service import Viewer
from memory.store.db import MIGRATIONS, Database
from memory.store.schema import pairing_requests
from memory.store.storage import Storage
from tests.fakes.llm import FakeLLM
from tests.fakes.telegram import Fail, FakeTelegram
from tests.telegram_world import telegram_world
from tests.waits import until

ADMIN, STRANGER, OTHER = 9, 5005, 6006
USERS = {"root": {"roles": ["admin"], "identities": [f"telegram:{ADMIN}"]}}
World = tuple[Gateway, FakeTelegram, FakeLLM]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with telegram_world(tmp_path, USERS) as w:  # dm_policy pairing, the default
        yield w


async def pairing_code(tg: FakeTelegram, sender: int) -> str:
    await tg.dm("hello?", sender=sender)
    await until(lambda: any("pairing code" in t for t in tg.texts_to(sender)))
    found = re.search(r"pairing code is ([A-Z0-9]{6})", tg.texts_to(sender)[-1])
    assert found
    return found.group(1)


def notices(gw: Gateway) -> PairingNotices:
    assert gw.pairing_notices is not None
    return gw.pairing_notices


async def test_approved_in_the_console_the_person_is_told_once(world: World) -> None:
    gw, tg, _llm = world
    code = await pairing_code(tg, STRANGER)
    assert gw.console is not None
    await gw.console.approve_pairing(Viewer("root", frozenset({"admin"}), None), code)
    await until(lambda: APPROVED_TEXT in tg.texts_to(STRANGER))  # at once, not at the next sweep
    assert await notices(gw).sweep() == 0
    assert tg.texts_to(STRANGER).count(APPROVED_TEXT) == 1
    await tg.dm("thanks!", sender=STRANGER)  # and they may talk now
    await until(lambda: "echo: thanks!" in tg.texts_to(STRANGER))


async def test_approved_from_another_process_the_sweep_tells_them_once(world: World) -> None:
    gw, tg, _llm = world
    code = await pairing_code(tg, STRANGER)
    # What `clawgate pairing approve` does: its own connection to the database, no gateway.
    cli = await Storage.open(gw.config.storage.resolved_database_url)
    try:
        assert await cli.pairing.approve(code, "cli") is not None
    finally:
        await cli.close()
    assert tg.texts_to(STRANGER).count(APPROVED_TEXT) == 0
    # Two sweeps at once (two instances on one database): one claim wins, one message is sent.
    sent = await asyncio.gather(notices(gw).sweep(), notices(gw).sweep())
    assert sorted(sent) == [0, 1]
    await until(lambda: APPROVED_TEXT in tg.texts_to(STRANGER))
    assert await notices(gw).sweep() == 0
    assert tg.texts_to(STRANGER).count(APPROVED_TEXT) == 1


async def test_only_approved_people_are_told(world: World) -> None:
    gw, tg, _llm = world
    await pairing_code(tg, OTHER)  # asks, nobody approves
    assert await notices(gw).sweep() == 0
    assert APPROVED_TEXT not in tg.texts_to(OTHER)


def _to(revision: str) -> Callable[[Connection], None]:
    def run(conn: Connection) -> None:
        cfg = AlembicConfig()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)

    return run


def _requests(conn: Connection) -> None:
    at = datetime(2026, 11, 1, tzinfo=UTC)
    conn.execute(
        insert(pairing_requests),
        [
            {"identity": "telegram:1", "channel": "telegram", "code": "AAAAAA", "created_at": at, "approved_at": at},
            {"identity": "telegram:2", "channel": "telegram", "code": "BBBBBB", "created_at": at, "approved_at": None},
        ],
    )


async def test_approvals_made_before_the_upgrade_are_not_announced(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/old.db"
    old = Database(url)
    await old.write(_to("0019"))
    await old.write(_requests)
    await old.close()
    storage = await Storage.open(url)  # brought up to date
    try:
        assert await storage.pairing.unnotified(["telegram"]) == []  # months-old approvals stay quiet
        assert await storage.pairing.approve("BBBBBB", "root") is not None
        [waiting] = await storage.pairing.unnotified(["telegram"])
        assert waiting.identity == "telegram:2" and waiting.chat_id is None  # asked before the DM was kept
        assert await storage.pairing.claim_notice("telegram:2")
        assert not await storage.pairing.claim_notice("telegram:2")
    finally:
        await storage.close()


async def test_a_send_that_certainly_failed_is_tried_again_and_a_refused_one_is_not(world: World) -> None:
    gw, tg, _llm = world
    code = await pairing_code(tg, STRANGER)
    for _ in range(4):  # the first send and Delivery's three retries
        tg.fail_next("sendMessage", Fail(500, "Internal Server Error"))
    assert gw.storage is not None
    gw.storage.pairing.on_approve = None  # this test drives the sweeps itself
    assert await gw.storage.pairing.approve(code, "root") is not None
    assert await notices(gw).sweep() == 0  # the platform failed: given back
    assert await notices(gw).sweep() == 1
    assert tg.texts_to(STRANGER).count(APPROVED_TEXT) == 1

    other = await pairing_code(tg, OTHER)
    tg.fail_next("sendMessage", Fail(403, "Forbidden: bot was blocked by the user"))
    assert await gw.storage.pairing.approve(other, "root") is not None
    assert await notices(gw).sweep() == 0
    assert await notices(gw).sweep() == 0  # refused for good: not asked again every half minute
    assert APPROVED_TEXT not in tg.texts_to(OTHER)
