"""`hyperbolic` (HyperRAG §3.1, §3.3): a query-rooted reasoning tree from two retrieval rounds, fused with
the explicit keyword edges; passages from the graph walk seeded by the tree, re-ranked by Poincaré distance
in the learned ball.

Tree. Round 1 is the round_k chunks nearest the question; the `decompose` role reads them and proposes
follow-up directives; round 2 retrieves round_k chunks per directive (one batched search, by the entity's own vector
where a directive is the name of an index entity: `name_vectors`). Implicit edges run query -> each round-1
chunk and, per directive, parent -> each of its round-2 chunks, where the parent is the round-1 chunk holding
most of the directive's novel key terms (those the question lacks: they name what the directive is after, e.g.
a bridge entity), the higher-ranked one on ties. Explicit edges are the index's keyword edges between two
retrieved chunks. Fusion is a breadth-first search from the query over both kinds, implicit edges before
explicit ones at each node, in retrieval order: the first parent to reach a chunk keeps it, so a chunk found
twice (both rounds, two directives, or an explicit edge) becomes one node and an edge that would close a loop
is never taken. The result is one tree rooted at the query, returned in notes["implicit_subgraph"] for the
online updater (HyperRAG L_inc).

Candidates. The tree's chunks are the reasoning the decomposition found; they seed the graph
walk (propagation.py) beside the dense + BM25 passages and the question's linked entities, so
the walk starts from both hops. The walk's ranking (CANDIDATES chunks) is the first signal.

Query point. The question is projected into the ball with the passages' own initialization
(`init_from_text`), which places it where an untrained passage of the same text would sit. The
learned geometry, however, is where the tree's chunks actually are, so ranking uses the weighted
Einstein (gyro)midpoint of that projection and the tree's chunks. Each level of the tree carries
half the weight of the level above, shared equally by its nodes (query 1, round-1 chunks 1/2 in
all, round-2 chunks 1/4 in all), following HyperRAG's reading that a longer reasoning path is a
larger logical distance.

Ranking. The walk's candidates, the first CANDIDATES dense hits and the k chunks nearest the
projected question in the "hyperbolic" index (§3.3, served by the vector index, never by a
scan) are ordered by Poincaré distance to the query point; the final order is the weighted
reciprocal-rank fusion of the walk's order (weight 1) and that distance order (HYPERBOLIC_WEIGHT).
Poincaré distance alone ranks far below dense similarity with the bundled embedder (recall@5
.25-.61 on the dev sets), so it re-ranks, and the online learner (indexing/online.py) moves it.
"""

from __future__ import annotations

import numpy as np

from hygraph.core.hyperbolic import init_from_text, key_terms, poincare_distance, query_vector
from hygraph.core.retrieval.context import Context, ContextItem, Search, passages_from_chunks, pool_size
from hygraph.core.retrieval.fusion import bm25_hits, rrf
from hygraph.core.retrieval.linking import link_entities, name_vectors
from hygraph.core.retrieval.propagation import RELATION_SEEDS, by_mass, propagate
from hygraph.core.retrieval.view import Decompose, Embed, IndexView, Points, QuestionEntities

ROOT = "query"
CANDIDATES = 20  # passages the walk proposes for re-ranking
# Weight of the Poincaré order against the walk's in the final fusion. Chosen on the dev sets: 0.25
# costs 1 to 4 points of recall@5 against the walk alone (0.5 costs 4 to 11, 1.0 up to 30), and
# leaves the online learner room to move the ranking.
HYPERBOLIC_WEIGHT = 0.25


