"""The OnlineUpdater: the named, detached Ray actor around the index's updater that `hygraph serve` starts.

It polls the journal every `updates.poll_s` and applies what is pending (updater/index_updater.py),
then, journal first: deferred summaries, a finished or due hyperbolic recalibration, HyperRAG
L_inc steps for observed queries, and compaction when nothing else is waiting. An updater file
lock keeps a second writer (another actor, a CLI insert) out.

A named index's updater ends itself after `updates.named_idle_stop_s` with nothing to do, so a
service with many indexes holds models and connections only for those being written; the ingress
starts it again on the next write (`ensure_updater`). The hand-over cannot lose a write: the ingress
journals first, then calls `wake`, which refuses once the updater has decided to stop; the updater
decides, then looks at the journal once more, and stays if anything is pending.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hygraph.updater.names import updater_name
from hygraph.config import HygraphConfig
from hygraph.errors import IndexNotReady, StoreUnavailable
from hygraph.store.journal import bounded_error
from hygraph.store.objects import index_uri
from hygraph.store.points import PointMoves
from hygraph.store.versions import IndexStore

if TYPE_CHECKING:  # the update path (models, torch) is imported in the actor, not where it is started
    from hygraph.updater.index_updater import IndexUpdater

log = logging.getLogger("hygraph.updater")

# Query subgraphs learned from per round: a round ends before the journal is looked at again, so a
# few keeps a document that arrives during online learning from waiting for a long queue of them.
LEARN_STEPS_PER_ROUND = 4


class OnlineUpdater:
    """Ray actor: polls the journal every `updates.poll_s` and applies what is pending.

    Started before the first build has landed (a fresh Kubernetes deploy), it waits for one.
    """

    def __init__(self, config: dict[str, Any], index_dir: str, create_empty: bool = False) -> None:
        # hygraph's own lines (what each step applied) at INFO; libraries' (model loading, HTTP clients) only
        # from WARNING: this actor's output reaches the server's terminal.
        logging.basicConfig(level=logging.WARNING)
        logging.getLogger("hygraph").setLevel(logging.INFO)
        self.cfg = HygraphConfig.model_validate(config)
        self.index_dir = index_dir
        self.create_empty = create_empty
        self.updater: IndexUpdater | None = None
        self.last_error: str | None = None
        self.last_result: dict[str, Any] | None = None
        from ray.util import metrics

        self.steps = metrics.Counter("hygraph_updater_steps_total", "Updater steps by outcome (applied, "
                                     "sliced, summarized, deferred, online, recalibrated, compacted).",
                                     tag_keys=("kind",))
        self.step_seconds = metrics.Histogram("hygraph_online_step_seconds", "Seconds of one L_inc step "
                                              "(HyperRAG 3.3) for one query's subgraph.",
                                              boundaries=[0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5])
        self.lag = metrics.Histogram("hygraph_ingest_lag_seconds", "Seconds from a write's 202 to the "
                                     "version that applies it.", boundaries=[0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600])
        self.summary_lag = metrics.Histogram("hygraph_summary_lag_seconds", "Seconds the oldest pending summaries had "
                                             "waited when a slice of them was published (updates.defer_summaries_s).",
                                             boundaries=[0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600])
        self.version = metrics.Gauge("hygraph_updater_version", "Last index version the updater published.")
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._stopping = False  # decided to end (idle): `wake` refuses, the ingress starts a new one
        self._stopping_lock = threading.Lock()
        self._idle_since = time.monotonic()
        threading.Thread(target=self._loop, name="hygraph-updater", daemon=True).start()

    def _loop(self) -> None:
        failures = 0
        while not self._stop.is_set():
            self._wake.clear()
            try:
                if self._work():
                    failures, self._idle_since = 0, time.monotonic()
                    continue
                self.last_error, failures = None, 0
                if self._retire_when_idle():
                    return
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

    def _retire_when_idle(self) -> bool:
        """A named index's updater, idle for `updates.named_idle_stop_s`, ends its actor (True) unless a job
        was journaled meanwhile."""
        idle_stop = self.cfg.updates.named_idle_stop_s
        if (not self.create_empty or idle_stop <= 0 or self.updater is None or self.updater.learning.recalibrating
                or time.monotonic() - self._idle_since < idle_stop):
            return False
        with self._stopping_lock:
            self._stopping = True
        if self.updater.pending():  # journaled before its `wake` found us stopping: stay and apply it
            with self._stopping_lock:
                self._stopping = False
            self._idle_since = time.monotonic()
            return False
        log.info("index %s: updater idle for %.0f s, stopping (the next write starts it)", self.index_dir, idle_stop)
        self.updater.close()
        import ray

        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
        return True

    def wake(self) -> bool:
        """From the ingress after it journaled a write: look at the journal now. False when this updater is
        stopping (idle); the caller then starts a new one, which applies the write."""
        with self._stopping_lock:
            if self._stopping:
                return False
            self._idle_since = time.monotonic()
        self._wake.set()
        return True

    def _reconnect(self) -> None:
        try:
            self.updater.publisher.reconnect()
            log.info("reconnected to the vector store")
        except Exception as exc:  # noqa: BLE001 - still down: the next deferred round tries again
            self.last_error = bounded_error(f"{type(exc).__name__}: {exc}")

    def _work(self) -> bool:
        """One round: the next write step (`IndexUpdater.write_step`: a journal batch, a slice of a large
        document or of overdue summaries, by turns), else a slice of the deferred summaries, else a finished or
        due recalibration, else L_inc steps, else a due compaction, else a due garbage collection (the versions
        the last publish spared, once their grace is over). True when something was done (the loop goes on
        without waiting)."""
        if self.updater is None:
            if IndexStore(self.index_dir, **self.cfg.store.model_dump()).current_version() is None:
                if not self.create_empty:
                    return False  # the default index: its first version is a build's
                from hygraph.indexing.build import create_empty_index

                log.info("index %s: writing its empty first version", self.index_dir)
                create_empty_index(self.cfg, self.index_dir)
            from hygraph.updater.index_updater import IndexUpdater

            self.updater = IndexUpdater(self.cfg, self.index_dir)
        defer = self.cfg.updates.defer_summaries_s > 0
        if self.updater.compactor.overdue() and self._compact():
            return True  # a steady stream of writes would otherwise pile up deltas without end
        # Batches, document slices and overdue summary slices take turns; fresh summaries wait for an idle journal.
        result = self.updater.write_step(defer, summaries_due=defer) or self.updater.summarize_slice()
        if result is not None:
            self.last_result, self.last_error = result, None
            kind = result["kind"]
            self.steps.inc(tags={"kind": kind})
            self.version.set(result["version"])
            for lag in result.get("lag_s", ()):
                self.lag.observe(lag)
            if kind == "summarized":
                self.summary_lag.observe(result["pending_s"])
            return True
        recalibrated = self.updater.learning.recalibrate_step()
        if recalibrated is not None:
            self.last_result = recalibrated
            self.steps.inc(tags={"kind": "recalibrated"})
            self.version.set(recalibrated["version"])
            return True
        online = self.cfg.updates.online_learning
        seconds = self.updater.learning.learn(max_steps=LEARN_STEPS_PER_ROUND) if online else []
        for s in seconds:
            self.steps.inc(tags={"kind": "online"})
            self.step_seconds.observe(s)
        if seconds:
            return True
        if self._compact():
            return True
        collected = self.updater.publisher.index.collect_garbage_when_due()
        return collected is not None and bool(collected.versions)

    def _compact(self) -> bool:
        compacted = self.updater.compactor.compact()
        if compacted is None:
            return False
        self.last_result = compacted
        self.steps.inc(tags={"kind": "compacted"})
        self.version.set(compacted["version"])
        return True

    def observe(self, subgraph: dict[str, Any], query_vec: Any) -> None:
        """Fire and forget from the Retriever: one `hyperbolic` query's implicit subgraph."""
        if self.cfg.updates.online_learning and self.updater is not None:
            self.updater.learning.observe(subgraph, query_vec)
            self._wake.set()

    def moves_since(self, collection: str, epoch: str | None, seq: int) -> PointMoves | None:
        """From a Retriever: the online moves of `collection`'s points after its feed position
        (updater/moves.py); None before this updater has loaded the index."""
        if self.updater is None:
            return None
        return self.updater.learning.feed.since(collection, epoch, seq)

    def recalibrate(self) -> None:
        """On demand: retrain the hyperbolic embeddings now (in the background) instead of at the next N queries."""
        if self.updater is None:
            raise IndexNotReady(f"{self.index_dir} holds no index version to recalibrate")
        self.updater.learning.request_recalibration()
        self._wake.set()

    def status(self) -> dict[str, Any]:
        if self.updater is None:  # loading its models, or no index version yet
            current = IndexStore(self.index_dir, **self.cfg.store.model_dump()).current_version()
            return {"starting": True, "index_version": current, "last_error": self.last_error}
        learner = self.updater.learning.learner
        manifest = self.updater.store.manifest()
        waiting = manifest.summaries_pending
        return {"pending": len(self.updater.pending()), "applied_batches": self.updater.applied_batches,
                "documents_in_slices": len(manifest.chunks_pending),
                "summaries_pending": None if waiting is None else {
                    "nodes": len(waiting.chunks) + len(waiting.entities),
                    "age_s": round(time.time() - waiting.since, 3)},
                "last_result": self.last_result, "last_error": self.last_error,
                "online": {"steps": learner.steps, "queued": len(learner.pending), "dropped": learner.dropped,
                           "since_recalibration": learner.since_recalibration,
                           "recalibrating": self.updater.learning.recalibrating,
                           "recalibrations": self.updater.learning.recalibrations},
                "compactions": self.updater.compactor.compactions}

    def stop(self) -> None:
        self._stop.set()


def start_updater(cfg: HygraphConfig, index_dir: str | Path, create_empty: bool = False) -> Any:
    """The index's OnlineUpdater actor: started if absent, restarted by Ray if its process dies.
    `create_empty` (a named index): it writes the index's empty first version when there is none."""
    import ray

    share = cfg.updates.named_num_cpus if create_empty else cfg.updates.num_cpus
    remote = ray.remote(num_cpus=share, max_restarts=-1, max_concurrency=4)(OnlineUpdater)
    return remote.options(name=updater_name(index_dir), namespace="hygraph", lifetime="detached",
                          get_if_exists=True).remote(cfg.model_dump(), index_uri(index_dir), create_empty)


def stop_updater(index_dir: str | Path) -> None:
    """Kill the index's updater actor (its journal stays; the next start replays what is pending)."""
    import ray

    try:
        ray.kill(ray.get_actor(updater_name(index_dir), namespace="hygraph"), no_restart=True)
    except ValueError:
        pass  # not running
