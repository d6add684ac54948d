"""Exact search over a version's mapped vectors (store/exact.py), and the engine's Search answering from it."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
import pytest

from hygraph.errors import StoreError
from hygraph.store import exact
from hygraph.store.artifacts import CHUNKS, RELATIONS, SUMMARIES, ChunkRow, RelationRow, SummaryRow
from hygraph.store.exact import ExactVectors, exact_searches, scores_of, scores_of_many, store_held, top_rows
from hygraph.store.manifest import Manifest
from hygraph.store.reading import VersionReader, VersionSearch
from hygraph.store.versions import IndexStore

DIMS = {"text": 2}


def _chunk(cid: str, x: float, y: float) -> ChunkRow:
    return ChunkRow(cid, "d", 0, "text", 1, "t", (), (), (), np.array([x, y], np.float32))


def _summary(sid: str, layer: int, x: float, y: float) -> SummaryRow:
    return SummaryRow(sid, layer, "s", (), (), "", np.zeros(0, np.int64), np.array([x, y], np.float32))


def _commit(store: IndexStore, artifact, base=None, rows=(), dead=()) -> int:
    with store.begin() as w:
        if base is None:
            w.replace(artifact, list(rows), DIMS)
        else:
            w.change(base, artifact, list(rows), list(dead), DIMS)
        w.commit(Manifest(dims=DIMS))
        return w.version


def test_top_rows_largest_first_ties_by_row_and_only_allowed_rows() -> None:
    scores = np.array([0.1, 0.9, 0.5, 0.9, 0.3], np.float32)
    assert top_rows(scores, 3).tolist() == [1, 3, 2]
    assert top_rows(scores, 9).tolist() == [1, 3, 2, 4, 0]
    assert top_rows(scores, 2, np.array([True, False, True, False, True])).tolist() == [2, 4]


def test_scores_equal_the_products_for_one_and_for_many_queries(monkeypatch: pytest.MonkeyPatch) -> None:
    """One query by faiss's inner products, over a read-only matrix (a mapped segment's); several by the blocked
    matrix-matrix product from GEMM_FROM queries on, by one product per query below."""
    rng = np.random.default_rng(0)
    matrix, q = rng.random((10, 4), dtype=np.float32), rng.random(4, dtype=np.float32)
    matrix.setflags(write=False)
    np.testing.assert_allclose(scores_of(matrix, q), matrix @ q, rtol=1e-6)
    np.testing.assert_allclose(scores_of(matrix[:0], q), np.zeros(0))
    monkeypatch.setattr(exact, "GEMM_BLOCK_PRODUCTS", 12)  # 1 row a block at 3 queries of 4
    for n in (1, exact.GEMM_FROM - 1, exact.GEMM_FROM, 5):
        queries = rng.random((n, 4), dtype=np.float32)
        np.testing.assert_allclose(scores_of_many(matrix, queries), queries @ matrix.T, rtol=1e-6)
    with pytest.raises(ValueError, match="float32"):
        scores_of(matrix.astype(np.float64), q)


def test_a_version_scores_its_live_rows_only(tmp_path) -> None:
    store = IndexStore(tmp_path, create=True)
    v1 = _commit(store, CHUNKS, rows=[_chunk("a", 1, 0), _chunk("b", 0, 1), _chunk("c", 0.6, 0.8)])
    # v2: b moves away from the query, c is deleted, d is added (a second segment)
    v2 = _commit(store, CHUNKS, store.open(v1).table(CHUNKS), rows=[_chunk("b", -1, 0), _chunk("d", 0.8, 0.6)],
                 dead=["c"])
    q = np.array([[0.0, 1.0]], np.float32)
    old, new = ExactVectors.mapped(store.open(v1).table(CHUNKS)), ExactVectors.mapped(store.open(v2).table(CHUNKS))
    assert [[(i, round(s, 6)) for i, s in row] for row in old.search(q, 2)] == [[("b", 1.0), ("c", 0.8)]]
    assert [[(i, round(s, 6)) for i, s in row] for row in new.search(q, 9)] == [
        [("d", 0.6), ("a", 0.0), ("b", 0.0)]]
    # two query rows, each its own ranking; k = 0 asks for nothing
    assert [[i for i, _ in row] for row in new.search(np.array([[1, 0], [0, 1]], np.float32), 1)] == [["a"], ["d"]]
    assert new.search(q, 0) == [[]]


def test_a_layer_limits_the_summaries_searched(tmp_path) -> None:
    store = IndexStore(tmp_path, create=True)
    v = _commit(store, SUMMARIES, rows=[_summary("L1:0", 1, 1, 0), _summary("L2:0", 2, 0.9, 0.1),
                                         _summary("L1:1", 1, 0, 1)])
    found = ExactVectors.mapped(store.open(v).table(SUMMARIES), layered=True)
    q = np.array([[1.0, 0.0]], np.float32)
    assert [i for i, _ in found.search(q, 3)[0]] == ["L1:0", "L2:0", "L1:1"]
    assert [i for i, _ in found.search(q, 3, layer=1)[0]] == ["L1:0", "L1:1"]
    assert [i for i, _ in found.search(q, 3, layer=2)[0]] == ["L2:0"]


def test_only_small_collections_of_the_versions_kinds_are_searched_in_process(tmp_path) -> None:
    store = IndexStore(tmp_path, create=True)
    v = store.open(_commit(store, CHUNKS, rows=[_chunk("a", 1, 0), _chunk("b", 0, 1)]))
    assert set(exact_searches(v, {"chunks": "col", "entities": "col"}, 2)) == {"chunks"}  # no entities table
    assert exact_searches(v, {"chunks": "col"}, 1) == {}  # over the threshold
    assert exact_searches(v, {"chunks": "col"}, 0) == {}  # 0: never
    assert exact_searches(v, {"relations": "col"}, 2) == {}  # a collection whose vectors are not in segments


class StoreOnly:
    """A vector store that answers `relations` only: any other collection must be searched in process."""

    def search(self, name: str, queries: np.ndarray, k: int, layer: int | None = None) -> list[list]:
        assert name == "col_relations"
        from hygraph.backends.vectorstore import Hit
        return [[Hit("r1", 0.5), Hit("stale", 0.4)] for _ in queries]


def test_the_engines_search_answers_small_collections_in_process(tmp_path) -> None:
    store = IndexStore(tmp_path, create=True)
    v = store.open(_commit(store, CHUNKS, rows=[_chunk("a", 1, 0), _chunk("b", 0, 1)]))
    loaded = SimpleNamespace(collections={"chunks": "col_chunks", "relations": "col_relations"},
                             view=SimpleNamespace(known=lambda kind: {"r1"}), exact=exact_searches(v, {"chunks"}, 10))
    q = np.array([[0.0, 1.0]], np.float32)
    with ThreadPoolExecutor(max_workers=2) as pool:
        search = VersionSearch(StoreOnly(), loaded, pool)
        chunks, relations = search.start([("chunks", q, 1, None), ("relations", q, 2, None)])()
    assert [[i for i, _ in row] for row in chunks] == [["b"]]
    assert relations == [[("r1", 0.5)]]


def test_relations_are_searched_in_process_from_vectors_read_from_the_store(tmp_path) -> None:
    store = IndexStore(tmp_path, create=True)
    v = store.open(_commit(store, RELATIONS, rows=[RelationRow("r1", "a", "knows", "b", 1.0, ()),
                                                    RelationRow("r2", "b", "likes", "c", 1.0, ())]))
    assert store_held(v, {"relations": "col_relations"}, 2) == {"relations": ["r1", "r2"]}
    assert store_held(v, {"relations": "col_relations"}, 1) == {}
    vectors = {"r1": [1.0, 0.0], "r2": [0.6, 0.8]}

    class Fetching:
        def fetch(self, name: str, ids: list[str]) -> np.ndarray:
            assert name == "col_relations"
            return np.array([vectors[i] for i in ids], np.float32)

    class Failing:
        def fetch(self, name: str, ids: list[str]) -> np.ndarray:
            raise StoreError("no vector for id 'r2'")

    def reader(vectors: object, from_store: bool = True) -> SimpleNamespace:
        out = SimpleNamespace(index=SimpleNamespace(vectors=vectors), exact_max_rows=10, exact_from_store=from_store)
        out._vectors = lambda *a: VersionReader._vectors(out, *a)
        return out

    exact = VersionReader._exact(reader(Fetching()), v, {"relations": "col_relations"})
    found = exact["relations"].search(np.array([[0.0, 1.0]], np.float32), 2)[0]
    assert [(i, round(s, 6)) for i, s in found] == [("r2", 0.8), ("r1", 0.0)]
    # a collection whose vectors cannot be read is left to the store, and so is every one without exact_from_store
    assert VersionReader._exact(reader(Failing()), v, {"relations": "col_relations"}) == {}
    assert VersionReader._exact(reader(Fetching(), from_store=False), v, {"relations": "col_relations"}) == {}


def test_a_newer_version_reads_only_the_rows_the_served_one_did_not_hold(tmp_path) -> None:
    store = IndexStore(tmp_path, create=True)
    v = store.open(_commit(store, RELATIONS, rows=[RelationRow("r1", "a", "knows", "b", 1.0, ()),
                                                    RelationRow("r3", "c", "likes", "d", 1.0, ())]))
    vectors = {"r1": [1.0, 0.0], "r2": [0.6, 0.8], "r3": [0.0, 1.0]}
    asked: list[list[str]] = []

    class Fetching:
        def fetch(self, name: str, ids: list[str]) -> np.ndarray:
            asked.append(list(ids))
            return np.array([vectors[i] for i in ids], np.float32)

    reader = SimpleNamespace(index=SimpleNamespace(vectors=Fetching()), exact_max_rows=10, exact_from_store=True)
    reader._vectors = lambda *a: VersionReader._vectors(reader, *a)
    before = ExactVectors.of(["r1", "r2"], np.array([[1.0, 0.0], [0.6, 0.8]], np.float32))
    served = SimpleNamespace(collections={"relations": "col_relations"}, exact={"relations": before})
    exact = VersionReader._exact(reader, v, {"relations": "col_relations"}, served)
    assert asked == [["r3"]]  # r1 reused, r2 gone with its row, r3 new
    found = exact["relations"].search(np.array([[0.0, 1.0]], np.float32), 3)[0]
    assert [(i, round(s, 6)) for i, s in found] == [("r3", 1.0), ("r1", 0.0)]
    asked.clear()  # another collection (a rebuild's): every row read again
    VersionReader._exact(reader, v, {"relations": "col2_relations"}, served)
    assert asked == [["r1", "r3"]]



def test_queries_asked_together_are_answered_by_one_scan_as_each_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads that ask while a scan runs wait and go in one product of all their queries; each gets what it
    would have got alone (the same rows in the same order; layers and k per query)."""
    rng = np.random.default_rng(1)
    matrix = rng.standard_normal((300, 8)).astype(np.float32)
    layers = np.arange(300) % 3
    searched = ExactVectors([exact._Part(matrix[:200], [f"a{i}" for i in range(200)], None, layers[:200]),
                             exact._Part(matrix[200:], [f"b{i}" for i in range(100)], np.arange(100) % 2 == 0,
                                         layers[200:])])
    asks = [(rng.standard_normal((1 + i % 2, 8)).astype(np.float32), 3 + i, None if i % 3 else i % 3)
            for i in range(7)]
    alone = [searched.search(q, k, layer) for q, k, layer in asks]

    first_scan, queued = threading.Event(), threading.Event()
    products: list[int] = []
    real_one, real_many = exact.scores_of, exact.scores_of_many

    def slow_first(m: np.ndarray, q: np.ndarray) -> np.ndarray:
        if not first_scan.is_set():  # the first scan waits until every other thread has queued its queries
            first_scan.set()
            assert queued.wait(10)
        return real_one(m, q)

    def counted(m: np.ndarray, queries: np.ndarray) -> np.ndarray:
        products.append(len(queries))
        return real_many(m, queries)

    monkeypatch.setattr(exact, "scores_of", slow_first)
    monkeypatch.setattr(exact, "scores_of_many", counted)
    lone = np.ones((1, 8), np.float32)
    with ThreadPoolExecutor(len(asks) + 1) as pool:
        leader = pool.submit(searched.search, lone, 2)
        assert first_scan.wait(10)
        together = [pool.submit(searched.search, q, k, layer) for q, k, layer in asks]
        while len(searched._waiting) < sum(len(q) for q, _, _ in asks):
            threading.Event().wait(0.01)
        queued.set()
        got = [f.result(10) for f in together]
        assert leader.result(10) == ExactVectors(searched.parts).search(lone, 2)
    assert products == [sum(len(q) for q, _, _ in asks)] * 2  # one product per part for all 10 queries
    assert [[[i for i, _ in hits] for hits in g] for g in got] == [[[i for i, _ in hits] for hits in a] for a in alone]
    for g, a in zip(got, alone):
        for hits, lone_hits in zip(g, a):
            np.testing.assert_allclose([s for _, s in hits], [s for _, s in lone_hits], rtol=1e-5)


def test_a_failed_scan_fails_every_query_it_held(monkeypatch: pytest.MonkeyPatch) -> None:
    searched = ExactVectors.of(["r1", "r2"], np.array([[1.0, 0.0], [0.0, 1.0]], np.float32))

    def broken(m: np.ndarray, queries: np.ndarray) -> np.ndarray:
        raise MemoryError("no room for the scores")

    monkeypatch.setattr(exact, "scores_of_many", broken)
    with pytest.raises(MemoryError):
        searched.search(np.eye(2, dtype=np.float32), 1)
    # The next scan is not held up by the failed one.
    monkeypatch.undo()
    assert searched.search(np.eye(2, dtype=np.float32), 1) == [[("r1", 1.0)], [("r2", 1.0)]]
