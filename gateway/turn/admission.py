"""Whether an inbound message is answered (DESIGN §3), with what the policy needs from storage: the
pairing lookups, `/link CODE` from an account waiting for approval (commands/linking.py), and the group
messages nobody addressed to the assistant, kept as that group's context (group_context.py). The
policy itself is pure, in access.py."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from gateway.config.model import Config
from gateway.core.channel_config import ChatChannelConfig
from gateway.core.events import ConversationKind, MessageReceived
from gateway.core.logs import event
from gateway.core.metrics import Metrics
from gateway.core.ports import Adapter
from gateway.turn import access, group_context
from gateway.turn.commands.context import AttemptLimiter
from gateway.turn.commands.linking import Approval, link_unpaired
from memory.store.identities import User
from memory.store.storage import Storage

log = logging.getLogger("clawgate.router")

# Router._answer: reply to the event with a text, then finish it with a status.
Answer = Callable[[Adapter, MessageReceived, str, str], Awaitable[None]]


class Admission:
    def __init__(self, storage: Storage, metrics: Metrics, limiter: AttemptLimiter) -> None:
        self.storage = storage
        self.metrics = metrics
        self.limiter = limiter
        self.approval = Approval(storage.identities, storage.pairing)

    async def admit(
        self,
        config: Config,
        declared_identities: frozenset[str],
        ev: MessageReceived,
        adapter: Adapter,
        user: User,
        command: tuple[str, str] | None,
        answer: Answer,
    ) -> bool:
        """Access policy and size limits. False: the event was answered or ignored here, and finished.
        `command`: the command `ev` is, when addressed to the assistant (Router._command)."""
        cfg = config.channels.get(ev.ref.channel)
        if not isinstance(cfg, ChatChannelConfig):
            return True  # the web channel authenticates every request itself
        if ev.edited:
            event(log, "inbound_edit_ignored", channel=ev.ref.channel, event_id=ev.event_id)
            await self.storage.journal.finish(ev.event_id, "ignored")
            return False
        declared = ev.sender.identity in declared_identities
        # Only an undeclared DM sender under the pairing policy needs the (database) pairing lookup.
        needs_pairing = ev.ref.kind == ConversationKind.DM and cfg.dm_policy == "pairing" and not declared
        decision = access.decide(
            cfg,
            ev,
            user_id=user.id,
            roles=user.roles,
            declared=declared,
            paired=needs_pairing
            and await self.approval.account(ev.sender.identity, user, config.users, declared_identities),
            is_command=command is not None,
        )
        code = None
        why_not_linked = None
        if decision.verdict == access.Verdict.PAIR:
            if command is not None and command[0] == "link" and command[1]:
                linked, told = await link_unpaired(
                    command[1],
                    ev.sender.identity,
                    user,
                    ev.ref.channel,
                    links=self.storage.links,
                    identities=self.storage.identities,
                    approval=self.approval,
                    limiter=self.limiter,
                    declared_users=config.users,
                    declared=declared_identities,
                )
                event(log, "link_unpaired", channel=ev.ref.channel, event_id=ev.event_id, linked=linked)
                if linked:
                    await answer(adapter, ev, told, "done")
                    return False
                why_not_linked = told
            code = await self.storage.pairing.request(
                ev.sender.identity, ev.ref.channel, ev.sender.display_name, ev.ref.chat_id
            )
        elif decision.verdict == access.Verdict.OVERHEAR:
            await self._overhear(cfg, ev)
        refusal = access.refusal(decision, cfg, ev, code)
        if refusal is not None and why_not_linked is not None:
            refusal = f"{why_not_linked}\n\n{refusal}"
        if decision.verdict == access.Verdict.ALLOW and refusal is None:
            return True
        self.metrics.rejected.labels(ev.ref.channel, decision.reason if refusal is None else "refused").inc()
        event(
            log,
            "inbound_refused" if refusal else "inbound_ignored",
            channel=ev.ref.channel,
            event_id=ev.event_id,
            identity=ev.sender.identity,
            reason=decision.reason,
        )
        if refusal:
            await answer(adapter, ev, refusal, "ignored")
        else:
            await self.storage.journal.finish(ev.event_id, "ignored")
        return False

    async def _overhear(self, cfg: ChatChannelConfig, ev: MessageReceived) -> None:
        """Keep a group message nobody addressed to the assistant as that group's recent context. A
        failure costs only that context: logged, and the message is finished as ignored all the same."""
        try:
            await group_context.overhear(self.storage.groups, cfg, ev)
        except Exception as exc:
            event(log, "group_history_failed", logging.WARNING, channel=ev.ref.channel, error=type(exc).__name__)
