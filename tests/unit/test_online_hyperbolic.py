"""HyperRAG §3.3 on a live index (indexing/online.py): L_inc steps from observed subgraphs, recalibration."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hygraph.config import HyperbolicConfig, UpdatesConfig
from hygraph.core.hyperbolic import (from_storage, init_from_text, lorentz_lift, norm_bound, poincare_distance,
                                     train_poincare)
from hygraph.indexing.online import OnlineLearner, install, observation, retrain

N, EMB_DIM = 12, 8
HC = HyperbolicConfig(dim=4, epochs=30, lr=0.05, negatives=4, batch_size=64)
UC = UpdatesConfig(online_steps=20, recalibrate_every=2, online_queue=3)
# Explicit graph: a path c0-c1-...-c5, and c6..c11 isolated.
EXPLICIT = np.array([(i, i + 1) for i in range(5)], dtype=np.int64)


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class Live:
    """The live points as the updater serves them: a table of points by chunk id, the explicit graph, M."""

    def __init__(self, ids: list[str], points: np.ndarray, edges: np.ndarray, emb: np.ndarray) -> None:
        self.ids, self.points_, self.edges, self.emb = list(ids), points, edges, emb
        self.M = norm_bound(lorentz_lift(points))

    def exists(self, chunk_id: str) -> bool:
        return chunk_id in self.ids

    def points(self, chunk_ids) -> np.ndarray:
        return self.points_[[self.ids.index(c) for c in chunk_ids]]

    def neighbours(self, chunk_id: str) -> list[str]:
        i = self.ids.index(chunk_id)
        return [self.ids[b if a == i else a] for a, b in self.edges.tolist() if i in (a, b)]

    def sample(self, k: int, rng: np.random.Generator, exclude: set[str]) -> list[str]:
        return [c for c in self.ids if c not in exclude][:k]

    def move(self, ids: list[str], vectors: np.ndarray) -> None:
        """What the updater does with a step's result: upsert the moved rows."""
        for cid, v in zip(ids, from_storage(vectors)):
            self.points_[self.ids.index(cid)] = v


