"""Personalized PageRank over the hybrid graph (HippoRAG 2 §3: passages ranked by the mass a walk from the
question's seeds leaves on them): Haveliwala's power iteration, exact and whole-graph, and Andersen, Chung and
Lang's forward push, approximate and local, whose cost follows the mass it moves rather than the graph's size.

The walk runs on the HybridGraph's symmetric adjacency with one weight per edge kind: a step
from a node picks a neighbour with probability proportional to the kind's weight, so, for
example, a passage shares its mass with the entities it mentions and an entity with the
passages mentioning it and the entities it is related to.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from hygraph.core.graph import EDGE_KINDS, HybridGraph

# (kind code of one end, kind code of the other) -> edge kind; codes as HybridGraph.node_kinds()
_KIND_OF_PAIR = {(0, 0): "chunk_chunk", (1, 1): "entity_entity", (0, 1): "entity_chunk", (1, 0): "entity_chunk",
                 (2, 1): "hyperedge_entity", (1, 2): "hyperedge_entity", (2, 0): "hyperedge_chunk",
                 (0, 2): "hyperedge_chunk"}


@dataclass(frozen=True, eq=False)
class Walk:
    """The column-stochastic transition matrix of the weighted hybrid graph, ready for power iteration.

    `matrix[j, i]` is the probability of stepping from node i to node j; a node without edges
    (`dangling`) has a zero column and its mass returns to the seeds. Stored by column (CSC): a
    push reads the out-edges of the nodes it pushes from, which are a column's slice.
    """

    matrix: sp.csc_matrix
    dangling: np.ndarray  # indices of the nodes without edges


def kind_weights(edge_weights: dict[str, float]) -> np.ndarray:
    """(3, 3) float32: the weight of a step between node kinds (codes as HybridGraph.node_kinds())."""
    table = np.zeros((3, 3), dtype=np.float32)
    for (a, b), kind in _KIND_OF_PAIR.items():
        table[a, b] = edge_weights.get(kind, 0.0)
    return table


def transition(graph: HybridGraph, edge_weights: dict[str, float], subject: np.ndarray | None = None,
               subject_weight: float = 1.0) -> Walk:
    """The walk's transition matrix: adjacency entries weighted by edge kind, each node's out-weights summing to 1.

    `subject` lists (chunk node, entity node) mention edges where the entity is what the chunk
    is about (its passage's title); their weight is multiplied by `subject_weight` both ways.
    """
    unknown = set(edge_weights) - set(EDGE_KINDS)
    if unknown:
        raise ValueError(f"unknown edge kinds {sorted(unknown)} (one of {', '.join(EDGE_KINDS)})")
    adj = graph.adjacency.tocoo()
    kinds = graph.node_kinds()
    table = kind_weights(edge_weights)
    w = table[kinds[adj.row], kinds[adj.col]] * adj.data
    if subject is not None and len(subject):
        n = np.int64(graph.n_nodes)
        pairs = np.asarray(subject, dtype=np.int64).reshape(-1, 2)
        keys = np.concatenate([pairs[:, 0] * n + pairs[:, 1], pairs[:, 1] * n + pairs[:, 0]])
        w = np.where(np.isin(adj.row.astype(np.int64) * n + adj.col, keys), w * subject_weight, w)
    keep = w > 0
    rows, cols, w = adj.row[keep], adj.col[keep], w[keep]
    out_weight = np.bincount(rows, weights=w, minlength=graph.n_nodes)
    # Column-stochastic: entry (to, from) = w(from, to) / out_weight(from).
    matrix = sp.csc_matrix(((w / out_weight[rows]).astype(np.float32), (cols, rows)),
                           shape=(graph.n_nodes, graph.n_nodes))
    return Walk(matrix, np.flatnonzero(out_weight == 0))


def personalized_pagerank(walk: Walk, reset: np.ndarray, damping: float = 0.5, tol: float = 1e-4,
                          max_iter: int = 50) -> np.ndarray:
    """Power iteration for p = (1 - d) r + d (T p + dangling mass * r), r the normalized reset vector.

    Stops when the L1 change falls under `tol` or after `max_iter` steps; returns p (sums to 1).
    With d = 0.5 (HippoRAG's setting) the error halves at every step, so a few steps suffice.
    """
    return power_iteration(walk, reset, damping, tol, max_iter)[0]


def power_iteration(walk: Walk, reset: np.ndarray, damping: float = 0.5, tol: float = 1e-4,
                    max_iter: int = 50) -> tuple[np.ndarray, int]:
    """`personalized_pagerank` with the number of steps it took."""
    if not 0.0 <= damping < 1.0:
        raise ValueError(f"damping must be in [0, 1), got {damping}")
    total = float(reset.sum())
    if reset.shape != (walk.matrix.shape[0],) or total <= 0 or (reset < 0).any():
        raise ValueError("reset must be a non-negative vector over the graph's nodes with a positive sum")
    r = (reset / total).astype(np.float32)
    p = r.copy()
    steps = 0
    for steps in range(1, max_iter + 1):
        nxt = walk.matrix @ p
        nxt += float(p[walk.dangling].sum()) * r
        nxt = (1.0 - damping) * r + damping * nxt
        delta = float(np.abs(nxt - p).sum())
        p = nxt
        if delta < tol:
            break
    return p, steps


def forward_push(walk: Walk, reset: np.ndarray, damping: float = 0.5, epsilon: float = 1e-4,
                 max_rounds: int = 200) -> tuple[np.ndarray, int]:
    """Andersen-Chung-Lang forward push (FOCS 2006), in synchronous rounds: an approximation of
    `personalized_pagerank` that only touches the nodes the mass reaches.

    Invariant: PPR(r) = p + PPR(residual). Each round takes every node holding more than `epsilon`
    of residual mass, keeps 1 - damping of it in p and passes the rest along its out-edges (a
    dangling node's back to the seeds). When no node holds more than `epsilon`, the residual's
    first step, (1 - damping) x residual, is added, so every node the walk reached has mass. Returns
    (p, rounds). Total error (L1) is at most damping x the residual mass left, each node's at most
    about epsilon / (1 - damping); the top of the ranking, which holds most of the mass, settles first.
    """
    if not 0.0 <= damping < 1.0:
        raise ValueError(f"damping must be in [0, 1), got {damping}")
    if epsilon <= 0:
        raise ValueError(f"epsilon must be positive, got {epsilon}")
    total = float(reset.sum())
    if reset.shape != (walk.matrix.shape[0],) or total <= 0 or (reset < 0).any():
        raise ValueError("reset must be a non-negative vector over the graph's nodes with a positive sum")
    seeds = np.flatnonzero(reset)
    seed_share = reset[seeds] / total
    indptr, indices, data = walk.matrix.indptr, walk.matrix.indices, walk.matrix.data
    p = np.zeros(reset.shape[0], dtype=np.float64)
    residual = np.zeros(reset.shape[0], dtype=np.float64)
    residual[seeds] = seed_share
    active = seeds[seed_share > epsilon]
    rounds = 0
    while active.size and rounds < max_rounds:
        rounds += 1
        mass = residual[active]
        residual[active] = 0.0
        p[active] += (1.0 - damping) * mass
        starts, lengths = indptr[active], indptr[active + 1] - indptr[active]
        # Every out-edge of every active node, as positions into indices/data.
        edges = np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))
        targets = indices[edges]
        np.add.at(residual, targets, data[edges] * np.repeat(damping * mass, lengths))
        stranded = damping * float(mass[lengths == 0].sum())
        if stranded > 0:
            residual[seeds] += stranded * seed_share
            targets = np.concatenate([targets, seeds])
        active = _over(residual, targets, epsilon)
    p += (1.0 - damping) * residual
    return p.astype(np.float32), rounds


# A round that touched more than 1/SCAN_SHARE of the nodes finds the next active ones by scanning every node's
# residual: then a scan costs less than deduplicating the touched ones (demo graph, 15k nodes: 1.7 -> 1.0 ms a walk).
SCAN_SHARE = 16


def _over(residual: np.ndarray, touched: np.ndarray, epsilon: float) -> np.ndarray:
    """The nodes whose residual exceeds `epsilon`, ascending, given every node whose residual changed this round
    (`touched`, with repeats). Only a touched node can be over: an active node's residual was zeroed, and every
    other node's was at most `epsilon` after the previous round (by induction: the seeds start at most there)."""
    if touched.size * SCAN_SHARE > residual.size:
        return np.flatnonzero(residual > epsilon)
    # Deduplicated after the threshold: far fewer nodes cross it than are touched.
    return np.unique(touched[residual[touched] > epsilon])
