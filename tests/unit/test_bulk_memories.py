"""benchmarks/bulk_memories.py (the million-memory load of benchmarks/pg_recall.py) at a tiny size on
both databases: the texts are recall_scale's, the vector rows are the ones VectorStore.upsert writes,
the HNSW index is the gateway's, and `verify` catches a row that differs. Vectors are random unit
vectors here (the benchmark's come from MiniLM): what is tested is the writing, not the search."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import text, update

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import bulk_memories  # noqa: E402
from recall_scale import DATA, World, add_records, load_locomo, memory_texts  # noqa: E402

from memory.embed.pgvector import hnsw_index_name  # noqa: E402
from memory.store.schema import memory_vectors  # noqa: E402
from memory.store.storage import Storage  # noqa: E402
from tests.postgres import BACKENDS, database_url  # noqa: E402

pytestmark = pytest.mark.skipif(not DATA.is_file(), reason="LoCoMo's locomo10.json is not here")
MODEL = "test-model"
SIZE = 2_000


@pytest.fixture(scope="module")
def turns():  # type: ignore[no-untyped-def]
    return load_locomo(DATA)[0]


def test_wordings_are_recall_scales_then_more(turns) -> None:  # type: ignore[no-untyped-def]
    made = bulk_memories.wordings(turns, 3_000)
    assert [(w.text, w.speaker) for w in made] == memory_texts(turns, 3_000)
    assert all(w.real for w in made)
    beyond = bulk_memories.wordings(turns, 140_000)
    assert len({w.text for w in beyond}) == 140_000
    extra = [w for w in beyond if not w.real]
    assert len(extra) == 140_000 - 137_903
    assert all(w.remark is not None and w.text.startswith(w.text.split(" Related: ")[0]) for w in extra)
    bulk_memories.check_texts(turns, beyond)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_bulk_load_reads_as_the_stores_own(backend: str, tmp_path: Path, turns) -> None:  # type: ignore[no-untyped-def]
    storage = await Storage.open(database_url(backend, tmp_path))
    try:
        made = bulk_memories.wordings(turns, SIZE)
        vecs = np.random.default_rng(1).normal(size=(SIZE, 384)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        row_of = {w.text: n for n, w in enumerate(made)}
        world = World()
        await add_records(storage, [(w.text, w.speaker) for w in made], 0, SIZE, datetime.now(UTC), world)
        ids = list(world.text_of)
        assert len(ids) == SIZE + SIZE // 10  # the copies in other people's scopes
        assert await bulk_memories.write_vectors(storage, world, row_of, vecs, MODEL, ids) == len(ids)
        if backend == "postgres":
            built = await bulk_memories.build_indexes(storage, MODEL, "64MB")
            assert [i["kind"] for i in built["indexes"]] == ["record"]
            name = hnsw_index_name(MODEL, "record", 384)
            assert await storage.db.read(lambda c: c.execute(text("SELECT to_regclass(:n)"), {"n": name}).scalar())
        report = await bulk_memories.verify(storage, world, row_of, vecs, MODEL, sample=5)
        assert report["records"] == report["revisions"] == report["record_vectors"] == len(ids)
        assert report["sample_checked"] == report["sample_found_by_search"] == 5

        # A row that is not what the store writes is caught (here: a stale text hash).
        sample = sorted(ids)[0]
        await storage.db.write(
            lambda c: c.execute(
                update(memory_vectors).where(memory_vectors.c.item_id == sample).values(text_hash="0" * 16)
            )
        )
        with pytest.raises(AssertionError):
            await bulk_memories.verify(storage, world, row_of, vecs, MODEL, sample=5)
    finally:
        await storage.close()
