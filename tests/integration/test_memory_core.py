"""The fake LLM sees the Memory.md core in the system prompt, after the instructions, capped."""

from __future__ import annotations

import aiohttp

from gateway.app import Gateway
from tests.conftest import BOB_TOKEN, auth
from tests.fakes.llm import FakeLLM


async def test_memory_md_reaches_the_model_after_the_instructions(
    gateway_factory, fake_llm: FakeLLM, http: aiohttp.ClientSession
) -> None:  # type: ignore[no-untyped-def]
    gw: Gateway = await gateway_factory(fake_llm, memory__bootstrap_max_chars=400)
    root = gw.config.storage.data_dir / "memory"
    (root / "users" / "alice").mkdir(parents=True)
    (root / "Memory.md").write_text("# Team\nDeploys happen on Tuesdays.\n" + "filler " * 200 + "\nEND OF CORE")
    (root / "users" / "alice" / "Memory.md").write_text("Alice prefers answers in German.")
    r = await http.post(gw.url + "/api/v1/messages", json={"text": "hi"}, headers=auth())
    assert r.status == 200
    system = fake_llm.requests[-1]["messages"][0]["content"]
    assert system.startswith("You are clawgate")
    assert "Deploys happen on Tuesdays." in system and "END OF CORE" in system
    assert "characters omitted" in system  # the shared core is over 400 characters: both ends kept
    assert "Alice prefers answers in German." in system
    # Bob gets the shared core, never Alice's.
    r = await http.post(gw.url + "/api/v1/messages", json={"text": "hi"}, headers=auth(BOB_TOKEN))
    assert r.status == 200
    system = fake_llm.requests[-1]["messages"][0]["content"]
    assert "Tuesdays" in system and "German" not in system
