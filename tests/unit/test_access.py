from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from channels.telegram.config import TelegramChannelConfig
from gateway.core.events import Actor, ConversationKind, ConversationRef, MessageReceived
from gateway.turn.access import Verdict, audience, decide
from memory.store.links import LinkError
from memory.store.storage import Storage


def cfg(**kw: object) -> TelegramChannelConfig:
    return TelegramChannelConfig(token="123:abc", **kw)  # type: ignore[arg-type]


def ev(
    kind: ConversationKind, *, mention: bool = False, sender: str = "telegram:5", chat: str = "42"
) -> MessageReceived:
    return MessageReceived("e", ConversationRef("tg", chat, None, kind), Actor(sender), "hi", mentions_bot=mention)


def verdict(
    c: TelegramChannelConfig,
    e: MessageReceived,
    *,
    roles: tuple[str, ...] = ("user",),
    declared: bool = False,
    paired: bool = False,
    command: bool = False,
) -> Verdict:
    return decide(c, e, user_id="u5", roles=roles, declared=declared, paired=paired, is_command=command).verdict


DM, GROUP = ConversationKind.DM, ConversationKind.GROUP


@pytest.mark.parametrize(
    ("policy", "listed", "declared", "paired", "admin", "expected"),
    [
        (p, listed, declared, paired, admin, exp)
        for p, listed, declared, paired, admin in itertools.product(
            ["open", "allowlist", "pairing", "disabled"], [False, True], [False, True], [False, True], [False, True]
        )
        for exp in [
            Verdict.ALLOW
            if admin or p == "open" or (p != "disabled" and listed) or (p == "pairing" and (declared or paired))
            else Verdict.PAIR
            if p == "pairing"
            else Verdict.REFUSE
        ]
    ],
)
def test_dm_policy_matrix(
    policy: str, listed: bool, declared: bool, paired: bool, admin: bool, expected: Verdict
) -> None:
    c = cfg(dm_policy=policy, allow_from=["telegram:5"] if listed else [])
    roles = ("admin",) if admin else ("user",)
    assert verdict(c, ev(DM), roles=roles, declared=declared, paired=paired) == expected


@pytest.mark.parametrize(
    ("policy", "listed", "mention", "require", "command", "expected"),
    [
        (p, listed, mention, require, command, exp)
        for p, listed, mention, require, command in itertools.product(
            ["open", "allowlist", "disabled"], [False, True], [False, True], [False, True], [False, True]
        )
        for exp in [
            Verdict.IGNORE
            if p == "disabled" or (p == "allowlist" and not listed)
            else Verdict.OVERHEAR  # kept as group context, not answered
            if require and not mention and not command
            else Verdict.ALLOW
        ]
    ],
)
def test_group_policy_matrix(
    policy: str, listed: bool, mention: bool, require: bool, command: bool, expected: Verdict
) -> None:
    c = cfg(group_policy=policy, require_mention=require, allow_from=["chat:42"] if listed else [])
    assert verdict(c, ev(GROUP, mention=mention), command=command) == expected


def test_allow_from_matches_identity_user_or_chat() -> None:
    for entry in ("telegram:5", "u5", "chat:42"):
        assert verdict(cfg(dm_policy="allowlist", allow_from=[entry]), ev(DM)) == Verdict.ALLOW
    assert verdict(cfg(dm_policy="allowlist", allow_from=["telegram:6"]), ev(DM)) == Verdict.REFUSE


def test_audience_defaults_and_overrides() -> None:
    c = cfg(audience={"-100": "public"})
    assert audience(c, ConversationRef("tg", "1", None, DM)) == "personal"
    assert audience(c, ConversationRef("tg", "2", None, GROUP)) == "team"
    assert audience(c, ConversationRef("tg", "-100", None, GROUP)) == "public"
    assert audience(None, ConversationRef("web", "x", None, DM)) == "personal"


async def test_link_codes_are_single_use_and_expire(tmp_path: Path) -> None:
    storage = await Storage.open(f"sqlite:///{tmp_path}/l.db")
    try:
        alice = await storage.identities.resolve("telegram:1")
        code = await storage.links.create(alice.id, "telegram:1")
        with pytest.raises(LinkError, match="other account"):
            await storage.links.redeem(code, "telegram:1")
        assert await storage.links.redeem(code.lower(), "discord:9") == alice.id
        with pytest.raises(LinkError):
            await storage.links.redeem(code, "slack:T/U")
        with pytest.raises(LinkError):
            await storage.links.redeem("WRONGCODE", "slack:T/U")
        storage.identities.forget("discord:9", (alice.id,))
        assert (await storage.identities.resolve("discord:9")).id == alice.id
        assert set((await storage.identities.get_user(alice.id)).identities) == {"telegram:1", "discord:9"}  # type: ignore[union-attr]
    finally:
        await storage.close()


async def test_pairing_requests(tmp_path: Path) -> None:
    storage = await Storage.open(f"sqlite:///{tmp_path}/p.db")
    try:
        code = await storage.pairing.request("telegram:7", "tg", "Zoe")
        assert await storage.pairing.request("telegram:7", "tg", "Zoe") == code  # one code per person
        assert not await storage.pairing.is_approved("telegram:7")
        assert [p.identity for p in await storage.pairing.pending()] == ["telegram:7"]
        assert await storage.pairing.approve("nope", "root") is None
        approved = await storage.pairing.approve(code.lower(), "root")
        assert approved is not None and approved.identity == "telegram:7"
        assert await storage.pairing.is_approved("telegram:7")
        assert await storage.pairing.pending() == []
    finally:
        await storage.close()
