"""Who `--user USER_ID` names at the shell: a user config.yaml declares, or one the gateway met in chat,
with the roles the gateway gives them.

Resolved read-only, from the same list the gateway writes at start (Config.declared_users), so a user
declared in config.yaml is known on a data dir no gateway has opened yet. The CLI does not write that
list itself: the file it reads may be one the running gateway has not applied (an edit not reloaded
yet, or one a reload refused), and writing it would release identities and take roles back behind the
gateway's back, its cached lookups none the wiser. The gateway stays the one writer of users."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.config.model import Config
from memory.store.identities import PLAIN_ROLES, User

if TYPE_CHECKING:
    from memory.store.storage import Storage

FIND_USERS = (
    "user ids are the names under `users:` in config.yaml, what /whoami answers in chat, "
    "or the user= of the gateway's log lines"
)
NAMES_SHOWN = 20  # declared user ids listed in an error, at most


def declared_user(config: Config, user_id: str) -> User | None:
    """The user `config` declares under `user_id`, with the roles and identities it gives them."""
    for uid, roles, identities in config.declared_users():
        if uid == user_id:
            return User(uid, tuple(roles), tuple(identities))
    return None


async def resolve_user(config: Config, storage: Storage, user_id: str) -> User | None:
    """The user `user_id` names, as the gateway would see them after its start: declared in `config`
    (its roles win over the database's), else met in chat before (the database), else None. Writes
    nothing."""
    user_id = user_id.strip()
    declared = declared_user(config, user_id)
    if declared is not None:
        return declared
    stored = await storage.identities.get_user(user_id) if user_id else None
    if stored is None:
        return None
    # The config is the only source of roles: whom it does not declare, the gateway's start leaves
    # with the plain ones, whatever a database written under an older config says.
    return User(stored.id, tuple(PLAIN_ROLES), stored.identities)


def unknown_user(config: Config, user_id: str) -> str:
    """Why `user_id` names nobody, and how to find the ids that do."""
    given = user_id.strip()
    owners = [uid for uid, _, identities in config.declared_users() if given in identities]
    if owners:
        return f"no user {given!r}: that is an identity of {owners[0]}; use --user {owners[0]}"
    names = [uid for uid, _, _ in config.declared_users()]
    if not names:
        declared = "config.yaml declares no users"
    else:  # `users:`, and a loopback web channel's anonymous visitor
        more = f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else ""
        declared = "known from config.yaml: " + ", ".join(names[:NAMES_SHOWN]) + more
    met = "anyone else is a user once they have written to the assistant"
    return f"no user {given!r} ({declared}; {met}; {FIND_USERS})"
