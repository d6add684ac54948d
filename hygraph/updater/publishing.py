"""Publishing a live index's next version: the one writer's hold on its store, vectors and loaded state.

Every change the updater makes (a journal batch, a slice of a large document, deferred summaries, a
compaction, a hyperbolic recalibration) is published the same way (ARCHITECTURE.md §7):

1. vector rows of the change are upserted, tagged with the new version number; readers of
   the current version never see them (they keep only ids their version knows);
2. the changed rows are written as delta segments, then the version's manifest, and
   `CURRENT` moves, carrying the change's journal offset;
3. rows the new version no longer has are deleted, and old versions, the segments only they
   named and the collections only they named are garbage-collected.

A crash before 2 completes leaves the current version untouched and the jobs unapplied, so the
next updater replays them (ids are content-derived: replaying upserts the same rows) and the
unpublished segments are collected. A crash between 2 and 3 leaves rows no version knows; the
next start deletes them again from the current manifest's `retired` list. Hence every
acknowledged job is applied exactly once.

One updater applies an index's journal: a local index's takes a file lock (`updater.lock`, released by the
kernel when the process dies), an index on object storage's the store's updater lease (store/lease.py), which
holds across nodes and lapses one term after its holder died.

The publisher keeps what was derived from the version it writes on (`LiveIndex`) across changes and
reloads it only on start, after a failed change (`forget`), or when another writer (a full
`hygraph index`) replaced the version.
"""

from __future__ import annotations

import fcntl
import gc
import logging
import os
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from hygraph.backends.vectorstore import VectorStore
from hygraph.config import HygraphConfig
from hygraph.core.hyperbolic import from_storage, sample_present
from hygraph.errors import StoreError
from hygraph.indexing.state import IndexState
from hygraph.indexing.update import Applied, LiveIndex
from hygraph.store.artifacts import ARTIFACTS, TERMS
from hygraph.store import lease
from hygraph.store.index import Index
from hygraph.store.journal import bounded_error
from hygraph.store.lease import LeaseHeld, WriterLease
from hygraph.store.objects import is_remote
from hygraph.store.versions import IndexStore, VersionWriter
from hygraph.store.view_loader import release_freed_memory

log = logging.getLogger("hygraph.updater")


class UpdaterBusy(StoreError):
    """Another process holds the index's updater lock."""


