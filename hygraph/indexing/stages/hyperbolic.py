"""The hyperbolic stage (HyperRAG §3.1-3.2): explicit keyword edges between passages and Poincaré points.

The build computes every chunk's key terms, the explicit edges over all of them, trains all
points with Riemannian Adam and stores them in Lorentz form. An update computes key terms for
the new chunks only and finds their explicit edges through the inverted term index the updater
keeps (`TermIndex`), by the build's rule restricted to the new rows: each new chunk nominates
its best partners (overlap ratio >= theta, terms held by more than `hub_df` live chunks left out,
as in the build), accepted strongest first while both ends have fewer than `max_neighbors` edges. The new points are
trained with every other point frozen, against their explicit neighbours and a sample of stored
points as negatives. The norm bound M (and every stored vector) changes only when a new point
needs a larger one.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from hygraph.backends import resolve_device
from hygraph.config import HyperbolicConfig
from hygraph.core import hyperbolic
from hygraph.indexing.stages.vectors import VectorDelta
from hygraph.indexing.state import IndexState
from hygraph.store.artifacts import CHUNKS, TERMS, TermsRow
from hygraph.store.versions import Version

# Stored points sampled as negatives when new points are trained (the build samples from all of them).
NEGATIVE_POOL = 512
Points = Callable[[Sequence[str]], np.ndarray]  # chunk ids -> their current Poincaré points (float64)


@dataclass
class Trained:
    terms: list[set[str]]
    edges: np.ndarray  # (m, 2) rows into the chunk list, i < j
    points: np.ndarray
    M: float

    def storage(self) -> np.ndarray:
        return hyperbolic.storage_vectors(self.points, self.M).astype(np.float32)

    def rows(self, chunk_ids: Sequence[str]) -> list[TermsRow]:
        neighbours: list[list[str]] = [[] for _ in chunk_ids]
        for i, j in self.edges.tolist():
            neighbours[i].append(chunk_ids[j])
            neighbours[j].append(chunk_ids[i])
        return [TermsRow(cid, tuple(sorted(t)), tuple(nb)) for cid, t, nb in zip(chunk_ids, self.terms, neighbours)]


def build(h: HyperbolicConfig, texts: Sequence[str], embeddings: np.ndarray) -> Trained:
    """HyperRAG §3.1-3.2: explicit keyword edges, Poincaré training, the Lorentz/L2 norm bound."""
    terms = hyperbolic.key_terms(texts)
    edges = hyperbolic.explicit_edges(terms, theta=h.theta, max_neighbors=h.max_neighbors, hub_df=h.hub_df)
    init = hyperbolic.init_from_text(embeddings, h.dim, h.seed)
    points = hyperbolic.train_poincare(init, edges, epochs=h.epochs, lr=h.lr, negatives=h.negatives,
                                       batch_size=h.batch_size, seed=h.seed, device=resolve_device(h.device))
    return Trained(terms, edges.astype(np.int64), points, float(hyperbolic.norm_bound(hyperbolic.lorentz_lift(points))))


@dataclass
class TermIndex:
    """The updater's inverted index of chunk key terms (term -> chunk numbers), each term's count of live chunks,
    and each chunk's count of non-hub terms (those held by at most `hub_df` live chunks: the build's |T|) and
    explicit degree. Derived from the terms at load; a batch edits it as it publishes."""

    hub_df: int
    number: dict[str, int] = field(default_factory=dict)
    ids: list[str | None] = field(default_factory=list)  # None: removed
    n_terms: array = field(default_factory=lambda: array("l"))
    degree: array = field(default_factory=lambda: array("l"))
    postings: dict[str, array] = field(default_factory=dict)
    df: dict[str, int] = field(default_factory=dict)  # live chunks holding the term

    @staticmethod
    def load(version: Version, hub_df: int) -> "TermIndex":
        index = TermIndex(hub_df)
        if version.has(TERMS):
            for batch in version.table(TERMS).batches(["id", "terms", "neighbours"]):
                cols = batch.to_pydict()
                for cid, terms, neighbours in zip(cols["id"], cols["terms"], cols["neighbours"]):
                    index.add(cid, terms, len(neighbours))
        return index

    def add(self, cid: str, terms: Sequence[str], degree: int) -> None:
        n = self.number[cid] = len(self.ids)
        self.ids.append(cid)
        self.degree.append(degree)
        size = 0
        for t in terms:
            posting = self.postings.setdefault(t, array("l"))
            df = self.df[t] = self.df.get(t, 0) + 1
            if df == self.hub_df + 1:
                self._resize(posting, -1)  # t just became a hub: its holders stop counting it
            posting.append(n)
            size += df <= self.hub_df
        self.n_terms.append(size)

    def remove(self, cid: str, terms: Sequence[str]) -> None:
        """Drop a chunk; `terms`: its key terms as added."""
        n = self.number.pop(cid, None)
        if n is None:
            return
        self.ids[n] = None  # postings keep the number; lookups skip removed chunks
        for t in terms:
            df = self.df[t] = self.df[t] - 1
            if df == self.hub_df:
                self._resize(self.postings[t], 1)  # no longer a hub: its live holders count it again

    def _resize(self, posting: array, by: int) -> None:
        for m in posting:
            if self.ids[m] is not None:
                self.n_terms[m] += by

    def overlaps(self, terms: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(chunk numbers, shared non-hub terms) of every live chunk sharing a non-hub term."""
        lists = [np.frombuffer(self.postings[t], dtype=np.int64) for t in terms
                 if t in self.postings and self.df[t] <= self.hub_df]
        if not lists:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        nums, counts = np.unique(np.concatenate(lists), return_counts=True)
        alive = np.fromiter((self.ids[i] is not None for i in nums.tolist()), dtype=bool, count=len(nums))
        return nums[alive], counts[alive]

    def live(self) -> list[str]:
        return [c for c in self.ids if c is not None]


