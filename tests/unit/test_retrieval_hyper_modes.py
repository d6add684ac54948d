"""`hypergraph` (HyperGraphRAG §4.2-4.3) and `hyperbolic` (HyperRAG §3.1, §3.3) on hand-made index views.

Vector search is brute force over hand-made vectors: cosine for the text kinds, squared L2 over
the real storage vectors for "hyperbolic". Embedding, question entities and decomposition are
lookup tables and fixed rules, so every expected value below is worked out by hand.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from hygraph.core.hyperbolic import (
    from_storage,
    init_from_text,
    lorentz_lift,
    norm_bound,
    poincare_distance,
    query_vector,
    storage_vectors,
)
from hygraph.core.graph import build_hybrid_graph
from hygraph.core.lexical import analyze
from hygraph.core.lexical import build as bm25_index
from hygraph.core.retrieval import hyperbolic as hyperbolic_module
from hygraph.core.retrieval.fusion import bm25_hits, rrf
from hygraph.core.retrieval.context import pool_size
from hygraph.core.retrieval.hyperbolic import hyperbolic
from hygraph.core.retrieval.hypergraph import _reciprocal_rank_fusion, hypergraph
from hygraph.core.retrieval.linking import link_entities, name_vectors
from hygraph.core.retrieval.propagation import RELATION_SEEDS, by_mass, propagate, walk_for
from hygraph.core.retrieval.view import IndexView
from tests.views import by_doc

DIM = 16
RRF_C = 60


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    # Distances are computed on a handful of rows; extra intra-op threads only spin on a shared CPU.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def axis(i: int) -> np.ndarray:
    v = np.zeros(DIM)
    v[i] = 1.0
    return v


def at_cosine(target: int, cos: float, spare: int) -> np.ndarray:
    """A unit vector whose cosine with axis `target` is exactly `cos` (the rest on axis `spare`)."""
    return cos * axis(target) + math.sqrt(1 - cos * cos) * axis(spare)


class BruteSearch:
    """search(kind, rows, k, layer) by exhaustive scoring; records every call."""

    def __init__(self, text: dict[str, dict[str, np.ndarray]], points: dict[str, np.ndarray] | None = None) -> None:
        self.text = {kind: (list(vecs), np.array(list(vecs.values()))) for kind, vecs in text.items()}
        self.calls: list[tuple[str, np.ndarray, int]] = []
        if points is not None:
            ids, pts = list(points), np.array(list(points.values()))
            self.storage = (ids, storage_vectors(pts, norm_bound(lorentz_lift(pts))))

    def __call__(self, kind: str, rows: np.ndarray, k: int, layer: int | None) -> list[list[tuple[str, float]]]:
        self.calls.append((kind, np.array(rows), k))
        if kind == "hyperbolic":
            ids, stored = self.storage
            scores = [((stored - row) ** 2).sum(axis=1) for row in rows]
            return [[(ids[i], float(s[i])) for i in np.argsort(s, kind="stable")[:k]] for s in scores]
        ids, mat = self.text[kind]
        scores = [mat @ row for row in rows]
        return [[(ids[i], float(s[i])) for i in np.argsort(-s, kind="stable")[:k]] for s in scores]

    def many(self, requests) -> list[list[list[tuple[str, float]]]]:
        return [self(*r) for r in requests]

    def start(self, requests):
        hits = self.many(requests)
        return lambda: hits

    def points(self, chunk_ids) -> np.ndarray:
        """The engine's live points: read back from the stored (Lorentz) vectors."""
        ids, stored = self.storage
        row = {cid: i for i, cid in enumerate(ids)}
        return from_storage(stored[[row[cid] for cid in chunk_ids]])

    def of_kind(self, kind: str) -> list[tuple[str, np.ndarray, int]]:
        return [c for c in self.calls if c[0] == kind]


def lookup(table: dict[str, np.ndarray]):
    return lambda texts: np.array([table[t] for t in texts])


# ---------------------------------------------------------------- hypergraph

QUESTION = "Who directed Alpha with Beta?"
Q = axis(0)  # the question's vector
EQ = axis(1)  # the vector of its entity spans joined: "Alpha, Beta"


