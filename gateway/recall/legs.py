"""The legs of a turn's recall for one person in one conversation: full text over records, archived
messages and daily notes, the vector index, the threads around a hit, and loading what was found,
every one behind the read policy (DESIGN §7). memory.recall fuses what they return; TurnRecall
(gateway/recall/engine.py) builds them for each turn.

Recall never re-injects what the conversation's own summary covers (DESIGN §12): the messages its
open session archived into that summary (reason `summarized`) are no candidates there, by every leg.
They stay in the archive for the memory tools and for the person's other conversations, and what
was trimmed without a summary, flushed or cleared by a reset is still recalled."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import bindparam, select
from sqlalchemy.engine import Connection

from gateway.core.events import utcnow
from gateway.session.memory_service import MemoryService
from memory.archive.daily_index import DailyIndex
from memory.archive.daily_index import search_in as daily_search
from memory.archive.daily_index import threads_in as daily_threads
from memory.archive.daily_index import visible_in as daily_visible
from memory.archive.fulltext import query_terms
from memory.archive.search import search_in as archive_search
from memory.archive.store import threads_in as archive_threads
from memory.archive.store import visible_in as archive_visible
from memory.embed.index import DatabaseIndex, VectorIndex
from memory.embed.pgvector import Reach
from memory.recall import Candidate, Key
from memory.records.dated import created_in as records_created_in
from memory.records.model import MemoryRecord, ScopeKind
from memory.records.reads import get_many_in as load_records
from memory.records.search import search_in as records_search
from memory.store.schema import archived_messages, sessions
from memory.store.storage import Storage
from memory.trust import policy
from memory.trust.policy import Actor, Where, archive_scope

KINDS = ("record", "archive", "daily")
PROJECT = ScopeKind.PROJECT.value + ":"  # the prefix of every project scope

# Which of some archived messages the open session of a conversation folded into its summary.
_SUMMARIZED = select(archived_messages.c.id).where(
    archived_messages.c.id.in_(bindparam("ids", expanding=True)),
    archived_messages.c.reason == "summarized",
    archived_messages.c.session_id.in_(
        select(sessions.c.id).where(sessions.c.key == bindparam("key"), sessions.c.ended_at.is_(None))
    ),
)


def summarized(conn: Connection, key: str | None, ids: Collection[int]) -> set[int]:
    """The messages among `ids` that the open session of `key` archived into its summary."""
    if key is None or not ids:
        return set()
    return set(conn.execute(_SUMMARIZED, {"ids": list(ids), "key": key}).scalars())


def _uncovered(conn: Connection, key: str | None, hits: Sequence[Any]) -> list[Any]:
    """`hits` (archived messages, or neighbours, with `id` and `session_key`) but those the
    conversation's own summary covers. Only a hit of the conversation itself costs a query."""
    own = [h.id for h in hits if h.session_key == key]
    covered = summarized(conn, key, own) if own else set()
    return [h for h in hits if h.id not in covered] if covered else list(hits)


class Sources(Protocol):
    """What the legs read of a turn's recall (gateway.recall.engine.TurnRecall)."""

    memory: MemoryService
    daily: DailyIndex | None
    storage: Storage
    index: VectorIndex | DatabaseIndex | None
    filled: set[str]  # the searchable tables found holding rows (see filled_tables)

    def groups(
        self,
        scopes: Sequence[str],
        daily_scopes: Sequence[str],
        include_projects: bool,
        archive_user: str | None,
        archive_keys: Sequence[str],
    ) -> set[str]: ...


