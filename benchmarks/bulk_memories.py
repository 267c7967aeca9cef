"""Memories for recall at a million: more texts than LoCoMo's wordings give, vectors for them without
running the model over each, and every vector written in large batches instead of through the upkeep.

benchmarks/pg_recall.py uses this for sizes the gateway's own path cannot reach in a run on a 2-core
machine (a million texts through MiniLM take 40+ minutes, and pgvector's HNSW index growing row by
row takes hours):

Texts. recall_scale's 24 wordings of LoCoMo's 5,882 turns give 137,903 distinct texts (`memory_texts`,
unchanged: the first 137,903 here are exactly its). Beyond them more wordings of the fourth style
follow (the turn, then "Related: <someone> once said <the gist of another turn>"), each with another
turn's remark, so that every text stays distinct and reads like language.

Vectors. Texts of the 24 real wordings get their real MiniLM vector (recall_scale's cache under
~/.cache/clawgate-bench; the few it lacks are embedded and added). The extra texts get a **synthetic**
vector, made the way such a text's real vector is made up: `a * base + b * remark + noise`, normalised,
where `base` is the real vector of the same turn in the same prefix without a remark, `remark` the
real vector of the quoted turn (its first wording), and `a`, `b` and the noise's size are fitted by
least squares on the real vectors of the six real wordings with a remark (35,292 texts). So every
synthetic vector sits in the cone of real MiniLM vectors, close to its turn's other wordings (as
near-duplicates do in a real store; random vectors would make the search unrealistically easy), and
the fit is reported: the cosine of a synthetic vector to its base next to the real ones' (0.904 both
at a million). Query vectors stay real.

Writing. Records go through `RecordStore.import_batch` (recall_scale's `add_records`: the store's own
rows, revisions, full-text index by triggers on SQLite and generated columns on PostgreSQL), which
already writes 1,000 a transaction (1,100,000 in 4-5 minutes). Only the records' vectors skip the upkeep:
`write_vectors` inserts the rows `VectorStore.upsert` would insert (same columns, the blob, the
text's hash), many thousand a transaction, without building the HNSW index; `build_indexes` then
makes the missing indexes with the gateway's own `ensure_hnsw`, once, with more memory for the build.
`verify` checks counts and that the bulk rows are found and read as the store's own.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from recall_scale import PREFIXES, BenchEmbedder, Turn, VectorCache, World, _body, introduced, memory_texts
from sqlalchemy import func, insert, literal_column, select, text
from sqlalchemy.engine import Connection

from memory.embed.items import KINDS
from memory.embed.pgvector import ensure_hnsw
from memory.embed.vectors import VectorStore, text_hash, to_blob
from memory.records.model import RecordStatus
from memory.store.schema import memory_records, memory_revisions, memory_vectors
from memory.store.storage import Storage

REAL_FAMILIES = 4 * len(PREFIXES)  # recall_scale's wordings: four styles times six prefixes
REMARK_STYLE = 3
VECTOR_BATCH = 5_000  # vector rows a transaction
BUILD_MEMORY = "4GB"  # maintenance_work_mem for the one HNSW build after a bulk load
SEED = 20_251_201


@dataclass(frozen=True, slots=True)
class Wording:
    """One memory text and what it was made of: its turn, its wording (family), and for the style
    with a remark the turn the remark quotes."""

    text: str
    speaker: str
    turn: int
    family: int
    remark: int | None

    @property
    def real(self) -> bool:
        """One of recall_scale's wordings (a real vector); else a synthetic one."""
        return self.family < REAL_FAMILIES


def _remark_turn(i: int, family: int, turns: int) -> int:
    return (i * 7919 + 104_729 * family) % turns  # as recall_scale._body picks it


