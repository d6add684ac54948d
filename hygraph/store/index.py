"""One index as a whole: the files of its versions and the vector collections those versions name.

An index version is two things kept in two systems: its segments and manifest (`IndexStore`, a directory or an
S3 prefix) and the rows of the vector collections its manifest names (the vector store, one server for every
index). `Index` holds both, so what spans them has one home:

- publishing: `publishing` is the one way a version is written and published. A version's writer records its
  new collections before creating them; if the version is not published they are dropped with its segments.
  Once `CURRENT` moved, the records are forgotten (the manifest names the collections), the vector rows the
  version no longer has are deleted (retiring; a crash before that is finished at the writer's next start,
  from the manifest's `retired` list) and garbage is collected;
- garbage collection: old versions and the segments only they named go, then the collections only they named
  and those of writers that died before publishing, whose records are then forgotten;
- the connection: a restarted embedded Milvus listens on a new port, so a writer reconnects.

The full build and `create_empty_index` (indexing/), the updater's publisher and compaction (updater/) publish
through it; `hygraph gc` and the removal of a named index go through it; readers open versions through it
(store/reading.py).
"""

from __future__ import annotations

import logging
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator

from hygraph.backends import vectorstore
from hygraph.backends.vectorstore import VectorStore
from hygraph.config import HygraphConfig
from hygraph.store.journal import bounded_error
from hygraph.store.manifest import Manifest
from hygraph.store.objects import is_remote
from hygraph.store.versions import GcResult, IndexStore, VersionWriter

log = logging.getLogger(__name__)


def _log_warning(message: str) -> None:
    log.warning("%s", message)