def new_edges(index: TermIndex, new: Sequence[str], terms: Sequence[set[str]], theta: float,
              max_neighbors: int) -> list[tuple[str, str]]:
    """§3.1 explicit edges of new chunks (already in `index`): nominations by overlap ratio over the non-hub
    terms, then greedy acceptance by ratio while both ends have a free slot (the build's rule, on the new
    rows)."""
    candidates: dict[tuple[int, int], float] = {}
    n_terms = np.frombuffer(index.n_terms, dtype=np.int64)
    for cid, t in zip(new, terms):
        me = index.number[cid]
        nums, shared = index.overlaps(sorted(t))
        smaller = np.minimum(n_terms[nums], n_terms[me])
        ratio = shared / np.maximum(smaller, 1)
        ok = (nums != me) & (smaller > 0) & (ratio >= theta)
        nums, ratio = nums[ok], ratio[ok]
        best = np.lexsort((nums, -ratio))[:max_neighbors]
        for j, r in zip(nums[best].tolist(), ratio[best].tolist()):
            key = (min(me, j), max(me, j))
            candidates[key] = max(candidates.get(key, 0.0), r)
    out = []
    degree = index.degree
    for (a, b), _ in sorted(candidates.items(), key=lambda kv: (-kv[1], kv[0])):
        if degree[a] < max_neighbors and degree[b] < max_neighbors:
            degree[a] += 1
            degree[b] += 1
            out.append((index.ids[a], index.ids[b]))
    return out  # type: ignore[return-value]


def update(state: IndexState, h: HyperbolicConfig, index: TermIndex, new_chunks: Sequence[str],
           new_texts: Sequence[str], new_embeddings: np.ndarray, removed: Sequence[str], points_of: Points,
           delta: VectorDelta) -> None:
    """Explicit edges and points for the new chunks; removed chunks leave their neighbours' lists."""
    lists: dict[str, list[str]] = {}

    def neighbours(cid: str) -> list[str]:
        if cid not in lists:
            row = state.get(TERMS, cid)
            lists[cid] = list(row.neighbours) if row is not None else []
        return lists[cid]

    for cid in removed:
        for other in neighbours(cid):
            if other not in removed and cid in neighbours(other):
                neighbours(other).remove(cid)
                if other in index.number:
                    index.degree[index.number[other]] -= 1
        _remove(state, index, cid)
        state.delete(TERMS, cid)
        lists.pop(cid, None)
    terms = hyperbolic.key_terms(new_texts)
    for cid, t in zip(new_chunks, terms):
        _remove(state, index, cid)  # a replaced chunk comes back as a new row
        index.add(cid, sorted(t), 0)
        lists[cid] = []
    for a, b in new_edges(index, new_chunks, terms, h.theta, h.max_neighbors):
        neighbours(a).append(b)
        neighbours(b).append(a)
    term_of = dict(zip(new_chunks, terms))
    for cid, nb in lists.items():
        if cid in term_of:
            state.put(TERMS, TermsRow(cid, tuple(sorted(term_of[cid])), tuple(nb)))
        elif state.contains(TERMS, cid):
            state.put(TERMS, TermsRow(cid, state.require(TERMS, cid).terms, tuple(nb)))
    if new_chunks:
        _train(state, h, index, list(new_chunks), new_embeddings, lists, points_of, delta)


