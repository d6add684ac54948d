"""HyperRAG §3.3 on a live index: L_inc steps from served queries, and the periodic full recalibration.

The Retriever sends each `hyperbolic` query's implicit subgraph (a tree rooted at the query,
see core/retrieval/hyperbolic.py) with the question's embedding. The query becomes a temporary
row placed at its text projection (`init_from_text`) and held fixed there (it is where the
Retriever places such a question), so the query -> round-1 edges pull the retrieved chunks
toward where such questions land; it is dropped after the step. Nodes of the subgraph and
their one-hop explicit neighbours are trainable; a sample of other stored points serves as
negatives and stays frozen with everything else. The changed rows are pulled back under the
norm bound M so the stored vectors stay valid until the next recalibration recomputes M.

Recalibration retrains every point from its text initialization on the explicit edges plus
every accumulated subgraph (each with its own query row), as `hygraph index` trains them; the
updater runs it off its loop thread and swaps the result in as a new version.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import numpy as np

from hygraph.config import HyperbolicConfig, UpdatesConfig
from hygraph.core import hyperbolic

QUERY = "query"  # the root of every implicit subgraph (core/retrieval/hyperbolic.py ROOT)
NEGATIVE_POOL = 512  # stored points sampled as negatives for one step


class LivePoints(Protocol):
    """The live hyperbolic points as the updater reads them (the vector collection and the terms)."""

    M: float

    def exists(self, chunk_id: str) -> bool: ...

    def points(self, chunk_ids: Sequence[str]) -> np.ndarray:
        """Current Poincaré points (float64), rows in `chunk_ids` order."""
        ...

    def neighbours(self, chunk_id: str) -> Sequence[str]: ...

    def sample(self, k: int, rng: np.random.Generator, exclude: set[str]) -> list[str]:
        """Up to k live chunk ids outside `exclude`, at random."""
        ...


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
    """Queues observed subgraphs, takes L_inc steps on the live points, remembers them for recalibration."""

    def __init__(self, hc: HyperbolicConfig, uc: UpdatesConfig) -> None:
        self.hc, self.uc = hc, uc
        self.pending: deque[Observation] = deque(maxlen=uc.online_queue)
        self.history: deque[Observation] = deque(maxlen=uc.max_implicit_subgraphs)
        self.dropped = 0
        self.steps = 0
        self.since_recalibration = 0

    def observe(self, obs: Observation) -> None:
        if len(self.pending) == self.pending.maxlen:
            self.dropped += 1  # the oldest waiting subgraph gives way: learning is best effort
        self.pending.append(obs)

    @property
    def recalibration_due(self) -> bool:
        return self.since_recalibration >= self.uc.recalibrate_every

    def step(self, live: LivePoints) -> tuple[list[str], np.ndarray]:
        """§3.3 Phase 1 (L_inc) for the oldest pending subgraph.

        Returns the chunk ids whose points moved and their new storage vectors (float32).
        Chunks deleted since the query was served are left out of its subgraph.
        """
        obs = self.pending.popleft()
        self.history.append(obs)
        self.since_recalibration += 1
        pairs = [(p, c) for p, c in obs.edges if (p == QUERY or live.exists(p)) and live.exists(c)]
        if not pairs:
            return [], np.zeros((0, self.hc.dim + 2), np.float32)
        nodes = list(dict.fromkeys(x for pair in pairs for x in pair if x != QUERY))
        neighbours = list(dict.fromkeys(n for x in nodes for n in live.neighbours(x) if n not in set(nodes)))
        rng = np.random.default_rng(self.hc.seed + self.steps)
        pool = live.sample(NEGATIVE_POOL, rng, set(nodes) | set(neighbours))
        ids = [*nodes, *neighbours, *pool]
        row = {cid: i for i, cid in enumerate(ids)}
        anchor = len(ids)
        points = np.vstack([live.points(ids),
                            hyperbolic.init_from_text(obs.query_vec[None, :], self.hc.dim, self.hc.seed)])
        edges = np.array([(anchor if p == QUERY else row[p], row[c]) for p, c in pairs], dtype=np.int64)
        moved, changed = hyperbolic.incremental_step(
            points, edges, np.array([row[n] for n in neighbours], dtype=np.int64), steps=self.uc.online_steps,
            lr=self.hc.lr, negatives=self.hc.negatives, seed=self.hc.seed + self.steps, frozen=np.array([anchor]))
        self.steps += 1
        changed = changed[changed < anchor]
        fitted = hyperbolic.fit_under_bound(moved[changed], live.M)
        return [ids[i] for i in changed], hyperbolic.storage_vectors(fitted, live.M).astype(np.float32)

    def recalibration(self, chunk_ids: list[str], embeddings: np.ndarray, explicit_edges: np.ndarray) -> Recalibration:
        """The inputs of a retrain (copied by the caller) with every remembered subgraph; restarts the count."""
        self.since_recalibration = 0
        return Recalibration(chunk_ids, embeddings, explicit_edges, list(self.history))


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


def install(live_ids: Sequence[str], current: np.ndarray, chunk_ids: Sequence[str],
            points: np.ndarray) -> tuple[np.ndarray, float]:
    """Retrained points by chunk id over the live chunks' current points, and the recomputed bound M
    (§3.3 Phase 2). Chunks inserted while the retrain ran keep their current points. Returns the
    storage vectors of every live chunk (float32, rows in `live_ids` order) and M."""
    row = {cid: i for i, cid in enumerate(chunk_ids)}
    out = np.array(current, dtype=np.float64, copy=True)
    for i, cid in enumerate(live_ids):
        if cid in row:
            out[i] = points[row[cid]]
    m = float(hyperbolic.norm_bound(hyperbolic.lorentz_lift(out)))
    return hyperbolic.storage_vectors(out, m).astype(np.float32), m
