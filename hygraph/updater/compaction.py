"""Compaction: when the journal is idle, an artifact whose delta segments grew too many or too large is
rewritten as fewer segments, in a version of its own with the same content. Under a steady stream of writes
the journal is never idle: once an artifact has OVERDUE_FACTOR times `updates.compact_max_segments` deltas,
compaction takes a turn between two batches (every read of a key looks through the deltas, and a stream of
200 writes left 68 of them: docs/bench/s3_cluster.md)."""

from __future__ import annotations

import copy
import logging
import time
from typing import Any

from hygraph.config import HygraphConfig
from hygraph.indexing.update import LiveIndex
from hygraph.store.artifacts import ARTIFACTS
from hygraph.store.manifest import Manifest
from hygraph.updater.publishing import Publisher

log = logging.getLogger("hygraph.updater")
OVERDUE_FACTOR = 4


def overdue(manifest: Manifest, max_segments: int) -> bool:
    """Whether some artifact has so many delta segments that compaction should not wait for an idle journal."""
    return any(len(ref.segments) - 1 > OVERDUE_FACTOR * max_segments for ref in manifest.tables.values())


class Compactor:
    def __init__(self, cfg: HygraphConfig, publisher: Publisher) -> None:
        self.cfg, self.publisher = cfg, publisher
        self.compactions = 0

    def overdue(self) -> bool:
        """Whether the published version's deltas are past the overdue bound (read from the loaded version)."""
        live = self.publisher.live
        return live is not None and overdue(live.version.manifest, self.cfg.updates.compact_max_segments)

    def compact(self) -> dict[str, Any] | None:
        """Rewrite, as a version with the same content, the artifacts with more than
        `updates.compact_max_segments` delta segments (the deltas merged into one, which keeps only
        their live rows: a row rewritten by many updates is kept once), and those whose oldest delta
        (after such merges, the merged one) outweighs `updates.compact_ratio` of the base segment (all
        merged into one). Merging only deltas keeps the bytes a compaction writes near the bytes the
        updates wrote; the full merge comes once the distinct changed rows are a share of the base.
        None when nothing is due."""
        u, store = self.cfg.updates, self.publisher.store
        try:
            live = self.publisher.load()
            version = live.version
            plan = {}
            for name, ref in version.manifest.tables.items():
                sizes = [store.segment_bytes(name, s) for s in ref.segments]
                if len(sizes) >= 2 and sizes[1] > u.compact_ratio * sizes[0]:
                    plan[name] = True
                elif len(sizes) - 1 > u.compact_max_segments:
                    plan[name] = False
            if not plan:
                return None
            t0 = time.perf_counter()
            with self.publisher.index.publishing() as w:
                for name in version.manifest.tables:
                    artifact = ARTIFACTS[name]
                    if name in plan:
                        w.compact(version.table(artifact), artifact, full=plan[name])
                    else:
                        w.keep(version.table(artifact), artifact)
                manifest = copy.deepcopy(version.manifest)
                manifest.base_version, manifest.retired = version.version, {}
                manifest.update = {"compaction": {name: "full" if full else "deltas" for name, full in plan.items()},
                                   "seconds": round(time.perf_counter() - t0, 3), "bytes_written": w.bytes_written}
                manifest.stats = {**manifest.stats, "bytes_written": w.bytes_written}
                w.commit(manifest, expect_current=version.version)
            # Same rows: what the live index derived from them stays valid.
            self.publisher.replace(LiveIndex(store.open(w.version), live.layers, live.terms))
        except Exception:
            self.publisher.forget()
            raise
        self.compactions += 1
        log.info("compacted %s as version %d", manifest.update["compaction"], w.version)
        return {"version": w.version, **manifest.update}