class Legs:
    """The retriever's callables for one person in one conversation, every one behind the policy."""

    def __init__(
        self, recall: Sources, actor: Actor, where: Where, names: Mapping[str, str], kinds: Collection[str] = KINDS
    ) -> None:
        self.r = recall
        self.actor = actor
        self.where = where
        self.names = names  # identity → display name: a message's author as a question names them
        visible = recall.memory.visible(actor, where)
        self.scopes = [str(s) for s in visible.scopes]
        self.include_projects = visible.include_projects
        self.archive_user, self.archive_keys = archive_scope(
            actor.user_id or "", where.conversation or "", where.audience
        )
        if not where.conversation:
            self.archive_keys = []
        if "archive" not in kinds:
            self.archive_user, self.archive_keys = None, []
        self.daily_scopes = [s for s in self.scopes if not s.startswith(PROJECT)]
        if "daily" not in kinds or recall.daily is None:
            self.daily_scopes = []
        if "record" not in kinds:
            self.scopes, self.include_projects = [], False
        self.records: dict[str, MemoryRecord] = {}  # record id → record, for the section labels
        self.refused: dict[str, str] = {}  # record id → why policy.can_read turned it away
        self.cache: dict[Key, Candidate] = {}

    def _readable(self, record: MemoryRecord, now: datetime) -> bool:
        decision = policy.can_read(self.actor, record, self.where, now)
        if not decision:
            self.refused[record.id] = decision.reason
        return bool(decision)

    def _record_candidate(self, record: MemoryRecord) -> Candidate:
        self.records[record.id] = record
        return Candidate.of_record(record)

    def _archive_candidate(self, h: Any) -> Candidate:
        speaker = self.names.get(h.author, h.author) if h.author else None
        return Candidate("archive", str(h.id), h.content, h.session_key, h.created_at, speaker=speaker, author=h.author)

    @staticmethod
    def _daily_candidate(h: Any) -> Candidate:
        day = datetime.fromisoformat(h.day).replace(tzinfo=UTC)
        return Candidate("daily", str(h.id), h.content, h.scope, day)

    async def lexical(self, query: str, limit: int) -> Sequence[tuple[Candidate, float]]:
        terms = query_terms(query)
        if not terms:
            return []
        now = utcnow()
        records, archived, chunks = await self.r.storage.db.read(self._search_all, terms, limit, now)
        hits: list[tuple[Candidate, float]] = []
        for record, score in records:
            if self._readable(record, now):
                hits.append((self._record_candidate(record), score))
        hits += [(self._archive_candidate(h), h.score) for h in archived]
        hits += [(self._daily_candidate(c), c.score) for c in chunks]
        for candidate, _ in hits:
            self.cache[candidate.key] = candidate
        hits.sort(key=lambda pair: -pair[1])
        return hits

    def _search_all(self, conn: Connection, terms: list[str], limit: int, now: datetime) -> tuple[Any, Any, Any]:
        """The three full-text legs in one transaction: one hop to the database thread, not three.
        A leg whose table is empty is skipped (building its query costs more than asking)."""
        asked = {
            "memory_records": bool(self.scopes or self.include_projects),
            "archived_messages": self.archive_user is not None or bool(self.archive_keys),
            "daily_chunks": bool(self.daily_scopes),
        }
        filled = filled_tables(conn, [table for table, wanted in asked.items() if wanted], self.r.filled)
        records = []
        if "memory_records" in filled:
            records = records_search(conn, terms, self.scopes, self.include_projects, limit, now)
        archived = []
        if "archived_messages" in filled:
            archived = archive_search(conn, terms, self.archive_user, self.archive_keys, limit, snippets=False)
            archived = _uncovered(conn, self.where.conversation, archived)
        chunks = []
        if "daily_chunks" in filled:
            chunks = daily_search(conn, terms, self.daily_scopes, limit)
        return records, archived, chunks

    async def vector(self, qvec: Any, limit: int, only: Collection[Key] | None) -> Sequence[tuple[Key, float]]:
        index = self.r.index
        if index is None:
            return []
        if only is not None:  # lexical hits and neighbours: already this person's
            if isinstance(index, DatabaseIndex):
                scored = await index.scores(qvec, only)
            else:
                scored = index.search(qvec, len(only), set(only))
            return [((kind, item_id), cos) for kind, item_id, cos in scored]
        # Only what this person may see is ranked (in memory: the groups they may see; in the
        # database: the lexical legs' rules, in the same statement); the loader then applies the full
        # policy (status, expiry, review), which can still turn a few away: ask for more until enough pass.
        nearest: Callable[[int], Awaitable[Sequence[tuple[str, str, float]]]]
        if isinstance(index, DatabaseIndex):
            reach = Reach(
                tuple(self.scopes),
                self.include_projects,
                self.archive_user,
                tuple(self.archive_keys),
                tuple(self.daily_scopes),
            )

            async def nearest(want: int) -> Sequence[tuple[str, str, float]]:
                return await index.search(qvec, want, reach)

        else:
            groups = self.r.groups(
                self.scopes, self.daily_scopes, self.include_projects, self.archive_user, self.archive_keys
            )

            async def nearest(want: int) -> Sequence[tuple[str, str, float]]:
                return index.search(qvec, want, groups=groups)

        want = limit + max(8, limit // 4)  # the ranking holds only what is theirs already: a small margin
        while True:
            raw = await nearest(want)
            seen = await self.load([(kind, item_id) for kind, item_id, _ in raw])
            found = [((kind, item_id), cos) for kind, item_id, cos in raw if (kind, item_id) in seen]
            if len(found) >= limit or len(raw) < want:
                return found[:limit]
            want *= 4

    async def dated(self, start: datetime | None, end: datetime, limit: int) -> Sequence[Key]:
        """Records this person may see created in [start, end), newest first (a window the question
        names); the loader applies the full read policy to them, as to every candidate."""
        if not (self.scopes or self.include_projects):
            return []
        read = self.r.storage.db.read
        ids = await read(records_created_in, self.scopes, self.include_projects, start, end, limit, utcnow())
        return [("record", i) for i in ids]

    async def neighbours(self, keys: Sequence[Key], reach: int) -> Mapping[Key, Sequence[Key]]:
        """Archived messages and daily chunks next to these along their thread, up to `reach`
        steps (a record stands alone), with the new ones loaded: one transaction."""
        if not any(kind in ("archive", "daily") for kind, _ in keys):
            return {}
        adjacent, found = await self.r.storage.db.read(self._threads, keys, reach)
        for c in found:
            self.cache.setdefault(c.key, c)
        return adjacent

    def _threads(
        self, conn: Connection, keys: Sequence[Key], reach: int
    ) -> tuple[dict[Key, list[Key]], list[Candidate]]:
        """Each key's thread (its neighbours this person may see, in order) as adjacency, and the
        neighbours as candidates."""
        threads: dict[Key, dict[Key, Any]] = {}  # hit → its thread's items → their order in it
        found: list[Candidate] = []
        messages = [int(i) for kind, i in keys if kind == "archive" and i.isdigit()]
        if messages and (self.archive_user is not None or self.archive_keys):
            around = archive_threads(conn, messages, reach, self.archive_user, self.archive_keys)
            for n in _uncovered(conn, self.where.conversation, around):
                hit = ("archive", str(n.hit))
                threads.setdefault(hit, {hit: n.hit})[("archive", str(n.id))] = n.id
                found.append(self._archive_candidate(n))
        chunks = [int(i) for kind, i in keys if kind == "daily" and i.isdigit()]
        if chunks and self.daily_scopes:
            for c in daily_threads(conn, chunks, reach, self.daily_scopes):
                threads.setdefault(("daily", str(c.hit)), {})[("daily", str(c.id))] = c.chunk_no
                found.append(self._daily_candidate(c))
        adjacent: dict[Key, list[Key]] = {}
        for thread in threads.values():
            chain = sorted(thread, key=thread.__getitem__)
            for before, after in itertools.pairwise(chain):
                adjacent.setdefault(before, []).append(after)
                adjacent.setdefault(after, []).append(before)
        return adjacent, found

    async def load(self, keys: Sequence[Key]) -> Mapping[Key, Candidate]:
        out = {k: self.cache[k] for k in keys if k in self.cache}
        todo: dict[str, list[str]] = {}
        for kind, item_id in keys:
            if (kind, item_id) not in out:
                todo.setdefault(kind, []).append(item_id)
        if not todo:
            return out
        records, archived, chunks = await self.r.storage.db.read(self._load_sync, todo)
        now = utcnow()
        found = [
            *(self._record_candidate(r) for r in records if self._readable(r, now)),
            *map(self._archive_candidate, archived),
            *map(self._daily_candidate, chunks),
        ]
        for c in found:
            out[c.key] = self.cache[c.key] = c
        return out

    def _load_sync(self, conn: Connection, todo: Mapping[str, Sequence[str]]) -> tuple[Any, Any, Any]:
        """The items of `todo` (kind → ids) this person may see, in one transaction (the records'
        read policy is applied by the caller, with the rest of the record in hand)."""
        records = [r for r in load_records(conn, todo.get("record", ()), False) if self._in_scope(str(r.scope))]
        messages = [int(i) for i in todo.get("archive", ()) if i.isdigit()]
        archived = []
        if messages and (self.archive_user is not None or self.archive_keys):
            archived = archive_visible(conn, messages, self.archive_user, self.archive_keys, snippets=False)
            archived = _uncovered(conn, self.where.conversation, archived)
        chunks = [int(i) for i in todo.get("daily", ()) if i.isdigit()]
        found = daily_visible(conn, chunks, self.daily_scopes) if chunks and self.daily_scopes else []
        return records, archived, found

    def _in_scope(self, scope: str) -> bool:
        return scope in self.scopes or (self.include_projects and scope.startswith(PROJECT))


def filled_tables(conn: Connection, tables: Sequence[str], known: set[str]) -> set[str]:
    """Which of `tables` hold a row. `known` (kept by the caller across turns) holds the tables
    found filled before: a table rarely empties again, and searching an empty one is only a little
    wasted work, so those are not asked again; the rest are asked in one statement."""
    unknown = [t for t in tables if t not in known]
    if unknown:
        found = conn.exec_driver_sql("SELECT " + ", ".join(f"EXISTS (SELECT 1 FROM {t})" for t in unknown)).one()
        known.update(t for t, filled in zip(unknown, found, strict=True) if filled)
    return {t for t in tables if t in known}
