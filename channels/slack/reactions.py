"""Reactions in Slack's form: Slack names its emoji (`eyes`), where the config gives an emoji (👀)."""

from __future__ import annotations

import re

# The emoji people are likely to choose for "working on it", by the name Slack knows them by.
_NAMES = {
    "👀": "eyes",
    "✅": "white_check_mark",
    "👍": "+1",
    "👌": "ok_hand",
    "⏳": "hourglass_flowing_sand",
    "⌛": "hourglass",
    "🤔": "thinking_face",
    "🔥": "fire",
    "🙏": "pray",
    "✍": "writing_hand",
    "💬": "speech_balloon",
    "🧠": "brain",
    "⚙": "gear",
    "🚀": "rocket",
    "🤖": "robot_face",
    "👋": "wave",
    "⭐": "star",
    "❤": "heart",
    "💭": "thought_balloon",
    "📝": "memo",
}
_NAME = re.compile(r"^:?([a-z0-9_+'-]+):?$")


def reaction_name(reaction: str) -> str | None:
    """Slack's name for a reaction given as an emoji or as a name (`eyes`, `:eyes:`); None if unknown."""
    found = _NAMES.get(reaction.replace("\ufe0f", ""))
    if found is not None:
        return found
    match = _NAME.match(reaction)
    return match.group(1) if match else None
