"""Reading an index: the version a reader serves, opened through its `Index` and held by its lease.

A reader (a Retriever replica, `hygraph query`, the evaluator) serves one version at a time. Before it reads
anything of a version it names it in its lease (`store/lease.py`), so garbage collection on any node spares
that version's segments and collections; it swaps to a newer version when `CURRENT` moves, or when its lease
lapsed (it stalled: its version may be gone). A request reads `VersionReader.loaded` once, so a swap between
two of its searches cannot mix versions.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from hygraph.backends.vectorstore import VectorStore
from hygraph.core.retrieval.context import Hits, SearchRequest
from hygraph.core.retrieval.filter import MetadataIndex, PassageFilter
from hygraph.core.retrieval.view import IndexView
from hygraph.errors import StoreError, VersionNotReady
from hygraph.store.artifacts import DOCUMENTS, TERMS
from hygraph.store.catalog import Catalog
from hygraph.store.exact import ExactVectors, exact_searches, store_held
from hygraph.store.index import Index
from hygraph.store.points import LivePoints, PointMoves
from hygraph.store.versions import Version
from hygraph.store.view_loader import load_view, release_freed_memory

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Loaded:
    """One index version as a request sees it: the graph view (over the version's mapped segments,
    which it keeps open) and its vector collections."""

    view: IndexView
    collections: dict[str, str]
    version: Version
    catalog: Catalog  # its documents and counts, read back (GET /v1/documents, /v1/stats)
    # The collections searched in this process, over the version's vectors (vector_store.exact_max_rows); the
    # hyperbolic points among them as `LivePoints`, which the online learner's moves reach (store/points.py).
    exact: Mapping[str, ExactVectors | LivePoints] = field(default_factory=dict)

    @property
    def points(self) -> LivePoints | None:
        """The chunks' hyperbolic points held in this process; None: read from the vector store."""
        held = self.exact.get("hyperbolic")
        return held if isinstance(held, LivePoints) else None

    @cached_property
    def metadata_index(self) -> MetadataIndex:
        """Its documents' metadata postings, made by the first filtered query (one pass over the column)."""
        return MetadataIndex.build((doc_id, text) for batch in self.version.table(DOCUMENTS).batches(["id", "metadata"])
                                   for doc_id, text in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()))

    def passage_filter(self, flt: Mapping[str, Any]) -> PassageFilter:
        v = self.view
        return PassageFilter.of(self.metadata_index.documents(flt), v.chunk_doc, v.doc_chunks)


class VersionSearch:
    """`Search` over one loaded version's collections: the small ones exactly in this process (`Loaded.exact`),
    the others by the vector store, whose hits the version does not know (rows a newer or an older version
    wrote) are dropped."""

    def __init__(self, vectors: VectorStore, loaded: Loaded, pool: ThreadPoolExecutor) -> None:
        self.vectors, self.loaded, self.pool = vectors, loaded, pool

    def __call__(self, kind: str, queries: np.ndarray, k: int, layer: int | None) -> Hits:
        exact = self.loaded.exact.get(kind)
        if exact is not None:
            return exact.search(queries, k, layer)
        rows = self.vectors.search(self.loaded.collections[kind], queries, k, layer)
        known = self.loaded.view.known(kind)
        return [[(h.id, h.score) for h in row if h.id in known] for row in rows]

    def many(self, requests: Sequence[SearchRequest]) -> list[Hits]:
        if len(requests) < 2:
            return [self(*r) for r in requests]
        return self.start(requests)()

    def start(self, requests: Sequence[SearchRequest]) -> Callable[[], list[Hits]]:
        # Only the store's searches go to the pool: an exact one costs less than the hand-over, and runs
        # when the hits are collected.
        running = [None if r[0] in self.loaded.exact else self.pool.submit(self, *r) for r in requests]
        return lambda: [self(*r) if done is None else done.result() for r, done in zip(requests, running)]


