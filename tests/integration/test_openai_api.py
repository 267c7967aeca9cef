"""The official openai SDK as a client of the gateway's OpenAI-compatible API."""

from __future__ import annotations

import openai
import pytest

from gateway.app import Gateway
from tests.conftest import ALICE_TOKEN
from tests.fakes.llm import Fail, FakeLLM, Reply


def client(gw: Gateway, token: str = ALICE_TOKEN) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key=token, max_retries=0, timeout=20)


async def test_models_lists_agents(gateway: Gateway) -> None:
    models = await client(gateway).models.list()
    assert {m.id for m in models.data} == {"default"}


async def test_completion_json(gateway: Gateway, fake_llm: FakeLLM) -> None:
    fake_llm.script(Reply("Paris."))
    resp = await client(gateway).chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Capital of France?"}]
    )
    assert resp.choices[0].message.content == "Paris."
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage is not None and resp.usage.total_tokens > 0
    sent = fake_llm.requests[-1]["messages"]
    assert sent[0]["role"] == "system" and sent[-1]["content"] == "Capital of France?"


async def test_completion_streaming(gateway: Gateway, fake_llm: FakeLLM) -> None:
    fake_llm.script(Reply("one two three four", chunks=4))
    stream = await client(gateway).chat.completions.create(
        model="default", messages=[{"role": "user", "content": "count"}], stream=True
    )
    pieces = []
    finish = None
    async for chunk in stream:
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
    assert "".join(pieces) == "one two three four"
    assert len([p for p in pieces if p]) >= 2
    assert finish == "stop"


async def test_user_field_keeps_the_session_on_the_gateway(gateway: Gateway, fake_llm: FakeLLM) -> None:
    c = client(gateway)
    await c.chat.completions.create(
        model="default", user="s1", messages=[{"role": "user", "content": "my name is Ada"}]
    )
    # The client resends everything; only the newest user message is new input.
    await c.chat.completions.create(
        model="default",
        user="s1",
        messages=[
            {"role": "user", "content": "ignored old turn"},
            {"role": "assistant", "content": "ignored old answer"},
            {"role": "user", "content": "what is my name?"},
        ],
    )
    contents = [m["content"] for m in fake_llm.requests[-1]["messages"][1:]]
    assert contents == ["my name is Ada", "echo: my name is Ada", "what is my name?"]


async def test_without_user_each_request_is_its_own_session(gateway: Gateway, fake_llm: FakeLLM) -> None:
    c = client(gateway)
    await c.chat.completions.create(model="default", messages=[{"role": "user", "content": "first"}])
    await c.chat.completions.create(
        model="default", messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "second"}]
    )
    contents = [m["content"] for m in fake_llm.requests[-1]["messages"]]
    assert "first" not in contents and contents[-2:] == ["be brief", "second"]


async def test_errors_are_openai_shaped(gateway: Gateway, fake_llm: FakeLLM) -> None:
    with pytest.raises(openai.AuthenticationError):
        await client(gateway, "not-a-valid-token-123").chat.completions.create(
            model="default", messages=[{"role": "user", "content": "x"}]
        )
    with pytest.raises(openai.NotFoundError) as nf:
        await client(gateway).chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert nf.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError):
        await client(gateway).chat.completions.create(model="default", messages=[])
    fake_llm.script(Fail(401, "bad key"), Fail(401, "bad key"))
    with pytest.raises(openai.APIStatusError) as upstream:
        await client(gateway).chat.completions.create(model="default", messages=[{"role": "user", "content": "x"}])
    assert upstream.value.status_code == 502
    assert "openai/fake-model" in str(upstream.value)