def hyperbolic(question: str, query_vec: np.ndarray, k: int, view: IndexView, search: Search, embed: Embed,
               decompose: Decompose, points: Points, question_entities: QuestionEntities, *,
               round_k: int | None = None) -> Context:
    """HyperRAG §3.1 + §3.3: implicit tree from query decomposition, fused with explicit edges; the graph walk
    seeded by the tree, re-ranked by Poincaré distance to the tree's midpoint.

    round_k (default k) chunks per retrieval round and per directive. Returns the ranked chunks
    of the top-k passages, the passages, notes["implicit_subgraph"] = {"nodes": [chunk ids],
    "edges": [[parent, child], ...], "root": "query"} (a tree; parent is "query" or a chunk id)
    and notes["directives"]. `points` reads the chunks' current Poincaré points (the online
    learner refines them between versions). Needs an index with hyperbolic embeddings.
    """
    if not view.hyper_dim:
        raise ValueError("hyperbolic retrieval needs hyperbolic embeddings, and this index version has none")
    if not view.hyper_neighbours:  # an index with no chunk yet (made empty, or every document deleted)
        return Context(notes={"implicit_subgraph": {"nodes": [], "edges": [], "root": "query"}, "directives": []})
    per_round = k if round_k is None else round_k
    q = query_vec[None, :]
    depth = pool_size(k)
    projected = init_from_text(query_vec, view.hyper_dim, view.hyper_seed)
    # The searches that need only the question, side by side.
    searches = search.start([
        ("chunks", q, max(depth, per_round), None), ("relations", q, RELATION_SEEDS, None),
        ("hyperbolic", query_vector(projected)[None, :], k, None)])
    spans, lexical_hits = question_entities(question), bm25_hits(question, depth, view)
    dense_hits, relation_hits, hyperbolic_hits = (hits[0] for hits in searches())
    round1 = [cid for cid, _ in dense_hits[:per_round]]
    directives = decompose(question, [view.chunk_text[cid] for cid in round1]) if round1 else []
    round2: list[list[str]] = []
    if directives:
        directive_hits = search("chunks", name_vectors(directives, view, embed), per_round, None)
        round2 = [[cid for cid, _ in hits] for hits in directive_hits]
    parent = _fused_tree(_implicit_children(question, round1, directives, round2, view.chunk_text), view)
    tree_depth = {ROOT: 0}
    for child, par in parent.items():
        tree_depth[child] = tree_depth[par] + 1

    seeds = link_entities(spans, relation_hits, view)
    lexical = rrf([[cid for cid, _ in dense_hits], [cid for cid, _ in lexical_hits]])
    seed_passages = rrf([[cid for cid, _ in lexical], list(parent)])
    walk_order = [cid for cid, _ in by_mass(propagate(view, seeds, seed_passages), view, CANDIDATES)]

    level_size = np.bincount(list(tree_depth.values()))
    weights = np.array([0.5 ** tree_depth[n] / level_size[tree_depth[n]] for n in tree_depth])
    neighbours = [cid for cid, _ in hyperbolic_hits]
    candidates = list(dict.fromkeys([*walk_order, *(cid for cid, _ in dense_hits[:CANDIDATES]), *neighbours]))
    wanted = list(dict.fromkeys([*parent, *candidates]))  # the tree's and the candidates' points, one read
    row = {cid: i for i, cid in enumerate(wanted)}
    located = points(wanted)
    tree_points = located[[row[c] for c in parent]].reshape(-1, projected.shape[0])
    q_point = _weighted_midpoint(np.vstack([projected, tree_points]), weights)
    distance = poincare_distance(located[[row[c] for c in candidates]], q_point[None, :])
    by_distance = [candidates[i] for i in np.argsort(distance, kind="stable")]
    fused = rrf([walk_order, by_distance], weights=[1.0, HYPERBOLIC_WEIGHT])
    ranked = [ContextItem(cid, "chunk", view.chunk_text[cid], score, (view.chunk_doc[cid],)) for cid, score in fused]
    passages = passages_from_chunks(ranked, view.titles, k)
    kept = {p.id for p in passages}
    subgraph = {"nodes": list(parent), "edges": [[par, child] for child, par in parent.items()], "root": ROOT}
    return Context(chunks=[c for c in ranked if c.sources[0] in kept], passages=passages,
                   notes={"implicit_subgraph": subgraph, "directives": list(directives)})


def _implicit_children(question: str, round1: list[str], directives: list[str], round2: list[list[str]],
                       chunk_text: dict[str, str]) -> dict[str, list[str]]:
    """Implicit edges as parent -> children in retrieval order: query -> round 1 -> round 2."""
    children: dict[str, list[str]] = {ROOT: list(round1)}
    question_terms = key_terms([question])[0]
    round1_terms = key_terms([chunk_text[cid] for cid in round1])
    for terms, hits in zip(key_terms(directives), round2):
        novel = terms - question_terms
        best = max(range(len(round1)), key=lambda i: (len(novel & round1_terms[i]), -i))
        children.setdefault(round1[best], []).extend(hits)
    return children


def _fused_tree(children: dict[str, list[str]], view: IndexView) -> dict[str, str]:
    """Breadth-first from the query, implicit edges first, first parent wins: child -> parent in BFS order."""
    position = {cid: i for i, cid in enumerate(dict.fromkeys(c for kids in children.values() for c in kids))}
    explicit: dict[str, list[str]] = {}
    for cid in position:
        linked = view.hyper_neighbours.get(cid, ())
        explicit[cid] = sorted((other for other in linked if other in position), key=position.__getitem__)
    parent: dict[str, str] = {}
    queue = [ROOT]
    for node in queue:
        for child in [*children.get(node, ()), *explicit.get(node, ())]:
            if child not in parent:
                parent[child] = node
                queue.append(child)
    return parent


def _weighted_midpoint(points: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted Einstein midpoint of Poincaré points (Ungar's gyromidpoint), in ball coordinates.

    lambda x / (lambda - 1) is x in Klein coordinates and lambda - 1 its Lorentz factor, so the
    weighted sum is the Einstein midpoint in the Klein model; y / (1 + sqrt(1 - |y|^2)) maps it back.
    """
    lam = 2.0 / (1.0 - np.sum(points * points, axis=1))
    y = (weights * lam) @ points / np.sum(weights * (lam - 1.0))
    return y / (1.0 + np.sqrt(max(0.0, 1.0 - float(y @ y))))


