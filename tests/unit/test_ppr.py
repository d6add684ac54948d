"""Personalized PageRank (core/ppr.py) on hand-checked graphs, and the walk's subject edges (propagation.py)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from hygraph.core.graph import build_hybrid_graph
from hygraph.core.ppr import Walk, forward_push, personalized_pagerank, transition
from hygraph.core.retrieval.propagation import subject_pairs

ALL = {"entity_chunk": 1.0, "entity_entity": 1.0, "chunk_chunk": 1.0, "hyperedge_entity": 1.0, "hyperedge_chunk": 1.0}


def chain():
    # c0 - a - c1 - b   (chunks c0, c1; entities a, b): nodes 0 c0, 1 c1, 2 a, 3 b
    return build_hybrid_graph(["c0", "c1"], [["a"], ["a", "b"]], [], [])


def test_transition_is_column_stochastic_and_weighted_by_kind():
    g = build_hybrid_graph(["c0"], [["a", "b"]], [("a", "b", "r1")], [])  # nodes: c0, a, b
    walk = transition(g, {"entity_chunk": 1.0, "entity_entity": 3.0})
    m = walk.matrix.toarray()
    assert m.sum(axis=0) == pytest.approx([1.0, 1.0, 1.0])
    # from a: to c0 with weight 1, to b with weight 3
    assert m[:, 1] == pytest.approx([0.25, 0.0, 0.75])
    assert m[:, 0] == pytest.approx([0.0, 0.5, 0.5])


def test_zero_weight_kinds_drop_out_and_leave_dangling_nodes():
    g = build_hybrid_graph(["c0", "c1"], [[], []], [("a", "b", "r1")], [])
    walk = transition(g, {"entity_chunk": 1.0})
    assert walk.matrix.nnz == 0
    assert walk.dangling.tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="unknown edge kinds"):
        transition(g, {"chunk_entity": 1.0})


def test_subject_edges_take_the_extra_weight_both_ways():
    g = chain()
    subject = np.array([[1, 3]])  # c1 is about b
    m = transition(g, ALL, subject, subject_weight=4.0).matrix.toarray()
    # from c1: a with 1, b with 4;  from b: only c1
    assert m[:, 1] == pytest.approx([0.0, 0.0, 0.2, 0.8])
    assert m[:, 3] == pytest.approx([0.0, 1.0, 0.0, 0.0])


def test_ppr_on_a_chain_matches_the_closed_form():
    g = chain()
    walk = transition(g, ALL)
    reset = np.array([1.0, 0.0, 0.0, 0.0])
    p = personalized_pagerank(walk, reset, damping=0.5, tol=1e-12, max_iter=500)
    # exact solution of p = 0.5 r + 0.5 T p for this chain
    t = walk.matrix.toarray()
    exact = np.linalg.solve(np.eye(4) - 0.5 * t, 0.5 * reset)
    assert p == pytest.approx(exact, abs=1e-6)
    assert p.sum() == pytest.approx(1.0)
    assert p[0] > p[2] > p[1] > p[3]  # mass falls with distance from the seed


def test_dangling_mass_returns_to_the_seeds():
    g = build_hybrid_graph(["c0", "c1"], [["a"], []], [], [])  # c1 has no edge
    walk = transition(g, ALL)
    p = personalized_pagerank(walk, np.array([0.0, 1.0, 0.0]), damping=0.8, tol=1e-12, max_iter=500)
    assert p == pytest.approx([0.0, 1.0, 0.0])


def test_ppr_rejects_bad_input():
    walk = transition(chain(), ALL)
    with pytest.raises(ValueError):
        personalized_pagerank(walk, np.zeros(4))
    with pytest.raises(ValueError):
        personalized_pagerank(walk, np.ones(3))
    with pytest.raises(ValueError):
        personalized_pagerank(walk, np.ones(4), damping=1.0)


def test_subject_pairs_link_a_chunk_to_the_entity_its_title_names():
    g = build_hybrid_graph(["x:0", "y:0"], [["film x", "dan smith"], ["dan smith"]], [], [])
    pairs = subject_pairs(g, {"x:0": "x", "y:0": "y"}, {"x": "Film X", "y": "Nobody"})
    assert pairs.tolist() == [[0, g.node_index["film x"]]]


def exact_ppr(walk, reset, damping):
    """p = (1 - d) r + d (T p + dangling mass r), solved directly."""
    n = reset.shape[0]
    r = reset / reset.sum()
    t = walk.matrix.toarray() + np.outer(r, np.isin(np.arange(n), walk.dangling))
    return np.linalg.solve(np.eye(n) - damping * t, (1 - damping) * r)


def test_forward_push_on_a_chain_matches_the_closed_form():
    walk = transition(chain(), ALL)
    reset = np.array([1.0, 0.0, 0.0, 0.0])
    p, rounds = forward_push(walk, reset, damping=0.5, epsilon=1e-10)
    assert p == pytest.approx(exact_ppr(walk, reset, 0.5), abs=1e-6)
    assert rounds > 1


def test_forward_push_returns_dangling_mass_to_the_seeds():
    g = build_hybrid_graph(["c0", "c1"], [["a"], []], [], [])  # c1 has no edge
    p, _ = forward_push(transition(g, ALL), np.array([0.0, 1.0, 0.0]), damping=0.8, epsilon=1e-10)
    assert p == pytest.approx([0.0, 1.0, 0.0], abs=1e-6)


def test_forward_push_stays_where_the_mass_goes():
    # two components: c0 - a and c1 - b; seeded on c0, nothing of c1's component is touched
    g = build_hybrid_graph(["c0", "c1"], [["a"], ["b"]], [], [])  # nodes: c0, c1, a, b
    p, _ = forward_push(transition(g, ALL), np.array([1.0, 0.0, 0.0, 0.0]), damping=0.7, epsilon=1e-6)
    assert p[1] == 0.0 and p[3] == 0.0
    assert p[0] > p[2] > 0


def test_forward_push_error_shrinks_with_epsilon():
    walk = transition(chain(), ALL)
    reset = np.array([0.0, 2.0, 1.0, 0.0])
    exact = exact_ppr(walk, reset, 0.7)
    errors = [np.abs(forward_push(walk, reset, 0.7, eps)[0] - exact).sum() for eps in (1e-1, 1e-2, 1e-3, 1e-5)]
    assert errors == sorted(errors, reverse=True)
    assert errors[-1] < 1e-4


def test_forward_push_rejects_bad_input():
    walk = transition(chain(), ALL)
    for reset, kwargs in ((np.zeros(4), {}), (np.ones(3), {}), (np.ones(4), {"damping": 1.0}),
                          (np.ones(4), {"epsilon": 0.0}), (np.array([1.0, -1.0, 1.0, 1.0]), {})):
        with pytest.raises(ValueError):
            forward_push(walk, reset, **kwargs)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 12), density=st.floats(0.0, 0.6), seed=st.integers(0, 2**31 - 1),
       damping=st.floats(0.05, 0.9))
def test_forward_push_converges_to_power_iteration_on_random_graphs(n, density, seed, damping):
    rng = np.random.default_rng(seed)
    weights = np.triu(rng.random((n, n)) * (rng.random((n, n)) < density), 1)
    adjacency = sp.csc_matrix(weights + weights.T, dtype=np.float32)
    out = np.asarray(adjacency.sum(axis=0)).ravel()
    matrix = sp.csc_matrix(adjacency.multiply(1.0 / np.where(out > 0, out, 1.0)), dtype=np.float32)
    walk = Walk(matrix, np.flatnonzero(out == 0))
    reset = rng.random(n) * (rng.random(n) < 0.5)
    reset[rng.integers(n)] += 1.0
    pushed, _ = forward_push(walk, reset, damping, epsilon=1e-9)
    powered = personalized_pagerank(walk, reset, damping, tol=1e-10, max_iter=2000)
    assert pushed == pytest.approx(powered, abs=1e-5)
    assert pushed.sum() == pytest.approx(1.0, abs=1e-5)
