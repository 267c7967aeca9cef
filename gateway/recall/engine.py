"""Recall for a turn (DESIGN §7): long-term records, archived messages and daily notes that the
person may see, found by full text and (when embeddings are on) by vectors, fused by memory.recall
and handed to the prompt as sections under the memory budget. Once per turn, before the model runs;
the tool loop reuses the same system prompt. Many turns recall nothing: that is normal.

Embeddings never run on the reply path except for the query: a background upkeep embeds what is
new (records, archive, daily chunks) in batches, and re-embeds everything for a new model id. The
vector leg searches an in-memory index of every stored vector on SQLite, and the database itself
(pgvector's HNSW, memory.embed.index.DatabaseIndex) on PostgreSQL: chosen by the database URL.
Every degradation is explicit and logged once per cooldown: no embedder yet or a slow query
embedding (memory_recall_vector_degraded), items without a vector (memory_recall_coverage_gap), a
model without a calibrated floor (memory_recall_missing_calibration), a relevance gate that is
loading, failed to load or was too slow (memory_recall_gate_degraded, gateway/recall/gate.py)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gateway.config.model import Config
from gateway.core.events import utcnow
from gateway.core.logs import event
from gateway.recall import prompt as recall_prompt
from gateway.recall.gate import RelevanceGate
from gateway.recall.legs import KINDS, PROJECT, Legs
from gateway.recall.select import (
    TurnPolicy,
    confirmed_first,
    conflicts,
    fused_strength,
    lexical_strength,
    settle_conflicts,
)
from gateway.session.memory_service import Found, MemoryService
from gateway.turn.context import Section
from gateway.turn.engine import NOTICE_AUTHOR
from memory.archive.daily_index import DailyIndex
from memory.changes import newer_first
from memory.embed.embeddings import Embedder, make_embedder, model_info
from memory.embed.errors import MissingPackage
from memory.embed.index import DatabaseIndex, VectorIndex
from memory.embed.pgvector import searched_in_database
from memory.embed.providers import litellm_route, resolve_credentials
from memory.embed.vectors import VectorStore, text_hash
from memory.recall import (
    Cooldown,
    Key,
    Names,
    Recall,
    RecallSettings,
    Retriever,
    Scored,
    describe,
    resolve_evidence_floor,
    selection,
)
from memory.records.model import MemoryRecord
from memory.rerank import GateVerdict, merge_decisions
from memory.store.storage import Storage
from memory.trust.policy import Actor, Where

log = logging.getLogger("clawgate.recall")

UPKEEP_BATCH = 64
# A sweep for items without a vector reads every searchable item (~0.35 s at 100k records), so it
# runs when something was written (wake) and otherwise once an hour, never in a tight idle loop.
UPKEEP_IDLE_SECONDS = 3600.0
UPKEEP_DEBOUNCE_SECONDS = 1.0
# Who a query may name (identities' display names) is read again at most this often.
NAMES_TTL_SECONDS = 60.0


def settings_from(config: Config) -> RecallSettings:
    rc = config.memory.recall
    return RecallSettings(
        vector_weight=rc.vector_weight,
        lexical_weight=rc.lexical_weight,
        recency_half_life_days=rc.recency_half_life_days,
        min_cosine=rc.min_cosine_similarity,
        max_chars=rc.max_chars,
        k=rc.limit,
        query_timeout_ms=rc.query_embedding_budget_ms,
        evidence_min_score=rc.evidence_min_score,
    )


def _label(kind: str, place: str) -> str:
    """The index group of an item of `kind` that lives at `place` (a record's or daily chunk's
    scope, an archived message's session key): who may see it."""
    return f"{kind}|{place}"


def embedder_from_config(config: Config) -> Embedder | None:
    """The embedder memory.search configures; None for keyword search only. Cheap: the model is
    loaded by its first use or `load()`, never here. ValueError for a model the provider cannot run.

    A remote provider's key and address are memory.search's own, else `ai:`'s when the chat model is
    of the same provider (memory.embed.providers.resolve_credentials); which setting each came from
    is logged (`embedding_provider`), the key never. A key still missing is found out, logged with
    its fix and degraded to keyword search by the embedder's `load()`."""
    search = config.memory.search
    if search.provider in (None, "", "local"):
        return make_embedder(
            search.provider, search.model, threads=search.threads, runtime=search.runtime, precision=search.precision
        )
    route = litellm_route(search.provider, search.model)
    ai = config.ai
    found = resolve_credentials(
        route,
        api_base=search.api_base,
        api_key=search.api_key.get_secret_value() if search.api_key else None,
        ai_model=ai.model,
        ai_api_base=ai.api_base,
        ai_api_key=ai.api_key.get_secret_value() if ai.api_key else None,
        gemini_api_key=ai.gemini.api_key.get_secret_value() if ai.gemini.api_key else None,
    )
    event(
        log,
        "embedding_provider",
        model=route,
        key_from=found.key_from or "environment",
        address_from=found.base_from or "provider default",
    )
    return make_embedder(
        search.provider,
        route,
        api_base=found.api_base,
        api_key=found.api_key,
        key_from=found.key_from,
        base_from=found.base_from,
    )


class TurnRecall:
    def __init__(
        self,
        config: Config,
        storage: Storage,
        memory: MemoryService,
        daily: DailyIndex | None,
        embedder: Embedder | None,
        secrets: Sequence[str] = (),
    ) -> None:
        self.config = config
        self.secrets = secrets  # the gateway's configured secret values (a reload extends the list)
        self._screened: dict[Key, str | None] = {}  # archived messages' and notes' screen results
        self.storage = storage
        self.memory = memory
        self.daily = daily
        self.embedder = embedder
        self.settings = settings_from(config)
        self.vectors = VectorStore(storage.db)
        # Set once the embedder is loaded: on SQLite an in-memory index of every stored vector of its
        # model; on PostgreSQL the database's own (pgvector), nothing loaded.
        self.index: VectorIndex | DatabaseIndex | None = None
        # Who may see an indexed item is its group (see _group); archived messages are visible by
        # session key, or to the session's owner in their DMs: owner -> their session keys.
        self._sessions_of: dict[str, set[str]] = {}
        self._project_groups: set[str] = set()
        self._groups_checked = utcnow()
        self._wake = asyncio.Event()
        # The kinds of item written since the upkeep last looked (wake): only those are scanned. A
        # turn archives messages, and scanning the records and the notes after each cost more than
        # embedding what was new.
        self._dirty: set[str] = set(KINDS)
        self._loaded = asyncio.Event()  # the index is loaded, or loading failed
        self._sweeping = asyncio.Lock()
        self._cursor: dict[str, str | None] = {}  # per kind: the last item embedded in this pass
        self._task: asyncio.Task[None] | None = None
        self._cooldown = Cooldown()  # each degradation logged once per cooldown, per gateway
        # The cross-encoder second stage (memory.recall.relevance_gate); loads at start(), or at the first turn.
        self.gate = RelevanceGate(config.memory.recall.relevance_gate, self._cooldown)
        self._names: dict[str, str] = {}  # identity → display name (see speakers())
        self._named = Names()  # the same display names, indexed for a query (built once a refresh)
        self._names_read = -math.inf
        self.filled: set[str] = set()  # the searchable tables found holding rows (see legs.filled_tables)

    def use_config(self, config: Config) -> None:
        """Settings from a config reload (memory.recall); the embedder stays until a restart."""
        self.config = config
        self.settings = settings_from(config)
        self.gate.configure(config.memory.recall.relevance_gate)  # another model loads anew

    # -- background: the embedder, the index, and embedding what is new ----------------------------

    def start(self) -> None:
        self.gate.start()  # loads its model on a thread of its own: turns go ungated meanwhile
        if self.embedder is not None and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._upkeep())

    async def stop(self) -> None:
        self.gate.stop()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def wake(self, *kinds: str) -> None:
        """Something searchable was written (items of `kinds`; of any kind when none is named):
        embed it soon."""
        self._dirty.update(kinds or KINDS)
        self._wake.set()

    async def loaded(self) -> None:
        """Return once the embedding model and the stored vectors are loaded (or failed to)."""
        if self.embedder is not None:
            await self._loaded.wait()

    async def caught_up(self, timeout: float = 60) -> None:
        """Once the index is loaded, embed and regroup everything outstanding now (tests, CLI)."""
        if self.embedder is None:
            return
        async with asyncio.timeout(timeout):
            await self._loaded.wait()
            if self.index is None:
                raise RuntimeError(f"embeddings unavailable: {self.embedder.model_id} failed to load")
            while await self.sweep():
                pass

    async def sweep(self, kinds: Collection[str] = KINDS) -> int:
        """One pass of upkeep: regroup changed records, embed a batch of each of `kinds`. How many
        embedded."""
        async with self._sweeping:
            await self._regroup_changed_records()
            return await self._embed_missing(kinds)

    async def open_index(self) -> None:
        """Load the model and every stored vector of it into the index (grouped by who may see
        each item); on PostgreSQL make the model's HNSW indexes that are missing instead, and search
        there. Raises whatever loading the model raises."""
        assert self.embedder is not None
        embedder = self.embedder
        started = time.perf_counter()
        load = getattr(embedder, "load", None)
        if load is not None:
            await load()
        if searched_in_database(self.storage.db):
            await self.vectors.prepare(embedder.model_id)
            self.index = DatabaseIndex(self.vectors, embedder.model_id)
            stored = (await self.vectors.models()).get(embedder.model_id, 0)
            ms = (time.perf_counter() - started) * 1000
            event(log, "embeddings_ready", model=embedder.model_id, vectors=stored, searched="database", ms=ms)
            return
        index = VectorIndex(embedder.model_id, embedder.dim or None)
        self._groups_checked = utcnow()
        await index.load(self.vectors)
        await self._place(index, index.keys())
        self.index = index
        event(
            log,
            "embeddings_ready",
            model=embedder.model_id,
            vectors=len(index),
            ms=(time.perf_counter() - started) * 1000,
        )

    async def _upkeep(self) -> None:
        assert self.embedder is not None
        try:
            await self.open_index()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            event(
                log,
                "memory_recall_vector_degraded",
                logging.WARNING,
                reason="embedder_failed",
                error=type(exc).__name__,
                # A package not installed: say which, and the pip command (memory.embed.errors).
                **({"detail": exc.what, "fix": exc.fix} if isinstance(exc, MissingPackage) else {}),
            )
            return
        finally:
            self._loaded.set()
        while True:
            kinds, self._dirty = self._dirty, set()
            self._wake.clear()
            try:
                await self.sweep(kinds)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a failing model or database: lexical recall goes on meanwhile
                event(log, "embedding_upkeep_failed", logging.WARNING, error=type(exc).__name__)
            if self._dirty:
                continue  # a full batch (there may be more), or written meanwhile
            try:  # asyncio.timeout: wait_for may lose a cancellation on Python 3.11 (see gateway/jobs/runner.py)
                async with asyncio.timeout(UPKEEP_IDLE_SECONDS):
                    await self._wake.wait()
                await asyncio.sleep(UPKEEP_DEBOUNCE_SECONDS)  # a burst of writes: one sweep
            except TimeoutError:
                self._dirty.update(KINDS)  # once an hour every kind, whatever was said

    async def _embed_missing(self, kinds: Collection[str]) -> int:
        """One batch per kind of `kinds` of items without a current vector; how many were embedded.
        A kind whose batch was full is marked to be looked at again."""
        assert self.embedder is not None and self.index is not None
        done = 0
        for kind in (k for k in KINDS if k in kinds):
            # Onward from the last batch: a scan from the start would re-read every item that
            # already has a vector, each batch (quadratic over a backfill). Past the end, one
            # more scan from the start finds what was written behind the cursor meanwhile.
            after = self._cursor.get(kind)
            batch = await self.vectors.missing(kind, self.embedder.model_id, UPKEEP_BATCH, after=after)
            if not batch and after is not None:
                batch = await self.vectors.missing(kind, self.embedder.model_id, UPKEEP_BATCH)
            self._cursor[kind] = batch[-1][0] if batch else None
            if not batch:
                continue
            if len(batch) == UPKEEP_BATCH:
                self._dirty.add(kind)
            vecs = await self.embedder.embed_documents([text for _, text in batch])
            rows = [(item_id, text_hash(text), vecs[i]) for i, (item_id, text) in enumerate(batch)]
            await self.vectors.upsert(kind, rows, self.embedder.model_id)
            if isinstance(self.index, VectorIndex):  # the database's index follows its rows by itself
                self.index.add_many([(kind, item_id, vec) for item_id, _digest, vec in rows])
                await self._place(self.index, [(kind, item_id) for item_id, _digest, _vec in rows])
            done += len(rows)
        return done

    async def _place(self, index: VectorIndex, keys: Sequence[Key]) -> None:
        """Put indexed items in their visibility groups (an item without one is found by nobody)."""
        by_kind: dict[str, list[str]] = {}
        for kind, item_id in keys:
            by_kind.setdefault(kind, []).append(item_id)
        for kind, ids in by_kind.items():
            places = await self.vectors.places(kind, ids)
            index.set_groups(((kind, i), self._group(kind, place, owner)) for i, (place, owner) in places.items())

    def _group(self, kind: str, place: str, owner: str | None) -> str:
        group = _label(kind, place)
        if kind == "archive" and owner:
            self._sessions_of.setdefault(owner, set()).add(place)
        elif kind == "record" and place.startswith(PROJECT):
            self._project_groups.add(group)
        return group

    async def _regroup_changed_records(self) -> None:
        """A record's scope can be narrowed after it was embedded (review): move it to its new group.
        (The database's index needs none of this: its search reads each record's scope as it is.)"""
        if not isinstance(self.index, VectorIndex):
            return
        since, self._groups_checked = self._groups_checked, utcnow()
        changed = await self.vectors.records_changed(since)
        self.index.set_groups((("record", i), self._group("record", scope, None)) for i, scope in changed)

    def groups(
        self,
        scopes: Sequence[str],
        daily_scopes: Sequence[str],
        include_projects: bool,
        archive_user: str | None,
        archive_keys: Sequence[str],
    ) -> set[str]:
        """The index groups one person may see from where they are (the same rules as the lexical legs)."""
        keys = set(archive_keys)
        if archive_user is not None:
            keys |= self._sessions_of.get(archive_user, set())
        groups = {_label("record", s) for s in scopes} | {_label("daily", s) for s in daily_scopes}
        groups |= {_label("archive", k) for k in keys}
        if include_projects:
            groups |= self._project_groups
        return groups

    # -- a turn's recall -----------------------------------------------------------------------------

    async def speakers(self) -> Mapping[str, str]:
        """identity → display name: who a message's author is, as people name them in a question,
        so that "what did Dana say about …" boosts Dana's messages (and searches without "Dana")."""
        if time.monotonic() - self._names_read > NAMES_TTL_SECONDS:
            self._names = await self.storage.identities.display_names()
            self._named = Names(set(self._names.values()))
            self._names_read = time.monotonic()
        return self._names

    async def rank(
        self,
        actor: Actor,
        where: Where,
        query: str,
        *,
        kinds: Collection[str] = KINDS,
        settings: RecallSettings | None = None,
        refused: dict[str, str] | None = None,
    ) -> tuple[Recall, Mapping[str, MemoryRecord]]:
        """Everything `actor` may recall for `query` from `where`, best first (of `kinds` only), and
        the records among them by id. sections() picks a turn's share; the CLI's search shows it.
        `refused`, when given, receives the records the search found in the actor's scopes that the
        read policy turned away, with why (for the recall trace)."""
        settings = settings or self.settings
        names = await self.speakers()
        legs = Legs(self, actor, where, names, kinds)
        if refused is not None:
            legs.refused = refused
        vectors = self.vectors_usable(settings)
        retriever = Retriever(
            settings,
            legs.lexical,
            legs.load,
            vector=legs.vector if vectors else None,
            neighbours=legs.neighbours,
            embed_query=self.embedder.embed_query if vectors and self.embedder is not None else None,
            calibrated_floor=model_info(self.embedder.model_id).min_cosine if self.embedder is not None else None,
            cooldown=self._cooldown,
            names=self._named,
            dated=legs.dated,
            zone=self.config.timezone,
        )
        event(
            log,
            "memory_retrieval_request_plan",
            legs="lexical+vector" if vectors else "lexical",
            scopes=len(legs.scopes),
            lexical_pool=settings.lexical_pool,
            vector_pool=settings.vector_pool,
        )
        recall = await retriever.recall(query, utcnow())
        return replace(recall, ranked=newer_first(recall.ranked)), legs.records

    def vectors_usable(self, settings: RecallSettings | None = None) -> bool:
        """Whether the vector leg may run: the index is loaded and the model has a cosine floor
        (calibrated in its manifest, or memory.recall.min_cosine_similarity). A model without one
        would let every vector neighbour in, however unrelated: recall stays lexical, and says so."""
        if self.index is None or self.embedder is None:
            return False
        floor = (settings or self.settings).min_cosine
        if floor is None and model_info(self.embedder.model_id).min_cosine is None:
            if self._cooldown.ready("missing_calibration"):
                event(
                    log,
                    "memory_recall_vector_degraded",
                    logging.WARNING,
                    reason="missing_calibration",
                    model=self.embedder.model_id,
                    fix="set memory.recall.min_cosine_similarity",
                )
            return False
        return True

    async def search_records(
        self, actor: Actor, where: Where, query: str, limit: int, *, settings: RecallSettings | None = None
    ) -> list[Found]:
        """At most `limit` long-term records `actor` could recall for `query` from `where`, best first,
        ranked as a turn ranks them (a search by a person: `clawgate memory search`, the console)."""
        s = settings or self.settings  # a turn takes the best 20 lexical and 50 vector hits; a longer answer, more
        pools = replace(s, lexical_pool=max(s.lexical_pool, limit), vector_pool=max(s.vector_pool, limit))
        recall, records = await self.rank(actor, where, query, kinds=("record",), settings=pools)
        return [Found(records[c.candidate.id], c.score) for c in recall.ranked[:limit]]

    async def sections(self, actor: Actor, where: Where, query: str) -> list[Section]:
        """What the prompt should carry for this turn: instruction-grade memories, evidence, and
        earlier notes and messages, each a section (lowest priority dropped first by the budget)."""
        return (await self.for_turn(actor, where, query)).sections

    async def for_turn(self, actor: Actor, where: Where, query: str) -> TurnMemory:
        """sections(), with what the turn's recall trace needs to say how they were chosen."""
        if not self.config.memory.enabled or where.audience == "public" or actor.is_public or not query.strip():
            return TurnMemory([])
        started = time.perf_counter()
        if self.embedder is not None and self.index is None and self._cooldown.ready("embedder_loading"):
            event(log, "memory_recall_vector_degraded", logging.INFO, reason="embedder_loading")
        refused: dict[str, str] = {}
        recall, records = await self.rank(actor, where, query, refused=refused)
        now = utcnow()
        vectors = self.vectors_usable() and not recall.vector_degraded  # the vector leg ran for this turn
        calibrated = model_info(self.embedder.model_id).evidence_min_score if self.embedder is not None else None
        evidence_floor, evidence_source, fused = resolve_evidence_floor(self.settings, calibrated, vectors)
        disagreeing = conflicts(recall.ranked, records)
        ranked = confirmed_first(recall.ranked, disagreeing)
        strength = fused_strength if fused else lexical_strength(ranked)
        held = TurnPolicy(records, evidence_floor, strength, self.secrets, NOTICE_AUTHOR, self._screened)
        gated = await self.gate.judge(query, ranked)  # before selection: what it drops is never chosen
        kept = [s for s in ranked if s.candidate.key not in gated.dropped] if gated.dropped else ranked
        kept_decisions = selection(kept, self.settings.max_chars, self.settings.k, self.settings.max_similar, held)
        decisions = merge_decisions(ranked, gated.dropped, kept_decisions)
        chosen_ids = {s.candidate.id for s, why in zip(ranked, decisions, strict=True) if why is None}
        labelled = settle_conflicts(chosen_ids, decisions, ranked, disagreeing)
        chosen = [s for s, why in zip(ranked, decisions, strict=True) if why is None]
        event(log, "memory_retrieval_candidate_selection", candidates=len(ranked), chosen=len(chosen))
        event(
            log,
            "memory_retrieval_final",
            **{k: v for k, v in describe(recall).items() if not isinstance(v, (list, dict))},
            evidence_floor=evidence_floor,
            evidence_floor_source=evidence_source,
            **gated.log_fields(),
        )
        event(log, "turn_memory_recall", count=len(chosen), ms=(time.perf_counter() - started) * 1000)
        warnings = {rid: recall_prompt.Warnings(conflicts_with=cid) for rid, cid in labelled.items()}
        placed = recall_prompt.placed(chosen, records, now, warnings)
        return TurnMemory(recall_prompt.sections(placed), ranked, decisions, records, placed, refused, gated.verdict)


@dataclass(frozen=True, slots=True)
class TurnMemory:
    """A turn's recall: the prompt sections, and for the recall trace everything ranked, the
    selection's decision on each (None: chosen, else why not), the records among them, and where
    each chosen item went (its section's title and its line there; the prompt's context budget may
    still drop or cut that section)."""

    sections: list[Section]
    ranked: Sequence[Scored] = ()
    decisions: Sequence[str | None] = ()
    records: Mapping[str, MemoryRecord] = field(default_factory=dict)
    placed: Sequence[tuple[Scored, str, str]] = ()
    refused: Mapping[str, str] = field(default_factory=dict)  # record id → why the read policy left it out
    gate: GateVerdict | None = None  # the relevance gate's scores, when it ran
