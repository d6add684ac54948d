import numpy as np
import pytest

from hygraph.backends.vectorstore.faiss_store import FaissStore
from hygraph.config import VectorStoreConfig
from hygraph.errors import StoreError


def _unit(rows):
    v = np.asarray(rows, dtype=np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_ip_search_upsert_delete_and_reopen(tmp_path):
    cfg = VectorStoreConfig(backend="faiss")
    store = FaissStore(cfg, tmp_path, "cpu")
    store.create("c_chunks", 3, "IP")
    store.upsert("c_chunks", ["a", "b", "c"], _unit([[1, 0, 0], [0, 1, 0], [1, 1, 0]]), version=1)
    store.seal("c_chunks")
    [hits] = store.search("c_chunks", _unit([[1, 0.1, 0]]), 2)
    assert [h.id for h in hits] == ["a", "c"]
    store.upsert("c_chunks", ["a"], _unit([[0, 0, 1]]), version=2)  # replaces a, no duplicate
    store.delete("c_chunks", ["c"])
    store.seal("c_chunks")
    reopened = FaissStore(cfg, tmp_path, "cpu")
    reopened.open("c_chunks")
    [hits] = reopened.search("c_chunks", _unit([[1, 0.1, 0]]), 3)
    assert [h.id for h in hits] == ["b", "a"]


def test_l2_and_layer_filter(tmp_path):
    store = FaissStore(VectorStoreConfig(backend="faiss"), tmp_path, "cpu")
    store.create("c_summaries", 2, "L2")
    store.upsert("c_summaries", ["L1:0", "L1:1", "L2:0"], np.array([[0, 0], [5, 5], [0.1, 0]], np.float32),
                 version=1, layers=[1, 1, 2])
    [hits] = store.search("c_summaries", np.array([[0, 0]], np.float32), 2)
    assert [h.id for h in hits] == ["L1:0", "L2:0"] and hits[0].score == pytest.approx(0.0)
    [hits] = store.search("c_summaries", np.array([[0, 0]], np.float32), 5, layer=1)
    assert [(h.id, h.layer) for h in hits] == [("L1:0", 1), ("L1:1", 1)]
    assert hits[1].score == pytest.approx(50.0)


def test_missing_collection_is_a_store_error(tmp_path):
    with pytest.raises(StoreError, match="not found"):
        FaissStore(VectorStoreConfig(backend="faiss"), tmp_path, "cpu").open("nope")


def test_hnsw_is_saved_at_seal_and_agrees_with_exact_search(tmp_path):
    rng = np.random.default_rng(0)
    vecs = _unit(rng.normal(size=(3000, 32)))
    ids = [f"e{i}" for i in range(3000)]
    queries = _unit(rng.normal(size=(50, 32)))
    hnsw = FaissStore(VectorStoreConfig(backend="faiss", index_type="HNSW"), tmp_path / "h", "cpu")
    flat = FaissStore(VectorStoreConfig(backend="faiss", index_type="FLAT"), tmp_path / "f", "cpu")
    for store in (hnsw, flat):
        store.create("c_entities", 32, "IP")
        store.upsert("c_entities", ids, vecs, version=1)
        store.seal("c_entities")
    assert (tmp_path / "h" / "c_entities" / "index.faiss").is_file()
    assert not (tmp_path / "f" / "c_entities" / "index.faiss").exists()
    reopened = FaissStore(VectorStoreConfig(backend="faiss", index_type="HNSW"), tmp_path / "h", "cpu")
    reopened.open("c_entities")
    approx = reopened.search("c_entities", queries, 10)
    exact = flat.search("c_entities", queries, 10)
    overlap = np.mean([len({h.id for h in a} & {h.id for h in e}) / 10 for a, e in zip(approx, exact)])
    assert overlap >= 0.95
    assert [h.id for h in exact[0]][:1] == [h.id for h in approx[0]][:1]
    assert approx[0][0].score == pytest.approx(float(vecs[int(approx[0][0].id[1:])] @ queries[0]), abs=1e-5)