def hypergraph_view(chunks: dict[str, str], **fields) -> IndexView:
    return IndexView(version=1, chunk_text={c: f"text of {c}" for c in chunks}, chunk_doc=dict(chunks),
                     titles={d: d.upper() for d in chunks.values()}, doc_chunks=by_doc(chunks), **fields)


def entity_fixture() -> tuple[IndexView, BruteSearch]:
    """Entities scored against EQ; hyperedges against Q; worked scores in the comments."""
    # entity: (cosine to EQ, extraction score) -> eq. 8 score
    entities = {
        "alpha": (0.9, 0.9),  # 0.81
        "beta": (0.8, 0.3),  # 0.24: below tau_v = 0.3 although second nearest
        "gamma": (0.5, 1.0),  # 0.50: third nearest
        "omega": (0.2, 0.8),  # 0.16
        "delta": (0.1, 1.0),  # 0.10
        "zed": (0.05, 0.9),  # 0.045
        "kappa": (0.0, 0.7),
    }
    # hyperedge: (cosine to Q, extraction score, entities, source chunk) -> eq. 9 score
    edges = {
        "h1": (0.7, 0.8, ("alpha", "zed"), "c1"),  # 0.56
        "h2": (0.3, 0.5, ("alpha", "gamma"), "c2"),  # 0.15: below tau_h = 0.2
        "h3": (0.15, 0.9, ("zed", "kappa"), "c3"),  # 0.135
        "h4": (0.25, 1.0, ("omega", "delta"), "c5"),  # 0.25
    }
    entity_hyperedges: dict[str, list[str]] = {}
    for e, (_, _, members, _) in edges.items():
        for u in members:
            entity_hyperedges.setdefault(u, []).append(e)
    view = hypergraph_view(
        {f"c{i}": f"d{i}" for i in range(1, 6)},
        entity_name={u: u.title() for u in entities}, entity_desc={"alpha": "a film"},
        entity_score={u: s for u, (_, s) in entities.items()},
        entity_chunks={"alpha": ["c1", "c2", "c4"], "zed": ["c1", "c3"], "gamma": ["c2"], "kappa": ["c3"],
                       "omega": ["c5"], "delta": ["c5"], "beta": ["c4"]},
        hyperedge_text={e: f"fact {e}" for e in edges}, hyperedge_entities={e: m for e, (_, _, m, _) in edges.items()},
        hyperedge_score={e: s for e, (_, s, _, _) in edges.items()},
        hyperedge_chunks={e: [c] for e, (_, _, _, c) in edges.items()}, entity_hyperedges=entity_hyperedges,
    )
    search = BruteSearch({
        "entities": {u: at_cosine(1, cos, 2 + i) for i, (u, (cos, _)) in enumerate(entities.items())},
        "hyperedges": {e: at_cosine(0, cos, 10 + i) for i, (e, (cos, *_)) in enumerate(edges.items())},
        "chunks": {f"c{i}": at_cosine(0, 1.0 - 0.1 * i, 15) for i in range(1, 6)},
    })
    return view, search


def with_graph(view: IndexView) -> IndexView:
    """The view with the hybrid graph of its chunks, mentions and facts, and each node's extraction score, as a
    served view derives them (store/view_loader.py)."""
    chunk_ids = list(view.chunk_text)
    mentions: dict[str, list[str]] = {cid: [] for cid in chunk_ids}
    for u, cids in view.entity_chunks.items():
        for cid in cids:
            mentions[cid].append(u)
    facts = [(e, members, cid) for e, members in view.hyperedge_entities.items() for cid in view.hyperedge_chunks[e]]
    g = build_hybrid_graph(chunk_ids, [mentions[cid] for cid in chunk_ids], [], facts)
    score = np.zeros(g.n_nodes)
    for ids, field, first in ((g.entity_ids, view.entity_score, g.entity_slice.start),
                              (g.hyperedge_ids, view.hyperedge_score, g.hyperedge_slice.start)):
        score[first:first + len(ids)] = [field.get(x, 0.0) for x in ids]
    view.graph, view.graph_score = g, score
    return view


def run_hypergraph(view: IndexView, search: BruteSearch, spans: list[str] | None = None, k: int = 3, **kw):
    spans = ["Alpha", "Beta"] if spans is None else spans
    embed = lookup({"Alpha, Beta": EQ, "Nobody": axis(14)})
    return hypergraph(QUESTION, Q, k, with_graph(view), search, embed, lambda q: list(spans), **kw)


