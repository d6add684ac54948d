import multiprocessing as mp

import numpy as np
import pytest

from hygraph.errors import InputError
from hygraph.store.snapshot import SnapshotStore


def test_missing_index_dir_is_input_error(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        SnapshotStore(tmp_path / "nope")
    store = SnapshotStore(tmp_path / "idx", create=True)
    with pytest.raises(InputError, match="holds no index version"):
        store.open()


def test_commit_publishes_and_moves_current(tmp_path):
    store = SnapshotStore(tmp_path, create=True)
    with store.begin() as w:
        w.write_table("t", {"id": ["a", "b"]})
        w.write_array("v", np.eye(2, dtype=np.float32))
        snap = w.commit({"counts": {"t": 2}})
    assert store.current_version() == snap.version == 1
    opened = store.open()
    assert opened.table("t").column("id").to_pylist() == ["a", "b"]
    assert np.array_equal(opened.array("v"), np.eye(2))
    assert opened.manifest["counts"] == {"t": 2}


def test_failed_version_leaves_nothing_behind(tmp_path):
    store = SnapshotStore(tmp_path, create=True)
    with store.begin() as w:
        w.write_table("t", {"id": ["a"]})
        w.commit({})
    with pytest.raises(RuntimeError):
        with store.begin() as w:
            w.write_table("t", {"id": ["b"]})
            raise RuntimeError("crash mid-build")
    assert store.versions() == [1] and store.current_version() == 1
    assert [p.name for p in (tmp_path / "versions").iterdir()] == ["000001"]


def _commit_one(path: str) -> int:
    store = SnapshotStore(path, create=True)
    with store.begin() as w:
        w.write_table("t", {"id": ["x"]})
        return w.commit({}).version


def test_concurrent_writers_get_distinct_versions(tmp_path):
    with mp.get_context("spawn").Pool(2) as pool:
        versions = pool.map(_commit_one, [str(tmp_path)] * 4)
    assert sorted(versions) == [1, 2, 3, 4]
    assert SnapshotStore(tmp_path).current_version() == 4


def test_hybrid_graph_round_trips_through_a_version(tmp_path):
    from hygraph.core.graph import build_hybrid_graph
    from hygraph.store.graph_io import read_graph, write_graph

    graph = build_hybrid_graph(
        ["d1:0", "d2:0"], [{"a", "b", "c", "x"}, {"a", "b", "c", "x", "y"}],
        [("b", "a", "r2"), ("a", "y", "r1")], [("h1", ["a", "b"], "d1:0")], shared_entity_threshold=3)
    store = SnapshotStore(tmp_path, create=True)
    with store.begin() as w:
        write_graph(w, graph)
        w.commit({})
    back = read_graph(store.open())
    assert back.node_ids == graph.node_ids and back.relation_ids == graph.relation_ids
    assert (back.adjacency != graph.adjacency).nnz == 0
    assert back.relation_heads.tolist() == graph.relation_heads.tolist()
    assert back.edge_counts() == graph.edge_counts() and back.edge_counts()["chunk_chunk"] == 1