class Index:
    """The files and vector collections of the index in `files`, with the retention of `cfg.updates`."""

    def __init__(self, cfg: HygraphConfig, files: IndexStore) -> None:
        self.cfg, self.files = cfg, files
        self.vectors: VectorStore = vectorstore.connect(cfg.vector_store, files.local_dir)
        self._gc_due: float | None = None  # monotonic s: the versions the last publish spared pass their grace

    @classmethod
    def open(cls, cfg: HygraphConfig, uri: str | Path) -> "Index":
        """The index at `uri` (a directory or `s3://bucket/prefix`) with its vector store connected."""
        return cls(cfg, IndexStore(uri, **cfg.store.model_dump()))

    @property
    def uri(self) -> str:
        return self.files.uri

    @property
    def local_dir(self) -> Path:
        """This node's directory for the index (the managed vector store, the LLM cache, build checkpoints)."""
        return self.files.local_dir

    def reconnect(self) -> None:
        """A fresh vector store connection: a restarted Milvus Lite server listens on a new port, so the old
        client never recovers on its own (found by loadtests/faults.py --fault store)."""
        old, self.vectors = self.vectors, vectorstore.connect(self.cfg.vector_store, self.local_dir)
        old.close()

    def close(self) -> None:
        self.vectors.close()

    @contextmanager
    def publishing(self, prefer: int | None = None, warn: Callable[[str], None] = _log_warning,
                   waiting: Callable[[str], None] | None = None,
                   keep: Iterable[tuple[str, str]] = ()) -> Iterator[VersionWriter]:
        """Publish the next version: yields its writer (`IndexStore.begin`, numbered past `prefer` and telling
        `waiting` of a wait for the writer lease, and keeping the `keep` segments of a dead writer of that
        number, as there), whose segments and vector collections the body
        writes, recording each collection before creating it (`IndexStore.record_collections`), and which the
        body ends by committing (`VersionWriter.commit`, with `expect_current` when it changes a version it
        read).

        If the version is not published (the body raised or never committed), the collections recorded for
        it are dropped before the writer lease is released: a resumed build may take the same number, and
        so the same collection names, as soon as it is. Once the commit moved `CURRENT` and the lease is
        released (other writers wait on it): the version's records are forgotten (its manifest names the
        collections), the vector rows it retired are deleted and garbage is collected. Those steps come after
        the change is published, so each failure goes to `warn` (default: this module's log), never raised;
        they are retried by the next publish or the writer's next start."""
        with self.files.begin(prefer=prefer, waiting=waiting, keep=keep) as w:
            try:
                yield w
            finally:
                if w.committed is None:
                    self._quietly(f"dropping the collections of unpublished version {w.version}",
                                  lambda: self._drop_unpublished(w.version), warn)
        if w.committed is not None:
            self._published(w.committed, warn)

    def _drop_unpublished(self, version: int) -> None:
        names = self.files.recorded_collections(version)
        # Most failed changes created no collection: nothing more to ask the store. A commit that failed
        # after its manifest landed still published the version: it keeps them.
        if not names or self.files.is_published(version):
            return
        for name in sorted(names):
            self.vectors.drop(name)
        self.files.forget_collections([version])

    def _published(self, manifest: Manifest, warn: Callable[[str], None]) -> None:
        self._quietly("forgetting the records of the new version's collections",
                      lambda: self.files.forget_collections([manifest.version]), warn)
        self._quietly("retiring old vector rows", lambda: self._retire(manifest), warn)
        self._quietly("garbage collection of old versions", self.collect_garbage, warn)
        self._gc_due = time.monotonic() + self.cfg.updates.gc_grace_s

    @staticmethod
    def _quietly(what: str, step: Callable[[], object], warn: Callable[[str], None]) -> None:
        """`step`, whose failure is only reported: what it would have done is redone later (see the callers)."""
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - see above
            warn(f"{what} failed (retried later): {bounded_error(f'{type(exc).__name__}: {exc}')}")

    def _retire(self, manifest: Manifest) -> None:
        """Delete the vector rows a published version no longer has (`retired`, per kind). Only after `CURRENT`
        moved, and nobody waits for the deletes to become visible: readers already ignore those rows (they keep
        only ids their version knows)."""
        for kind, ids in manifest.retired.items():
            if ids and kind in manifest.collections:
                self.vectors.delete(manifest.collections[kind], ids)

    def finish_retiring(self) -> None:
        """Retire what the current version's writer may not have finished (it crashed after publishing); a
        failure is logged, never raised (the next start retries)."""
        manifest = self.files.manifest()
        self._quietly("retiring old vector rows", lambda: self._retire(manifest), _log_warning)

    def collect_garbage(self) -> GcResult:
        """Versions past `updates.keep_versions` and `updates.gc_grace_s` that no reader's lease names, the
        segments only they named, then the collections only they named and those of writers that died
        before publishing (whose records are forgotten once their collections are dropped)."""
        result = self.files.gc(self.cfg.updates.keep_versions, self.cfg.updates.gc_grace_s)
        for name in sorted(result.collections):
            self.vectors.drop(name)
        self.files.forget_collections(result.orphaned)
        return result

    def collect_garbage_when_due(self) -> GcResult | None:
        """What a publish's own collection left for later: the versions it spared for being younger than
        `updates.gc_grace_s` (a burst of publishes, such as recalibrations, leaves several), collected once
        that grace is over, once per publish. Without it a quiet index keeps them, with their segments and
        their vector collections (loaded in the store), until its next change. None while not due."""
        if self._gc_due is None or time.monotonic() < self._gc_due:
            return None
        result = self.collect_garbage()
        self._gc_due = None
        return result

    def remove(self) -> int:
        """Drop every vector collection of the index, then its files (`DELETE /v1/indexes/{name}`, after the
        registry took it out of sight); returns how many collections went, and closes the connection. Files go
        only once nothing of the index is left in the vector store, so a removal cut short is found again."""
        names = self.files.every_collection()
        try:
            for name in sorted(names):
                self.vectors.drop(name)
        finally:
            self.close()
        if is_remote(self.uri):
            self.files.purge()
            shutil.rmtree(self.local_dir, ignore_errors=True)  # this node's caches of it (other nodes: their LRU)
        else:
            shutil.rmtree(self.local_dir)
        return len(names)
