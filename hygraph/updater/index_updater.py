"""The publisher: the only writer of a live index, without Ray (ARCHITECTURE.md §7).

`IndexUpdater` takes journal jobs after the current version's `journal_offset`, applies them
as one batch (indexing/update.py) and publishes the next version:

1. vector rows of the batch are upserted, tagged with the new version number; readers of
   the current version never see them (they keep only ids their version knows);
2. the batch's changed rows are written as delta segments, then the version's manifest, and
   `CURRENT` moves, carrying the batch's journal offset;
3. rows the new version no longer has are deleted, and old versions, the segments only they
   named and the collections only they named are garbage-collected.

A crash before 2 completes leaves the current version untouched and the jobs unapplied, so the
next updater replays them (ids are content-derived: replaying upserts the same rows) and the
unpublished segments are collected. A crash between 2 and 3 leaves rows no version knows; the
next start deletes them again from the current manifest's `retired` list. Hence every
acknowledged job is applied exactly once.

The updater keeps what it derived from the version it applies to (`LiveIndex`) across batches
and reloads it only on start, after a failed batch, or when another writer (a full `hygraph
index`) replaced the version. When the journal is idle it compacts: an artifact whose delta
segments grew too many or too large is rewritten as fewer segments, in a version of its own.

It also runs HyperRAG's online learning (indexing/online.py): L_inc steps for the subgraphs
that `hyperbolic` queries send, upserted into the current hyperbolic collection (readers take
points from it), and every `updates.recalibrate_every` queries a retrain in a background thread,
published as a new version with its own hyperbolic collection. Document jobs go first.
"""

from __future__ import annotations

import copy
import fcntl
import gc
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from hygraph.backends import resolve_device, vectorstore
from hygraph.backends.embedder import make_embedder
from hygraph.backends.llm import make_llm
from hygraph.config import HygraphConfig
from hygraph.core.hyperbolic import from_storage
from hygraph.errors import BackendError, StoreError, StoreUnavailable
from hygraph.indexing.online import OnlineLearner, Recalibration, install, observation, retrain
from hygraph.indexing.stages.hyperbolic import explicit_graph
from hygraph.indexing.stages.vectors import VectorDelta
from hygraph.indexing.state import IndexState
from hygraph.indexing.update import Applied, Applier, Batch, LiveIndex, PresentDocuments, fold_jobs
from hygraph.store.artifacts import ARTIFACTS, TERMS
from hygraph.store.journal import Job, Journal, bounded_error, job_error
from hygraph.store.versions import IndexStore, VersionWriter
from hygraph.store.view_loader import release_freed_memory

log = logging.getLogger("hygraph.updater")
# Failures worth retrying later (the job stays queued); anything else fails the job.
RETRYABLE = (BackendError, StoreUnavailable)


class UpdaterBusy(StoreError):
    """Another process holds the index's updater lock."""


class _Points:
    """The live hyperbolic points (the collection is the truth: online steps move them between versions)."""

    def __init__(self, updater: "IndexUpdater", live: LiveIndex) -> None:
        self.updater, self.live = updater, live
        info = live.version.manifest.hyperbolic
        self.M = info.M if info is not None else 0.0
        self.name = live.version.manifest.collections.get("hyperbolic", "")

    def points(self, chunk_ids: Sequence[str]) -> np.ndarray:
        if not chunk_ids:
            return np.zeros((0, 0))
        return from_storage(self.updater.vectors.fetch(self.name, list(chunk_ids)))

    def everything(self) -> tuple[list[str], np.ndarray]:
        ids = self.live.terms.live()
        return ids, self.points(ids)

    def exists(self, chunk_id: str) -> bool:
        return chunk_id in self.live.terms.number

    def neighbours(self, chunk_id: str) -> Sequence[str]:
        row = self.live.version.table(TERMS).get(chunk_id)
        return row.neighbours if row is not None else ()

    def sample(self, k: int, rng: np.random.Generator, exclude: set[str]) -> list[str]:
        alive = [c for c in self.live.terms.live() if c not in exclude]
        picked = rng.choice(len(alive), size=min(k, len(alive)), replace=False) if alive else []
        return [alive[i] for i in sorted(picked)]


