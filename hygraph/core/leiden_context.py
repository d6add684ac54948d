"""Context-aware Leiden (Adaptive Context GraphRAG, seed 004 §III-A): Leiden communities plus context nodes.

The Leiden partition itself comes from a graph kernel (`hygraph.backends.graph`); this module is
the post-processing of §III-A steps 2-5 over plain arrays:

- step 2, `misalignment`: sim(v, C) is the paper's average cosine between v and the members of C,
  computed exactly as z_v . mean_{u in C} z_u over unit-normalized embeddings (so v's own
  community includes v itself, as the formula is written). v is a candidate for exactly one
  community, j* = argmax_j sim(v, C_j), when j* is not its own community and sim(v, C_j*) is
  strictly greater than sim(v, C_orig).
- eq. 1, `semantic_score`: s = max(sim, 0)^2 / (1 + d), d the hop distance from v to the
  nearest member of C_j* (`community_hop_distance`). A negative similarity is clipped to 0 so
  that squaring never rewards dissimilarity.
- step 3, `centrality_penalty`: s / (1 + b~(v)) with b~ = b / max(b) over the whole graph.
- eq. 2, `context_budget` and step 5, `select_context`: M_c counts the candidates of c with a
  positive score; lambda_c = min(lambda_max, floor(alpha * log2(M_c + 1))); the lambda_c best
  candidates (ties: lower node id) become context nodes of c.

Core members never move: the returned partition keeps the Leiden labels unchanged and lists the
context nodes next to them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.sparse.csgraph import connected_components

# Rows of the node x community similarity product computed at once: 4096 x 3000 float32 is ~50 MB.
_SIM_CHUNK = 4096


@dataclass(frozen=True)
class ContextPartition:
    """Leiden communities with their context nodes, both as CSR-style lists per community."""

    labels: np.ndarray          # (n,) Leiden community of every node, unchanged
    core_ptr: np.ndarray        # (K+1,) offsets into core_nodes
    core_nodes: np.ndarray      # members grouped by community, ascending within a community
    context_ptr: np.ndarray     # (K+1,) offsets into context_nodes
    context_nodes: np.ndarray   # context nodes grouped by community, best score first
    context_scores: np.ndarray  # their penalized eq. 1 scores

    @property
    def n_communities(self) -> int:
        return len(self.core_ptr) - 1

    def core(self, community: int) -> np.ndarray:
        return self.core_nodes[self.core_ptr[community]:self.core_ptr[community + 1]]

    def context(self, community: int) -> np.ndarray:
        return self.context_nodes[self.context_ptr[community]:self.context_ptr[community + 1]]


def _unit_rows(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def misalignment(embeddings: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """§III-A step 2: misaligned nodes, the community j* each one is most similar to, and sim(v, C_j*).

    `labels` are community ids 0..K-1. Returns (nodes, targets, sims) for the misaligned nodes only,
    nodes ascending. The n x K similarity matrix is never held whole (computed in row chunks).
    """
    labels = np.asarray(labels, dtype=np.int64)
    z = _unit_rows(embeddings)
    n_comm = int(labels.max()) + 1 if len(labels) else 0
    sizes = np.bincount(labels, minlength=n_comm).astype(np.float32)
    membership = sparse.csr_matrix((np.ones(len(labels), dtype=np.float32), (labels, np.arange(len(labels)))),
                                   shape=(n_comm, len(labels)))
    means = np.asarray(membership @ z) / np.maximum(sizes, 1.0)[:, None]
    best = np.empty(len(labels), dtype=np.int64)
    best_sim = np.empty(len(labels), dtype=np.float32)
    own_sim = np.empty(len(labels), dtype=np.float32)
    for start in range(0, len(labels), _SIM_CHUNK):
        rows = slice(start, start + _SIM_CHUNK)
        sim = z[rows] @ means.T
        best[rows] = sim.argmax(axis=1)
        best_sim[rows] = sim[np.arange(sim.shape[0]), best[rows]]
        own_sim[rows] = sim[np.arange(sim.shape[0]), labels[rows]]
    nodes = np.flatnonzero(best_sim > own_sim)
    return nodes, best[nodes], best_sim[nodes].astype(np.float64)


def _adjacency(n_nodes: int, edges: np.ndarray) -> sparse.csr_matrix:
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    e = e[e[:, 0] != e[:, 1]]
    rows = np.concatenate([e[:, 0], e[:, 1]])
    cols = np.concatenate([e[:, 1], e[:, 0]])
    adj = sparse.csr_matrix((np.ones(len(rows), dtype=np.int8), (rows, cols)), shape=(n_nodes, n_nodes))
    adj.sum_duplicates()
    return adj


def _neighbour_pairs(adj: sparse.csr_matrix, owner: np.ndarray, node: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For every (owner, node) pair, the pairs (owner, w) for each neighbour w of node."""
    starts = adj.indptr[node]
    counts = adj.indptr[node + 1] - starts
    total = int(counts.sum())
    offsets = np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(total)
    return np.repeat(owner, counts), adj.indices[offsets].astype(np.int64)


