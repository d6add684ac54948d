"""The structure stage: Cleora embeddings (HyGRAG eq. 7) of every graph node.

The build propagates over the whole graph. An update embeds only the new nodes: each starts
from its id-derived Cleora init and takes the configured propagation steps through its
neighbours, whose vectors stay fixed (`core.cleora.cleora_extend` on the new nodes and their
one-hop neighbourhood, which is all the propagation reads).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from hygraph.backends import resolve_device
from hygraph.config import CleoraConfig
from hygraph.core import cleora
from hygraph.core.graph import HybridGraph
from hygraph.indexing.state import IndexState
from hygraph.store.artifacts import GRAPH


def build(c: CleoraConfig, graph: HybridGraph) -> np.ndarray:
    """Rows follow graph.node_ids."""
    return cleora.cleora_embed(graph.adjacency, graph.node_ids, dim=c.dim, iterations=c.iterations, seed=c.seed,
                               device=resolve_device(c.device))


def update(state: IndexState, c: CleoraConfig, new_nodes: Sequence[str]) -> None:
    if not new_nodes:
        return
    rows = {n: state.require(GRAPH, n) for n in new_nodes}
    local = list(dict.fromkeys([*new_nodes, *(m for r in rows.values() for m in r.neighbours)]))
    index = {n: i for i, n in enumerate(local)}
    n_new = len(new_nodes)
    src = [index[n] for n, r in rows.items() for _ in r.neighbours]
    dst = [index[m] for r in rows.values() for m in r.neighbours]
    adj = sp.csr_matrix((np.ones(len(src), np.float32), (src, dst)), shape=(len(local), len(local)))
    base = np.zeros((len(local), c.dim), np.float32)
    for i, n in enumerate(local[n_new:], n_new):
        base[i] = state.require(GRAPH, n).cleora
    is_new = np.arange(len(local)) < n_new
    z = cleora.cleora_extend(adj, local, base, is_new, iterations=c.iterations, seed=c.seed)
    for i, n in enumerate(new_nodes):
        state.put(GRAPH, replace(rows[n], cleora=z[i]))
