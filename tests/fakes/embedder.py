"""A deterministic stand-in for a sentence-embedding model, for recall tests that must not wait for
MiniLM: every word adds to one dimension, chosen by its *concept* when the test names one (so
"basil" and "grow" can be close without sharing a word, as with a real model) and by a hash
otherwise. It implements memory.embed.embeddings.Embedder for real; it is not a mock of a library."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Mapping, Sequence

import numpy as np

from memory.embed.embeddings import Vectors, normalize

_WORD = re.compile(r"[^\W_]+")


class ConceptEmbedder:
    def __init__(
        self,
        model_id: str = "test/concepts",
        *,
        dim: int = 64,
        concepts: Mapping[str, str] | None = None,
        query_delay: float = 0.0,
    ) -> None:
        self.model_id = model_id
        self.query_prefix = ""
        self.document_prefix = ""
        self._dim = dim
        self.concepts = dict(concepts or {})
        self.query_delay = query_delay  # seconds: longer than the budget makes recall degrade
        self.documents = 0  # how many texts were embedded as documents
        self.queries = 0

    @property
    def dim(self) -> int:
        return self._dim

    def _slot(self, word: str) -> int:
        name = self.concepts.get(word, word)
        return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=4).digest(), "little") % self._dim

    def _row(self, text: str) -> np.ndarray:
        row = np.zeros(self._dim, dtype=np.float32)
        for word in _WORD.findall(text.lower()):
            row[self._slot(word)] += 1.0
        return row

    async def embed_documents(self, texts: Sequence[str]) -> Vectors:
        self.documents += len(texts)
        await asyncio.sleep(0)  # a real model answers later: let the loop run between batches
        return normalize(np.stack([self._row(t) for t in texts]) if texts else np.zeros((0, self._dim)))

    async def embed_query(self, text: str) -> Vectors:
        self.queries += 1
        if self.query_delay:
            await asyncio.sleep(self.query_delay)
        return normalize(self._row(text)[None, :])[0]
