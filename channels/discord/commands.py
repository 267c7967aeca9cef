"""The gateway's chat commands as Discord application (slash) commands. Pure: no network.

Each command takes one optional free-text option, "text", so "/link CODE" works; the interaction
comes back as the message "/link CODE" (see normalize.normalize_command).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

CHAT_INPUT = 1  # application command type: a slash command
STRING = 3  # option type
TEXT_OPTION = "text"
MAX_NAME = 32
MAX_DESCRIPTION = 100
GUILD_INSTALL = 0
# Interaction contexts: guild channels and DMs with the bot, the places send() can reach. Group DMs
# (2) only occur for user-installed apps, where the bot is not a member and could not answer.
CONTEXTS = (0, 1)


def valid_name(name: str) -> bool:
    """Discord's rule for chat-input names: 1-32 lowercase letters/digits of any script, '-', '_' or "'"."""
    return 0 < len(name) <= MAX_NAME and name == name.lower() and all(c.isalnum() or c in "-_'" for c in name)


def command_definitions(commands: Iterable[tuple[str, str]]) -> tuple[list[dict[str, Any]], list[str]]:
    """(definitions for PUT /applications/{id}/commands, names Discord would refuse).

    Discord refuses the whole bulk overwrite for one bad name, so bad names are left out here and
    reported instead; duplicates keep their first summary.
    """
    definitions: dict[str, dict[str, Any]] = {}
    rejected: list[str] = []
    for name, summary in commands:
        if not valid_name(name):
            rejected.append(name)
        elif name not in definitions:
            definitions[name] = _definition(name, summary)
    return list(definitions.values()), rejected


def _definition(name: str, summary: str) -> dict[str, Any]:
    return {
        "name": name,
        "type": CHAT_INPUT,
        "description": _description(summary or name),
        "options": [{"type": STRING, "name": TEXT_OPTION, "description": "arguments", "required": False}],
        "integration_types": [GUILD_INSTALL],
        "contexts": list(CONTEXTS),
    }


def _description(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_DESCRIPTION else text[: MAX_DESCRIPTION - 1] + "…"


def ack_text(name: str | None, known: bool, delivered: bool) -> str:
    """The ephemeral answer Discord needs within 3 s; the real reply follows as a channel message."""
    if not known or name is None:
        return "Unknown command"
    return f"/{name} received." if delivered else f"/{name} cannot be used here."