def make_state() -> Live:
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((N, EMB_DIM)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    points = train_poincare(init_from_text(emb, HC.dim, HC.seed), EXPLICIT, epochs=5, lr=HC.lr,
                            negatives=HC.negatives, seed=0)
    return Live([f"c{i}" for i in range(N)], points, EXPLICIT.copy(), emb)


def query_vec(seed: int = 1) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(EMB_DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def tree(*edges: tuple[str, str]) -> dict:
    return {"nodes": sorted({c for _, c in edges}), "edges": [list(e) for e in edges], "root": "query"}


def test_a_step_moves_only_the_subgraph_and_its_neighbours_toward_the_query() -> None:
    state = make_state()
    before = state.points_.copy()
    learner = OnlineLearner(HC, UC)
    q = query_vec()
    learner.observe(observation(tree(("query", "c2"), ("query", "c8"), ("c8", "c9")), q))
    ids, vectors = learner.step(state)
    state.move(ids, vectors)
    after = state.points_
    moved = {f"c{i}" for i in np.flatnonzero(np.any(after != before, axis=1))}
    assert moved == set(ids) and {"c2", "c8", "c9"} <= moved
    assert moved <= {"c2", "c8", "c9", "c1", "c3"}  # c1, c3: c2's one-hop explicit neighbours
    assert len(after) == N  # the query's temporary row is gone
    np.testing.assert_allclose(from_storage(vectors), after[[int(i[1:]) for i in ids]], atol=1e-6)
    assert np.linalg.norm(lorentz_lift(after), axis=1).max() <= state.M
    anchor = init_from_text(q[None, :], HC.dim, HC.seed)
    for cid in ("c2", "c8"):
        row = int(cid[1:])
        assert poincare_distance(after[row], anchor[0]) < poincare_distance(before[row], anchor[0])
    assert poincare_distance(after[8], after[9]) < poincare_distance(before[8], before[9])


def test_ids_deleted_since_the_query_are_left_out() -> None:
    state = make_state()
    learner = OnlineLearner(HC, UC)
    learner.observe(observation(tree(("query", "gone"), ("gone", "c4")), query_vec()))
    ids, vectors = learner.step(state)
    assert ids == [] and vectors.shape == (0, HC.dim + 2)


def test_queue_drops_the_oldest_and_recalibration_comes_due() -> None:
    state = make_state()
    learner = OnlineLearner(HC, UC)
    for i in range(4):  # online_queue=3
        learner.observe(observation(tree(("query", f"c{i}")), query_vec(i)))
    assert learner.dropped == 1 and [o.edges[0][1] for o in learner.pending] == ["c1", "c2", "c3"]
    learner.step(state)
    assert not learner.recalibration_due
    learner.step(state)
    assert learner.recalibration_due  # recalibrate_every=2
    job = learner.recalibration(state.ids, state.emb, state.edges)
    assert not learner.recalibration_due and len(job.observations) == 2 and len(learner.pending) == 1


def test_retrain_uses_the_explicit_graph_and_every_accumulated_subgraph() -> None:
    state = make_state()
    learner = OnlineLearner(HC, UC)
    plain = retrain(learner.recalibration(state.ids, state.emb, state.edges), HC, "cpu")
    # Without implicit edges, recalibration is `hygraph index`'s training from the text projection.
    expected = train_poincare(init_from_text(state.emb, HC.dim, HC.seed), EXPLICIT, epochs=HC.epochs,
                              lr=HC.lr, negatives=HC.negatives, batch_size=HC.batch_size, seed=HC.seed)
    np.testing.assert_allclose(plain, expected)
    for i in range(4):  # c7 and c10 are isolated in the explicit graph; queries keep linking them
        learner.observe(observation(tree(("query", "c7"), ("c7", "c10")), query_vec(i)))
        state.move(*learner.step(state))
    linked = retrain(learner.recalibration(state.ids, state.emb, state.edges), HC, "cpu")
    assert linked.shape == (N, HC.dim)
    assert poincare_distance(linked[7], linked[10]) < poincare_distance(plain[7], plain[10])


def test_install_maps_by_id_keeps_newer_chunks_and_recomputes_the_bound() -> None:
    state = make_state()
    job = OnlineLearner(HC, UC).recalibration(state.ids, state.emb, state.edges)
    points = retrain(job, HC, "cpu")
    # While it trained, c0 was deleted and c12 inserted.
    live_ids = state.ids[1:] + ["c12"]
    newcomer = np.full(HC.dim, 0.1)
    current = np.vstack([state.points_[1:], newcomer])
    storage, m = install(live_ids, current, job.chunk_ids, points)
    installed = from_storage(storage)
    np.testing.assert_allclose(installed[:-1], points[1:], atol=1e-5)
    np.testing.assert_allclose(installed[-1], newcomer, atol=1e-6)
    assert m == pytest.approx(norm_bound(lorentz_lift(np.vstack([points[1:], newcomer]))))
    np.testing.assert_allclose(np.linalg.norm(storage.astype(np.float64), axis=1), m, rtol=1e-5)


class BoundedStore:
    """A vector store whose reads answer the rows as of the last `persist` (Milvus's bounded consistency: a
    read right after an upsert answers the older row)."""

    def __init__(self, rows: dict[str, np.ndarray]) -> None:
        self.visible, self.unpersisted = dict(rows), {}
        self.fetched: list[list[str]] = []

    def fetch(self, name: str, ids) -> np.ndarray:
        self.fetched.append(list(ids))
        return np.array([self.visible[i] for i in ids], np.float32)

    def upsert(self, name: str, ids, vectors, version: int) -> None:
        self.unpersisted.update(zip(ids, np.asarray(vectors, np.float32)))

    def persist(self, *names: str) -> None:
        self.visible.update(self.unpersisted)
        self.unpersisted.clear()


def test_the_updater_steps_from_the_points_it_moved_before_the_store_shows_them() -> None:
    """Two steps on one subgraph in one round: the second starts where the first left the points, not from
    the rows a bounded read of the collection still answers; after the round the store holds the same points
    as an updater whose every read saw every write."""
    from types import SimpleNamespace

    from hygraph.core.hyperbolic import storage_vectors
    from hygraph.updater.publishing import Points

    state = make_state()
    reference = make_state()
    store = BoundedStore(dict(zip(state.ids, storage_vectors(state.points_, state.M).astype(np.float32))))
    manifest = SimpleNamespace(hyperbolic=SimpleNamespace(M=state.M), collections={"hyperbolic": "col"})
    live = SimpleNamespace(version=SimpleNamespace(manifest=manifest, version=3))
    points = Points(SimpleNamespace(vectors=store), live)
    points.exists, points.neighbours, points.sample = state.exists, state.neighbours, state.sample

    learner, learner_ref = OnlineLearner(HC, UC), OnlineLearner(HC, UC)
    subgraph = tree(("query", "c2"), ("query", "c8"), ("c8", "c9"))
    for _ in range(2):
        learner.observe(observation(subgraph, query_vec()))
        learner_ref.observe(observation(subgraph, query_vec()))
    for _ in range(2):
        ids, vectors = learner.step(points)
        points.write(ids, vectors)
        reference.move(*learner_ref.step(reference))
    assert store.visible["c2"].tolist() == storage_vectors(state.points_, state.M)[2].astype(np.float32).tolist()
    points.persist()
    got = from_storage(np.array([store.visible[c] for c in state.ids]))
    np.testing.assert_allclose(got, reference.points_, atol=1e-5)
    store.fetched.clear()
    points.points(["c2", "c3"])
    assert store.fetched == [["c2", "c3"]]  # once persisted, the store answers them again