def scores(items) -> list[tuple[str, float]]:
    return [(it.id, round(it.score, 6)) for it in items]


def retrieval_only(view: IndexView) -> IndexView:
    """No expansion: the entities of R_V alone (a version without facts; the search still finds the old ones)."""
    view.hyperedge_text, view.hyperedge_entities, view.hyperedge_score, view.hyperedge_chunks = {}, {}, {}, {}
    view.entity_hyperedges = {}
    return view


def test_entities_use_the_joined_spans_threshold_and_limit() -> None:
    view, search = entity_fixture()
    ctx = run_hypergraph(retrieval_only(view), search, tau_h=1.0)
    [(_, rows, k_v)] = search.of_kind("entities")
    np.testing.assert_allclose(rows, EQ[None, :])
    assert k_v == 60
    assert scores(ctx.entities) == [("alpha", 0.81), ("gamma", 0.5)]  # beta, omega, delta, zed below 0.3
    assert ctx.notes["question_entities"] == ["Alpha", "Beta"]
    assert ctx.entities[0].text == "Alpha: a film" and ctx.entities[1].text == "Gamma"
    assert ctx.entities[0].sources == ("d1", "d2", "d4")

    # k_v limits the similarity search: gamma (third nearest) is never seen, beta still fails tau_v.
    view, search = entity_fixture()
    assert scores(run_hypergraph(retrieval_only(view), search, tau_h=1.0, k_v=2).entities) == [("alpha", 0.81)]
    view, search = entity_fixture()
    assert scores(run_hypergraph(retrieval_only(view), search, tau_h=1.0, tau_v=0.2).entities) == [
        ("alpha", 0.81), ("gamma", 0.5), ("beta", 0.24)]


def test_entities_fall_back_to_the_question_vector() -> None:
    view, search = entity_fixture()
    ctx = run_hypergraph(retrieval_only(view), search, spans=[], tau_h=1.0, tau_v=0.0)
    [(_, rows, _)] = search.of_kind("entities")
    np.testing.assert_allclose(rows, Q[None, :])
    assert ctx.entities == []  # every entity is orthogonal to Q
    assert ctx.notes["question_entities"] == []


def test_hyperedges_threshold_and_bidirectional_expansion() -> None:
    view, search = entity_fixture()
    ctx = run_hypergraph(view, search)
    # R_H = {h1 0.56, h4 0.25}. From R_V = {alpha 0.81, gamma 0.5}: h1 rises to 0.81 * 0.8 and
    # h2 enters at 0.81 * 0.5 (eq. 10). h3 touches no retrieved entity and stays out.
    assert scores(ctx.hyperedges) == [("h1", 0.648), ("h2", 0.405), ("h4", 0.25)]
    # Entities of every K_H hyperedge (eq. 11): zed via h1 0.648 * 0.9, delta and omega via h4.
    assert scores(ctx.entities) == [("alpha", 0.81), ("zed", 0.5832), ("gamma", 0.5), ("delta", 0.25),
                                    ("omega", 0.2)]
    assert ctx.hyperedges[0].text == "fact h1" and ctx.hyperedges[0].sources == ("d1",)
    assert ctx.hyperedges[0].links == ("alpha", "zed")  # its member entity ids, for a graph view
    [(_, rows, k_h)] = search.of_kind("hyperedges")
    np.testing.assert_allclose(rows, Q[None, :])
    assert k_h == 60

    # k_h = 1: only h1 is retrieved, so h4 and the entities reached only through it are gone.
    view, search = entity_fixture()
    ctx = run_hypergraph(view, search, k_h=1)
    assert [it.id for it in ctx.hyperedges] == ["h1", "h2"]
    assert [it.id for it in ctx.entities] == ["alpha", "zed", "gamma"]