def community_hop_distance(n_nodes: int, edges: np.ndarray, labels: np.ndarray, nodes: np.ndarray,
                           targets: np.ndarray, max_hops: int = 2) -> np.ndarray:
    """The d of eq. 1: hops from each node to the nearest member of its target community.

    Exact up to `max_hops`. Beyond it the value is `max_hops + 1` (a lower bound, so the score
    is an upper bound) when node and community share a connected component, and inf when they do
    not (eq. 1 then gives 0). A breadth-first search per candidate, bounded by `max_hops`, keeps
    the cost near the candidates' max_hops-1 neighbourhoods instead of all-pairs distances; the
    last hop is answered from a node->adjacent-communities index rather than expanded.
    """
    labels = np.asarray(labels, dtype=np.int64)
    nodes = np.asarray(nodes, dtype=np.int64)
    targets = np.asarray(targets, dtype=np.int64)
    n_comm = int(labels.max()) + 1 if len(labels) else 0
    adj = _adjacency(n_nodes, edges)
    coo = adj.tocoo()
    # touches[u*K + c]: u is in community c or has a neighbour in it, i.e. d(u, C_c) <= 1.
    touches = np.unique(np.concatenate([np.arange(n_nodes, dtype=np.int64) * n_comm + labels,
                                        coo.row.astype(np.int64) * n_comm + labels[coo.col]]))

    def touching(node: np.ndarray, comm: np.ndarray) -> np.ndarray:
        keys = node * n_comm + comm
        pos = np.minimum(np.searchsorted(touches, keys), len(touches) - 1)
        return touches[pos] == keys if len(touches) else np.zeros(len(keys), dtype=bool)

    dist = np.full(len(nodes), np.inf)
    dist[labels[nodes] == targets] = 0.0
    owner = np.flatnonzero(np.isinf(dist))
    frontier = nodes[owner]
    visited = np.unique(owner * n_nodes + frontier)
    for hop in range(1, max_hops + 1):
        hit = touching(frontier, targets[owner])
        found = np.unique(owner[hit])
        dist[found] = hop
        if hop == max_hops:
            break
        open_ = np.isinf(dist[owner])
        owner, frontier = _neighbour_pairs(adj, owner[open_], frontier[open_])
        keys = np.unique(owner * n_nodes + frontier)
        keys = keys[~np.isin(keys, visited, assume_unique=True)]
        visited = np.union1d(visited, keys)
        owner, frontier = keys // n_nodes, keys % n_nodes

    far = np.isinf(dist)
    if far.any():
        _, comp = connected_components(adj, directed=False)
        comp = comp.astype(np.int64)
        present = np.unique(comp * n_comm + labels)
        keys = comp[nodes[far]] * n_comm + targets[far]
        reachable = np.isin(keys, present)
        dist[np.flatnonzero(far)[reachable]] = max_hops + 1
    return dist