class IndexUpdater:
    def __init__(self, cfg: HygraphConfig, index_dir: str | Path) -> None:
        self.cfg = cfg
        self.index_dir = Path(index_dir)
        self.store = IndexStore(index_dir, **cfg.store.model_dump())
        self.journal = Journal(index_dir)
        self._lock_fd = self._take_lock()
        self.vectors = vectorstore.connect(cfg.vector_store, index_dir)
        self.llm = make_llm(cfg.llm, cache_dir=cfg.llm.cache_dir or str(self.index_dir / "llm_cache"))
        self.applier = Applier(cfg, make_embedder(cfg.embedder), self.llm, resolve_device(cfg.hierarchy.device))
        self.live: LiveIndex | None = None
        self.applied_batches = 0
        self._slice_turn = False  # the last write step applied a journal batch: a large document's slice is next
        self.learner = OnlineLearner(cfg.hyperbolic, cfg.updates)
        self.recalibrations = 0
        self.compactions = 0
        self._hyp_device = resolve_device(cfg.hyperbolic.device)
        self._recal: threading.Thread | None = None
        self._recal_done: tuple[Recalibration, np.ndarray, float] | None = None
        self._recal_requested = False
        self._attempts: dict[str, int] = {}  # retryable failures per batch head, while the store answered
        self._reconcile()

    def _take_lock(self) -> int:
        fd = os.open(self.index_dir / "updater.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UpdaterBusy(f"{self.index_dir}: another updater is running (a `hygraph serve` on this index?)") \
                from None
        return fd

    def close(self) -> None:
        self.vectors.close()
        os.close(self._lock_fd)

    def reconnect(self) -> None:
        """A fresh store connection: a restarted Milvus Lite server listens on a new port, so the old
        client never recovers on its own (found by loadtests/faults.py --fault store)."""
        old, self.vectors = self.vectors, vectorstore.connect(self.cfg.vector_store, self.index_dir)
        old.close()

    def load(self) -> LiveIndex:
        """The live index: loaded on start, after a failed batch, or when another writer replaced the version."""
        current = self.store.current_version()
        if self.live is None or self.live.version.version != current:
            live = LiveIndex.load(self.store, self.cfg, current)
            name = live.version.manifest.collections.get("hyperbolic")
            if name:
                self.vectors.open(name)  # a restarted Milvus Lite server has every collection released
            self.live = live
        return self.live

    def _reconcile(self) -> None:
        """Finish step 3 of the last published version (a crash may have cut it short)."""
        manifest = self.store.manifest()
        self._retire(manifest.collections, manifest.retired)

    def pending(self) -> list[Job]:
        """Jobs after the current version's offset that have not failed; malformed lines are marked
        failed here, once, so they never reach a batch."""
        offset = self.store.manifest().journal_offset
        failed = self.journal.failed()
        out = []
        for job in self.journal.jobs(offset):
            if job.job_id in failed:
                continue
            if job.op == "invalid":
                log.warning("journal job %s is malformed and skipped: %s", job.job_id, job.payload["error"])
                self.journal.mark_failed(job.job_id, f"InputError: {job.payload['error']}")
                failed[job.job_id] = job.payload["error"]
                continue
            out.append(job)
        return out

    def step(self, defer_summaries: bool = False) -> dict[str, Any] | None:
        """Apply up to `updates.max_batch_jobs` pending jobs as one version; None when nothing is pending.

        `defer_summaries` (the serving updater): the batch's new nodes are published without their
        hierarchy step, which `summarize_pending` runs later, slice by slice (what a batch removes
        leaves the summaries in its own version).

        One bad job never blocks the journal: a batch that fails is split in halves and each half
        retried, down to the job that fails alone, which is marked failed (once, with a bounded
        error) and skipped. A retryable failure (store unreachable, LLM down) leaves the jobs queued
        and is raised to the caller, who backs off; once the store answers again but the same batch
        keeps failing for `updates.max_attempts` rounds, it is isolated like any other failure.
        """
        jobs = self.pending()[:self.cfg.updates.max_batch_jobs]
        if not jobs:
            return None
        self.journal.set_running([j.job_id for j in jobs])
        try:
            result = self._apply(jobs, defer_summaries)
            self._attempts.clear()
            return result
        except RETRYABLE as exc:
            self.live = None
            if not self._exhausted(jobs[0].job_id):
                raise
            return self._isolate(jobs, defer_summaries, exc, retry_retryable=False)
        except Exception as exc:  # noqa: BLE001 - isolated below: the failing job is recorded, not lost
            self.live = None
            return self._isolate(jobs, defer_summaries, exc)
        finally:
            self.journal.set_running([])

    def _exhausted(self, head: str) -> bool:
        """Whether a retryable failure of the batch starting at `head` has happened `max_attempts` times
        while the store was reachable (an outage does not count: everything waits for it)."""
        try:
            self.vectors.ping()
        except StoreUnavailable:
            return False
        self._attempts[head] = self._attempts.get(head, 0) + 1
        return self._attempts[head] >= self.cfg.updates.max_attempts

    def _isolate(self, jobs: list[Job], defer_summaries: bool, exc: BaseException,
                 retry_retryable: bool = True) -> dict[str, Any] | None:
        """Bisect a failed batch: apply each half, splitting again where it fails; a job that fails
        alone is marked failed. Returns the last published result (None when nothing was)."""
        if len(jobs) == 1:
            self._fail(jobs[0].job_id, exc)
            return None
        last = None
        mid = len(jobs) // 2
        for half in (jobs[:mid], jobs[mid:]):
            try:
                last = self._apply(half, defer_summaries) or last
            except RETRYABLE as again:
                self.live = None
                if retry_retryable:
                    raise  # what is left stays queued for the next round
                last = self._isolate(half, defer_summaries, again, retry_retryable) or last
            except Exception as again:  # noqa: BLE001 - see step()
                self.live = None
                last = self._isolate(half, defer_summaries, again, retry_retryable) or last
        return last

    def _fail(self, job_id: str, exc: BaseException) -> None:
        log.warning("journal job %s failed and is skipped: %s", job_id, bounded_error(f"{type(exc).__name__}: {exc}"))
        log.debug("journal job %s failure", job_id, exc_info=exc)
        self.journal.mark_failed(job_id, job_error(exc))
        self._attempts.pop(job_id, None)

    def summaries_age(self) -> float | None:
        """Seconds the oldest pending summaries have waited; None when none are pending."""
        pending = self.store.manifest().summaries_pending
        return None if pending is None else time.time() - pending.since

    def summaries_overdue(self) -> bool:
        """Whether summaries have been pending for `updates.defer_summaries_s`: the serving updater then runs
        a slice of them before each batch, so a steady stream of writes cannot starve them."""
        age = self.summaries_age()
        return age is not None and age >= self.cfg.updates.defer_summaries_s

    def summarize_pending(self, max_nodes: int | None = None) -> dict[str, Any] | None:
        """Publish the hierarchy step deferred by earlier batches, for at most `max_nodes` pending nodes;
        None when nothing waits for it."""
        pending = self.store.manifest().summaries_pending
        if pending is None:
            return None
        try:
            live = self.load()
            applied = self.applier.summarize_pending(live, max_nodes)
            if applied is None:
                return None
            update = {**applied.stats, "summarized_after_offset": pending.after_offset}
            version = self._publish(applied, applied.state.manifest.journal_offset, update)
        except Exception:
            self.live = None  # the hierarchy index changed in memory: reload what is published
            raise
        log.info("summaries of %d nodes published as version %d: %s", applied.stats["summarized_nodes"], version,
                 applied.stats)
        del applied  # its rows and vectors go before memory is returned
        _return_memory()
        return {**update, "version": version, "pending_s": time.time() - pending.since}

    def continue_documents(self, defer_summaries: bool = False) -> dict[str, Any] | None:
        """Publish the next slice of the documents a batch applied in part (`Applier.continue_documents`); None
        when none waits. A slice that fails for a reason other than an outage fails its document's job, and
        the document is taken out whole, so no half of it stays served."""
        pending = self.store.manifest().chunks_pending
        if not pending:
            return None
        try:
            live = self.load()
            applied = self.applier.continue_documents(live, _Points(self, live).points, defer_summaries)
            if applied is None:
                return None
            version = self._publish(applied, applied.state.manifest.journal_offset, applied.stats)
        except RETRYABLE:
            self.live = None
            raise
        except Exception as exc:  # noqa: BLE001 - recorded as the job's failure, never lost
            self.live = None
            job_id = pending[0].job_id
            self._fail(job_id, exc)
            live = self.load()
            batch = Batch(remove={p.doc_id for p in pending if p.job_id == job_id},
                          end_offset=live.version.manifest.journal_offset)
            applied = self.applier.apply(live, batch, _Points(self, live).points, defer_summaries)
            version = self._publish(applied, batch.end_offset, {**applied.stats, "jobs_failed": [job_id]})
            return {**applied.stats, "version": version, "jobs_finished": []}
        log.info("slice of %d chunks published as version %d: %s", applied.stats["chunks_added"], version,
                 applied.stats)
        return {**applied.stats, "version": version}

    def write_step(self, defer_summaries: bool = False) -> dict[str, Any] | None:
        """The journal's next batch or the next slice of a large document, taking turns (`kind`: "applied" or
        "sliced"): the jobs behind a large document wait for one slice of it, and the document still advances
        under a stream of jobs. None when neither waits."""
        turns = (("sliced", self.continue_documents), ("applied", self.step))
        for kind, run in turns if self._slice_turn else turns[::-1]:
            result = run(defer_summaries)
            if result is not None:
                self._slice_turn = kind == "applied"
                _return_memory()
                return {**result, "kind": kind}
        return None

    def run_until_idle(self) -> list[dict[str, Any]]:
        """Every pending job, with the slices of large documents and summaries (including any a stopped server
        left deferred). While a document is applied in slices their summaries wait for the end, where they
        are made once, instead of the upper layers being summarized again for every slice."""
        out = []
        while True:
            slicing = bool(self.store.manifest().chunks_pending)
            result = self.write_step(defer_summaries=slicing) or self.summarize_pending()
            if result is None:
                return out
            out.append(result)

    def _apply(self, jobs: list[Job], defer_summaries: bool = False) -> dict[str, Any]:
        live = self.load()
        batch = fold_jobs(jobs, PresentDocuments(IndexState(live.version)))
        points = _Points(self, live)
        applied = self.applier.apply(live, batch, points.points, defer_summaries)
        update = {**applied.stats, "jobs": batch.job_ids}
        version = self._publish(applied, batch.end_offset, update)  # adds what the version wrote: bytes_written
        self.applied_batches += 1
        log.info("applied %d journal jobs as version %d: %s", len(jobs), version, applied.stats)
        now = time.time()
        return {**update, "version": version, "lag_s": [now - j.accepted_at for j in jobs]}

    def _publish(self, applied: Applied, journal_offset: int, update: dict[str, Any],
                 hyperbolic_rebuild: tuple[list[str], np.ndarray] | None = None) -> int:
        """Steps 1-3 of the module docstring. `hyperbolic_rebuild` (ids and storage vectors of every chunk, a
        recalibration) goes into a new collection that only the new version names."""
        state = applied.state
        collections: dict[str, str] = dict(state.base.manifest.collections)
        try:
            version, bytes_written = self._commit(applied, journal_offset, update, hyperbolic_rebuild, collections)
        except BaseException:
            rebuilt = collections.get("hyperbolic")
            if rebuilt != state.base.manifest.collections.get("hyperbolic") and \
                    rebuilt != self.store.manifest().collections.get("hyperbolic"):
                self.vectors.drop(rebuilt)  # its version never landed: nobody names it
            raise
        # Published: nothing after this point may fail the batch's jobs.
        try:
            assert self.live is not None
            self.live.version = self.store.open(version)
        except Exception as exc:  # noqa: BLE001 - the next batch reloads what is published
            self.live = None
            log.warning("reopening version %d failed: %s", version, bounded_error(f"{type(exc).__name__}: {exc}"))
        self._retire(collections, applied.delta.retired)
        try:
            self._gc()
        except Exception as exc:  # noqa: BLE001 - published already; the next publish collects again
            log.warning("garbage collection of old versions failed: %s", bounded_error(f"{type(exc).__name__}: {exc}"))
        return version

    def _commit(self, applied: Applied, journal_offset: int, update: dict[str, Any],
                hyperbolic_rebuild: tuple[list[str], np.ndarray] | None,
                collections: dict[str, str]) -> tuple[int, int]:
        state, delta = applied.state, applied.delta
        with self.store.begin() as w:
            if hyperbolic_rebuild is not None:
                rebuilt = self.store.collection(state.manifest.generation, "hyperbolic", w.version)
                collections["hyperbolic"] = rebuilt
                ids, storage = hyperbolic_rebuild
                self.vectors.create(rebuilt, storage.shape[1], "L2")
                self.vectors.upsert(rebuilt, ids, storage, w.version)
                self.vectors.seal(rebuilt)
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
            return w.version, w.bytes_written

    def _gc(self) -> None:
        """Old versions past `keep_versions` and the grace period, the segments only they named, then the
        collections only they named (a hyperbolic collection a recalibration replaced, a full rebuild's
        predecessor)."""
        for name in self.store.gc(self.cfg.updates.keep_versions, self.cfg.updates.gc_grace_s).collections:
            self.vectors.drop(name)

    # ------------------------------------------------------------ compaction

    def compact(self) -> dict[str, Any] | None:
        """Rewrite, as a version with the same content, the artifacts with more than
        `updates.compact_max_segments` delta segments (the deltas merged into one, which keeps only
        their live rows: a row rewritten by many updates is kept once), and those whose oldest delta
        (after such merges, the merged one) outweighs `updates.compact_ratio` of the base segment (all
        merged into one). Merging only deltas keeps the bytes a compaction writes near the bytes the
        updates wrote; the full merge comes once the distinct changed rows are a share of the base.
        None when nothing is due."""
        u = self.cfg.updates
        try:
            live = self.load()
            version = live.version
            plan = {}
            for name, ref in version.manifest.tables.items():
                sizes = [self.store.segment_bytes(name, s) for s in ref.segments]
                if len(sizes) >= 2 and sizes[1] > u.compact_ratio * sizes[0]:
                    plan[name] = True
                elif len(sizes) - 1 > u.compact_max_segments:
                    plan[name] = False
            if not plan:
                return None
            t0 = time.perf_counter()
            with self.store.begin() as w:
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
                published = w.version
            self.live = LiveIndex(self.store.open(published), live.layers, live.terms)
        except Exception:
            self.live = None
            raise
        self.compactions += 1
        log.info("compacted %s as version %d", manifest.update["compaction"], published)
        self._gc()
        return {"version": published, **manifest.update}

    # ------------------------------------------------------------ HyperRAG §3.3 online learning

    def observe(self, subgraph: dict[str, Any], query_vec: Any) -> None:
        """Queue one `hyperbolic` query's implicit subgraph (notes["implicit_subgraph"]) for an L_inc step."""
        self.learner.observe(observation(subgraph, query_vec))

    def learn(self, max_steps: int) -> list[float]:
        """L_inc steps for up to `max_steps` queued subgraphs, moved points upserted into the current
        version's hyperbolic collection. Returns each step's seconds (the step alone, not the upsert)."""
        if not self.learner.pending:
            return []
        live = self.load()
        if live.version.manifest.hyperbolic is None:
            self.learner.pending.clear()
            return []
        points = _Points(self, live)
        seconds = []
        while self.learner.pending and len(seconds) < max_steps:
            t0 = time.perf_counter()
            ids, vecs = self.learner.step(points)
            seconds.append(time.perf_counter() - t0)
            if ids:
                self.vectors.upsert(points.name, ids, vecs, live.version.version)
        self.vectors.persist(points.name)
        return seconds

    def request_recalibration(self) -> None:
        self._recal_requested = True

    @property
    def recalibrating(self) -> bool:
        return self._recal is not None

    def recalibrate_step(self) -> dict[str, Any] | None:
        """Start a due (or requested) retrain in a background thread, or publish a finished one.

        Returns the published version's result; None while nothing was published.
        """
        if self._recal is not None:
            if self._recal.is_alive():
                return None
            self._recal.join()
            self._recal, done, self._recal_done = None, self._recal_done, None
            return self._publish_recalibration(*done) if done is not None else None
        if not (self._recal_requested or self.learner.recalibration_due):
            return None
        self._recal_requested = False
        live = self.load()
        if live.version.manifest.hyperbolic is None:
            return None
        job = self.learner.recalibration(*explicit_graph(live.version))
        self._recal = threading.Thread(target=self._retrain, args=(job,), name="hygraph-recalibration", daemon=True)
        self._recal.start()
        return None

    def _retrain(self, job: Recalibration) -> None:
        t0 = time.perf_counter()
        try:
            self._recal_done = (job, retrain(job, self.cfg.hyperbolic, self._hyp_device), time.perf_counter() - t0)
        except Exception:  # noqa: BLE001 - the current points stay served; the next due retrain tries again
            log.exception("hyperbolic recalibration failed")

    def _publish_recalibration(self, job: Recalibration, points: np.ndarray, seconds: float) -> dict[str, Any]:
        live = self.load()
        t0 = time.perf_counter()
        try:
            ids, current = _Points(self, live).everything()
            storage, m = install(ids, current, job.chunk_ids, points)
            state = IndexState(live.version)
            assert state.manifest.hyperbolic is not None
            state.manifest.hyperbolic.M = m
            info = {"recalibration": {"subgraphs": len(job.observations), "train_seconds": round(seconds, 3),
                                      "M": m}}
            version = self._publish(Applied(state, VectorDelta(), {}), state.manifest.journal_offset, info,
                                    (ids, storage))
        except Exception:
            self.live = None
            raise
        self.recalibrations += 1
        info["recalibration"]["publish_seconds"] = round(time.perf_counter() - t0, 3)
        log.info("hyperbolic recalibration published as version %d: %s", version, info["recalibration"])
        return {"version": version, **info}

    def _retire(self, collections: dict[str, str], retired: dict[str, list[str]]) -> None:
        """Step 3: delete rows the published version no longer has. It runs after `CURRENT` moved, so a
        failure here must not fail the batch's jobs: readers already ignore those rows (they keep only
        ids their version knows), and the next start retries from the manifest's `retired` list. For the
        same reason nobody waits for the deletes to become visible."""
        try:
            for kind, ids in retired.items():
                if ids and kind in collections:
                    self.vectors.delete(collections[kind], ids)
        except Exception as exc:  # noqa: BLE001 - see above
            log.warning("retiring old vector rows failed (retried at the next start): %s",
                        bounded_error(f"{type(exc).__name__}: {exc}"))


def _return_memory() -> None:
    """After a published step: a batch's rows, vectors and model activations are garbage now, but glibc and
    Arrow keep freed pages for reuse, so without this the updater would stay at its largest batch's peak.
    The full collection is affordable here (a step takes far longer; no request waits on this process)."""
    gc.collect()
    release_freed_memory()


def _write_changes(w: VersionWriter, state: IndexState) -> None:
    """The batch's changed rows as one delta segment per changed artifact; the rest is referenced."""
    changed = {a.name for a in state.changed_artifacts()}
    for name in state.base.manifest.tables:
        artifact = ARTIFACTS[name]
        if name not in changed:
            w.keep(state.base.table(artifact), artifact)
    for artifact in state.changed_artifacts():
        rows, dead = state.changes(artifact)
        w.change(state.table(artifact), artifact, rows, dead, state.dims)