def _remove(state: IndexState, index: TermIndex, cid: str) -> None:
    row = state.get(TERMS, cid)
    index.remove(cid, row.terms if row is not None else ())


def _train(state: IndexState, h: HyperbolicConfig, index: TermIndex, new: list[str], embeddings: np.ndarray,
           lists: dict[str, list[str]], points_of: Points, delta: VectorDelta) -> None:
    """§3.2 for the new rows only: everything else is frozen."""
    new_set = set(new)
    fixed = list(dict.fromkeys(o for c in new for o in lists[c] if o not in new_set))
    rng = np.random.default_rng(h.seed + state.version)
    skip = new_set | set(fixed)
    others = fixed + hyperbolic.sample_present(index.ids, NEGATIVE_POOL, rng, skip)
    row = {cid: i for i, cid in enumerate([*new, *others])}
    init = np.vstack([hyperbolic.init_from_text(embeddings, h.dim, h.seed),
                      points_of(others) if others else np.zeros((0, h.dim))])
    pairs = {(min(row[c], row[o]), max(row[c], row[o])) for c in new for o in lists[c] if o in row}
    edges = np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2)
    trainable = np.arange(len(init)) < len(new)
    points = hyperbolic.train_poincare(init, edges, epochs=h.epochs, lr=h.lr, negatives=h.negatives,
                                       batch_size=h.batch_size, seed=h.seed, trainable_mask=trainable)[:len(new)]
    info = state.manifest.hyperbolic
    assert info is not None
    if hyperbolic.norm_bound(hyperbolic.lorentz_lift(points)) > info.M:
        # A new point needs a larger bound: every stored vector is rewritten under the new M. The term index
        # already lists this batch's chunks (and a replaced chunk under its old id): their points are the
        # ones just trained, never a fetch of what the collection does not hold yet or holds stale.
        ids = [c for c in index.live() if c not in new_set]
        stored = np.vstack([points_of(ids), points]) if ids else points
        info.M = float(hyperbolic.norm_bound(hyperbolic.lorentz_lift(stored)))
        delta.add("hyperbolic", ids + new, hyperbolic.storage_vectors(stored, info.M).astype(np.float32))
    else:
        delta.add("hyperbolic", new, hyperbolic.storage_vectors(points, info.M).astype(np.float32))


def explicit_graph(version: Version) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Every chunk's id and text embedding and the explicit edges between them (rows into the ids, i < j),
    for a full retrain (indexing/online.py)."""
    chunks = version.table(CHUNKS)
    ids: list[str] = []
    parts: list[np.ndarray] = []
    for batch in chunks.batches(["id", "embedding"]):
        ids.extend(batch.column(0).to_pylist())
        emb = batch.column(1)
        # flatten() honours the array's offset; the fixed width shapes an empty segment's batch too.
        parts.append(emb.flatten().to_numpy(zero_copy_only=False).reshape(len(emb), emb.type.list_size))
    row = {cid: i for i, cid in enumerate(ids)}
    edges = []
    for batch in version.table(TERMS).batches(["id", "neighbours"]):
        for cid, nbs in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
            edges.extend((row[cid], row[n]) for n in nbs if n in row and row[cid] < row[n])
    return ids, np.vstack(parts).astype(np.float32), np.array(edges, dtype=np.int64).reshape(-1, 2)