def bridge_fixture() -> tuple[IndexView, BruteSearch]:
    """Dense top x0 has no graph support; `top` states the fact; `bridge` only mentions its other entity."""
    dense_cos = {"x0": 0.95, "top": 0.9, "x1": 0.8, "x2": 0.7, "x3": 0.6, "bridge": 0.1}
    view = hypergraph_view(
        {c: f"doc-{c}" for c in dense_cos},
        entity_name={"alpha": "Alpha", "zed": "Zed"}, entity_score={"alpha": 1.0, "zed": 1.0},
        entity_chunks={"alpha": ["top"], "zed": ["top", "bridge"]},
        hyperedge_text={"h": "Alpha was directed by Zed."}, hyperedge_entities={"h": ("alpha", "zed")},
        hyperedge_score={"h": 1.0}, hyperedge_chunks={"h": ["top"]}, entity_hyperedges={"alpha": ["h"], "zed": ["h"]},
    )
    search = BruteSearch({
        "entities": {"alpha": at_cosine(1, 0.9, 2), "zed": at_cosine(1, 0.0, 3)},
        "hyperedges": {"h": at_cosine(0, 0.6, 4)},
        "chunks": {c: at_cosine(0, cos, 5 + i) for i, (c, cos) in enumerate(dense_cos.items())},
    })
    return view, search


def test_fusion_keeps_the_top_dense_chunk_first_and_promotes_the_bridge() -> None:
    view, search = bridge_fixture()
    ctx = run_hypergraph(view, search, k=4, k_chunk=5)
    # Graph evidence: top = h 0.9 + alpha 0.9 + zed 0.9 / 2, bridge = zed 0.9 / 2; the graph list
    # is seeded with x0: [x0, top, bridge]. RRF over dense [x0, top, x1, x2, x3]:
    # x0 2/61, top 2/62, x1 1/63 = bridge 1/63 (tie -> dense first), x2 1/64, x3 1/65.
    # Unseeded, top (in both lists, 1/62 + 1/61) would have displaced x0 (dense only, 1/61).
    top = 2 / (RRF_C + 1)
    expected = [("x0", 1.0), ("top", 2 / 62 / top), ("x1", 1 / 63 / top), ("bridge", 1 / 63 / top)]
    assert [(p.id, round(p.score, 9)) for p in ctx.passages] == [
        (f"doc-{c}", round(s, 9)) for c, s in expected]
    assert [p.title for p in ctx.passages] == [f"doc-{c}".upper() for c, _ in expected]
    assert [c.id for c in ctx.chunks] == ["x0", "top", "x1", "bridge"]
    [(_, _, k_chunk)] = search.of_kind("chunks")
    assert k_chunk == 5


def test_graph_evidence_is_spread_over_an_items_chunks() -> None:
    chunks = ["top", "a1", "a2", "a3", "a4", "b"]
    view = hypergraph_view(
        {c: f"doc-{c}" for c in chunks},
        entity_name={"alpha": "Alpha", "zed": "Zed"}, entity_score={"alpha": 1.0, "zed": 0.5},
        entity_chunks={"alpha": ["top", "a1", "a2", "a3", "a4"], "zed": ["b"]},
        hyperedge_text={"h": "Alpha was directed by Zed."}, hyperedge_entities={"h": ("alpha", "zed")},
        hyperedge_score={"h": 1.0}, hyperedge_chunks={"h": ["top"]}, entity_hyperedges={"alpha": ["h"], "zed": ["h"]},
    )
    search = BruteSearch({
        "entities": {"alpha": at_cosine(1, 0.9, 2), "zed": at_cosine(1, 0.0, 3)},
        "hyperedges": {"h": at_cosine(0, 0.5, 4)},
        "chunks": {c: at_cosine(0, 0.9 - 0.1 * i, 5 + i) for i, c in enumerate(chunks)},
    })
    ctx = run_hypergraph(view, search, k=3, k_chunk=1)
    # alpha 0.9 over five mentions gives each 0.18; zed (0.9 via h, times 0.5) gives its one
    # mention 0.45: the rare entity's passage outranks the hub's, whatever the dense order says.
    assert [p.id for p in ctx.passages] == ["doc-top", "doc-b", "doc-a1"]


