"""Whatever a person asks, recall answers or the gateway refuses clearly, never an error: a question
in any script, one that is only symbols, a 10,000-character one, and an empty one, through REST and
the OpenAI-compatible API, with the vector leg running (a deterministic embedder) and memories to
find. The model receives the person's words, and recall's block when it found something."""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import openai
import pytest

import gateway.app
from gateway.app import Gateway
from tests.conftest import ALICE_TOKEN, auth
from tests.fakes.embedder import ConceptEmbedder
from tests.fakes.llm import FakeLLM
from tests.prompts import recall_of

QUESTIONS = [
    "what is my favourite editor?",
    "¿cuál es mi editor favorito?",  # Spanish
    "какой у меня любимый редактор?",  # Cyrillic  # noqa: RUF001
    "ما هو محرري المفضل؟",  # Arabic, right to left
    "我最喜欢的编辑器是什么？",  # Chinese: no spaces between words  # noqa: RUF001
    "私のお気に入りのエディタは何ですか",  # Japanese
    "मेरा पसंदीदा संपादक कौन सा है?",  # Devanagari
    "🙂🙂 ✏️ ??",  # symbols only
    "Helix " * 1_666 + "Helix",  # 10,000 characters, one word over and over
    "editor helix vim emacs nano " * 357,  # about 10,000 characters of different words
    "what did I note last week about the editor, in March, before the move, yesterday?",
    "\u200b\u200bhelix\u200b",  # zero-width spaces around a word
]


@pytest.fixture
async def gw(gateway_factory: Any, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> Gateway:
    embedder = ConceptEmbedder(concepts={"helix": "editors", "editor": "editors", "vim": "editors"})
    monkeypatch.setattr(gateway.app, "embedder_from_config", lambda config: embedder)
    g: Gateway = await gateway_factory(
        fake_llm,
        memory__search__provider="local",
        memory__recall__min_cosine_similarity=0.2,
        memory__recall__evidence_min_score=0.0,
    )
    return g


async def test_a_question_in_any_script_or_of_any_length_is_answered(
    gw: Gateway, fake_llm: FakeLLM, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    url = gw.url + "/api/v1/messages"
    remember = {"text": "/remember my favourite editor is Helix", "conversation": "c"}
    r = await http.post(url, json=remember, headers=auth())
    assert r.status == 200
    assert gw.router is not None and gw.router.recall is not None
    await gw.router.recall.caught_up()
    for question in QUESTIONS:
        with caplog.at_level(logging.WARNING):
            r = await http.post(url, json={"text": question, "conversation": "c"}, headers=auth())
            assert r.status == 200, (question[:40], await r.text())
            assert (await r.json())["reply"] == f"echo: {question}"
        sent = fake_llm.requests[-1]["messages"][-1]["content"]
        assert sent.endswith(question)  # the person's words, whole, after recall's block if any
        errors = [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
        assert not errors, [rec.getMessage() for rec in errors]
    # The plain English question found the memory; it is recalled into that turn's prompt.
    r = await http.post(url, json={"text": QUESTIONS[0], "conversation": "c"}, headers=auth())
    assert "favourite editor is Helix" in recall_of(fake_llm.requests[-1])


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
async def test_an_empty_question_is_refused_clearly(gw: Gateway, http: aiohttp.ClientSession, text: str) -> None:
    r = await http.post(gw.url + "/api/v1/messages", json={"text": text, "conversation": "c"}, headers=auth())
    assert r.status == 400
    assert "non-empty" in (await r.json())["error"]


async def test_the_openai_api_answers_any_script_too(gw: Gateway, fake_llm: FakeLLM) -> None:
    client = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key=ALICE_TOKEN, max_retries=0)
    try:
        for question in [*QUESTIONS, " "]:
            done = await client.chat.completions.create(
                model="default", user="s1", messages=[{"role": "user", "content": question}]
            )
            assert done.choices[0].message.content == f"echo: {question}"
    finally:
        await client.close()
