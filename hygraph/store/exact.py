"""Exact inner-product search over a version's text vectors: those its segments hold (chunks, entities,
summaries), mapped, and those only the vector store holds (relations, hyperedges), read from it at load.

A served query searches three to four collections; each vector store search costs a request to the
store and the store server's CPU for it (on the embedded Milvus 2.3.5, a few ms a search all told), while
a small collection's vectors are already mapped in the query process with the version's segments. Scoring
every live row there is exact (the ranking an HNSW search approximates) and costs well under a
millisecond below ~10k rows of 384 floats. Only the version's own live rows are scored, so no hit needs
dropping as another version's.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Container, Sequence

import faiss
import numpy as np

from hygraph.store.artifacts import CHUNKS, ENTITIES, HYPEREDGES, RELATIONS, SUMMARIES, Artifact
from hygraph.store.table import Table
from hygraph.store.versions import Version

# A product of several queries (a matrix-matrix product) goes multi-threaded in OpenBLAS once rows x queries x dim
# exceeds 65,536 x 4 (SMP_THRESHOLD_MIN x GEMM_MULTITHREAD_THRESHOLD, interface/gemm.c): blocks stay under it.
GEMM_BLOCK_PRODUCTS = 262_144
# Below this many queries a scan scores each with faiss's one-threaded SIMD inner products (`scores_of`), from it
# on with one matrix-matrix product: for 20k x 384, 2 queries cost 1.5 ms against 1.9, 4 cost 2.9 against 2.6.
GEMM_FROM = 3


@dataclass(frozen=True)
class _Part:
    """One segment's vectors: the rows this version reads from it (None: all) and their layers."""

    matrix: np.ndarray  # (rows, dim) float32, mapped
    ids: Sequence[str]
    live: np.ndarray | None  # bool per row; None when every row is live
    layers: np.ndarray | None  # int64 per row (summaries); None for kinds without layers


@dataclass
class _Wanted:
    """One query row of a search, waiting for the scan that answers it."""

    q: np.ndarray
    k: int
    layer: int | None
    found: list[tuple[str, float]] | None = None
    error: BaseException | None = None


class ExactVectors:
    """Exact top-k by inner product over one collection's vectors as one version holds them.

    A scan reads every row of the collection, so its cost is the memory it streams (a 20k x 384 collection is
    30 MB, past the cache), not the arithmetic. The queries that threads of one process ask at the same time
    (a replica's concurrent requests) are answered by one scan: the thread that finds no scan running takes
    every query waiting, its own included, and scores them in one matrix-matrix product while the threads
    that ask meanwhile wait for it and go in the next scan. A lone query is scanned at once, as before.
    """

    def __init__(self, parts: list[_Part]) -> None:
        self.parts = parts
        self._turn = threading.Condition()
        self._waiting: list[_Wanted] = []
        self._scanning = False

    @classmethod
    def mapped(cls, table: Table[Any], layered: bool = False) -> "ExactVectors":
        """The live rows of `table`'s `embedding` column, read where the segments are mapped."""
        runs: dict[int, list[tuple[int, int]]] = {}  # segment position -> its live rows' (start, count) runs
        for at, start, batch in table.batches_at(["id"]):
            runs.setdefault(at, []).append((start, batch.num_rows))
        parts = []
        for at, seg_runs in sorted(runs.items()):
            seg = table.segments[at]
            mask = None
            if seg_runs != [(0, len(seg))]:
                mask = np.zeros(len(seg), bool)
                for start, count in seg_runs:
                    mask[start:start + count] = True
            parts.append(_Part(np.ascontiguousarray(seg.column("embedding").matrix, dtype=np.float32), seg.ids, mask,
                               seg.column("layer").values if layered else None))
        return cls(parts)

    @classmethod
    def of(cls, ids: Sequence[str], matrix: np.ndarray) -> "ExactVectors":
        """`ids` and their vectors (rows of `matrix`), held by the caller (a collection whose vectors the
        segments do not hold, read from the store)."""
        return cls([_Part(np.ascontiguousarray(matrix, dtype=np.float32), list(ids), None, None)])

    def by_id(self) -> dict[str, np.ndarray]:
        """Each live row's vector by its id (views of the held matrices, no copy)."""
        out: dict[str, np.ndarray] = {}
        for part in self.parts:
            for row, item in enumerate(part.ids):
                if part.live is None or part.live[row]:
                    out[item] = part.matrix[row]
        return out

    def search(self, queries: np.ndarray, k: int, layer: int | None = None) -> list[list[tuple[str, float]]]:
        """Per query row, the k live rows (of `layer` only, when given) with the largest inner product, best
        first, as (id, score)."""
        queries = np.asarray(queries, dtype=np.float32)
        if k <= 0 or not len(queries):
            return [[] for _ in queries]
        mine = [_Wanted(q, k, layer) for q in queries]
        with self._turn:
            self._waiting += mine
            while any(w.found is None and w.error is None for w in mine):
                if self._scanning:
                    self._turn.wait()
                    continue
                batch, self._waiting, self._scanning = self._waiting, [], True
                self._turn.release()
                try:
                    self._scan(batch)
                finally:
                    self._turn.acquire()
                    self._scanning = False
                    self._turn.notify_all()
        for w in mine:
            if w.error is not None:
                raise w.error
        return [w.found or [] for w in mine]

    def _scan(self, batch: list[_Wanted]) -> None:
        """Answer every query of `batch` (or give each the error) from one pass over the rows."""
        try:
            found: list[list[tuple[float, int, int]]] = [[] for _ in batch]  # per query: (score, part, row)
            matrix = np.stack([w.q for w in batch]) if len(batch) > 1 else None
            for p, part in enumerate(self.parts):
                scores = scores_of(part.matrix, batch[0].q)[None, :] if matrix is None \
                    else scores_of_many(part.matrix, matrix)
                for w, row_scores, out in zip(batch, scores, found):
                    allowed = part.live
                    if w.layer is not None and part.layers is not None:
                        at_layer = part.layers == w.layer
                        allowed = at_layer if allowed is None else allowed & at_layer
                    rows = top_rows(row_scores, w.k, allowed)
                    out += zip(row_scores[rows].tolist(), [p] * len(rows), rows.tolist())
            for w, hits in zip(batch, found):
                if len(self.parts) > 1:  # one part's rows come best first already (`top_rows`)
                    hits.sort(key=lambda hit: -hit[0])
                w.found = [(self.parts[p].ids[row], score) for score, p, row in hits[:w.k]]
        except BaseException as exc:  # every waiting query gets it, and the one that scanned raises it too
            for w in batch:
                w.error = exc
            raise


