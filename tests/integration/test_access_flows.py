"""Access policy end to end on Telegram: pairing, mentions in groups, roles for commands."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.app import Gateway
from tests.fakes.llm import FakeLLM, Gate, Reply
from tests.fakes.telegram import FakeTelegram
from tests.telegram_world import telegram_world
from tests.waits import until

ADMIN = 9
STRANGER = 1001


@pytest.fixture
async def tg_world(
    tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[Gateway, FakeTelegram, FakeLLM]]:
    users = {"root": {"roles": ["admin"], "identities": [f"telegram:{ADMIN}"]}}
    session = getattr(request, "param", {})
    async with telegram_world(tmp_path, users, telegram={"max_message_chars": 500}, session=session) as world:
        yield world


async def test_pairing_keeps_strangers_out_until_an_admin_approves(
    tg_world: tuple[Gateway, FakeTelegram, FakeLLM],
) -> None:
    _gw, tg, llm = tg_world
    await tg.dm("hello, who are you?", sender=STRANGER)
    await until(lambda: bool(tg.texts_to(STRANGER)))
    code = re.search(r"pairing code is ([A-Z0-9]{6})", tg.texts_to(STRANGER)[0])
    assert code, tg.texts_to(STRANGER)
    assert llm.requests == []  # nothing reaches the model before approval

    await tg.dm("/pair", sender=ADMIN)
    await until(lambda: bool(tg.texts_to(ADMIN)))
    assert code.group(1) in tg.texts_to(ADMIN)[0]
    await tg.dm(f"/pair approve {code.group(1)}", sender=ADMIN)
    await until(lambda: len(tg.texts_to(ADMIN)) == 2)
    assert f"Approved telegram:{STRANGER}" in tg.texts_to(ADMIN)[1]

    await tg.dm("hello again", sender=STRANGER)
    await until(lambda: any(s.text == "echo: hello again" for s in tg.sent))
    assert len(llm.requests) == 1


async def test_strangers_cannot_approve_themselves(tg_world: tuple[Gateway, FakeTelegram, FakeLLM]) -> None:
    gw, tg, _llm = tg_world
    await tg.dm("/pair approve ABCDEF", sender=STRANGER)
    await until(lambda: bool(tg.texts_to(STRANGER)))
    assert "pairing code" in tg.texts_to(STRANGER)[0]  # unpaired: even commands wait for approval
    assert gw.storage is not None and not await gw.storage.pairing.is_approved(f"telegram:{STRANGER}")


async def test_groups_need_a_mention_and_admins_for_reset(tg_world: tuple[Gateway, FakeTelegram, FakeLLM]) -> None:
    _gw, tg, llm = tg_world
    group = tg.group_chat()["id"]
    await tg.group("just talking among ourselves", sender=STRANGER)
    await tg.group("what do you think?", sender=STRANGER, mention=True)
    await until(lambda: any(s.text == "echo: what do you think?" for s in tg.sent))
    assert len(llm.requests) == 1  # the unmentioned message was ignored
    await tg.group("/new", sender=STRANGER)
    await until(lambda: any("not allowed" in t for t in tg.texts_to(group)))
    await tg.group("/new", sender=ADMIN)
    await until(lambda: any("Started a new conversation" in t for t in tg.texts_to(group)))


async def test_oversized_messages_are_refused_with_a_reason(tg_world: tuple[Gateway, FakeTelegram, FakeLLM]) -> None:
    _gw, tg, llm = tg_world
    await tg.dm("x" * 501, sender=ADMIN)
    await until(lambda: bool(tg.texts_to(ADMIN)))
    assert "too long" in tg.texts_to(ADMIN)[0] and "500" in tg.texts_to(ADMIN)[0]
    assert llm.requests == []


@pytest.mark.parametrize("tg_world", [{"max_pending_per_session": 1}], indirect=True)
async def test_a_full_session_queue_is_answered_not_dropped(
    tg_world: tuple[Gateway, FakeTelegram, FakeLLM],
) -> None:
    _gw, tg, llm = tg_world
    llm.script(Gate(Reply("slow answer")))
    await tg.dm("first", sender=ADMIN)
    await llm.wait_requests(1)
    await tg.dm("second, too soon", sender=ADMIN)
    await until(lambda: any("still working" in t for t in tg.texts_to(ADMIN)))
    llm.release()
    await until(lambda: any(s.text == "slow answer" for s in tg.sent))
    assert len(llm.requests) == 1  # the refused message never reached the model


async def test_an_account_taken_from_a_person_does_not_inherit_their_conversation(tmp_path: Path) -> None:
    dana = 2002
    users = {
        "root": {"roles": ["admin"], "identities": [f"telegram:{ADMIN}"]},
        "dana": {"identities": [f"telegram:{dana}"]},
    }
    async with telegram_world(tmp_path, users, telegram={"dm_policy": "open"}) as (gw, tg, llm):
        assert gw.storage is not None
        await tg.dm("my locker code is 4711", sender=dana)
        await until(lambda: any(s.text == "echo: my locker code is 4711" for s in tg.sent))
        # The operator takes the account out of dana's identities (say, she left and it was reassigned).
        await gw.storage.identities.sync_declared([("root", ["admin"], [f"telegram:{ADMIN}"])])
        await tg.dm("what is my locker code?", sender=dana)
        await until(lambda: any(s.text == "echo: what is my locker code?" for s in tg.sent))
        prompt = str(llm.requests[-1]["messages"])
        assert "4711" not in prompt  # neither her messages nor a summary of them
        newcomer = await gw.storage.identities.resolve(f"telegram:{dana}")
        assert newcomer.id != "dana"
        # Her conversation is archived as hers: found by her, not by the newcomer.
        assert any("4711" in h.content for h in await gw.storage.archive.search("locker", user_id="dana"))
        assert not await gw.storage.archive.search("locker", user_id=newcomer.id)