class VersionReader:
    """The version one reader of `index` serves (`loaded`), named by its lease; its collections of at most
    `vector_store.exact_max_rows` rows (0: none) are searched in this process: those whose vectors its segments
    hold, and with `vector_store.exact_from_store` those whose vectors are read from the store at each load,
    the chunks' hyperbolic points among them (store/points.py)."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self.exact_max_rows = index.cfg.vector_store.exact_max_rows
        self.exact_from_store = index.cfg.vector_store.exact_from_store
        self.lease = index.files.reader_lease()
        self._swap = threading.Lock()
        self.loaded = self._load(index.files.current_version(), None)

    def _load(self, number: int | None, previous: Loaded | None) -> Loaded:
        """Version `number` (None: the index has none yet, an InputError saying so), held by this reader's
        lease before anything of it is read."""
        if number is not None:
            self.lease.hold(number)
        version = self.index.files.open(number, reuse=previous.version if previous is not None else None)
        collections = version.manifest.collections
        for name in collections.values():
            self.index.vectors.open(name)
        return Loaded(load_view(version), collections, version, Catalog(version),
                      self._exact(version, collections, previous))

    def _exact(self, version: Version, collections: Mapping[str, str],
               previous: Loaded | None = None) -> dict[str, ExactVectors]:
        """The collections of `version` to search in this process: those its segments hold the vectors of, and
        those whose vectors are read from the store (only the rows `previous`, the version served before, did
        not hold: the updater writes a relation's or hyperedge's vector once, when it appears, and a rebuild
        writes new collections)."""
        exact = exact_searches(version, collections, self.exact_max_rows)
        if not self.exact_from_store:
            return exact
        for kind, ids in store_held(version, collections, self.exact_max_rows).items():
            if not ids:
                continue  # nothing to score: the store answers an empty collection as cheaply
            held = previous.exact.get(kind) if previous is not None and \
                previous.collections.get(kind) == collections[kind] else None
            try:
                exact[kind] = ExactVectors.of(ids, self._vectors(collections[kind], ids, held))
            except StoreError as exc:  # the store searches it then, as it does a larger collection
                log.warning("version %d: the %s vectors could not be read from the vector store (%s); it "
                            "searches them", version.version, kind, exc)
        points = held_points(version, collections, previous, self.exact_max_rows, self.index.vectors)
        if points is not None:
            exact["hyperbolic"] = points
        return exact

    def follow_moves(self, moves: PointMoves) -> int:
        """Apply the online learner's moves (after `points_position`) to the points held; returns the rows moved."""
        with self._swap:
            points = self.loaded.points
            if points is None:
                return 0
            return points.apply(moves, _fresh_rows(self.index.vectors, points.collection))

    def points_position(self) -> tuple[str, str | None, int] | None:
        """(collection, epoch, seq): where the held points stand in the learner's feed; None: none held."""
        points = self.loaded.points
        if points is None:
            return None
        return (points.collection, *points.position)

    def _vectors(self, name: str, ids: list[str], held: ExactVectors | None) -> np.ndarray:
        """The vectors of `ids` in collection `name`, in order: those `held` has reused, the rest read."""
        known = held.by_id() if held is not None else {}
        missing = [i for i in ids if i not in known]
        read = dict(zip(missing, self.index.vectors.fetch(name, missing))) if missing else {}
        return np.stack([known[i] if i in known else read[i] for i in ids]).astype(np.float32, copy=False)

    @property
    def version(self) -> int:
        return self.loaded.view.version

    def refresh(self) -> bool:
        """Swap to the version `CURRENT` names when it is newer, or when this reader's lease lapsed (it stalled:
        its version may be gone); requests already running keep theirs."""
        with self._swap:
            current = self.index.files.current_version()
            lapsed = self.lease.lapsed
            if current is None or (current <= self.loaded.view.version and not lapsed):
                return False
            if lapsed:
                log.warning("%s: this reader's lease on version %d lapsed (it stalled past store.lease_s, so garbage "
                            "collection may have removed that version): loading version %d", self.index.uri,
                            self.loaded.view.version, current)
            self.loaded = self._load(current, self.loaded)
        # The old version's structures go when the last request holding them ends; what is freed by now goes back.
        release_freed_memory()
        return True

    def at_least(self, version: int) -> Loaded:
        """The loaded version, moved forward first when a request needs a newer one (read-your-writes:
        a client that saw a job `done` at version V asks for V)."""
        loaded = self.loaded
        if loaded.view.version >= version:
            return loaded
        self.refresh()
        loaded = self.loaded
        if loaded.view.version < version:
            raise VersionNotReady(f"min_index_version: index version {version} is not published yet "
                                  f"(the newest is {loaded.view.version})")
        return loaded

    def close(self) -> None:
        self.lease.release()


def held_points(version: Version, collections: Mapping[str, str], previous: Loaded | None, max_rows: int,
                vectors: VectorStore) -> LivePoints | None:
    """The version's hyperbolic points to hold in process (store/points.py), when it has at most `max_rows`
    chunks: those `previous` held of the same collection kept, the rest read from `vectors`."""
    name = collections.get("hyperbolic")
    if name is None or not version.has(TERMS) or version.manifest.hyperbolic is None:
        return None
    table = version.table(TERMS)
    if not 0 < len(table) <= max_rows:
        return None
    held = previous.points if previous is not None else None
    changed = None
    if held is not None and previous is not None and previous.version.has(TERMS):
        # A chunk's point changes only with its terms row (added, or replaced with its document): the rows of
        # the segments the previous version did not have are read again; the rest are kept.
        before = set(previous.version.table(TERMS).segments_names)
        changed = {cid for seg_name, seg in zip(table.segments_names, table.segments) if seg_name not in before
                   for cid in seg.ids}
    try:
        return LivePoints.read(name, version.version, list(table.ids()), _fresh_rows(vectors, name), held, changed)
    except StoreError as exc:  # the store answers them then
        log.warning("version %d: the hyperbolic points could not be read from the vector store (%s); it serves "
                    "them", version.version, exc)
        return None


def _fresh_rows(vectors: VectorStore, name: str) -> Callable[[Sequence[str]], np.ndarray]:
    return lambda ids: vectors.fetch(name, ids, fresh=True)
