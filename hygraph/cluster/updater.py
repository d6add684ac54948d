"""The OnlineUpdater: the only writer of a live index (ARCHITECTURE.md §7).

`IndexUpdater` (no Ray) takes journal jobs after the current version's `journal_offset`,
applies them as one batch and publishes the next version:

1. vector rows of the batch are upserted, tagged with the new version number; readers of
   the current version never see them (they keep only ids their version knows);
2. the snapshot is written and `CURRENT` moves, carrying the batch's journal offset;
3. rows the new version no longer has are deleted, and old versions are garbage-collected.

A crash before 2 leaves the current version untouched and the jobs unapplied, so the next
updater replays them; ids are content-derived, so replaying upserts the same rows. A crash
between 2 and 3 leaves rows no version knows; the next start deletes them again from the
current manifest's `retired` list. Hence every acknowledged job is applied exactly once.

Served inserts become retrievable before their summaries: an insert-only batch is published
without its hierarchy step (the slow part: EraRAG re-summarizes every bucket the new nodes
reach, in every layer), and the next idle moment publishes the summaries for every batch since,
as a version of their own; `updates.defer_summaries_s` bounds the wait. Deletes never wait.

It also runs HyperRAG's online learning (indexing/online.py): L_inc steps for the subgraphs
that `hyperbolic` queries send, upserted into the current hyperbolic collection (readers take
points from it), and every `updates.recalibrate_every` queries a retrain in a background thread,
published as a new version with its own hyperbolic collection. Document jobs go first.

`OnlineUpdater` is the named, detached Ray actor around it that `hygraph serve` starts; an
updater file lock keeps a second writer (another actor, a CLI insert) out.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from hygraph.backends import resolve_device, vectorstore
from hygraph.backends.embedder import make_embedder
from hygraph.backends.llm import make_llm
from hygraph.config import HygraphConfig
from hygraph.core.hyperbolic import from_storage
from hygraph.errors import BackendError, IndexNotReady, StoreError, StoreUnavailable
from hygraph.indexing.build import _stats, _write_tables
from hygraph.indexing.online import OnlineLearner, Recalibration, install, observation, retrain
from hygraph.indexing.state import IndexState, load_state
from hygraph.indexing.update import PENDING, Applier, Delta, fold_jobs
from hygraph.store.journal import Job, Journal, bounded_error
from hygraph.store.snapshot import SnapshotStore

log = logging.getLogger("hygraph.updater")
# Failures worth retrying later (the job stays queued); anything else fails the job.
RETRYABLE = (BackendError, StoreUnavailable)


class UpdaterBusy(StoreError):
    """Another process holds the index's updater lock."""


