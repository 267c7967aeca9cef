"""Who may talk to the assistant where, what they are told when not, and what audience a
conversation is (DESIGN §3). Pure."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gateway.core.channel_config import Audience, ChatChannelConfig
from gateway.core.events import ConversationKind, ConversationRef, MessageReceived


class Verdict(enum.StrEnum):
    ALLOW = "allow"
    IGNORE = "ignore"  # say nothing (disabled groups, conversations not allowed)
    # Say nothing, but keep it as the group's recent context: a group message not addressed to the
    # assistant (gateway/turn/group_context.py).
    OVERHEAR = "overhear"
    REFUSE = "refuse"  # tell the sender why
    PAIR = "pair"  # unknown DM sender under the pairing policy: give them a code


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    reason: str


def _listed(cfg: ChatChannelConfig, ev: MessageReceived, user_id: str) -> bool:
    allowed = set(cfg.allow_from)
    return bool({ev.sender.identity, user_id, f"chat:{ev.ref.chat_id}"} & allowed)


def decide(
    cfg: ChatChannelConfig,
    ev: MessageReceived,
    *,
    user_id: str,
    roles: tuple[str, ...],
    declared: bool,
    paired: bool,
    is_command: bool,
) -> Decision:
    """`declared`: the operator named this identity in config. `paired`: an admin approved it."""
    is_admin = "admin" in roles
    if ev.ref.kind == ConversationKind.DM:
        policy = cfg.dm_policy
        if policy == "disabled":
            return Decision(Verdict.REFUSE if not is_admin else Verdict.ALLOW, "direct messages are disabled")
        if policy == "open" or is_admin or _listed(cfg, ev, user_id):
            return Decision(Verdict.ALLOW, "open" if policy == "open" else "listed")
        if policy == "allowlist":
            return Decision(Verdict.REFUSE, "sender not in allow_from")
        # pairing
        if declared or paired:
            return Decision(Verdict.ALLOW, "paired" if paired else "declared")
        return Decision(Verdict.PAIR, "unknown sender needs pairing")
    policy = cfg.group_policy
    if policy == "disabled":
        return Decision(Verdict.IGNORE, "groups are disabled")
    if policy == "allowlist" and not (is_admin or _listed(cfg, ev, user_id)):
        return Decision(Verdict.IGNORE, "conversation and sender not in allow_from")
    if cfg.require_mention and not ev.mentions_bot and not is_command:
        return Decision(Verdict.OVERHEAR, "not mentioned")
    return Decision(Verdict.ALLOW, policy)


def refusal(decision: Decision, cfg: ChatChannelConfig, ev: MessageReceived, pairing_code: str | None) -> str | None:
    """What to tell the sender: how to get paired, that they are not let in, or that their text is
    over the channel's limit. None: answer it (allowed and within limits), or say nothing."""
    if decision.verdict == Verdict.PAIR:
        code = pairing_code
        return (
            f"Hi! I don't know you yet. Your pairing code is {code}: ask an admin to approve it "
            f"(/pair approve {code}, or `clawgate pairing approve {code}`). I'll answer once you're approved."
        )
    if decision.verdict == Verdict.REFUSE:
        return "Sorry, I'm not available to you here."
    if decision.verdict != Verdict.ALLOW:
        return None
    if len(ev.text) > cfg.max_message_chars:
        return (
            f"That message is too long for me ({len(ev.text)} characters; the limit is "
            f"{cfg.max_message_chars}). Please shorten it or split it up."
        )
    # Attachments (their kinds, sizes and lengths) are judged with the message's turn, by one policy for
    # every channel, the web chat included (gateway/media, docs/media.md); a command ignores them.
    return None


def audience(cfg: ChatChannelConfig | None, ref: ConversationRef) -> Audience:
    if cfg is not None:
        override = cfg.audience.get(ref.chat_id)
        if override is not None:
            return override
    return "personal" if ref.kind == ConversationKind.DM else "team"
