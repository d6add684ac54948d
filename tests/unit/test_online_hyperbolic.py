"""HyperRAG §3.3 on a live index (indexing/online.py): L_inc steps from observed subgraphs, recalibration."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hygraph.config import HyperbolicConfig, UpdatesConfig
from hygraph.core.hyperbolic import (from_storage, init_from_text, lorentz_lift, norm_bound, poincare_distance,
                                     train_poincare)
from hygraph.indexing.online import OnlineLearner, install, observation, retrain
from hygraph.indexing.state import IndexState

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


def make_state() -> IndexState:
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((N, EMB_DIM)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    points = train_poincare(init_from_text(emb, HC.dim, HC.seed), EXPLICIT, epochs=5, lr=HC.lr,
                            negatives=HC.negatives, seed=0)
    return IndexState(version=3, manifest={}, docs=[], cols={"id": [f"c{i}" for i in range(N)], "embedding": emb},
                      hyp={"points": points, "edges": EXPLICIT.copy(), "M": norm_bound(lorentz_lift(points))})


def query_vec(seed: int = 1) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(EMB_DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def tree(*edges: tuple[str, str]) -> dict:
    return {"nodes": sorted({c for _, c in edges}), "edges": [list(e) for e in edges], "root": "query"}


def test_a_step_moves_only_the_subgraph_and_its_neighbours_toward_the_query() -> None:
    state = make_state()
    before = state.hyp["points"].copy()
    learner = OnlineLearner(HC, UC)
    q = query_vec()
    learner.observe(observation(tree(("query", "c2"), ("query", "c8"), ("c8", "c9")), q))
    ids, vectors = learner.step(state)
    after = state.hyp["points"]
    moved = {f"c{i}" for i in np.flatnonzero(np.any(after != before, axis=1))}
    assert moved == set(ids) and {"c2", "c8", "c9"} <= moved
    assert moved <= {"c2", "c8", "c9", "c1", "c3"}  # c1, c3: c2's one-hop explicit neighbours
    assert len(after) == N  # the query's temporary row is gone
    np.testing.assert_allclose(from_storage(vectors), after[[int(i[1:]) for i in ids]], atol=1e-6)
    assert np.linalg.norm(lorentz_lift(after), axis=1).max() <= state.hyp["M"]
    anchor = init_from_text(q[None, :], HC.dim, HC.seed)
    for cid in ("c2", "c8"):
        row = int(cid[1:])
        assert poincare_distance(after[row], anchor[0]) < poincare_distance(before[row], anchor[0])
    assert poincare_distance(after[8], after[9]) < poincare_distance(before[8], before[9])


def test_ids_deleted_since_the_query_are_left_out() -> None:
    state = make_state()
    before = state.hyp["points"].copy()
    learner = OnlineLearner(HC, UC)
    learner.observe(observation(tree(("query", "gone"), ("gone", "c4")), query_vec()))
    ids, vectors = learner.step(state)
    assert ids == [] and vectors.shape == (0, HC.dim + 2)
    np.testing.assert_array_equal(state.hyp["points"], before)


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
    job = learner.recalibration(state)
    assert not learner.recalibration_due and len(job.observations) == 2 and len(learner.pending) == 1


def test_retrain_uses_the_explicit_graph_and_every_accumulated_subgraph() -> None:
    state = make_state()
    learner = OnlineLearner(HC, UC)
    plain = retrain(learner.recalibration(state), HC, "cpu")
    # Without implicit edges, recalibration is `hygraph index`'s training from the text projection.
    expected = train_poincare(init_from_text(state.cols["embedding"], HC.dim, HC.seed), EXPLICIT, epochs=HC.epochs,
                              lr=HC.lr, negatives=HC.negatives, batch_size=HC.batch_size, seed=HC.seed)
    np.testing.assert_allclose(plain, expected)
    for i in range(4):  # c7 and c10 are isolated in the explicit graph; queries keep linking them
        learner.observe(observation(tree(("query", "c7"), ("c7", "c10")), query_vec(i)))
        learner.step(state)
    linked = retrain(learner.recalibration(state), HC, "cpu")
    assert linked.shape == (N, HC.dim)
    assert poincare_distance(linked[7], linked[10]) < poincare_distance(plain[7], plain[10])


def test_install_maps_by_id_keeps_newer_chunks_and_recomputes_the_bound() -> None:
    state = make_state()
    job = OnlineLearner(HC, UC).recalibration(state)
    points = retrain(job, HC, "cpu")
    # While it trained, c0 was deleted and c12 inserted (the state's rows moved).
    state.cols["id"] = state.cols["id"][1:] + ["c12"]
    newcomer = np.full(HC.dim, 0.1)
    state.hyp["points"] = np.vstack([state.hyp["points"][1:], newcomer])
    storage = install(state, job.chunk_ids, points)
    np.testing.assert_allclose(state.hyp["points"][:-1], points[1:])
    np.testing.assert_array_equal(state.hyp["points"][-1], newcomer)
    assert state.hyp["M"] == pytest.approx(norm_bound(lorentz_lift(state.hyp["points"])))
    np.testing.assert_allclose(np.linalg.norm(storage.astype(np.float64), axis=1), state.hyp["M"], rtol=1e-5)
