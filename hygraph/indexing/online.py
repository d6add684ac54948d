"""HyperRAG §3.3 on a live index: L_inc steps from served queries, and the periodic full recalibration.

The Retriever sends each `hyperbolic` query's implicit subgraph (a tree rooted at the query,
see core/retrieval/hyperbolic.py) with the question's embedding. The query becomes a temporary
row placed at its text projection (`init_from_text`) and held fixed there (it is where the
Retriever places such a question), so the query -> round-1 edges pull the retrieved chunks
toward where such questions land; it is dropped after the step. Nodes of the
subgraph and their one-hop explicit neighbours are trainable, everything else is frozen, and
the changed rows are pulled back under the norm bound M so the stored vectors stay valid until
the next recalibration recomputes M.

Recalibration retrains every point from its text initialization on the explicit edges plus
every accumulated subgraph (each with its own query row), as `hygraph index` trains them; the
updater runs it off its loop thread and swaps the result in as a new version.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from hygraph.config import HyperbolicConfig, UpdatesConfig
from hygraph.core import hyperbolic
from hygraph.indexing.state import IndexState

QUERY = "query"  # the root of every implicit subgraph (core/retrieval/hyperbolic.py ROOT)


@dataclass(frozen=True)
class Observation:
    """One served query: its implicit edges (parent, child) by chunk id, QUERY for the root, and its embedding."""

    edges: tuple[tuple[str, str], ...]
    query_vec: np.ndarray


@dataclass(frozen=True)
class Recalibration:
    """What a background retrain needs, copied so the updater can keep applying meanwhile."""

    chunk_ids: list[str]
    embeddings: np.ndarray
    explicit_edges: np.ndarray
    observations: list[Observation]


def observation(subgraph: dict[str, Any], query_vec: Sequence[float]) -> Observation:
    """From the Retriever's notes["implicit_subgraph"]; a malformed one raises ValueError."""
    edges = tuple((str(p), str(c)) for p, c in subgraph["edges"])
    return Observation(edges, np.asarray(query_vec, dtype=np.float32).reshape(-1))


class OnlineLearner:
    """Queues observed subgraphs, takes L_inc steps on an IndexState's points, remembers them for recalibration."""

    def __init__(self, hc: HyperbolicConfig, uc: UpdatesConfig) -> None:
        self.hc, self.uc = hc, uc
        self.pending: deque[Observation] = deque(maxlen=uc.online_queue)
        self.history: deque[Observation] = deque(maxlen=uc.max_implicit_subgraphs)
        self.dropped = 0
        self.steps = 0
        self.since_recalibration = 0
        self._index: tuple[tuple[int, int], dict[str, int], np.ndarray, np.ndarray] | None = None

    def observe(self, obs: Observation) -> None:
        if len(self.pending) == self.pending.maxlen:
            self.dropped += 1  # the oldest waiting subgraph gives way: learning is best effort
        self.pending.append(obs)

    @property
    def recalibration_due(self) -> bool:
        return self.since_recalibration >= self.uc.recalibrate_every

    def _rows(self, state: IndexState) -> tuple[dict[str, int], np.ndarray, np.ndarray]:
        """Chunk id -> row and the explicit graph's CSR for this state (rebuilt when an apply changed it)."""
        key = (id(state), state.version)
        if self._index is None or self._index[0] != key:
            ids = state.cols["id"]
            indptr, indices = hyperbolic.edge_adjacency(state.hyp["edges"], len(ids))
            self._index = (key, {cid: i for i, cid in enumerate(ids)}, indptr, indices)
        return self._index[1], self._index[2], self._index[3]

    def step(self, state: IndexState) -> tuple[list[str], np.ndarray]:
        """§3.3 Phase 1 (L_inc) for the oldest pending subgraph; updates `state` in place.

        Returns the chunk ids whose points moved and their new storage vectors (float32).
        Chunks deleted since the query was served are left out of its subgraph.
        """
        obs = self.pending.popleft()
        self.history.append(obs)
        self.since_recalibration += 1
        row, indptr, indices = self._rows(state)
        points = state.hyp["points"]
        n = len(points)
        edges = np.array([(n if p == QUERY else row[p], row[c]) for p, c in obs.edges
                          if (p == QUERY or p in row) and c in row], dtype=np.int64).reshape(-1, 2)
        if not len(edges):
            return [], np.zeros((0, points.shape[1] + 2), np.float32)
        nodes = np.unique(edges[edges < n])
        neighbours = np.concatenate([indices[indptr[i]:indptr[i + 1]] for i in nodes])
        anchor = hyperbolic.init_from_text(obs.query_vec[None, :], self.hc.dim, self.hc.seed)
        moved, changed = hyperbolic.incremental_step(
            np.vstack([points, anchor]), edges, neighbours, steps=self.uc.online_steps, lr=self.hc.lr,
            negatives=self.hc.negatives, seed=self.hc.seed + self.steps, frozen=np.array([n]))
        self.steps += 1
        changed = changed[changed < n]
        points[changed] = hyperbolic.fit_under_bound(moved[changed], state.hyp["M"])
        ids = state.cols["id"]
        return ([ids[i] for i in changed],
                hyperbolic.storage_vectors(points[changed], state.hyp["M"]).astype(np.float32))

    def recalibration(self, state: IndexState) -> Recalibration:
        """Copy the inputs of a retrain and restart the count toward the next one."""
        self.since_recalibration = 0
        return Recalibration(list(state.cols["id"]), np.array(state.cols["embedding"], copy=True),
                             np.array(state.hyp["edges"], copy=True), list(self.history))


