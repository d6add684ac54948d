import itertools

import numpy as np
import pytest

from hygraph.core.graph import EDGE_KINDS, HybridGraph, build_hybrid_graph

CHUNKS = ["d:0", "d:1", "d:2", "d:3"]
MENTIONS = [
    ["a", "b", "c", "d"],
    ["a", "b", "c", "d", "e", "a"],  # repeated mention collapses
    ["a", "b", "c"],
    [],
]
RELATIONS = [("a", "b", "r1"), ("b", "a", "r2"), ("e", "f", "r3"), ("a", "a", "r4")]
HYPEREDGES = [("h1", ["a", "c", "g"], "d:2"), ("h1", ["d"], "d:0"), ("h2", ["b", "e"], "d:1")]


def build(threshold: int = 3) -> HybridGraph:
    return build_hybrid_graph(CHUNKS, MENTIONS, RELATIONS, HYPEREDGES, shared_entity_threshold=threshold)


def has_edge(g: HybridGraph, u: str, v: str) -> bool:
    i, j = g.node_index[u], g.node_index[v]
    return bool(g.adjacency[i, j]) and bool(g.adjacency[j, i])


def test_nodes_are_grouped_by_kind_with_sorted_entities_and_hyperedges():
    g = build()
    assert g.chunk_ids == CHUNKS
    assert g.entity_ids == ["a", "b", "c", "d", "e", "f", "g"]  # f only in a relation, g only in a hyperedge
    assert g.hyperedge_ids == ["h1", "h2"]
    assert g.node_ids == CHUNKS + g.entity_ids + g.hyperedge_ids
    assert g.node_kinds().tolist() == [0] * 4 + [1] * 7 + [2] * 2
    assert g.node_index["a"] == 4 and g.node_index["h1"] == 11


def test_chunk_edges_need_more_than_l_shared_entities():
    g = build(threshold=3)
    assert has_edge(g, "d:0", "d:1")  # 4 shared > 3
    assert not has_edge(g, "d:0", "d:2")  # exactly 3 shared is not enough
    assert not has_edge(g, "d:1", "d:2")
    g2 = build(threshold=2)
    assert has_edge(g2, "d:0", "d:2") and has_edge(g2, "d:1", "d:2")


def test_edges_of_every_kind():
    g = build()
    assert has_edge(g, "a", "b") and has_edge(g, "e", "f")
    assert not has_edge(g, "a", "c")
    assert g.adjacency.diagonal().sum() == 0  # the a-a relation adds no self-loop
    assert has_edge(g, "a", "d:0") and has_edge(g, "e", "d:1") and not has_edge(g, "e", "d:0")
    for e in ["a", "c", "d", "g"]:
        assert has_edge(g, "h1", e)
    assert not has_edge(g, "h1", "b")
    assert has_edge(g, "h1", "d:2") and has_edge(g, "h1", "d:0") and not has_edge(g, "h1", "d:1")
    assert has_edge(g, "h2", "d:1")
    assert (g.adjacency != g.adjacency.T).nnz == 0
    assert set(g.adjacency.data) == {1.0}


def test_edge_counts():
    counts = build().edge_counts()
    assert list(counts) == list(EDGE_KINDS)
    assert counts == {"chunk_chunk": 1, "entity_entity": 2, "entity_chunk": 12,
                      "hyperedge_entity": 6, "hyperedge_chunk": 3}


def test_incidence_entity_graph_and_co_mentions():
    g = build()
    inc = g.chunk_entity().toarray()
    assert inc.shape == (4, 7)
    assert inc[1].tolist() == [1, 1, 1, 1, 1, 0, 0]
    assert inc[3].sum() == 0
    ent = g.entity_graph().toarray()
    a, b, e, f = (g.entity_ids.index(x) for x in "abef")
    assert ent[a, b] == ent[b, a] == 2  # two relations between a and b
    assert ent[e, f] == 1 and ent[a, a] == 0
    assert ent.sum() == 6
    co = g.co_mentions().toarray()
    c, d = g.entity_ids.index("c"), g.entity_ids.index("d")
    assert co[a, b] == 3 and co[d, e] == 1 and co[c, d] == 2
    assert np.all(np.diag(co) == 0)


def test_relations_are_kept_with_global_indices():
    g = build()
    assert g.relation_ids == ["r1", "r2", "r3", "r4"]
    assert [g.node_ids[i] for i in g.relation_heads] == ["a", "b", "e", "a"]
    assert [g.node_ids[i] for i in g.relation_tails] == ["b", "a", "f", "a"]


