"""Long-term memories a person could recall for a query, ranked as a turn's recall ranks them
(`clawgate memory search`, one query or a `--batch` of them).

The ranking is a turn's own (`TurnRecall.rank`: the same legs, policy, fusion and cosine floor),
over long-term records only (the archive has `--archive`; daily notes are for turns), so a
record's score is comparable within one query, not to a turn's prompt.

Built once, asked many times: `open` reads the stored vectors into an index and loads the model, so
a batch of queries pays for the model once. Nothing is written: a memory without a vector for the
active model is ranked by its words alone, as recall does while the background upkeep catches up,
and `coverage_note` says how many there are. With no stored vector at all the model is not loaded
(the vector leg would find nothing)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from gateway.config.model import Config
from gateway.recall.engine import TurnRecall
from gateway.session.memory_service import Found, MemoryService
from memory.embed.embeddings import Embedder
from memory.embed.index import DatabaseIndex, VectorIndex
from memory.embed.vectors import VectorStore
from memory.store.storage import Storage
from memory.trust.policy import Actor

# A turn gives up on the query's embedding after memory.recall.query_embedding_budget_ms and goes
# lexical; a search at the shell waits for it, so the ranking does not depend on the machine's load.
SHELL_QUERY_BUDGET_MS = 60_000.0


class RecordSearch:
    """A turn's recall (gateway.recall.engine.TurnRecall.rank), long-term records only, as the operator
    asks it from the shell: in a direct conversation with the person named."""

    def __init__(self, config: Config, storage: Storage, embedder: Embedder | None) -> None:
        self.config = config
        self.storage = storage
        self.embedder = embedder
        self.memory = MemoryService(config, storage.records, [])  # reads only: no secrets to refuse
        self.recall = TurnRecall(config, storage, self.memory, None, embedder)
        turn = self.recall.settings
        self.settings = replace(turn, query_timeout_ms=max(turn.query_timeout_ms, SHELL_QUERY_BUDGET_MS))

    @property
    def index(self) -> VectorIndex | DatabaseIndex | None:
        return self.recall.index

    @classmethod
    async def open(
        cls,
        config: Config,
        storage: Storage,
        embedder: Embedder | None,
        *,
        on_load: Callable[[str], None] | None = None,
    ) -> RecordSearch:
        """The searcher, its index read and its model loaded (when there are vectors to search).
        `on_load` is called with the model id just before the model loads (seconds, for a local one)."""
        search = cls(config, storage, embedder)
        if embedder is not None and (await VectorStore(storage.db).models()).get(embedder.model_id):
            if on_load is not None:
                on_load(embedder.model_id)
            await search.recall.open_index()
        return search

    async def coverage_note(self) -> str | None:
        """A line for the operator when some memories will be ranked without their vector."""
        if self.embedder is None:
            return None
        model = self.embedder.model_id
        covered, total = (await VectorStore(self.storage.db).coverage(model))["record"]
        if covered >= total:
            return None
        return (
            f"{total - covered:,} of {total:,} memories have no vector for {model} yet and are ranked by their "
            "words alone (clawgate memory backfill-embeddings)"
        )

    async def search(self, actor: Actor, query: str, limit: int) -> list[Found]:
        """At most `limit` memories `actor` could recall in a direct conversation, best first."""
        where = self.memory.where("personal", None)
        return await self.recall.search_records(actor, where, query, limit, settings=self.settings)