def test_reciprocal_rank_fusion_sums_the_terms_of_both_lists() -> None:
    ids, scores = _reciprocal_rank_fusion(["x", "a"], ["a", "b", "c"])
    top = 2 / 61
    assert ids == ["a", "x", "b", "c"]
    assert scores == [(1 / 61 + 1 / 62) / top, (1 / 61) / top, (1 / 62) / top, (1 / 63) / top]
    # A tie on score goes to the dense list: graph rank 2 and dense rank 2 score alike.
    assert _reciprocal_rank_fusion(["d", "y"], ["d", "g"])[0] == ["d", "y", "g"]
    assert _reciprocal_rank_fusion([], []) == ([], [])


def test_fusion_without_graph_evidence_is_the_dense_ranking() -> None:
    view, search = bridge_fixture()
    ctx = run_hypergraph(view, search, spans=["Nobody"], k=3, tau_v=0.99, tau_h=0.99)
    assert ctx.entities == [] and ctx.hyperedges == []
    assert [p.id for p in ctx.passages] == ["doc-x0", "doc-top", "doc-x1"]


def test_hits_the_version_does_not_hold_are_left_out() -> None:
    """A collection is shared by the versions of a build: a search may return a newer version's entity or fact."""
    class WithNewerRows(BruteSearch):
        def __call__(self, kind: str, rows: np.ndarray, k: int, layer: int | None) -> list[list[tuple[str, float]]]:
            newer = {"entities": ("newer", 0.99), "hyperedges": ("h-newer", 0.99)}.get(kind)
            hits = super().__call__(kind, rows, k, layer)
            return [[newer, *row] for row in hits] if newer is not None else hits

    view, search = entity_fixture()
    search.__class__ = WithNewerRows
    ctx = run_hypergraph(view, search)
    assert scores(ctx.hyperedges) == [("h1", 0.648), ("h2", 0.405), ("h4", 0.25)]
    assert [it.id for it in ctx.entities] == ["alpha", "zed", "gamma", "delta", "omega"]


def test_hypergraph_uses_three_searches() -> None:
    view, search = bridge_fixture()
    run_hypergraph(view, search, k=4)
    assert sorted(c[0] for c in search.calls) == ["chunks", "entities", "hyperedges"]
    assert all(len(rows) == 1 for _, rows, _ in search.calls)


# ---------------------------------------------------------------- hyperbolic

H_QUESTION = "Where was the director of Alpha born?"
DIRECTIVES = ["Zed Zedson where was the director of Alpha born", "Kappa Valley where was the director of Alpha born"]
N_CHUNKS = 40
H_DIM = 3
H_SEED = 7


def hyperbolic_fixture(rng_seed: int = 0) -> tuple[IndexView, BruteSearch, dict[str, np.ndarray]]:
    """40 chunks. Round 1 (Q): c0, c1. Directive 1 (axis 1): c2, c3. Directive 2 (axis 2): c4, then c0 again."""
    rng = np.random.default_rng(rng_seed)
    ids = [f"c{i}" for i in range(N_CHUNKS)]
    vecs = {
        "c0": 0.9 * axis(0) + math.sqrt(1 - 0.81) * axis(2),
        "c1": at_cosine(0, 0.8, 4),
        "c2": at_cosine(1, 0.9, 5),
        "c3": at_cosine(1, 0.8, 3),
        "c4": at_cosine(2, 0.9, 6),
    }
    for cid in ids[5:]:  # orthogonal to Q and both directives
        v = np.concatenate([np.zeros(7), rng.standard_normal(DIM - 7)])
        vecs[cid] = v / np.linalg.norm(v)
    text = {cid: f"Passage {cid} about nothing in particular." for cid in ids}
    text["c0"] = "Alpha is a film directed by Zed Zedson."
    text["c1"] = "Alpha was shot in Kappa Valley."
    x = rng.standard_normal((N_CHUNKS, H_DIM))
    points = x / np.linalg.norm(x, axis=1, keepdims=True) * rng.uniform(0.05, 0.9, size=(N_CHUNKS, 1))
    point_of = dict(zip(ids, points))
    explicit = [("c0", "c1"), ("c1", "c2"), ("c3", "c5"), ("c0", "c4")]
    neighbours: dict[str, list[str]] = {cid: [] for cid in ids}
    for a, b in explicit:
        neighbours[a].append(b)
        neighbours[b].append(a)
    # The hybrid graph the walk runs on: c0 and c1 mention Alpha, c0 its director Zed Zedson.
    mentions = {"c0": ["alpha", "zed zedson"], "c1": ["alpha", "kappa valley"]}
    graph = build_hybrid_graph(ids, [mentions.get(cid, []) for cid in ids], [("alpha", "zed zedson", "r1")], [])
    chunk_doc = {cid: f"d{cid[1:]}" for cid in ids}
    titles = {f"d{i}": f"T{i}" for i in range(N_CHUNKS)}
    view = IndexView(
        version=1, chunk_text=text, chunk_doc=chunk_doc, titles=titles, doc_chunks=by_doc(chunk_doc),
        entity_name={"alpha": "Alpha", "zed zedson": "Zed Zedson", "kappa valley": "Kappa Valley"},
        entity_chunks={"alpha": ["c0", "c1"], "zed zedson": ["c0"], "kappa valley": ["c1"]},
        relations={"r1": ("alpha", "directed by", "zed zedson", 1.0)},
        hyper_neighbours={cid: tuple(nb) for cid, nb in neighbours.items()},
        hyper_dim=H_DIM, hyper_seed=H_SEED,
        chunk_lexical=bm25_index(ids, [analyze(text[cid]) for cid in ids]),
        entity_lexical=bm25_index(graph.entity_ids, [analyze(e) for e in graph.entity_ids]), graph=graph,
        walk=walk_for(graph, chunk_doc, titles),
    )
    return view, BruteSearch({"chunks": vecs, "relations": {"r1": axis(0)}}, points=point_of), point_of


