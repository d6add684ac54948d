"""One index as a whole: the files of its versions and the vector collections those versions name.

An index version is two things kept in two systems: its segments and manifest (`IndexStore`, a directory or an
S3 prefix) and the rows of the vector collections its manifest names (the vector store, one server for every
index). `Index` holds both, so what spans them has one home:

- retiring: after a version is published, the vector rows it no longer has are deleted (a crash before that
  is finished at the writer's next start, from the manifest's `retired` list);
- garbage collection: old versions and the segments only they named go, then the collections only they named
  and those of writers that died before publishing, whose records are then forgotten;
- the connection: a restarted embedded Milvus listens on a new port, so a writer reconnects.

The updater's publisher, compaction, `hygraph gc` and the removal of a named index go through it.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from hygraph.backends import vectorstore
from hygraph.backends.vectorstore import VectorStore
from hygraph.config import HygraphConfig
from hygraph.store.journal import bounded_error
from hygraph.store.objects import is_remote
from hygraph.store.versions import GcResult, IndexStore

log = logging.getLogger(__name__)


class Index:
    """The files and vector collections of the index in `files`, with the retention of `cfg.updates`."""

    def __init__(self, cfg: HygraphConfig, files: IndexStore) -> None:
        self.cfg, self.files = cfg, files
        self.vectors: VectorStore = vectorstore.connect(cfg.vector_store, files.local_dir)

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

    def retire(self, collections: dict[str, str], retired: dict[str, list[str]]) -> None:
        """Delete the vector rows a published version no longer has (`retired`, per kind). It runs after
        `CURRENT` moved, so a failure is logged, never raised: readers already ignore those rows (they keep
        only ids their version knows), and the writer's next start retries from the manifest. For the same
        reason nobody waits for the deletes to become visible."""
        try:
            for kind, ids in retired.items():
                if ids and kind in collections:
                    self.vectors.delete(collections[kind], ids)
        except Exception as exc:  # noqa: BLE001 - see above
            log.warning("retiring old vector rows failed (retried at the next start): %s",
                        bounded_error(f"{type(exc).__name__}: {exc}"))

    def finish_retiring(self) -> None:
        """Retire what the current version's writer may not have finished (it crashed after publishing)."""
        manifest = self.files.manifest()
        self.retire(manifest.collections, manifest.retired)

    def collect_garbage(self) -> GcResult:
        """Versions past `updates.keep_versions` and `updates.gc_grace_s` that no reader's lease names, the
        segments only they named, then the collections only they named and those of writers that died
        before publishing (whose records are forgotten once their collections are dropped)."""
        result = self.files.gc(self.cfg.updates.keep_versions, self.cfg.updates.gc_grace_s)
        for name in sorted(result.collections):
            self.vectors.drop(name)
        self.files.forget_collections(result.orphaned)
        return result

    def collect_garbage_quietly(self) -> None:
        """`collect_garbage` after a publish: a failure is logged, never raised (the change is published
        already; the next publish collects)."""
        try:
            self.collect_garbage()
        except Exception as exc:  # noqa: BLE001 - see above
            log.warning("garbage collection of old versions failed: %s", bounded_error(f"{type(exc).__name__}: {exc}"))

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