def test_round_trip_through_arrays():
    g = build()
    arrays = g.to_arrays()
    for key in ("chunk_ids", "entity_ids", "hyperedge_ids", "relation_ids"):
        assert isinstance(arrays[key], list)
    assert np.all(arrays["edge_src"] < arrays["edge_dst"])
    back = HybridGraph.from_arrays(arrays)
    assert back.node_ids == g.node_ids
    assert back.relation_ids == g.relation_ids
    assert (back.adjacency != g.adjacency).nnz == 0
    np.testing.assert_array_equal(back.relation_heads, g.relation_heads)
    np.testing.assert_array_equal(back.relation_tails, g.relation_tails)
    assert back.edge_counts() == g.edge_counts()


def test_chunk_edges_match_pairwise_definition_on_random_graph():
    rng = np.random.default_rng(7)
    chunks = [f"c:{i}" for i in range(60)]
    mentions = [[f"e{j}" for j in rng.choice(40, size=rng.integers(0, 12), replace=False)] for _ in chunks]
    g = build_hybrid_graph(chunks, mentions, [], [], shared_entity_threshold=2)
    for i, j in itertools.combinations(range(60), 2):
        expected = len(set(mentions[i]) & set(mentions[j])) > 2
        assert bool(g.adjacency[i, j]) == expected


def test_a_hub_entity_neither_links_nor_counts():
    # "hub" is mentioned by all four chunks: with hub_chunks=3 it is left out, so d:0 and d:1 share only
    # a and b (2, not > 2) and lose their edge; d:2 and d:3 share x, y, z without it and keep theirs.
    mentions = [["hub", "a", "b"], ["hub", "a", "b"], ["hub", "x", "y", "z"], ["hub", "x", "y", "z"]]
    full = build_hybrid_graph(CHUNKS, mentions, [], [], shared_entity_threshold=2)
    capped = build_hybrid_graph(CHUNKS, mentions, [], [], shared_entity_threshold=2, hub_chunks=3)
    assert has_edge(full, "d:0", "d:1") and has_edge(full, "d:2", "d:3")
    assert not has_edge(capped, "d:0", "d:1") and has_edge(capped, "d:2", "d:3")
    assert has_edge(capped, "d:0", "hub")  # its mentions stay


def test_a_cap_no_entity_exceeds_changes_nothing():
    rng = np.random.default_rng(3)
    chunks = [f"c:{i}" for i in range(80)]
    mentions = [[f"e{j}" for j in rng.choice(30, size=rng.integers(0, 10), replace=False)] for _ in chunks]
    most = max(sum(f"e{j}" in m for m in mentions) for j in range(30))
    full = build_hybrid_graph(chunks, mentions, [], [], shared_entity_threshold=1)
    at_cap = build_hybrid_graph(chunks, mentions, [], [], shared_entity_threshold=1, hub_chunks=most)
    below = build_hybrid_graph(chunks, mentions, [], [], shared_entity_threshold=1, hub_chunks=most - 1)
    assert (at_cap.adjacency != full.adjacency).nnz == 0
    assert (below.adjacency != full.adjacency).nnz > 0


def test_empty_graph():
    g = build_hybrid_graph([], [], [], [])
    assert g.n_nodes == 0 and g.adjacency.shape == (0, 0)
    assert all(v == 0 for v in g.edge_counts().values())
    assert HybridGraph.from_arrays(g.to_arrays()).n_nodes == 0


@pytest.mark.parametrize("kwargs, message", [
    ({"chunk_ids": ["x", "x"], "chunk_entities": [[], []]}, "duplicate chunk ids"),
    ({"chunk_entities": [[]]}, "entity sets"),
    ({"hyperedges": [("h", ["a"], "nowhere")]}, "unknown source chunk"),
    ({"chunk_entities": [["d:0"], [], [], []]}, "two node kinds"),
    ({"shared_entity_threshold": -1}, "shared_entity_threshold"),
    ({"hub_chunks": 0}, "hub_chunks"),
])
def test_bad_input(kwargs, message):
    args = {"chunk_ids": CHUNKS, "chunk_entities": [[]] * 4, "relations": [], "hyperedges": [],
            "shared_entity_threshold": 3}
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        build_hybrid_graph(**args)
