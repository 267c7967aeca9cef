"""The index recall searches, one per embedding model: `VectorIndex` in memory (SQLite) or
`DatabaseIndex` in the database (PostgreSQL); the engine holds whichever the database URL chose.

`VectorIndex` keeps one model's vectors in a contiguous float32 matrix and answers exact top-k by
cosine with one matrix-vector product: 100k x 384 floats are ~150 MB and a few milliseconds per search,
without an ANN index to build, tune or keep in sync. That is how SQLite is searched.

`DatabaseIndex` holds nothing: it asks the store, which asks pgvector (memory.embed.pgvector).

Apart from the store (memory.embed.vectors) because searching is not storing: these read what it
holds (a load, or a statement per search) and never write it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime

import numpy as np
import numpy.typing as npt

from memory.embed.items import ItemKey, Vector
from memory.embed.pgvector import Reach
from memory.embed.vectors import VectorStore

Allow = Callable[[str, str], bool] | Collection[ItemKey] | None


# --- in the database ----------------------------------------------------------------------------


class DatabaseIndex:
    """One model's vectors searched in the database (PostgreSQL: pgvector's HNSW), standing where
    a VectorIndex stands on SQLite. Nothing is held in memory: what the store holds is searched,
    and who may see what is decided by the same statement, from the rows as they are now."""

    def __init__(self, store: VectorStore, model_id: str) -> None:
        self.store = store
        self.model_id = model_id

    async def search(
        self, query: npt.ArrayLike, k: int, reach: Reach, *, now: datetime | None = None
    ) -> list[tuple[str, str, float]]:
        """The `k` items of `reach` nearest to `query` (a unit vector) as (kind, item id, cosine),
        best first: approximate (HNSW) where the model is indexed, exact otherwise."""
        return await self.store.nearest(self.model_id, query, k, reach, now=now)

    async def scores(self, query: npt.ArrayLike, keys: Collection[ItemKey]) -> list[tuple[str, str, float]]:
        """The cosine of each of `keys` that has a vector (items the caller already may see), best first."""
        return await self.store.cosines(self.model_id, query, keys)


# --- the in-memory index ------------------------------------------------------------------------


_NO_GROUP = -1


def _lazy_is_cheaper(allowed: int, n: int, k: int) -> bool:
    """Whether ranking everything and asking candidates for membership beats scoring the allowed
    rows alone. Costs in units of about 0.1 us measured here: a key lookup with its row 6, a row of
    the full product 1.1, a membership question 5, about k·n/allowed of them (the allowed share)."""
    return allowed * 6 > n * 1.1 + 5 * k * n / allowed


class VectorIndex:
    """Exact cosine search over one model's unit vectors, in memory.

    Rows live in one float32 matrix whose capacity doubles when full (adding is amortized O(dim));
    removing moves the last row into the hole, so rows [0, len) are always dense and a search is one
    matrix-vector product over them. Not thread-safe: one event loop owns it.

    Each row may belong to one *group* (a label such as a scope: who may see it), kept as a small
    integer beside the row. A search restricted to some groups masks the scores of every other row
    before the top-k: one vectorized pass, so a person who may see 1 % of the items still gets their
    own top k, and a row without a group is in no group's results."""

    def __init__(self, model_id: str, dim: int | None = None, capacity: int = 1024) -> None:
        self.model_id = model_id
        self.dim = dim
        self._capacity = max(1, capacity)
        self._matrix: Vector | None = None if dim is None else np.empty((self._capacity, dim), dtype=np.float32)
        self._group_of_row = np.full(self._capacity, _NO_GROUP, dtype=np.int32)
        self._keys: list[ItemKey] = []
        self._slots: dict[ItemKey, int] = {}
        self._group_ids: dict[str, int] = {}
        self._group_names: list[str] = []

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._slots

    def keys(self) -> list[ItemKey]:
        """Every (kind, item id) in the index."""
        return list(self._keys)

    @property
    def capacity(self) -> int:
        return 0 if self._matrix is None else self._matrix.shape[0]

    def add(self, kind: str, item_id: str, vector: npt.ArrayLike, group: str | None = None) -> None:
        """Add or replace the vector of (kind, item_id), in `group` if given (else it keeps its group)."""
        vec = np.asarray(vector, dtype=np.float32)
        if vec.ndim != 1:
            raise ValueError(f"a vector must be 1-D, got shape {vec.shape}")
        if self.dim is None:
            self.dim = int(vec.shape[0])
        if vec.shape[0] != self.dim:
            raise ValueError(f"{self.model_id}: a {vec.shape[0]}-dimensional vector in a {self.dim}-dimensional index")
        key = (kind, str(item_id))
        slot = self._slots.get(key)
        if slot is None:
            slot = len(self._keys)
            self._reserve(slot + 1)
            self._keys.append(key)
            self._slots[key] = slot
        assert self._matrix is not None
        self._matrix[slot] = vec
        if group is not None:
            self._group_of_row[slot] = self._group_id(group)

    def add_many(self, items: Sequence[tuple[str, str, npt.ArrayLike]]) -> None:
        """add() for many (kind, item id, vector) at once: one copy into the matrix."""
        if not items:
            return
        block = np.asarray(np.stack([np.asarray(vec, dtype=np.float32) for _, _, vec in items]), dtype=np.float32)
        if block.ndim != 2:
            raise ValueError(f"vectors must be 1-D, got a block of shape {block.shape}")
        if self.dim is None:
            self.dim = int(block.shape[1])
        if block.shape[1] != self.dim:
            raise ValueError(f"{self.model_id}: {block.shape[1]}-dimensional vectors in a {self.dim}-dimensional index")
        self._reserve(len(self._keys) + len(items))
        assert self._matrix is not None
        slots = np.empty(len(items), dtype=np.intp)
        for i, (kind, item_id, _) in enumerate(items):
            key = (kind, str(item_id))
            slot = self._slots.get(key)
            if slot is None:
                slot = self._slots[key] = len(self._keys)
                self._keys.append(key)
            slots[i] = slot
        self._matrix[slots] = block  # a key given twice: its last vector wins, as with add()

    def remove(self, kind: str, item_id: str) -> bool:
        """Forget (kind, item_id); False when it was not there."""
        key = (kind, str(item_id))
        slot = self._slots.pop(key, None)
        if slot is None:
            return False
        last = len(self._keys) - 1
        if slot != last:
            assert self._matrix is not None
            moved = self._keys[last]
            self._matrix[slot] = self._matrix[last]
            self._group_of_row[slot] = self._group_of_row[last]
            self._keys[slot] = moved
            self._slots[moved] = slot
        self._group_of_row[last] = _NO_GROUP
        self._keys.pop()
        return True

    def set_groups(self, groups: Iterable[tuple[ItemKey, str]]) -> int:
        """Put items already in the index into groups ((kind, id), group); keys not in the index
        are ignored. How many were set."""
        done = 0
        for key, group in groups:
            slot = self._slots.get(key)
            if slot is not None:
                self._group_of_row[slot] = self._group_id(group)
                done += 1
        return done

    def group_of(self, kind: str, item_id: str) -> str | None:
        slot = self._slots.get((kind, str(item_id)))
        if slot is None or self._group_of_row[slot] == _NO_GROUP:
            return None
        return self._group_names[int(self._group_of_row[slot])]

    def _group_id(self, group: str) -> int:
        gid = self._group_ids.get(group)
        if gid is None:
            gid = self._group_ids[group] = len(self._group_names)
            self._group_names.append(group)
        return gid

    def search(
        self, query: npt.ArrayLike, k: int, allow: Allow = None, *, groups: Collection[str] | None = None
    ) -> list[tuple[str, str, float]]:
        """The `k` items most similar to `query` (a unit vector) as (kind, item id, cosine), best
        first, exact. `allow` restricts the ranking to some items, before the top-k: a collection
        of (kind, id) keys, or a predicate `allow(kind, id)`; None: everything. `groups` restricts
        it to the items of those groups (with `allow` too: items that pass both).

        A small allowed set is scored on its own rows. For a large one, looking every key up (about
        0.5 us each: 25 ms for 50k keys) would cost more than the search, so membership is checked
        on candidates in score order instead, as for a predicate: the best first, from a pool that
        widens until k pass. Same result either way; each candidate is asked at most once."""
        n = len(self._keys)
        if k < 1 or n == 0:
            return []
        assert self._matrix is not None
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        if q.shape[0] != self.dim:
            raise ValueError(f"{self.model_id}: a {q.shape[0]}-dimensional query in a {self.dim}-dimensional index")
        if groups is not None:
            return self._search_groups(q, k, allow, groups)
        if allow is None:
            return self._top(self._matrix[:n] @ q, np.arange(n), k)
        if callable(allow):
            predicate = allow
            return self._top_filtered(self._matrix[:n] @ q, k, lambda key: predicate(*key))
        size = len(allow)
        if size == 0:
            return []
        if _lazy_is_cheaper(size, n, k):
            return self._top_filtered(self._matrix[:n] @ q, k, allow.__contains__)
        slots = np.fromiter((s for s in map(self._slots.get, allow) if s is not None), dtype=np.intp)
        if slots.size == 0:
            return []
        slots.sort()  # reading the rows in memory order is faster
        return self._top(self._matrix[slots] @ q, slots, k)

    def _search_groups(self, q: Vector, k: int, allow: Allow, groups: Collection[str]) -> list[tuple[str, str, float]]:
        gids = [self._group_ids[g] for g in groups if g in self._group_ids]
        if not gids:
            return []
        n = len(self._keys)
        assert self._matrix is not None
        # A table lookup per row (which groups are allowed, by group id) instead of np.isin, which
        # sorts: 0.03 ms against 0.08 at 10,000 rows. Row -1 (no group) reads the table's extra last
        # entry, which is never allowed.
        allowed = np.zeros(len(self._group_names) + 1, dtype=bool)
        allowed[gids] = True
        slots = np.flatnonzero(allowed[self._group_of_row[:n]])
        if slots.size == 0:
            return []
        if slots.size * 4 < n:  # a small share: score its rows alone
            scores = self._matrix[slots] @ q
        else:  # most rows: one product over all, the others never picked
            scores = (self._matrix[:n] @ q)[slots]
        if allow is None:
            return self._top(scores, slots, k)
        accept = (lambda key: allow(*key)) if callable(allow) else allow.__contains__
        return self._top_filtered(scores, k, accept, slots)

    def _top(
        self, scores: npt.NDArray[np.float32], slots: npt.NDArray[np.intp], k: int
    ) -> list[tuple[str, str, float]]:
        k = min(k, scores.shape[0])
        part = np.argpartition(-scores, k - 1)[:k] if k < scores.shape[0] else np.arange(scores.shape[0])
        order = part[np.lexsort((slots[part], -scores[part]))]  # best first; ties in insertion order
        return [(*self._keys[slots[i]], float(scores[i])) for i in order]

    def _top_filtered(
        self,
        scores: npt.NDArray[np.float32],
        k: int,
        accept: Callable[[ItemKey], bool],
        slots: npt.NDArray[np.intp] | None = None,
    ) -> list[tuple[str, str, float]]:
        """Top-k of the items `accept` takes: candidates in score order from a pool that widens
        (4 times each round) until k pass or every item was asked; each item is asked once.
        `scores[i]` is row `slots[i]`'s (None: row i's)."""
        n = scores.shape[0]
        pool = min(n, max(4 * k, 64))
        verdicts: dict[int, bool] = {}
        while True:
            part = np.argpartition(-scores, pool - 1)[:pool] if pool < n else np.arange(n)
            order = part[np.lexsort((part, -scores[part]))]  # best first; ties in insertion order
            found = []
            for i in order.tolist():
                key = self._keys[i if slots is None else int(slots[i])]
                ok = verdicts.get(i)
                if ok is None:
                    ok = verdicts[i] = bool(accept(key))
                if ok:
                    found.append((*key, float(scores[i])))
                    if len(found) == k:
                        return found
            if pool >= n:
                return found
            pool = min(n, pool * 4)

    def _reserve(self, size: int) -> None:
        assert self.dim is not None
        if self._matrix is None:
            self._matrix = np.empty((max(self._capacity, size), self.dim), dtype=np.float32)
        elif size > self._matrix.shape[0]:
            grown = np.empty((max(size, 2 * self._matrix.shape[0]), self.dim), dtype=np.float32)
            grown[: len(self._keys)] = self._matrix[: len(self._keys)]
            self._matrix = grown
        rows = self._matrix.shape[0]
        if self._group_of_row.shape[0] < rows:
            more = np.full(rows, _NO_GROUP, dtype=np.int32)
            more[: self._group_of_row.shape[0]] = self._group_of_row
            self._group_of_row = more

    async def load(self, store: VectorStore, model_id: str | None = None, *, page: int = 5000) -> int:
        """Add every vector `store` holds for this index's model (or `model_id`). How many."""
        model = model_id or self.model_id
        after: ItemKey | None = None
        count = 0
        while True:
            rows = await store.vectors(model, after=after, limit=page)
            self.add_many(rows)
            count += len(rows)
            if len(rows) < page:
                return count
            after = (rows[-1][0], rows[-1][1])
