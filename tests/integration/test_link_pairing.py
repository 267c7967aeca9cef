"""Linking under `dm_policy: pairing` (docs/channels.md, "Linking and pairing"): a new account's
`/link CODE` joins it to the approved person who made the code, with no pairing code; anything else
from it still gets the pairing code. And the attacks: wrong, expired and used codes, a code made by
an account nobody approved, guessing from one account and from many."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from gateway.app import Gateway
from gateway.core.events import utcnow
from memory.store.schema import link_codes
from memory.store.storage import Storage
from tests.fakes.llm import FakeLLM
from tests.fakes.telegram import FakeTelegram
from tests.telegram_world import telegram_world
from tests.waits import until

ADMIN, DANA, NEW, STRANGER = 9, 2002, 3003, 4004
USERS = {
    "root": {"roles": ["admin"], "identities": [f"telegram:{ADMIN}"]},
    "dana": {"identities": [f"telegram:{DANA}"]},  # declared: approved by the operator
}
World = tuple[Gateway, FakeTelegram, FakeLLM]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with telegram_world(tmp_path, USERS) as w:  # dm_policy pairing, the default
        yield w


async def dm(tg: FakeTelegram, text: str, sender: int) -> str:
    """Send a DM and return the answer to it."""
    n = len(tg.texts_to(sender))
    await tg.dm(text, sender=sender)
    await until(lambda: len(tg.texts_to(sender)) > n)
    return tg.texts_to(sender)[n]


async def code_of(tg: FakeTelegram, sender: int) -> str:
    found = re.search(r"code is ([A-Z0-9]{4}-[A-Z0-9]{4})", await dm(tg, "/link", sender))
    assert found
    return found.group(1)


def storage(gw: Gateway) -> Storage:
    assert gw.storage is not None
    return gw.storage


async def test_a_new_account_joins_its_approved_owner_without_pairing(world: World) -> None:
    gw, tg, llm = world
    code = await code_of(tg, DANA)
    answer = await dm(tg, f"/link {code}", NEW)
    assert answer.startswith(f"Linked: telegram:{NEW} now belongs to user dana")
    assert "pairing code" not in answer
    assert await storage(gw).pairing.pending() == []  # no pairing request was made for it
    await tg.dm("hello from my new phone", sender=NEW)
    await until(lambda: any(s.text == "echo: hello from my new phone" for s in tg.sent if s.chat_id == NEW))
    assert f"telegram:{NEW}" in await dm(tg, "/whoami", DANA)
    assert len(llm.requests) == 1


async def test_an_account_an_admin_approved_may_vouch_for_another(world: World) -> None:
    gw, tg, _llm = world
    pairing = re.search(r"pairing code is ([A-Z0-9]{6})", await dm(tg, "hi", STRANGER))
    assert pairing
    assert "Approved" in await dm(tg, f"/pair approve {pairing.group(1)}", ADMIN)
    await until(lambda: "You're approved: you can talk to me now." in tg.texts_to(STRANGER))  # the notice
    code = await code_of(tg, STRANGER)
    assert (await dm(tg, f"/link {code}", NEW)).startswith("Linked:")
    owner = await storage(gw).identities.resolve(f"telegram:{NEW}")
    assert owner.id == (await storage(gw).identities.resolve(f"telegram:{STRANGER}")).id


@pytest.mark.parametrize("text", ["hello", "/whoami", "/link", "/help", "/pair approve ABCDEF"])
async def test_everything_else_from_an_unknown_account_still_gets_the_pairing_code(world: World, text: str) -> None:
    _gw, tg, llm = world
    answer = await dm(tg, text, NEW)
    assert "pairing code" in answer and "Linked" not in answer
    assert llm.requests == []


async def test_a_wrong_code_is_refused_with_the_pairing_code(world: World) -> None:
    gw, tg, _llm = world
    answer = await dm(tg, "/link WXYZ-2345", NEW)
    assert answer.startswith("Could not link: that code is unknown, already used or expired.")
    assert "pairing code" in answer
    assert (await storage(gw).identities.resolve(f"telegram:{NEW}")).id != "dana"


async def test_an_expired_or_used_code_is_refused(world: World) -> None:
    gw, tg, _llm = world
    code = await code_of(tg, DANA)
    assert (await dm(tg, f"/link {code}", NEW)).startswith("Linked:")
    assert (await dm(tg, f"/link {code}", STRANGER)).startswith("Could not link")  # used

    late = await code_of(tg, DANA)
    past = utcnow() - timedelta(seconds=1)
    await storage(gw).db.write(lambda conn: conn.execute(update(link_codes).values(expires_at=past)))
    answer = await dm(tg, f"/link {late}", STRANGER)
    assert answer.startswith("Could not link") and "pairing code" in answer
    assert (await storage(gw).identities.resolve(f"telegram:{STRANGER}")).id != "dana"


async def test_a_code_made_by_an_unapproved_account_links_nothing(world: World) -> None:
    gw, tg, llm = world
    # Made where that account could ask for one (an open channel, say): it is not approved here.
    accomplice = await storage(gw).identities.resolve("telegram:5005")
    code = await storage(gw).links.create(accomplice.id, "telegram:5005")
    answer = await dm(tg, f"/link {code}", NEW)
    assert answer.startswith("Could not link: that code belongs to an account that is not approved yet.")
    assert "pairing code" in answer
    assert await storage(gw).links.owner(code) == accomplice.id  # refused before it was used
    assert "pairing code" in await dm(tg, "let me in", NEW)
    assert llm.requests == []


async def test_guessing_is_limited_per_account(world: World) -> None:
    _gw, tg, _llm = world
    for i in range(5):
        assert (await dm(tg, f"/link WRNG-{i:04d}", NEW)).startswith("Could not link")
    code = await code_of(tg, DANA)
    answer = await dm(tg, f"/link {code}", NEW)  # even the right code, now
    assert answer.startswith("Too many link attempts") and "pairing code" in answer
    assert "pairing code" in await dm(tg, "hello", NEW)


async def test_guessing_is_limited_across_fresh_accounts(world: World) -> None:
    _gw, tg, _llm = world
    for sender in range(6000, 6020):  # twenty throwaway accounts, one guess each
        assert (await dm(tg, "/link WRNG-0000", sender)).startswith("Could not link")
    code = await code_of(tg, DANA)
    assert (await dm(tg, f"/link {code}", 6020)).startswith("Too many link attempts")
