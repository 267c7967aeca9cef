"""Table tests of channels.discord.commands: the gateway's commands as Discord application commands."""

from __future__ import annotations

import pytest

from channels.discord.commands import ack_text, command_definitions, valid_name

TEXT = {"type": 3, "name": "text", "description": "arguments", "required": False}


def test_each_command_is_a_global_slash_command_with_a_text_option() -> None:
    definitions, rejected = command_definitions((("help", "list commands"), ("link", "link  this\nchat")))
    assert rejected == []
    assert definitions == [
        {
            "name": "help",
            "type": 1,
            "description": "list commands",
            "options": [TEXT],
            "integration_types": [0],
            "contexts": [0, 1],
        },
        {
            "name": "link",
            "type": 1,
            "description": "link this chat",
            "options": [TEXT],
            "integration_types": [0],
            "contexts": [0, 1],
        },
    ]


def test_bad_names_are_left_out_and_descriptions_fitted() -> None:
    definitions, rejected = command_definitions(
        (("New", "x"), ("has space", "x"), ("a" * 33, "x"), ("", "x"), ("new", ""), ("new", "again"), ("ok", "d" * 150))
    )
    assert rejected == ["New", "has space", "a" * 33, ""]
    assert [(d["name"], d["description"]) for d in definitions] == [("new", "new"), ("ok", "d" * 99 + "…")]


@pytest.mark.parametrize("name", ["help", "set-model", "über", "x_1", "a" * 32, "it's"])
def test_valid_names(name: str) -> None:
    assert valid_name(name)


def test_ack_texts() -> None:
    assert ack_text("new", True, True) == "/new received."
    assert ack_text("new", True, False) == "/new cannot be used here."
    assert ack_text("weather", False, False) == "Unknown command"
    assert ack_text(None, False, False) == "Unknown command"