def scores_of(matrix: np.ndarray, q: np.ndarray) -> np.ndarray:
    """matrix @ q for a C-contiguous float32 matrix (every held or mapped one is), by faiss's SIMD inner products
    on one thread. OpenBLAS's matrix-vector product cost twice as much here (20k x 384: 1.44 against 0.75 ms of
    CPU; 100k x 384: 12.3 against 5.3; AMD EPYC, numpy's OpenBLAS 0.3.31), and more again once it spreads
    over every core, whose threads spin."""
    if matrix.dtype != np.float32 or not matrix.flags.c_contiguous:  # faiss reads the raw buffer
        raise ValueError(f"scores_of needs a C-contiguous float32 matrix, not {matrix.dtype}")
    if not len(matrix):
        return np.zeros(0, np.float32)
    q = np.ascontiguousarray(q, dtype=np.float32)
    out = np.empty(len(matrix), np.float32)
    faiss.fvec_inner_products_ny(faiss.swig_ptr(out), faiss.swig_ptr(q), faiss.swig_ptr(matrix), matrix.shape[1],
                                 len(matrix))
    return out


def scores_of_many(matrix: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """queries @ matrix.T, (queries, rows): query by query (`scores_of`) below GEMM_FROM queries, else in blocks
    of rows that OpenBLAS computes on one thread (`GEMM_BLOCK_PRODUCTS`)."""
    if len(queries) < GEMM_FROM:
        return np.stack([scores_of(matrix, q) for q in queries])
    block = max(1, GEMM_BLOCK_PRODUCTS // max(1, matrix.shape[1] * len(queries)))
    out = np.empty((len(matrix), len(queries)), np.float32)
    qt = np.ascontiguousarray(queries.T)
    for start in range(0, len(matrix), block):
        np.matmul(matrix[start:start + block], qt, out=out[start:start + block])
    return np.ascontiguousarray(out.T)


def top_rows(scores: np.ndarray, k: int, allowed: np.ndarray | None = None) -> np.ndarray:
    """The rows of the k largest scores (among the `allowed` ones), largest first; ties by row number."""
    candidates = np.flatnonzero(allowed) if allowed is not None else None
    pool = scores if candidates is None else scores[candidates]
    if k < len(pool):
        picked = np.argpartition(-pool, k - 1)[:k]
    else:
        picked = np.arange(len(pool))
    picked = picked[np.lexsort((picked, -pool[picked]))]
    return picked if candidates is None else candidates[picked]


# The kinds whose vectors a version's segments hold: their artifact and whether searches may ask for a layer.
IN_SEGMENTS: dict[str, tuple[Artifact[Any], bool]] = {
    "chunks": (CHUNKS, False), "entities": (ENTITIES, False), "summaries": (SUMMARIES, True)}


def exact_searches(version: Version, kinds: Container[str], max_rows: int) -> dict[str, ExactVectors]:
    """The searches of `version` to answer in process: those of `kinds` whose vectors its segments hold and
    that have at most `max_rows` rows."""
    out = {}
    for kind, (artifact, layered) in IN_SEGMENTS.items():
        if kind in kinds and version.has(artifact):
            table = version.table(artifact)
            if 0 < max_rows and len(table) <= max_rows:
                out[kind] = ExactVectors.mapped(table, layered)
    return out


# The kinds whose vectors only the vector store holds: read from it when a reader loads its first version (20,452
# relations of 384 floats: 1.9 s, 40 MiB), then only the rows each newer version added, after which their searches
# cost the store nothing either.
IN_STORE: dict[str, Artifact[Any]] = {"relations": RELATIONS, "hyperedges": HYPEREDGES}


def store_held(version: Version, kinds: Container[str], max_rows: int) -> dict[str, list[str]]:
    """The kinds of `kinds` whose vectors only the store holds that `version` has at most `max_rows` rows of,
    each with its ids: the vectors to read from the store for searching them in process."""
    out = {}
    for kind, artifact in IN_STORE.items():
        if kind in kinds and version.has(artifact):
            table = version.table(artifact)
            if 0 < max_rows and len(table) <= max_rows:
                out[kind] = list(table.ids())
    return out