class FixedDecompose:
    def __init__(self, directives: list[str]) -> None:
        self.directives, self.calls = directives, []

    def __call__(self, question: str, passages) -> list[str]:
        self.calls.append((question, list(passages)))
        return list(self.directives)


def run_hyperbolic(view: IndexView, search: BruteSearch, directives: list[str], k: int = 8, round_k: int = 2):
    decompose = FixedDecompose(directives)
    embed = lookup({DIRECTIVES[0]: axis(1), DIRECTIVES[1]: axis(2)})
    return (hyperbolic(H_QUESTION, Q, k, view, search, embed, decompose, search.points, lambda q: ["Alpha"],
                       round_k=round_k), decompose)


def einstein_midpoint(points: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Via the Klein model: k = 2p / (1 + |p|^2), gamma = 1 / sqrt(1 - |k|^2), p = k / (1 + sqrt(1 - |k|^2))."""
    klein = 2 * points / (1 + (points ** 2).sum(axis=1, keepdims=True))
    gamma = 1 / np.sqrt(1 - (klein ** 2).sum(axis=1))
    mid = (weights * gamma) @ klein / (weights * gamma).sum()
    return mid / (1 + np.sqrt(1 - mid @ mid))


def assert_tree_rooted_at_query(subgraph: dict) -> None:
    assert subgraph["root"] == "query"
    parents: dict[str, str] = {}
    for parent, child in subgraph["edges"]:
        assert child not in parents, f"{child} has two parents"
        parents[child] = parent
    assert set(parents) == set(subgraph["nodes"])
    for node in subgraph["nodes"]:
        seen = {node}
        while node != "query":
            node = parents[node]
            assert node not in seen, "cycle"
            seen.add(node)


def test_hyperbolic_tree_fuses_implicit_and_explicit_edges() -> None:
    view, search, _ = hyperbolic_fixture()
    ctx, decompose = run_hyperbolic(view, search, DIRECTIVES)
    sub = ctx.notes["implicit_subgraph"]
    assert json.loads(json.dumps(sub)) == sub
    # Implicit: query -> c0, c1; directive 1 ("zed zedson" is in c0) -> c2, c3 under c0; directive 2
    # ("kappa valley" is in c1) -> c4, c0 under c1. Explicit c0-c4 is met at c0 before c1's implicit
    # edge to c4, so c4 hangs under c0; c1 -> c0, c0-c1 and c1-c2 would close loops; c3-c5 leaves
    # the retrieved set.
    assert sub == {"nodes": ["c0", "c1", "c2", "c3", "c4"],
                   "edges": [["query", "c0"], ["query", "c1"], ["c0", "c2"], ["c0", "c3"], ["c0", "c4"]],
                   "root": "query"}
    assert_tree_rooted_at_query(sub)
    assert ctx.notes["directives"] == DIRECTIVES
    assert decompose.calls == [(H_QUESTION, [view.chunk_text["c0"], view.chunk_text["c1"]])]


def test_hyperbolic_searches_are_batched_and_small() -> None:
    view, search, _ = hyperbolic_fixture()
    run_hyperbolic(view, search, DIRECTIVES, k=3)
    chunk_calls = search.of_kind("chunks")
    # one dense search serves round 1 and the walk's passage seeds; one batched search serves round 2
    assert [(len(rows), k) for _, rows, k in chunk_calls] == [(1, pool_size(3)), (2, 2)]
    assert [k for _, _, k in search.of_kind("relations")] == [RELATION_SEEDS]
    np.testing.assert_allclose(chunk_calls[1][1], np.array([axis(1), axis(2)]))
    [(_, rows, k)] = search.of_kind("hyperbolic")
    assert k == 3 and k < N_CHUNKS
    np.testing.assert_allclose(rows, query_vector(init_from_text(Q, H_DIM, H_SEED))[None, :])
    assert all(k < N_CHUNKS for kind, _, k in search.calls if kind != "chunks")


def tree_midpoint(point_of: dict[str, np.ndarray]) -> np.ndarray:
    projected = init_from_text(Q, H_DIM, H_SEED)
    tree = ["c0", "c1", "c2", "c3", "c4"]
    # Level weights: query 1, round 1 (two chunks) 1/2 in all, round 2 (three chunks) 1/4 in all.
    weights = np.array([1.0, 1 / 4, 1 / 4, 1 / 12, 1 / 12, 1 / 12])
    return einstein_midpoint(np.vstack([projected, [point_of[c] for c in tree]]), weights)


def test_hyperbolic_distance_order_is_to_the_tree_midpoint(monkeypatch) -> None:
    """With the Poincaré order weighing all, passages follow the distance to the tree's midpoint."""
    view, search, point_of = hyperbolic_fixture()
    monkeypatch.setattr(hyperbolic_module, "HYPERBOLIC_WEIGHT", 1e6)
    monkeypatch.setattr(hyperbolic_module, "CANDIDATES", N_CHUNKS)
    k = 8
    ctx, _ = run_hyperbolic(view, search, DIRECTIVES, k=k)
    q_point = tree_midpoint(point_of)
    # With CANDIDATES = 40 the dense hits alone make every chunk a candidate.
    dist = {c: float(poincare_distance(point_of[c], q_point)) for c in point_of}
    expected = sorted(point_of, key=dist.__getitem__)
    projected = init_from_text(Q, H_DIM, H_SEED)
    # The fixture tells the two query points apart, so ranking by the projection would fail here.
    assert expected[:k] != sorted(point_of, key=lambda c: float(poincare_distance(point_of[c], projected)))[:k]
    assert [c.id for c in ctx.chunks] == expected[:k]
    assert [p.id for p in ctx.passages] == [view.chunk_doc[c] for c in expected[:k]]
    assert [p.title for p in ctx.passages] == [f"T{c[1:]}" for c in expected[:k]]


def test_hyperbolic_fuses_the_walk_and_the_distance_orders() -> None:
    view, search, point_of = hyperbolic_fixture()
    ctx, _ = run_hyperbolic(view, search, DIRECTIVES, k=8)
    q_point = tree_midpoint(point_of)
    # The walk's order, recomputed: the tree's chunks seed it beside the dense + BM25 passages.
    dense_order = [c for c, _ in search("chunks", Q[None, :], pool_size(8), None)[0]]
    lexical = rrf([dense_order, [c for c, _ in bm25_hits(H_QUESTION, pool_size(8), view)]])
    seeds = link_entities(["Alpha"], [("r1", 1.0)], view)
    walk = [c for c, _ in by_mass(propagate(view, seeds, rrf([[c for c, _ in lexical],
                                                             ["c0", "c1", "c2", "c3", "c4"]])), view, 20)]
    neighbours = [c for c, _ in search("hyperbolic", query_vector(init_from_text(Q, H_DIM, H_SEED))[None, :], 8,
                                       None)[0]]
    candidates = list(dict.fromkeys([*walk, *dense_order[:20], *neighbours]))
    by_distance = sorted(candidates, key=lambda c: float(poincare_distance(point_of[c], q_point)))
    fused = rrf([walk, by_distance], weights=[1.0, hyperbolic_module.HYPERBOLIC_WEIGHT])
    assert [c.id for c in ctx.chunks] == [c for c, _ in fused][:8]
    assert [c.score for c in ctx.chunks] == pytest.approx([s for _, s in fused][:8])
    # the walk puts Alpha's two passages first; Poincaré re-ranks below them
    assert sorted(c.id for c in ctx.chunks[:2]) == ["c0", "c1"]


def test_hyperbolic_without_directives_is_a_one_level_tree() -> None:
    view, search, _ = hyperbolic_fixture()
    ctx, _ = run_hyperbolic(view, search, [])
    assert ctx.notes["implicit_subgraph"] == {"nodes": ["c0", "c1"], "edges": [["query", "c0"], ["query", "c1"]],
                                              "root": "query"}
    assert len(search.of_kind("chunks")) == 1
    assert ctx.notes["directives"] == []


def test_hyperbolic_needs_hyperbolic_embeddings() -> None:
    view, search, _ = hyperbolic_fixture()
    view.hyper_neighbours, view.hyper_dim = {}, 0
    with pytest.raises(ValueError, match="hyperbolic embeddings"):
        run_hyperbolic(view, search, DIRECTIVES)


def test_hyperbolic_over_an_index_without_chunks_finds_nothing() -> None:
    view, search, _ = hyperbolic_fixture()
    view.hyper_neighbours = {}
    ctx, _ = run_hyperbolic(view, search, DIRECTIVES)
    assert ctx.passages == [] and ctx.chunks == []
    assert ctx.notes["implicit_subgraph"] == {"nodes": [], "edges": [], "root": "query"}


def test_read_many_reads_a_plain_mapping_key_by_key_and_names_an_absent_key():
    from hygraph.core.retrieval.view import read_many

    scores = {"a": 0.5, "b": 0.25}
    assert read_many(scores, ["b", "a", "b"]) == [0.25, 0.5, 0.25]
    assert read_many(scores, ["a", "z"], 0.0) == [0.5, 0.0]
    with pytest.raises(KeyError, match="z"):
        read_many(scores, ["a", "z"])


def test_name_vectors_are_the_entities_own_where_the_text_is_an_entitys_name() -> None:
    """An entity's vector embeds its name: a text that is exactly that name takes it, and every other text (no such
    entity, or the same entity under another surface form) is embedded, in one call."""
    own = at_cosine(1, 0.6, 2)
    view = IndexView(version=1, chunk_text={}, chunk_doc={}, titles={}, doc_chunks={},
                     entity_name={"zed zedson": "Zed Zedson"}, entity_embedding={"zed zedson": own})
    calls: list[list[str]] = []

    def embed(texts):
        calls.append(list(texts))
        return np.array([axis(3 + i) for i in range(len(texts))], dtype=np.float32)

    got = name_vectors(["Kappa Valley", "Zed Zedson", "ZED ZEDSON"], view, embed)
    assert calls == [["Kappa Valley", "ZED ZEDSON"]]
    np.testing.assert_allclose(got, np.array([axis(3), own, axis(4)]), atol=1e-7)
    calls.clear()
    np.testing.assert_allclose(name_vectors(["Zed Zedson"], view, embed), own[None, :], atol=1e-7)
    assert calls == []  # nothing to embed: no model call
    with pytest.raises(ValueError, match="no names"):
        name_vectors([], view, embed)


def test_hyperbolic_directives_that_name_index_entities_search_by_the_entities_vectors() -> None:
    view, search, _ = hyperbolic_fixture()
    names = ["Zed Zedson", "Kappa Valley"]
    view.entity_embedding = {"zed zedson": axis(1), "kappa valley": axis(2)}

    def embed(texts):
        raise AssertionError(f"embedded {texts}: both directives are entity names")

    ctx = hyperbolic(H_QUESTION, Q, 8, view, search, embed, FixedDecompose(names), search.points,
                     lambda q: ["Alpha"], round_k=2)
    np.testing.assert_allclose(search.of_kind("chunks")[1][1], np.array([axis(1), axis(2)]))
    assert ctx.notes["directives"] == names
