"""HyperRAG §3.3 online learning in the updater (indexing/online.py holds the algorithm): L_inc steps for
the subgraphs that `hyperbolic` queries send, upserted into the current hyperbolic collection (readers take
points from it, or from the feed of moves, updater/moves.py), and every `updates.recalibrate_every` queries
(or on request) a retrain in a background thread, published as a new version with its own hyperbolic
collection."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import numpy as np

from hygraph.backends import resolve_device
from hygraph.config import HygraphConfig
from hygraph.indexing.online import OnlineLearner, Recalibration, install, observation, retrain
from hygraph.indexing.stages.hyperbolic import explicit_graph
from hygraph.indexing.stages.vectors import VectorDelta
from hygraph.indexing.state import IndexState
from hygraph.indexing.update import Applied
from hygraph.updater.moves import MoveFeed
from hygraph.updater.publishing import Points, Publisher

log = logging.getLogger("hygraph.updater")


class HyperbolicLearning:
    def __init__(self, cfg: HygraphConfig, publisher: Publisher) -> None:
        self.cfg, self.publisher = cfg, publisher
        self.learner = OnlineLearner(cfg.hyperbolic, cfg.updates)
        self.feed = MoveFeed()  # the moves, for readers that hold the points in process (store/points.py)
        self.recalibrations = 0
        self._device = resolve_device(cfg.hyperbolic.device)
        self._thread: threading.Thread | None = None
        self._done: tuple[Recalibration, np.ndarray, float] | None = None
        self._requested = False

    def observe(self, subgraph: dict[str, Any], query_vec: Any) -> None:
        """Queue one `hyperbolic` query's implicit subgraph (notes["implicit_subgraph"]) for an L_inc step."""
        self.learner.observe(observation(subgraph, query_vec))

    def learn(self, max_steps: int) -> list[float]:
        """L_inc steps for up to `max_steps` queued subgraphs, moved points upserted into the current
        version's hyperbolic collection. Returns each step's seconds (the step alone, not the upsert)."""
        if not self.learner.pending:
            return []
        live = self.publisher.load()
        if live.version.manifest.hyperbolic is None:
            self.learner.pending.clear()
            return []
        points = Points(self.publisher, live)
        seconds = []
        moved: dict[str, np.ndarray] = {}
        while self.learner.pending and len(seconds) < max_steps:
            t0 = time.perf_counter()
            ids, vecs = self.learner.step(points)
            seconds.append(time.perf_counter() - t0)
            if ids:
                points.write(ids, vecs)
                moved.update(zip(ids, vecs))
        points.persist()
        if moved:
            self.feed.record(points.name, live.version.version, list(moved), np.stack(list(moved.values())))
        return seconds

    def request_recalibration(self) -> None:
        self._requested = True

    @property
    def recalibrating(self) -> bool:
        return self._thread is not None

    def recalibrate_step(self) -> dict[str, Any] | None:
        """Start a due (or requested) retrain in a background thread, or publish a finished one.

        Returns the published version's result; None while nothing was published.
        """
        if self._thread is not None:
            if self._thread.is_alive():
                return None
            self._thread.join()
            self._thread, done, self._done = None, self._done, None
            return self._publish(*done) if done is not None else None
        if not (self._requested or self.learner.recalibration_due):
            return None
        self._requested = False
        live = self.publisher.load()
        if live.version.manifest.hyperbolic is None:
            return None
        job = self.learner.recalibration(*explicit_graph(live.version))
        self._thread = threading.Thread(target=self._retrain, args=(job,), name="hygraph-recalibration", daemon=True)
        self._thread.start()
        return None

    def _retrain(self, job: Recalibration) -> None:
        t0 = time.perf_counter()
        try:
            self._done = (job, retrain(job, self.cfg.hyperbolic, self._device), time.perf_counter() - t0)
        except Exception:  # noqa: BLE001 - the current points stay served; the next due retrain tries again
            log.exception("hyperbolic recalibration failed")

    def _publish(self, job: Recalibration, points: np.ndarray, seconds: float) -> dict[str, Any]:
        live = self.publisher.load()
        t0 = time.perf_counter()
        try:
            ids, current = Points(self.publisher, live).everything()
            storage, m = install(ids, current, job.chunk_ids, points)
            state = IndexState(live.version)
            assert state.manifest.hyperbolic is not None
            state.manifest.hyperbolic.M = m
            info = {"recalibration": {"subgraphs": len(job.observations), "train_seconds": round(seconds, 3),
                                      "M": m}}
            version = self.publisher.publish(Applied(state, VectorDelta(), {}), state.manifest.journal_offset, info,
                                             (ids, storage))
        except Exception:
            self.publisher.forget()
            raise
        self.recalibrations += 1
        info["recalibration"]["publish_seconds"] = round(time.perf_counter() - t0, 3)
        log.info("hyperbolic recalibration published as version %d: %s", version, info["recalibration"])
        return {"version": version, **info}