def semantic_score(sims: np.ndarray, distances: np.ndarray) -> np.ndarray:
    """Eq. 1: s(v, C) = sim(v, C)^2 / (1 + d(v, C)), with negative similarity clipped to 0 and s = 0 at d = inf."""
    sims = np.clip(np.asarray(sims, dtype=np.float64), 0.0, None)
    return sims ** 2 / (1.0 + np.asarray(distances, dtype=np.float64))


def centrality_penalty(scores: np.ndarray, betweenness: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """§III-A step 3: s / (1 + b~(v)) with b~ = b / max(b) over all nodes, so the top hub is halved."""
    b = np.asarray(betweenness, dtype=np.float64)
    top = b.max() if len(b) else 0.0
    b_tilde = b[np.asarray(nodes, dtype=np.int64)] / top if top > 0 else np.zeros(len(nodes))
    return np.asarray(scores, dtype=np.float64) / (1.0 + b_tilde)


def context_budget(candidate_counts: np.ndarray, lambda_max: int, alpha: float) -> np.ndarray:
    """Eq. 2: lambda_c = min(lambda_max, floor(alpha * log2(M_c + 1))).

    Rounded down because a budget counts whole nodes and eq. 2 is an allowance, never to be
    exceeded; a 1e-9 slack keeps exact powers of two (M_c = 15, alpha = 1 -> 4) from flooring to 3.
    """
    m = np.asarray(candidate_counts, dtype=np.float64)
    raw = np.floor(alpha * np.log2(m + 1.0) + 1e-9).astype(np.int64)
    return np.minimum(lambda_max, raw)


def select_context(targets: np.ndarray, nodes: np.ndarray, scores: np.ndarray, n_communities: int,
                   lambda_max: int, alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """§III-A steps 4-5: per community, its budget's worth of best-scoring candidates.

    Candidates with score 0 (unreachable) are not counted in M_c. Returns CSR-style
    (context_ptr, context_nodes, context_scores), best first within a community, ties to lower id.
    """
    targets = np.asarray(targets, dtype=np.int64)
    nodes = np.asarray(nodes, dtype=np.int64)
    scores = np.asarray(scores, dtype=np.float64)
    keep = scores > 0
    targets, nodes, scores = targets[keep], nodes[keep], scores[keep]
    counts = np.bincount(targets, minlength=n_communities)
    budget = context_budget(counts, lambda_max, alpha)
    order = np.lexsort((nodes, -scores, targets))
    targets, nodes, scores = targets[order], nodes[order], scores[order]
    group_start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.arange(len(targets)) - group_start[targets]
    chosen = rank < budget[targets]
    targets, nodes, scores = targets[chosen], nodes[chosen], scores[chosen]
    ptr = np.concatenate([[0], np.cumsum(np.bincount(targets, minlength=n_communities))]).astype(np.int64)
    return ptr, nodes, scores


def context_aware_partition(labels: np.ndarray, embeddings: np.ndarray, edges: np.ndarray,
                            betweenness: np.ndarray, lambda_max: int, alpha: float,
                            max_hops: int = 2) -> ContextPartition:
    """§III-A steps 2-5 on a Leiden partition: the communities with their context nodes attached."""
    labels = np.asarray(labels, dtype=np.int64)
    n_nodes = len(labels)
    n_comm = int(labels.max()) + 1 if n_nodes else 0
    nodes, targets, sims = misalignment(embeddings, labels)
    dist = community_hop_distance(n_nodes, edges, labels, nodes, targets, max_hops)
    scores = centrality_penalty(semantic_score(sims, dist), betweenness, nodes)
    context_ptr, context_nodes, context_scores = select_context(targets, nodes, scores, n_comm,
                                                                lambda_max, alpha)
    core_nodes = np.argsort(labels, kind="stable").astype(np.int64)
    core_ptr = np.concatenate([[0], np.cumsum(np.bincount(labels, minlength=n_comm))]).astype(np.int64)
    return ContextPartition(labels=labels, core_ptr=core_ptr, core_nodes=core_nodes,
                            context_ptr=context_ptr, context_nodes=context_nodes,
                            context_scores=context_scores)