class IndexUpdater:
    def __init__(self, cfg: HygraphConfig, index_dir: str | Path) -> None:
        self.cfg = cfg
        self.index_dir = Path(index_dir)
        self.store = SnapshotStore(index_dir)
        self.journal = Journal(index_dir)
        self._lock_fd = self._take_lock()
        self.vectors = vectorstore.connect(cfg.vector_store, index_dir)
        self.llm = make_llm(cfg.llm, cache_dir=cfg.llm.cache_dir or str(self.index_dir / "llm_cache"))
        self.applier = Applier(cfg, make_embedder(cfg.embedder), self.llm, resolve_device(cfg.hierarchy.device))
        self.state: IndexState | None = None
        self.applied_batches = 0
        self.learner = OnlineLearner(cfg.hyperbolic, cfg.updates)
        self.recalibrations = 0
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

    def _load(self) -> IndexState:
        current = self.store.current_version()
        if self.state is None or self.state.version != current:
            state = load_state(self.store.open(current))
            if state.hyp is not None:
                # Online L_inc steps live in the hyperbolic collection and reach the snapshot only with
                # the next publish: the collection is the truth, or a restarted updater would undo them.
                name = state.manifest["collections"]["hyperbolic"]
                self.vectors.open(name)  # a restarted Milvus Lite server has every collection released
                stored = self.vectors.fetch(name, state.cols["id"])
                state.hyp["points"] = from_storage(stored)
            self.state = state
        return self.state

    def _reconcile(self) -> None:
        """Finish step 3 of the last published version (a crash may have cut it short)."""
        manifest = self.store.open().manifest
        self._retire(manifest["collections"], manifest.get("retired") or {})

    def pending(self) -> list[Job]:
        """Jobs after the current version's offset that have not failed; malformed lines are marked
        failed here, once, so they never reach a batch."""
        offset = int(self.store.open().manifest.get("journal_offset", 0))
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

        `defer_summaries` (the serving updater): an insert-only batch is published without its
        hierarchy step, which `summarize_pending` runs once the journal is idle, or which the
        first batch after `updates.defer_summaries_s` runs with its own.

        One bad job never blocks the journal: a batch that fails is split in halves and each half
        retried, down to the job that fails alone, which is marked failed (once, with a bounded
        error) and skipped. A retryable failure (store unreachable, LLM down) leaves the jobs queued
        and is raised to the caller, who backs off; once the store answers again but the same batch
        keeps failing for `updates.max_attempts` rounds, it is isolated like any other failure.
        """
        jobs = self.pending()[:self.cfg.updates.max_batch_jobs]
        if not jobs:
            return None
        if defer_summaries:
            pending = self._load().manifest.get(PENDING)
            defer_summaries = pending is None or time.time() - pending["since"] < self.cfg.updates.defer_summaries_s
        self.journal.set_running([j.job_id for j in jobs])
        try:
            result = self._apply(jobs, defer_summaries)
            self._attempts.clear()
            return result
        except RETRYABLE as exc:
            self.state = None
            if not self._exhausted(jobs[0].job_id):
                raise
            return self._isolate(jobs, defer_summaries, exc, retry_retryable=False)
        except Exception as exc:  # noqa: BLE001 - isolated below: the failing job is recorded, not lost
            self.state = None
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
            self._fail(jobs[0], exc)
            return None
        last = None
        mid = len(jobs) // 2
        for half in (jobs[:mid], jobs[mid:]):
            try:
                last = self._apply(half, defer_summaries) or last
            except RETRYABLE as again:
                self.state = None
                if retry_retryable:
                    raise  # what is left stays queued for the next round
                last = self._isolate(half, defer_summaries, again, retry_retryable) or last
            except Exception as again:  # noqa: BLE001 - see step()
                self.state = None
                last = self._isolate(half, defer_summaries, again, retry_retryable) or last
        return last

    def _fail(self, job: Job, exc: BaseException) -> None:
        error = bounded_error(f"{type(exc).__name__}: {exc}")
        log.warning("journal job %s failed and is skipped: %s", job.job_id, error)
        log.debug("journal job %s failure", job.job_id, exc_info=exc)
        self.journal.mark_failed(job.job_id, error)
        self._attempts.pop(job.job_id, None)

    def summarize_pending(self) -> dict[str, Any] | None:
        """Publish the hierarchy step deferred by earlier batches; None when nothing waits for it."""
        state = self._load()
        pending = state.manifest.get(PENDING)
        if pending is None:
            return None
        try:
            delta = self.applier.summarize_pending(state)
            update = {**delta.stats, "summarized_after_offset": pending["after_offset"]}
            version = self._publish(state, delta, int(state.manifest.get("journal_offset", 0)), update)
        except Exception:
            self.state = None  # the hierarchy changed in memory: reload what is published
            raise
        log.info("summaries of %d nodes published as version %d: %s", delta.stats["summarized_nodes"], version,
                 delta.stats)
        return {"version": version, "pending_s": time.time() - pending["since"], **delta.stats}

    def run_until_idle(self) -> list[dict[str, Any]]:
        """Every pending job, with summaries (including any a stopped server left deferred)."""
        out = []
        while (result := self.step() or self.summarize_pending()) is not None:
            out.append(result)
        return out

    def _apply(self, jobs: list[Job], defer_summaries: bool = False) -> dict[str, Any]:
        state = self._load()
        batch = fold_jobs(jobs, {d.id: d.text for d in state.docs})
        delta = self.applier.apply(state, batch, defer_summaries)
        version = self._publish(state, delta, batch.end_offset, {**delta.stats, "jobs": batch.job_ids})
        self.applied_batches += 1
        log.info("applied %d journal jobs as version %d: %s", len(jobs), version, delta.stats)
        now = time.time()
        return {"version": version, "jobs": batch.job_ids, "lag_s": [now - j.accepted_at for j in jobs],
                **delta.stats}

    def _publish(self, state: IndexState, delta: Delta, journal_offset: int, update: dict[str, Any],
                 hyperbolic_rebuild: np.ndarray | None = None) -> int:
        """Steps 1-3 of the module docstring. `hyperbolic_rebuild` (storage vectors of every chunk, a
        recalibration) goes into a new collection that only the new version names."""
        collections: dict[str, str] = dict(state.manifest["collections"])
        try:
            version = self._commit(state, delta, journal_offset, update, hyperbolic_rebuild, collections)
        except BaseException:
            rebuilt = collections.get("hyperbolic")
            if rebuilt != state.manifest["collections"].get("hyperbolic") and \
                    rebuilt != self.store.open().manifest["collections"].get("hyperbolic"):
                self.vectors.drop(rebuilt)  # its version never landed: nobody names it
            raise
        self._retire(collections, delta.retired)
        try:
            self._gc()
        except Exception as exc:  # noqa: BLE001 - published already; the next publish collects again
            log.warning("garbage collection of old versions failed: %s", bounded_error(f"{type(exc).__name__}: {exc}"))
        return version

    def _commit(self, state: IndexState, delta: Delta, journal_offset: int, update: dict[str, Any],
                hyperbolic_rebuild: np.ndarray | None, collections: dict[str, str]) -> int:
        with self.store.begin() as w:
            if hyperbolic_rebuild is not None:
                rebuilt = self.store.collection(int(state.manifest["generation"]), "hyperbolic", w.version)
                collections["hyperbolic"] = rebuilt
                self.vectors.create(rebuilt, hyperbolic_rebuild.shape[1], "L2")
                self.vectors.upsert(rebuilt, state.cols["id"], hyperbolic_rebuild, w.version)
                self.vectors.seal(rebuilt)
            for kind, (ids, vecs, layers) in delta.upserts.items():
                if ids and kind in collections:
                    self.vectors.upsert(collections[kind], ids, vecs, w.version, layers)
            for kind in delta.upserts:
                if kind in collections:
                    self.vectors.persist(collections[kind])
            _write_tables(w, state.docs, state.cols, state.kb, state.graph, state.hier, state.hyp,
                          state.node_vecs)
            stats = _stats(state.docs, state.cols, state.kb, state.graph, state.hier)
            if self.store.current_version() != state.version:
                raise StoreError(f"index version {self.store.current_version()} appeared while version "
                                 f"{w.version} was being applied on {state.version} (a full `hygraph index`?)")
            manifest = {k: v for k, v in state.manifest.items() if k not in ("version", "created")}
            manifest.update(
                counts=stats["counts"], stats=stats, journal_offset=journal_offset, base_version=state.version,
                hierarchy=state.hier.manifest() if state.hier is not None else None, collections=collections,
                update=update, retired=delta.retired)
            if state.hyp is not None:
                manifest["hyperbolic"] = {**manifest["hyperbolic"], "M": state.hyp["M"]}
            w.commit(manifest)
        state.version, state.manifest = w.version, {**manifest, "version": w.version}
        return w.version

    def _gc(self) -> None:
        """Old versions past `keep_versions` and the grace period, then the collections only they named
        (a hyperbolic collection a recalibration replaced, a full rebuild's predecessor)."""
        named = {v: self.store.open(v).manifest["collections"] for v in self.store.versions()}
        removed = set(self.store.gc(self.cfg.updates.keep_versions, self.cfg.updates.gc_grace_s))
        in_use = {name for v, cols in named.items() if v not in removed for name in cols.values()}
        for v in removed:
            for name in set(named[v].values()) - in_use:
                self.vectors.drop(name)

    # ------------------------------------------------------------ HyperRAG §3.3 online learning

    def observe(self, subgraph: dict[str, Any], query_vec: Any) -> None:
        """Queue one `hyperbolic` query's implicit subgraph (notes["implicit_subgraph"]) for an L_inc step."""
        self.learner.observe(observation(subgraph, query_vec))

    def learn(self, max_steps: int) -> list[float]:
        """L_inc steps for up to `max_steps` queued subgraphs, moved points upserted into the current
        version's hyperbolic collection. Returns each step's seconds (the step alone, not the upsert)."""
        if not self.learner.pending:
            return []
        state = self._load()
        if state.hyp is None:
            self.learner.pending.clear()
            return []
        name = state.manifest["collections"]["hyperbolic"]
        seconds = []
        while self.learner.pending and len(seconds) < max_steps:
            t0 = time.perf_counter()
            ids, vecs = self.learner.step(state)
            seconds.append(time.perf_counter() - t0)
            if ids:
                self.vectors.upsert(name, ids, vecs, state.version)
        self.vectors.persist(name)
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
        state = self._load()
        if state.hyp is None:
            return None
        job = self.learner.recalibration(state)
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
        state = self._load()
        t0 = time.perf_counter()
        try:
            storage = install(state, job.chunk_ids, points)
            info = {"recalibration": {"subgraphs": len(job.observations), "train_seconds": round(seconds, 3),
                                      "M": state.hyp["M"]}}
            version = self._publish(state, Delta(), int(state.manifest.get("journal_offset", 0)), info, storage)
        except Exception:
            self.state = None  # `install` changed the points in memory: reload what is published
            raise
        self.recalibrations += 1
        info["recalibration"]["publish_seconds"] = round(time.perf_counter() - t0, 3)
        log.info("hyperbolic recalibration published as version %d: %s", version, info["recalibration"])
        return {"version": version, **info}

    def _retire(self, collections: dict[str, str], retired: dict[str, list[str]]) -> None:
        """Step 3: delete rows the published version no longer has. It runs after `CURRENT` moved, so a
        failure here must not fail the batch's jobs: readers already ignore those rows (they keep only
        ids their version knows), and the next start retries from the manifest's `retired` list."""
        try:
            for kind, ids in retired.items():
                if ids and kind in collections:
                    self.vectors.delete(collections[kind], ids)
                    self.vectors.persist(collections[kind])
        except Exception as exc:  # noqa: BLE001 - see above
            log.warning("retiring old vector rows failed (retried at the next start): %s",
                        bounded_error(f"{type(exc).__name__}: {exc}"))


def updater_name(index_dir: str | Path) -> str:
    """One name per index directory, known before its first build (pods mount it at one path)."""
    return f"hygraph-updater-{hashlib.sha1(str(Path(index_dir).resolve()).encode()).hexdigest()[:12]}"


class OnlineUpdater:
    """Ray actor: polls the journal every `updates.poll_s` and applies what is pending.

    Started before the first build has landed (a fresh Kubernetes deploy), it waits for one.
    """

    def __init__(self, config: dict[str, Any], index_dir: str) -> None:
        logging.basicConfig(level=logging.INFO)
        self.cfg = HygraphConfig.model_validate(config)
        self.index_dir = index_dir
        self.updater: IndexUpdater | None = None
        self.last_error: str | None = None
        self.last_result: dict[str, Any] | None = None
        from ray.util import metrics

        self.steps = metrics.Counter("hygraph_updater_steps_total", "Updater steps by outcome (applied, "
                                     "summarized, deferred, online, recalibrated).", tag_keys=("kind",))
        self.step_seconds = metrics.Histogram("hygraph_online_step_seconds", "Seconds of one L_inc step "
                                              "(HyperRAG 3.3) for one query's subgraph.",
                                              boundaries=[0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5])
        self.lag = metrics.Histogram("hygraph_ingest_lag_seconds", "Seconds from a write's 202 to the "
                                     "version that applies it.", boundaries=[0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600])
        self.summary_lag = metrics.Histogram("hygraph_summary_lag_seconds", "Seconds from an insert's version to "
                                             "the version with its summaries (updates.defer_summaries_s).",
                                             boundaries=[0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600])
        self.version = metrics.Gauge("hygraph_updater_version", "Last index version the updater published.")
        self._stop = threading.Event()
        self._wake = threading.Event()
        threading.Thread(target=self._loop, name="hygraph-updater", daemon=True).start()

    def _loop(self) -> None:
        failures = 0
        while not self._stop.is_set():
            self._wake.clear()
            try:
                if self._work():
                    failures = 0
                    continue
                self.last_error, failures = None, 0
            except Exception as exc:  # noqa: BLE001 - retryable store/LLM failure: the jobs stay queued
                error = bounded_error(f"{type(exc).__name__}: {exc}")
                if error != self.last_error:  # one line per distinct failure, not per retry
                    log.warning("update deferred: %s", error)
                self.last_error, failures = error, failures + 1
                self.steps.inc(tags={"kind": "deferred"})
                # Exponential backoff, capped: a long outage costs a retry a minute, not a log flood.
                self._stop.wait(min(60.0, self.cfg.updates.poll_s * 2 ** min(failures, 10)))
                if isinstance(exc, StoreUnavailable) and self.updater is not None:
                    self._reconnect()
            self._wake.wait(self.cfg.updates.poll_s)

    def _reconnect(self) -> None:
        try:
            self.updater.reconnect()
            log.info("reconnected to the vector store")
        except Exception as exc:  # noqa: BLE001 - still down: the next deferred round tries again
            self.last_error = bounded_error(f"{type(exc).__name__}: {exc}")

    def _work(self) -> bool:
        """One round, journal first: a document batch, else a finished or due recalibration, else L_inc
        steps. True when something was done (the loop goes on without waiting)."""
        if self.updater is None:
            if SnapshotStore(self.index_dir).current_version() is None:
                return False
            self.updater = IndexUpdater(self.cfg, self.index_dir)
        result = self.updater.step(defer_summaries=self.cfg.updates.defer_summaries_s > 0)
        if result is not None:
            self.last_result, self.last_error = result, None
            self.steps.inc(tags={"kind": "applied"})
            self.version.set(result["version"])
            for lag in result["lag_s"]:
                self.lag.observe(lag)
            return True
        summarized = self.updater.summarize_pending()
        if summarized is not None:
            self.last_result = summarized
            self.steps.inc(tags={"kind": "summarized"})
            self.version.set(summarized["version"])
            self.summary_lag.observe(summarized["pending_s"])
            return True
        recalibrated = self.updater.recalibrate_step()
        if recalibrated is not None:
            self.last_result = recalibrated
            self.steps.inc(tags={"kind": "recalibrated"})
            self.version.set(recalibrated["version"])
            return True
        seconds = self.updater.learn(max_steps=32) if self.cfg.updates.online_learning else []
        for s in seconds:
            self.steps.inc(tags={"kind": "online"})
            self.step_seconds.observe(s)
        return bool(seconds)

    def observe(self, subgraph: dict[str, Any], query_vec: Any) -> None:
        """Fire and forget from the Retriever: one `hyperbolic` query's implicit subgraph."""
        if self.cfg.updates.online_learning and self.updater is not None:
            self.updater.observe(subgraph, query_vec)
            self._wake.set()

    def recalibrate(self) -> None:
        """On demand: retrain the hyperbolic embeddings now (in the background) instead of at the next N queries."""
        if self.updater is None:
            raise IndexNotReady(f"{self.index_dir} holds no index version to recalibrate")
        self.updater.request_recalibration()
        self._wake.set()

    def status(self) -> dict[str, Any]:
        if self.updater is None:  # loading its models, or no index version yet
            return {"starting": True, "index_version": SnapshotStore(self.index_dir).current_version(),
                    "last_error": self.last_error}
        learner = self.updater.learner
        waiting = self.updater.store.open().manifest.get(PENDING)
        return {"pending": len(self.updater.pending()), "applied_batches": self.updater.applied_batches,
                "summaries_pending": None if waiting is None else {
                    "nodes": len(waiting["chunks"]) + len(waiting["entities"]),
                    "age_s": round(time.time() - waiting["since"], 3)},
                "last_result": self.last_result, "last_error": self.last_error,
                "online": {"steps": learner.steps, "queued": len(learner.pending), "dropped": learner.dropped,
                           "since_recalibration": learner.since_recalibration,
                           "recalibrating": self.updater.recalibrating,
                           "recalibrations": self.updater.recalibrations}}

    def stop(self) -> None:
        self._stop.set()


def start_updater(cfg: HygraphConfig, index_dir: str | Path) -> Any:
    """The index's OnlineUpdater actor: started if absent, restarted by Ray if its process dies."""
    import ray

    remote = ray.remote(num_cpus=cfg.updates.num_cpus, max_restarts=-1, max_concurrency=4)(OnlineUpdater)
    return remote.options(name=updater_name(index_dir), namespace="hygraph", lifetime="detached",
                          get_if_exists=True).remote(cfg.model_dump(), str(Path(index_dir).resolve()))


def submit(cfg: HygraphConfig, index_dir: str | Path, op: str, payload: dict[str, Any],
           wait_s: float = 3600.0) -> dict[str, Any]:
    """`hygraph insert/delete`: journal the job, then apply it here, or wait for the running updater.

    Returns the totals of the versions that applied it (with a server running, the batch that
    carried the job may have carried others too).
    """
    store = SnapshotStore(index_dir)
    store.open()  # a clear error when the directory holds no index
    journal = Journal(index_dir)
    job = journal.append(op, payload)  # type: ignore[arg-type]
    try:
        updater = IndexUpdater(cfg, index_dir)
    except UpdaterBusy:
        print(f"[hygraph] job {job.job_id} journaled; the running updater applies it", file=sys.stderr)
        return _wait(store, journal, job, wait_s)
    try:
        results = updater.run_until_idle()
    finally:
        updater.close()
    status, error = journal.status(job, int(store.open().manifest.get("journal_offset", 0)))
    if status != "done":
        raise StoreError(f"job {job.job_id} {status}: {error or 'not applied'}")
    return _totals(results, store)


def _wait(store: SnapshotStore, journal: Journal, job: Job, wait_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + wait_s
    seen = store.current_version()
    results = []
    while time.monotonic() < deadline:
        current = store.current_version()
        if current != seen:
            for v in range((seen or 0) + 1, (current or 0) + 1):
                try:
                    update = store.open(v).manifest.get("update")
                except StoreError:
                    continue  # already garbage-collected
                if update:
                    results.append({"version": v, **update})
            seen = current
        manifest = store.open().manifest
        status, error = journal.status(job, int(manifest.get("journal_offset", 0)))
        if status == "failed":
            raise StoreError(f"job {job.job_id} failed: {error}")
        if status == "done" and not summaries_pending(manifest, job):
            return _totals(results, store)
        time.sleep(0.2)
    raise StoreError(f"job {job.job_id} was not applied within {wait_s:.0f} s; it stays journaled "
                     f"(GET /v1/jobs/{job.job_id})")


def summaries_pending(manifest: dict[str, Any], job: Job) -> bool:
    """Whether a done job's documents still wait for their summaries (a deferred hierarchy step)."""
    pending = manifest.get(PENDING)
    return pending is not None and job.end_offset > int(pending["after_offset"])


def _totals(results: list[dict[str, Any]], store: SnapshotStore) -> dict[str, Any]:
    calls: dict[str, int] = {}
    for r in results:
        for role, n in r.get("llm_calls", {}).items():
            calls[role] = calls.get(role, 0) + n
    total = {key: sum(r.get(key, 0) for r in results) for key in
             ("documents_added", "documents_removed", "chunks_added", "chunks_removed", "summaries_rebuilt",
              "nodes_touched")}
    return {"version": store.current_version(), "documents": total["documents_added"],
            "chunks": total["chunks_added"], "documents_removed": total["documents_removed"],
            "chunks_removed": total["chunks_removed"], "summaries_rebuilt": total["summaries_rebuilt"],
            "nodes_touched": total["nodes_touched"], "llm_calls": calls,
            "seconds": round(sum(r.get("seconds", 0.0) for r in results), 3), "batches": len(results)}


def stop_updater(index_dir: str | Path) -> None:
    """Kill the index's updater actor (its journal stays; the next start replays what is pending)."""
    import ray

    try:
        ray.kill(ray.get_actor(updater_name(index_dir), namespace="hygraph"), no_restart=True)
    except ValueError:
        pass  # not running