def retrain(job: Recalibration, hc: HyperbolicConfig, device: str) -> np.ndarray:
    """§3.3 Phase 2: all points from their text initialization on explicit + accumulated implicit edges.

    Returns the chunks' points (rows follow job.chunk_ids); the query rows are dropped.
    """
    n = len(job.chunk_ids)
    row = {cid: i for i, cid in enumerate(job.chunk_ids)}
    implicit, query_vecs = [], []
    for obs in job.observations:
        q = n + len(query_vecs)
        pairs = [(q if p == QUERY else row[p], row[c]) for p, c in obs.edges
                 if (p == QUERY or p in row) and c in row]
        if pairs:
            implicit.extend(pairs)
            query_vecs.append(obs.query_vec)
    init = hyperbolic.init_from_text(job.embeddings, hc.dim, hc.seed)
    if query_vecs:
        init = np.vstack([init, hyperbolic.init_from_text(np.vstack(query_vecs), hc.dim, hc.seed)])
    edges = np.vstack([job.explicit_edges.reshape(-1, 2), np.array(implicit, dtype=np.int64).reshape(-1, 2)])
    trainable = np.arange(len(init)) < n  # query rows stay at their projections, as in a step
    points = hyperbolic.train_poincare(init, edges, epochs=hc.epochs, lr=hc.lr, negatives=hc.negatives,
                                       batch_size=hc.batch_size, seed=hc.seed, device=device,
                                       trainable_mask=trainable)
    return points[:n]


def install(state: IndexState, chunk_ids: list[str], points: np.ndarray) -> np.ndarray:
    """Put retrained points into `state` by chunk id and recompute M (§3.3 Phase 2).

    Chunks inserted while the retrain ran keep their current points. Returns the storage
    vectors of every row (float32), for the new collection.
    """
    row = {cid: i for i, cid in enumerate(state.cols["id"])}
    out = np.array(state.hyp["points"], copy=True)
    for i, cid in enumerate(chunk_ids):
        if cid in row:
            out[row[cid]] = points[i]
    state.hyp["points"] = out
    state.hyp["M"] = hyperbolic.norm_bound(hyperbolic.lorentz_lift(out))
    return hyperbolic.storage_vectors(out, state.hyp["M"]).astype(np.float32)
