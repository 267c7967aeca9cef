"""A conversation's turns run in the order its messages arrived, whatever their handlers wait for
on the way (the journal, identity, the model client loading), and after a crash as well."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.app import Gateway
from gateway.core.events import Actor, ConversationKind, ConversationRef, MessageReceived
from tests.conftest import make_config
from tests.fakes.llm import FakeLLM

USER = "alice"


def _event(conv: str, n: int) -> MessageReceived:
    return MessageReceived(
        event_id=f"web:{USER}:{conv}-{n}",
        ref=ConversationRef("web", USER, conv, ConversationKind.DM),
        sender=Actor(f"web:{USER}", USER),
        text=f"{conv} message {n}",
        mentions_bot=True,
        wants_stream=False,
    )


def _delayed(method: Callable[..., Awaitable[Any]], yields: dict[str, int], key: Callable[..., str]) -> Any:
    """`method`, which first gives way to other tasks as often as `yields` says for its call."""

    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        for _ in range(yields.get(key(*args, **kwargs), 0)):
            await asyncio.sleep(0)
        return await method(*args, **kwargs)

    return wrapper


def _asked(fake: FakeLLM, conv: str) -> list[str]:
    """The user messages of `conv` in the order the model was asked about them."""
    seen = []
    for request in fake.requests:
        last = [m["content"] for m in request["messages"] if m["role"] == "user"][-1]
        if last.startswith(f"{conv} message "):
            seen.append(last)
    return seen


async def _arrive_and_answer(order: list[str], before: list[int], journal: list[int], identity: list[int]) -> None:
    fake = await FakeLLM().start()
    with tempfile.TemporaryDirectory() as tmp:
        gw = Gateway(make_config(Path(tmp), fake, memory__enabled=False))
        await gw.start()
        try:
            assert gw.router is not None and gw.storage is not None
            counts: dict[str, int] = {}
            events = []
            for conv in order:
                events.append(_event(conv, counts.get(conv, 0)))
                counts[conv] = counts.get(conv, 0) + 1
            # Each arrival is held up on the way by a drawn number of turns of the event loop: in the
            # journal (before its turn may start) and when its sender's identity is looked up.
            store = gw.storage
            journal_yields = {ev.event_id: journal[i] for i, ev in enumerate(events)}
            store.journal.record = _delayed(store.journal.record, journal_yields, lambda event_id, *_: event_id)  # type: ignore[method-assign]
            lookups = iter(identity)
            original_resolve = store.identities.resolve

            async def resolve(*args: Any, **kwargs: Any) -> Any:
                for _ in range(next(lookups, 0)):
                    await asyncio.sleep(0)
                return await original_resolve(*args, **kwargs)

            store.identities.resolve = resolve  # type: ignore[method-assign]
            tasks = []
            for i, ev in enumerate(events):
                for _ in range(before[i]):
                    await asyncio.sleep(0)
                tasks.append(asyncio.create_task(gw.router.handle(ev)))  # as an adapter hands it over
            await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
            for conv, n in counts.items():
                expected = [f"{conv} message {k}" for k in range(n)]
                assert _asked(fake, conv) == expected
                history = await store.sessions.history(f"web:dm:{USER}:{conv}")
                assert [m.content for m in history if m.role == "user"] == expected
        finally:
            await gw.stop()
            await fake.stop()


@st.composite
def _arrivals(draw: st.DrawFn) -> tuple[list[str], list[int], list[int], list[int]]:
    convs = [f"c{i}" for i in range(draw(st.integers(1, 4)))]
    messages = [c for c in convs for _ in range(draw(st.integers(2, 4)))]
    order = draw(st.permutations(messages))  # the nth arrival of a conversation is its message n
    n = len(order)
    delays = st.lists(st.integers(0, 6), min_size=n, max_size=n)
    return list(order), draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), draw(delays), draw(delays)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_arrivals())
def test_a_conversation_s_turns_run_in_arrival_order_for_any_interleaving(
    arrivals: tuple[list[str], list[int], list[int], list[int]],
) -> None:
    asyncio.run(_arrive_and_answer(*arrivals))


async def test_turns_sent_while_the_model_client_loads_keep_their_order(
    tmp_path: Path, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    """The reported case: many conversations, four messages each, right after start, before the
    model client has finished loading; each conversation's socket sends its four in order."""
    gw = Gateway(make_config(tmp_path, fake_llm, memory__enabled=False))
    await gw.start()  # not waiting for gw.llm.ready(): the model client is still loading
    try:
        sockets = []
        for c in range(20):
            ws = await http.ws_connect(f"{gw.url}/ws", origin=gw.url)
            await ws.send_json({"type": "hello", "conversation": f"conv{c}"})
            assert (await ws.receive_json(timeout=10))["type"] == "ready"
            sockets.append(ws)
        for c, ws in enumerate(sockets):
            for n in range(4):
                await ws.send_json({"type": "message", "text": f"conv{c} message {n}", "id": f"{c}-{n}"})
        for ws in sockets:
            finals = 0
            while finals < 4:
                frame = await ws.receive_json(timeout=30)
                finals += frame.get("type") == "reply" and frame.get("final") is True
            await ws.close()
        for c in range(20):
            assert _asked(fake_llm, f"conv{c}") == [f"conv{c} message {n}" for n in range(4)]
    finally:
        await gw.stop()
