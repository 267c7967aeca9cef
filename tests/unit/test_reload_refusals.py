"""What a reload must not take away unless forced (gateway/reload.py `refusals`, `empty_document`):
table tests over real configs."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gateway.config.load import parse_config
from gateway.config.model import Config
from gateway.reload import empty_document, refusals
from tests.conftest import ALICE_TOKEN, BOB_TOKEN

CAROL_TOKEN = "carol-token-0123456789"

RUNNING: dict[str, Any] = {
    "ai": {"model": "openai/a", "api_key": "sk-test-000000000000000000"},
    "agents": {"list": [{"name": "default"}, {"name": "coder", "model": "openai/code"}]},
    "users": {"alice": {"tokens": [ALICE_TOKEN]}, "bob": {"tokens": [BOB_TOKEN]}, "dana": {"identities": ["x:1"]}},
}


def config(change: Any = None, base: dict[str, Any] = RUNNING) -> Config:
    data = copy.deepcopy(base)
    if change is not None:
        change(data)
    return parse_config(data, "test", env={})


def no_tokens(data: dict[str, Any]) -> None:
    for user in data["users"].values():
        user.pop("tokens", None)


def rotate(data: dict[str, Any]) -> None:
    data["users"].pop("alice")
    data["users"]["bob"]["tokens"] = [CAROL_TOKEN]


@pytest.mark.parametrize(
    ("change", "codes"),
    [
        (None, []),
        (lambda d: d["ai"].update(model="openai/b"), []),
        (rotate, []),  # users and tokens change, some remain
        (lambda d: d["users"].pop("dana"), []),
        (lambda d: d.pop("users"), ["no_users", "no_tokens"]),
        (no_tokens, ["no_tokens"]),
        (lambda d: d["ai"].pop("model"), ["no_model"]),
        (lambda d: d["ai"].update(model=None, fallback=["openai/f"]), ["no_model"]),  # ai.model itself went
        (lambda d: d["agents"]["list"][1].pop("model"), []),  # coder falls back to ai.model
        (lambda d: d["agents"]["list"].pop(1), []),  # an agent taken out has no model to lose
    ],
)
def test_what_a_new_file_must_keep(change: Any, codes: list[str]) -> None:
    assert [r.code for r in refusals(config(), config(change), empty=False)] == codes


def test_the_words_say_what_went_and_count_what_was_there() -> None:
    found = refusals(config(), config(lambda d: d.pop("users")), empty=False)
    assert [r.words for r in found] == [
        "it declares no users (the running config has 3)",
        "no user has a token any more (the running config has 2)",
    ]
    assert ALICE_TOKEN not in repr(found) and BOB_TOKEN not in repr(found)


def test_an_agent_that_loses_its_only_model_is_named() -> None:
    running = config(lambda d: d["ai"].pop("model"))  # only coder has a model (its own)
    assert [r.code for r in refusals(running, running, empty=False)] == []
    none = config(lambda d: (d["ai"].pop("model"), d["agents"]["list"][1].pop("model")))
    found = refusals(running, none, empty=False)
    assert [(r.code, r.words) for r in found] == [("no_model", "agent coder would have no model")]
    # Its fallback is a model too.
    keeps = config(lambda d: (d["ai"].pop("model"), d["agents"]["list"][1].update(model=None, fallback=["openai/f"])))
    assert refusals(running, keeps, empty=False) == []


def test_the_first_agent_answers_by_default_whatever_its_name() -> None:
    running = config(lambda d: d["agents"]["list"][0].update(model="openai/own"))
    renamed = config(lambda d: (d["ai"].pop("model"), d["agents"].update(list=[{"name": "fresh"}])))
    found = refusals(running, renamed, empty=False)
    assert [r.words for r in found] == ["ai.model is gone; agent fresh would have no model"]


def test_an_empty_document_is_refused_for_that_alone() -> None:
    found = refusals(config(), config(lambda d: d.clear()), empty=True)
    assert [(r.code, r.words) for r in found] == [
        ("empty_document", "the file is empty (nothing but comments, {} or null)")
    ]


@pytest.mark.parametrize(
    ("data", "empty"),
    [
        (b"", True),
        (b"\n  \n", True),
        (b"# emptied\n# by a script\n", True),
        (b"{}\n", True),
        (b"null\n", True),
        (b"---\n", True),
        (b"ai: {}\n", False),
        (b"users:\n", False),  # a key, even without a value, is something
        (b"ai: [unclosed\n", False),  # not YAML: the loader says so
        (b"\xff\xfe", False),
    ],
)
def test_empty_document(data: bytes, empty: bool) -> None:
    assert empty_document(data) is empty
