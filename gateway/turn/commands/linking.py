"""Linking under the pairing policy (docs/channels.md, "Linking and pairing"): an account nobody has
approved yet may join an approved person with a link code that person made, and needs no pairing
code then. Nothing else gets past pairing this way:

- only `/link CODE` (no other command, no other text) is looked at, only in a direct conversation;
- the code must be valid (unknown, used and expired codes fail as ever) and made by an approved
  person: someone the config declares, an admin, or someone with an approved or declared account;
  a code made by an account that is itself waiting for approval is refused before it is used;
- attempts are rate-limited per account and, for accounts nobody approved, per channel as well,
  so many fresh accounts cannot share the guessing;
- whatever fails is answered with why, and the pairing code as before.
"""

from __future__ import annotations

from collections.abc import Collection

from gateway.turn.commands.context import AttemptLimiter
from memory.store.identities import IdentityStore, User
from memory.store.links import LinkError, LinkStore, PairingStore

# Link attempts by accounts nobody approved, per channel, in the limiter's window (10 minutes).
UNAPPROVED_ATTEMPTS = 20


class Approval:
    """Who counts as approved under the pairing policy: a person, through any of their accounts."""

    def __init__(self, identities: IdentityStore, pairing: PairingStore) -> None:
        self.identities = identities
        self.pairing = pairing

    async def person(self, user: User, declared_users: Collection[str], declared: Collection[str]) -> bool:
        """Whether `user` is approved: declared in the config (as a user or through an account), an
        admin, or the owner of an account an admin approved."""
        if user.id in declared_users or user.has_role("admin"):
            return True
        fresh = await self.identities.get_user(user.id) or user
        for identity in fresh.identities:
            if identity in declared or await self.pairing.is_approved(identity):
                return True
        return False

    async def account(
        self, identity: str, user: User, declared_users: Collection[str], declared: Collection[str]
    ) -> bool:
        """Whether messages from `identity` (which belongs to `user`) pass the pairing policy."""
        if identity in declared or await self.pairing.is_approved(identity):
            return True
        return await self.person(user, declared_users, declared)


async def link_unpaired(
    code: str,
    identity: str,
    user: User,
    channel: str,
    *,
    links: LinkStore,
    identities: IdentityStore,
    approval: Approval,
    limiter: AttemptLimiter,
    declared_users: Collection[str],
    declared: Collection[str],
) -> tuple[bool, str]:
    """Join the unapproved account `identity` (so far `user`'s, the person made for it at first
    contact) to the approved person who made `code`: (linked, what to tell the sender). Nothing is
    changed unless it is linked."""
    if not limiter.allow(f"link:{identity}") or not limiter.allow(f"link-unapproved:{channel}", UNAPPROVED_ATTEMPTS):
        return False, "Too many link attempts. Wait a few minutes and try again."
    owner_id = await links.owner(code)
    owner = await identities.get_user(owner_id) if owner_id is not None else None
    if owner is None:
        return False, "Could not link: that code is unknown, already used or expired."
    if not await approval.person(owner, declared_users, declared):
        return False, "Could not link: that code belongs to an account that is not approved yet."
    try:
        joined = await links.redeem(code, identity)
    except LinkError as exc:
        return False, f"Could not link: {exc}."
    identities.forget(identity, (user.id, joined))
    return True, f"Linked: {identity} now belongs to user {joined}. /whoami lists all your accounts."