def wordings(turns: Sequence[Turn], count: int) -> list[Wording]:
    """`count` distinct memory texts: recall_scale.memory_texts' (the same, in the same order), then
    more wordings with a remark until there are enough."""
    out: list[Wording] = []
    seen: set[str] = set()
    family = 0
    while len(out) < count:
        style, prefix = (family // len(PREFIXES), PREFIXES[family % len(PREFIXES)])
        if family >= REAL_FAMILIES:
            style = REMARK_STYLE
        if family > REAL_FAMILIES + 10 * count // max(1, len(turns)) + 10:
            raise SystemExit(f"only {len(out):,} distinct memory texts, {count:,} asked")
        for i, t in enumerate(turns):
            body = _body(turns, i, style, family)
            if body is None:
                continue
            words = introduced(prefix, t) + body
            if words in seen:
                continue
            seen.add(words)
            remark = _remark_turn(i, family, len(turns)) if style == REMARK_STYLE else None
            out.append(Wording(words, t.speaker, i, family, remark))
            if len(out) == count:
                break
        family += 1
    return out


def check_texts(turns: Sequence[Turn], made: Sequence[Wording]) -> None:
    """The real part of `made` is exactly recall_scale's texts (so 10k and 100k runs are unchanged)."""
    real = sum(w.real for w in made)
    if [(w.text, w.speaker) for w in made[:real]] != memory_texts(turns, real):
        raise AssertionError("bulk_memories.wordings drifted from recall_scale.memory_texts")


# --- vectors ------------------------------------------------------------------------------------


@dataclass(slots=True)
class Synthesis:
    """How an extra wording's vector is made from real ones: a * base + b * remark + N(0, sigma^2)."""

    a: float
    b: float
    sigma: float
    fitted_on: int
    real_cosine_to_base: float  # mean cosine of a real remark wording to its base
    synthetic_cosine_to_base: float = 0.0  # the same for the synthetic vectors made

    def as_dict(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "sigma": self.sigma,
            "fitted_on": self.fitted_on,
            "real_cosine_to_base": self.real_cosine_to_base,
            "synthetic_cosine_to_base": self.synthetic_cosine_to_base,
        }


class Vectors:
    """A vector for every wording: real ones from the cache (embedding what it lacks), synthetic ones
    for the extra wordings, from real vectors of the same turn (see the module docstring)."""

    def __init__(self, made: Sequence[Wording], cache: VectorCache, embedder: BenchEmbedder) -> None:
        self.made = made
        self.cache = cache
        self.embedder = embedder
        self.synthesis: Synthesis | None = None
        # Each turn's real vector per prefix without a remark (style 0), the base of its other wordings.
        self._base: dict[tuple[int, int], int] = {}
        for n, w in enumerate(made):
            if w.family < len(PREFIXES):
                self._base[(w.turn, w.family)] = n

    async def matrix(self) -> np.ndarray:
        """Row n: the vector of wording n (float32, unit length)."""
        real = [w.text for w in self.made if w.real]
        missing = [t for t in real if VectorCache.key(t) not in self.cache.vectors]
        for start in range(0, len(missing), 2_000):  # batches the model runs; checkpointed in the cache
            await self.embedder.embed_documents(missing[start : start + 2_000])
            self.cache.checkpoint()
        out = np.empty((len(self.made), self.embedder.dim or 384), dtype=np.float32)
        for n, w in enumerate(self.made):
            if w.real:
                out[n] = self.cache.vectors[VectorCache.key(w.text)]
        extra = [n for n, w in enumerate(self.made) if not w.real]
        if extra:
            self.synthesis = self._fit(out)
            self._synthesize(out, extra, self.synthesis)
        return out

    def _base_row(self, turn: int, family: int) -> int | None:
        """The row of the turn's remark-free wording in the family's prefix (or in any prefix: a
        turn whose text repeats an earlier one's lacks some)."""
        row = self._base.get((turn, family % len(PREFIXES)))
        if row is None:
            row = next((self._base[(turn, p)] for p in range(len(PREFIXES)) if (turn, p) in self._base), None)
        return row

    def _pairs(self, rows: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows kept, their base rows, their remark rows) of wordings whose base and remark exist."""
        kept, bases, remarks = [], [], []
        for n in rows:
            w = self.made[n]
            assert w.remark is not None
            base = self._base_row(w.turn, w.family)
            remark = self._base_row(w.remark, 0)
            if base is not None and remark is not None:
                kept.append(n)
                bases.append(base)
                remarks.append(remark)
        return np.array(kept, dtype=np.intp), np.array(bases, dtype=np.intp), np.array(remarks, dtype=np.intp)

    def _fit(self, vecs: np.ndarray) -> Synthesis:
        """a, b and sigma by least squares on the real wordings with a remark."""
        real_remarks = [n for n, w in enumerate(self.made) if w.real and w.remark is not None]
        kept, bases, remarks = self._pairs(real_remarks)
        if kept.size < 100:
            raise SystemExit("too few real wordings with a remark to fit the synthetic vectors on")
        y = vecs[kept].astype(np.float64)
        x_base, x_remark = vecs[bases].astype(np.float64), vecs[remarks].astype(np.float64)
        design = np.array(
            [
                [np.sum(x_base * x_base), np.sum(x_base * x_remark)],
                [np.sum(x_base * x_remark), np.sum(x_remark * x_remark)],
            ]
        )
        target = np.array([np.sum(x_base * y), np.sum(x_remark * y)])
        a, b = np.linalg.solve(design, target)
        residual = y - a * x_base - b * x_remark
        sigma = float(np.sqrt(np.mean(residual**2)))
        cos = float(np.mean(np.sum(y * x_base, axis=1)))
        return Synthesis(float(a), float(b), sigma, int(kept.size), cos)

    def _synthesize(self, vecs: np.ndarray, rows: Sequence[int], fit: Synthesis) -> None:
        kept, bases, remarks = self._pairs(rows)
        if kept.size != len(rows):
            raise AssertionError(f"{len(rows) - kept.size} extra wordings without a real base or remark vector")
        rng = np.random.default_rng(SEED)
        cosines = []
        for start in range(0, kept.size, 50_000):
            part = slice(start, start + 50_000)
            base = vecs[bases[part]]
            made = fit.a * base + fit.b * vecs[remarks[part]]
            made += rng.normal(0.0, fit.sigma, size=made.shape).astype(np.float32)
            made /= np.linalg.norm(made, axis=1, keepdims=True)
            vecs[kept[part]] = made
            cosines.append(np.sum(made * base, axis=1))
        fit.synthetic_cosine_to_base = float(np.mean(np.concatenate(cosines)))


# --- writing ------------------------------------------------------------------------------------


def _insert_vectors(conn: Connection, rows: list[dict[str, Any]]) -> None:
    conn.execute(insert(memory_vectors), rows)


async def write_vectors(
    storage: Storage, world: World, row_of: dict[str, int], vecs: np.ndarray, model_id: str, ids: Sequence[str]
) -> int:
    """The vectors of records `ids` (rows of `vecs` by their text) as `VectorStore.upsert` writes them
    (one row per record and model: the float32 blob, the hash of the text it describes), many
    thousand a transaction and without building an index; how many."""
    now = datetime.now(UTC)  # after the records' updated_at: the upkeep sees them as current
    dim = int(vecs.shape[1])
    written = 0
    for start in range(0, len(ids), VECTOR_BATCH):
        rows = []
        for record_id in ids[start : start + VECTOR_BATCH]:
            content = world.text_of[record_id]
            rows.append(
                {
                    "item_kind": "record",
                    "item_id": record_id,
                    "model_id": model_id,
                    "dim": dim,
                    "vector": to_blob(vecs[row_of[content]]),
                    "text_hash": text_hash(content),
                    "created_at": now,
                }
            )
        await storage.db.write(_insert_vectors, rows)
        written += len(rows)
    return written


def _build(conn: Connection, model_id: str, memory: str) -> list[tuple[str, int, float]]:
    # For this transaction only; ensure_hnsw keeps a setting above its own floor.
    conn.execute(text("SELECT set_config('maintenance_work_mem', :size, true)"), {"size": memory})
    v = memory_vectors.c
    found = conn.execute(select(v.item_kind, v.dim).where(v.model_id == model_id).distinct()).all()
    built = []
    for kind, dim in sorted(found):
        assert kind in KINDS
        t0 = time.perf_counter()
        if ensure_hnsw(conn, model_id, kind, int(dim)):
            built.append((str(kind), int(dim), time.perf_counter() - t0))
    return built


async def build_indexes(storage: Storage, model_id: str, memory: str = BUILD_MEMORY) -> dict[str, Any]:
    """PostgreSQL: the HNSW indexes `model_id`'s vectors lack, made once by the gateway's own
    `ensure_hnsw` (its DDL, its m and ef_construction) with `memory` for the build; seconds per index
    and in all (the commit included)."""
    t0 = time.perf_counter()
    built = await storage.db.write(_build, model_id, memory)
    return {
        "maintenance_work_mem": memory,
        "indexes": [{"kind": kind, "dim": dim, "seconds": s} for kind, dim, s in built],
        "seconds": time.perf_counter() - t0,
    }


# --- checking what was written ------------------------------------------------------------------


def _counts(conn: Connection, model_id: str) -> dict[str, int]:
    r = memory_records.c
    active = conn.execute(select(func.count()).where(r.status == RecordStatus.ACTIVE.value)).scalar_one()
    revisions = conn.execute(select(func.count()).select_from(memory_revisions)).scalar_one()
    v = memory_vectors.c
    vectors = conn.execute(select(func.count()).where(v.model_id == model_id, v.item_kind == "record")).scalar_one()
    return {"records": int(active), "revisions": int(revisions), "record_vectors": int(vectors)}


def _vector_row(conn: Connection, record_id: str, model_id: str) -> dict[str, Any]:
    v = memory_vectors.c
    columns: list[Any] = [c for c in memory_vectors.c if c.name != "created_at"]
    if conn.dialect.name == "postgresql":
        columns.append(literal_column("embedding::text").label("embedding"))  # computed by PostgreSQL
    row = conn.execute(
        select(*columns).where(v.item_kind == "record", v.item_id == record_id, v.model_id == model_id)
    ).one()
    return dict(row._mapping)


async def verify(
    storage: Storage, world: World, row_of: dict[str, int], vecs: np.ndarray, model_id: str, sample: int = 20
) -> dict[str, Any]:
    """After a bulk load: every record and vector there, and a sample of bulk rows found and read
    as the store's own (read back by id; the upkeep sees no vector missing; a vector row rewritten
    by `VectorStore.upsert` comes out the same, computed `embedding` included; full-text search by
    the record's own words finds it, in the store's top 50, among the other wordings of its turn:
    at a million some of those outrank it, so most of the sample must be found, not all). Raises
    AssertionError on any difference."""
    counts = await storage.db.read(_counts, model_id)
    records = len(world.mine) + len(world.theirs)
    if counts != {"records": records, "revisions": records, "record_vectors": records}:
        raise AssertionError(f"bulk load: {counts} in the database, {records:,} records written")
    vectors = VectorStore(storage.db)
    left = await vectors.missing("record", model_id, 10)
    if left:
        raise AssertionError(f"bulk load: {len(left)}+ records without a current vector, e.g. {left[0][0]}")
    ids = sorted(world.mine | world.theirs)
    picked = ids[:: max(1, len(ids) // sample)][:sample]
    found = 0
    for record_id in picked:
        record = await storage.records.get(record_id)
        if record is None or record.content != world.text_of[record_id]:
            raise AssertionError(f"bulk load: record {record_id} does not read back")
        hits = await storage.records.search(record.content, scopes=[record.scope], limit=50)
        found += record_id in {r.id for r, _ in hits}
        before = await storage.db.read(_vector_row, record_id, model_id)
        stored = await vectors.upsert(
            "record", [(record_id, text_hash(record.content), vecs[row_of[record.content]])], model_id
        )
        after = await storage.db.read(_vector_row, record_id, model_id)
        if stored != 1 or before != after:
            raise AssertionError(f"bulk load: the vector row of {record_id} differs from what the store writes")
    if found * 2 < len(picked):
        raise AssertionError(f"bulk load: full-text search found {found} of {len(picked)} records by their own words")
    return {**counts, "sample_checked": len(picked), "sample_found_by_search": found}