class Publisher:
    """The single writer of one live index: its updater lock, the index (store/index.py: its files and vector
    collections) and the loaded live index, and the one way a change becomes a version."""

    def __init__(self, cfg: HygraphConfig, index_dir: str | Path) -> None:
        self.cfg = cfg
        self.store = IndexStore(index_dir, **cfg.store.model_dump())
        self.local_dir = self.store.local_dir  # this node's directory of the index (the managed vector store)
        self._lease: WriterLease | None = None  # the updater lease on object storage (_take_lock)
        self._unlock = self._take_lock()  # before the vector store: a second updater starts nothing
        try:
            self.index = Index(cfg, self.store)
        except BaseException:
            self._unlock()
            raise
        self.live: LiveIndex | None = None
        self.index.finish_retiring()

    @property
    def vectors(self) -> VectorStore:
        return self.index.vectors

    def _take_lock(self) -> Callable[[], None]:
        """Become the index's one updater (UpdaterBusy when another is); returns what lets go. On object
        storage a contender waits up to one lease term: a holder that died lets go within it."""
        if is_remote(self.store.uri):
            hold = WriterLease(self.store.objects, self.store.lease_s, prefix=lease.UPDATER)
            try:
                hold.acquire(lambda previous: 0, wait_s=self.store.lease_s)
            except LeaseHeld as exc:
                raise UpdaterBusy(f"another updater is running: {exc}") from None
            self._lease = hold
            return hold.release
        fd = os.open(self.local_dir / "updater.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UpdaterBusy(f"{self.store.uri}: another updater is running (a `hygraph serve` on this index?)") \
                from None
        return lambda: os.close(fd)

    def check_lease(self) -> None:
        """StoreError when this updater's lease on an index on object storage was taken over (it stalled past
        a term): the journal's failed jobs are then the new holder's to write. A local index's lock is
        held by the kernel for as long as this process lives, so there is nothing to check."""
        if self._lease is not None:
            self._lease.check()

    def close(self) -> None:
        self.index.close()
        self._unlock()

    def reconnect(self) -> None:
        self.index.reconnect()

    def load(self) -> LiveIndex:
        """The live index: loaded on start, after a failed change, or when another writer replaced the version."""
        current = self.store.current_version()
        if self.live is None or self.live.version.version != current:
            live = LiveIndex.load(self.store, self.cfg, current)
            name = live.version.manifest.collections.get("hyperbolic")
            if name:
                self.vectors.open(name)  # a restarted Milvus Lite server has every collection released
            self.live = live
        return self.live

    def forget(self) -> None:
        """Drop the loaded live index (a change failed half-way in memory): the next `load` reads what is published."""
        self.live = None

    def replace(self, live: LiveIndex) -> None:
        """The live index of a version this writer just published without changing its derived state (a compaction)."""
        self.live = live

    def publish(self, applied: Applied, journal_offset: int, update: dict[str, Any],
                hyperbolic_rebuild: tuple[list[str], np.ndarray] | None = None) -> int:
        """Steps 1-3 of the module docstring (`Index.publishing`: step 3, and what a change that was not
        published leaves behind); the published version. `hyperbolic_rebuild` (ids and storage vectors of
        every chunk, a recalibration) goes into a new collection that only the new version names."""
        state, delta = applied.state, applied.delta
        collections: dict[str, str] = dict(state.base.manifest.collections)
        with self.index.publishing() as w:
            if hyperbolic_rebuild is not None:
                rebuilt = self.store.collection(state.manifest.generation, "hyperbolic", w.version)
                collections["hyperbolic"] = rebuilt
                self.store.record_collections(w.version, [rebuilt])  # dropped if the version is not published
                ids, storage = hyperbolic_rebuild
                self.vectors.create(rebuilt, storage.shape[1], "L2")
                self.vectors.upsert(rebuilt, ids, storage, w.version)
                self.vectors.seal(rebuilt)
                self.vectors.open(rebuilt)  # the live index fetches its points
            written = [kind for kind, (ids, _, _) in delta.upserts.items() if ids and kind in collections]
            for kind in written:
                ids, vecs, layers = delta.upserts[kind]
                self.vectors.upsert(collections[kind], ids, vecs, w.version, layers)
            self.vectors.persist(*(collections[kind] for kind in written))
            _write_changes(w, state)
            update["bytes_written"] = w.bytes_written
            manifest = state.manifest
            manifest.base_version, manifest.collections = state.version, collections
            manifest.journal_offset, manifest.update = journal_offset, update
            manifest.retired = delta.retired
            manifest.stats["bytes_written"] = w.bytes_written
            w.commit(manifest, expect_current=state.version)
        # Published: nothing after this point may fail the change's jobs.
        try:
            assert self.live is not None
            self.live.version = self.store.open(w.version, reuse=self.live.version)
        except Exception as exc:  # noqa: BLE001 - the next change reloads what is published
            self.live = None
            log.warning("reopening version %d failed: %s", w.version, bounded_error(f"{type(exc).__name__}: {exc}"))
        return w.version


class Points:
    """The live hyperbolic points of a live index (the collection is the truth: online steps move them
    between versions)."""

    def __init__(self, publisher: Publisher, live: LiveIndex) -> None:
        self.publisher, self.live = publisher, live
        info = live.version.manifest.hyperbolic
        self.M = info.M if info is not None else 0.0
        self.name = live.version.manifest.collections.get("hyperbolic", "")
        # The storage vectors this updater wrote and has not yet made visible (`persist`): a read of the
        # collection (bounded consistency) answers their older rows, and a step that starts from those
        # would undo the moves of the step before it.
        self._written: dict[str, np.ndarray] = {}

    def points(self, chunk_ids: Sequence[str]) -> np.ndarray:
        if not chunk_ids:
            return np.zeros((0, 0))
        unwritten = [c for c in chunk_ids if c not in self._written]
        read = iter(self.publisher.vectors.fetch(self.name, unwritten) if unwritten else ())
        return from_storage(np.asarray([self._written[c] if c in self._written else next(read) for c in chunk_ids],
                                       dtype=np.float32))

    def write(self, chunk_ids: Sequence[str], vectors: np.ndarray) -> None:
        """Upsert moved points' storage vectors; the next `points` read answers them."""
        self.publisher.vectors.upsert(self.name, chunk_ids, vectors, self.live.version.version)
        self._written.update(zip(chunk_ids, np.asarray(vectors, dtype=np.float32)))

    def persist(self) -> None:
        """Make the written points visible to every reader of the collection."""
        self.publisher.vectors.persist(self.name)
        self._written.clear()

    def everything(self) -> tuple[list[str], np.ndarray]:
        ids = self.live.terms.live()
        return ids, self.points(ids)

    def exists(self, chunk_id: str) -> bool:
        return chunk_id in self.live.terms.number

    def neighbours(self, chunk_id: str) -> Sequence[str]:
        row = self.live.version.table(TERMS).get(chunk_id)
        return row.neighbours if row is not None else ()

    def sample(self, k: int, rng: np.random.Generator, exclude: set[str]) -> list[str]:
        return sample_present(self.live.terms.ids, k, rng, exclude)


def return_memory(full: bool = True) -> None:
    """After a published step: a change's rows, vectors and model activations are garbage now, but glibc and
    Arrow keep freed pages for reuse, so without this the updater would stay at its largest change's peak.
    A full collection takes ~0.5 s in an updater holding its models and index, longer than a one-line
    insert's step, and the next job waits for it: after a short step (`full=False`) only the young
    generations are collected, since what such a step left behind is small."""
    gc.collect(2 if full else 1)
    release_freed_memory()


def _write_changes(w: VersionWriter, state: IndexState) -> None:
    """The change's rows as one delta segment per changed artifact; the rest is referenced."""
    changed = {a.name for a in state.changed_artifacts()}
    for name in state.base.manifest.tables:
        artifact = ARTIFACTS[name]
        if name not in changed:
            w.keep(state.base.table(artifact), artifact)
    for artifact in state.changed_artifacts():
        rows, dead = state.changes(artifact)
        w.change(state.table(artifact), artifact, rows, dead, state.dims)
