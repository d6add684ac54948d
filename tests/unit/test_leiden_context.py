"""Context-aware Leiden (seed 004 §III-A) and the graph kernels it runs on."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hygraph.backends.graph import IGraphKernels, canonical_labels, make_graph_kernels
from hygraph.core.leiden_context import (
    centrality_penalty,
    community_hop_distance,
    context_aware_partition,
    context_budget,
    misalignment,
    select_context,
)

# Three 5-cliques joined in a chain by single bridges 4-5 and 9-10.
CLIQUES = [range(0, 5), range(5, 10), range(10, 15)]
EDGES = np.array([(a, b) for c in CLIQUES for a in c for b in c if a < b] + [(4, 5), (9, 10)])
N = 15


def embeddings(misaligned: dict[int, int]) -> np.ndarray:
    """Each node points along its clique's axis, except `misaligned` nodes, which point along another's."""
    rng = np.random.default_rng(0)
    z = np.zeros((N, 3))
    for c, members in enumerate(CLIQUES):
        z[list(members), c] = 1.0
    for node, comm in misaligned.items():
        z[node] = 0.0
        z[node, comm] = 1.0
    return z + 0.01 * rng.standard_normal(z.shape)


@pytest.fixture(scope="module")
def labels() -> np.ndarray:
    return IGraphKernels().leiden(N, EDGES, None, resolution=1.0, seed=0)


def test_leiden_recovers_the_cliques(labels: np.ndarray) -> None:
    assert labels.tolist() == [0] * 5 + [1] * 5 + [2] * 5


def test_misalignment_marks_nodes_closer_to_another_community(labels: np.ndarray) -> None:
    nodes, targets, sims = misalignment(embeddings({4: 1, 3: 1}), labels)
    assert nodes.tolist() == [3, 4]
    assert targets.tolist() == [1, 1]
    assert np.all(sims > 0.5)


def test_hop_distance_to_target_community(labels: np.ndarray) -> None:
    nodes = np.array([4, 3, 0, 12, 5])
    targets = np.array([1, 1, 2, 0, 1])
    d = community_hop_distance(N, EDGES, labels, nodes, targets, max_hops=2)
    # 4 touches 5; 3 reaches 5 through 4; 0 -> community 2 and 12 -> community 0 are 4 hops,
    # beyond the horizon but in the same component, so max_hops + 1; 5 is inside its target.
    assert d.tolist() == [1, 2, 3, 3, 0]


def test_hop_distance_matches_brute_force_bfs() -> None:
    rng = np.random.default_rng(3)
    n = 60
    edges = rng.integers(0, n, size=(70, 2))
    labels = canonical_labels(rng.integers(0, 8, size=n))
    nodes = np.arange(n)
    targets = rng.integers(0, labels.max() + 1, size=n)
    spl = IGraphKernels().shortest_path_lengths(n, edges, nodes)
    exact = np.array([spl[v, labels == t].min() for v, t in zip(nodes, targets)])
    for max_hops in (1, 2, 3):
        d = community_hop_distance(n, edges, labels, nodes, targets, max_hops=max_hops)
        within = exact <= max_hops
        assert np.array_equal(d[within], exact[within])
        far_finite = ~within & np.isfinite(exact)
        assert np.all(d[far_finite] == max_hops + 1)
        assert np.all(np.isinf(d[np.isinf(exact)]))


def test_context_nodes_follow_the_scores_and_core_never_moves(labels: np.ndarray) -> None:
    z = embeddings({4: 1, 3: 1})
    part = context_aware_partition(labels, z, EDGES, np.zeros(N), lambda_max=5, alpha=1.0)
    assert np.array_equal(part.labels, labels)
    assert part.n_communities == 3
    for c, members in enumerate(CLIQUES):
        assert part.core(c).tolist() == list(members)
    # M_1 = 2 candidates -> lambda_1 = floor(log2 3) = 1: the nearer one (4, one hop) wins.
    assert part.context(1).tolist() == [4]
    assert part.context(0).size == 0 and part.context(2).size == 0
    wider = context_aware_partition(labels, z, EDGES, np.zeros(N), lambda_max=5, alpha=2.0)
    assert wider.context(1).tolist() == [4, 3]
    capped = context_aware_partition(labels, z, EDGES, np.zeros(N), lambda_max=0, alpha=2.0)
    assert capped.context_nodes.size == 0


def test_betweenness_penalty_demotes_a_hub(labels: np.ndarray) -> None:
    z = embeddings({4: 1, 3: 1})
    b = IGraphKernels().betweenness(N, EDGES, sample=None)
    assert b.argmax() in (4, 5, 9, 10)  # the bridges carry every cross-clique path
    hub = np.zeros(N)
    hub[4] = 1.0
    part = context_aware_partition(labels, z, EDGES, hub, lambda_max=5, alpha=1.0)
    # s(4) = sim^2 / 2 / (1 + 1) is now below s(3) = sim^2 / 3, so node 3 takes the single slot.
    assert part.context(1).tolist() == [3]
    scores = centrality_penalty(np.array([1.0, 1.0]), np.array([0.0, 2.0, 4.0]), np.array([0, 2]))
    assert scores.tolist() == [1.0, 0.5]


def test_budget_matches_equation_2() -> None:
    assert context_budget(np.array([0, 1, 2, 3, 15, 1000]), 5, 1.0).tolist() == [0, 1, 1, 2, 4, 5]
    assert context_budget(np.array([7]), 10, 0.5).tolist() == [1]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.floats(0.0, 1.0)), max_size=60),
       st.integers(0, 6), st.floats(0.0, 3.0))
def test_selection_respects_the_budget(cands: list[tuple[int, float]], lambda_max: int, alpha: float) -> None:
    targets = np.array([c for c, _ in cands], dtype=np.int64)
    scores = np.array([s for _, s in cands], dtype=np.float64)
    nodes = np.arange(len(cands))
    ptr, chosen, chosen_scores = select_context(targets, nodes, scores, 4, lambda_max, alpha)
    for c in range(4):
        pool = np.flatnonzero((targets == c) & (scores > 0))
        budget = min(lambda_max, math.floor(alpha * math.log2(len(pool) + 1) + 1e-9))
        got = chosen[ptr[c]:ptr[c + 1]]
        assert len(got) == min(budget, len(pool))
        assert np.all(targets[got] == c)
        rest = np.setdiff1d(pool, got)
        if len(got) and len(rest):
            assert scores[got].min() >= scores[rest].max()
        assert np.all(np.diff(chosen_scores[ptr[c]:ptr[c + 1]]) <= 0)


def test_igraph_kernels_on_a_hand_checked_graph() -> None:
    kernels = make_graph_kernels("igraph")
    assert kernels.name == "igraph"
    path = np.array([(0, 1), (1, 2), (2, 3)])  # plus isolated vertex 4
    # Pairs (0,2), (0,3) pass through 1 and (0,3), (1,3) through 2: 2 of (n-1)(n-2)/2 = 6.
    assert np.allclose(kernels.betweenness(5, path, sample=None), [0, 1 / 3, 1 / 3, 0, 0])
    assert np.allclose(kernels.betweenness(5, path, sample=5), kernels.betweenness(5, path, sample=None))
    d = kernels.shortest_path_lengths(5, path, [0, 4])
    assert d[0].tolist() == [0, 1, 2, 3, math.inf]
    assert d[1].tolist() == [math.inf] * 4 + [0]
    triangles = np.array([(0, 1), (1, 2), (0, 2), (3, 4), (4, 5), (3, 5), (2, 3)])
    assert kernels.leiden(7, triangles, None, 1.0, seed=0).tolist() == [0, 0, 0, 1, 1, 1, 2]


def test_sampled_betweenness_is_deterministic_and_close() -> None:
    rng = np.random.default_rng(1)
    edges = rng.integers(0, 200, size=(600, 2))
    k = IGraphKernels()
    exact = k.betweenness(200, edges, sample=None)
    a = k.betweenness(200, edges, sample=100, seed=7)
    assert np.array_equal(a, k.betweenness(200, edges, sample=100, seed=7))
    assert np.corrcoef(exact, a)[0, 1] > 0.9


def test_factory_resolves_auto_once_and_rejects_unknown() -> None:
    assert make_graph_kernels("auto").name in ("igraph", "cugraph")
    with pytest.raises(ValueError, match="unknown graph backend"):
        make_graph_kernels("networkx")


@pytest.mark.gpu
def test_cugraph_kernels_match_igraph() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    pytest.importorskip("cugraph")
    gpu, cpu = make_graph_kernels("cugraph"), IGraphKernels()
    assert gpu.name == "cugraph"
    path = np.array([(0, 1), (1, 2), (2, 3)])
    assert np.allclose(gpu.betweenness(5, path, sample=None), cpu.betweenness(5, path, sample=None))
    assert np.array_equal(gpu.shortest_path_lengths(5, path, [0, 4]), cpu.shortest_path_lengths(5, path, [0, 4]))
    assert np.array_equal(gpu.leiden(N, EDGES, None, 1.0, seed=0), cpu.leiden(N, EDGES, None, 1.0, seed=0))
    rng = np.random.default_rng(1)
    edges = rng.integers(0, 200, size=(600, 2))
    edges = edges[edges[:, 0] != edges[:, 1]]
    assert np.corrcoef(gpu.betweenness(200, edges, sample=100, seed=7),
                       cpu.betweenness(200, edges, sample=100, seed=7))[0, 1] > 0.99
