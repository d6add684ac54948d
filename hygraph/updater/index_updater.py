"""The updater of a live index, without Ray (ARCHITECTURE.md §7): journal jobs become versions.

`IndexUpdater` takes journal jobs after the current version's `journal_offset`, applies them as one
batch (indexing/update.py) and publishes the next version (updater/publishing.py: how a change
becomes a version, exactly once). A batch that fails is bisected down to the job that fails alone;
a large document is applied in slices that take turns with the journal's batches; summaries may be
deferred and published later in slices. Its parts do the other jobs on the same writer: compaction
(updater/compaction.py) and HyperRAG's online learning (updater/learning.py). Document jobs go first;
the Ray actor around it (updater/actor.py) decides the order of a round.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from hygraph.backends import resolve_device
from hygraph.backends.embedder import make_embedder
from hygraph.backends.llm import make_llm
from hygraph.config import HygraphConfig
from hygraph.errors import BackendError, StoreUnavailable
from hygraph.indexing.state import IndexState
from hygraph.indexing.update import Applier, Batch, PresentDocuments, fold_jobs, summary_slice
from hygraph.store.journal import Job, Malformed, bounded_error, job_error
from hygraph.store.object_journal import open_journal
from hygraph.updater.compaction import Compactor
from hygraph.updater.learning import HyperbolicLearning
from hygraph.updater.publishing import Points, Publisher, return_memory

log = logging.getLogger("hygraph.updater")
# Failures worth retrying later (the job stays queued); anything else fails the job.
RETRYABLE = (BackendError, StoreUnavailable)
# A write step this long (a slice, a large batch) leaves enough garbage to pay for a full collection.
FULL_COLLECTION_S = 1.0


class IndexUpdater:
    """Journal batches with bisection, document slices and deferred summaries, on the index's one
    `publisher`; `compactor` and `learning` share that writer."""

    def __init__(self, cfg: HygraphConfig, index_dir: str | Path) -> None:
        self.cfg = cfg
        self.publisher = Publisher(cfg, index_dir)
        self.store = self.publisher.store
        self.journal = open_journal(index_dir, self.store.objects)
        llm = make_llm(cfg.llm, cache_dir=cfg.llm.cache_dir or str(self.store.local_dir / "llm_cache"))
        self.applier = Applier(cfg, make_embedder(cfg.embedder), llm, resolve_device(cfg.hierarchy.device))
        self.compactor = Compactor(cfg, self.publisher)
        self.learning = HyperbolicLearning(cfg, self.publisher)
        self.applied_batches = 0
        self._last_kind: str | None = None  # of the last write step: after a slice, the journal's batch goes next
        self._slice_kinds = ["sliced", "summarized"]  # the two kinds of slice, the one to go first before
        self._summary_node_s: float | None = None  # seconds per node of the last summary slice
        self._attempts: dict[str, int] = {}  # retryable failures per batch head, while the store answered

    def close(self) -> None:
        self.publisher.close()

    def pending(self) -> list[Job]:
        """Jobs after the current version's offset that have not failed; malformed lines are marked
        failed here, once, so they never reach a batch."""
        offset = self.store.manifest().journal_offset
        failed = self.journal.failed()
        out = []
        for job in self.journal.jobs(offset):
            if job.job_id in failed:
                continue
            if isinstance(job.request, Malformed):
                log.warning("journal job %s is malformed and skipped: %s", job.job_id, job.request.error)
                self.publisher.check_lease()
                self.journal.mark_failed(job.job_id, f"InputError: {job.request.error}")
                failed[job.job_id] = job.request.error
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
            self.publisher.forget()
            if not self._exhausted(jobs[0].job_id):
                raise
            return self._isolate(jobs, defer_summaries, exc, retry_retryable=False)
        except Exception as exc:  # noqa: BLE001 - isolated below: the failing job is recorded, not lost
            self.publisher.forget()
            return self._isolate(jobs, defer_summaries, exc)
        finally:
            self.journal.set_running([])

    def _exhausted(self, head: str) -> bool:
        """Whether a retryable failure of the batch starting at `head` has happened `max_attempts` times
        while the store was reachable (an outage does not count: everything waits for it)."""
        try:
            self.publisher.vectors.ping()
            self.store.current_version()  # the index's own store (a bucket) answers too
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
                self.publisher.forget()
                if retry_retryable:
                    raise  # what is left stays queued for the next round
                last = self._isolate(half, defer_summaries, again, retry_retryable) or last
            except Exception as again:  # noqa: BLE001 - see step()
                self.publisher.forget()
                last = self._isolate(half, defer_summaries, again, retry_retryable) or last
        return last

    def _fail(self, job_id: str, exc: BaseException) -> None:
        log.warning("journal job %s failed and is skipped: %s", job_id, bounded_error(f"{type(exc).__name__}: {exc}"))
        log.debug("journal job %s failure", job_id, exc_info=exc)
        # A job marked failed is skipped by every later updater: only the lease's holder may decide that.
        self.publisher.check_lease()
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
            live = self.publisher.load()
            applied = self.applier.summarize_pending(live, max_nodes)
            if applied is None:
                return None
            update = {**applied.stats, "summarized_after_offset": pending.after_offset}
            version = self.publisher.publish(applied, applied.state.manifest.journal_offset, update)
        except Exception:
            self.publisher.forget()  # the hierarchy index changed in memory: reload what is published
            raise
        log.info("summaries of %d nodes published as version %d: %s", applied.stats["summarized_nodes"], version,
                 applied.stats)
        del applied  # its rows and vectors go before memory is returned
        return_memory()
        return {**update, "version": version, "pending_s": time.time() - pending.since}

    def continue_documents(self, defer_summaries: bool = False) -> dict[str, Any] | None:
        """Publish the next slice of the documents a batch applied in part (`Applier.continue_documents`); None
        when none waits. A slice that fails for a reason other than an outage fails its document's job, and
        the document is taken out whole, so no half of it stays served."""
        pending = self.store.manifest().chunks_pending
        if not pending:
            return None
        try:
            live = self.publisher.load()
            applied = self.applier.continue_documents(live, Points(self.publisher, live).points, defer_summaries)
            if applied is None:
                return None
            version = self.publisher.publish(applied, applied.state.manifest.journal_offset, applied.stats)
        except RETRYABLE:
            self.publisher.forget()
            raise
        except Exception as exc:  # noqa: BLE001 - recorded as the job's failure, never lost
            self.publisher.forget()
            job_id = pending[0].job_id
            self._fail(job_id, exc)
            live = self.publisher.load()
            batch = Batch(remove={p.doc_id for p in pending if p.job_id == job_id},
                          end_offset=live.version.manifest.journal_offset)
            applied = self.applier.apply(live, batch, Points(self.publisher, live).points, defer_summaries)
            version = self.publisher.publish(applied, batch.end_offset, {**applied.stats, "jobs_failed": [job_id]})
            return {**applied.stats, "version": version, "jobs_finished": []}
        log.info("slice of %d chunks published as version %d: %s", applied.stats["chunks_added"], version,
                 applied.stats)
        return {**applied.stats, "version": version}

    def summarize_slice(self) -> dict[str, Any] | None:
        """A slice of the deferred summaries (`indexing.update.summary_slice`): small while they are fresh, so a
        write waits little; larger as they age, so a backlog ends; never more than `updates.summary_slice_s`
        at the last slice's pace. None when none are pending."""
        age = self.summaries_age()
        if age is None:
            return None
        u = self.cfg.updates
        started = time.perf_counter()
        result = self.summarize_pending(summary_slice(age, u.defer_summaries_s, u.summary_slice_nodes,
                                                      self._summary_node_s, u.summary_slice_s))
        if result is not None and result.get("summarized_nodes"):
            self._summary_node_s = (time.perf_counter() - started) / result["summarized_nodes"]
        return None if result is None else {**result, "kind": "summarized"}

    def write_step(self, defer_summaries: bool = False, summaries_due: bool = False) -> dict[str, Any] | None:
        """The next write, by turns (`kind`): the journal's next batch ("applied"), the next slice of a large
        document ("sliced") and, with `summaries_due` once they are overdue, a slice of the deferred summaries
        ("summarized"). Jobs waiting in the journal go right after any slice, so a write waits for at most one
        (and its batch); the two kinds of slice alternate between batches, so both advance under a stream of
        jobs. None when nothing waits."""
        def overdue_summaries(_defer: bool) -> dict[str, Any] | None:
            return self.summarize_slice() if summaries_due and self.summaries_overdue() else None

        runs = {"applied": self.step, "sliced": self.continue_documents, "summarized": overdue_summaries}
        order = (["applied", *self._slice_kinds] if self._last_kind != "applied"
                 else [*self._slice_kinds, "applied"])
        for kind in order:
            result = runs[kind](defer_summaries)
            if result is not None:
                self._last_kind = kind
                if kind != "applied":  # the other kind of slice goes first next time
                    self._slice_kinds.remove(kind)
                    self._slice_kinds.append(kind)
                return_memory(full=result.get("seconds", FULL_COLLECTION_S) >= FULL_COLLECTION_S)
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
        live = self.publisher.load()
        batch = fold_jobs(jobs, PresentDocuments(IndexState(live.version)))
        points = Points(self.publisher, live)
        applied = self.applier.apply(live, batch, points.points, defer_summaries)
        update = {**applied.stats, "jobs": batch.job_ids}
        version = self.publisher.publish(applied, batch.end_offset, update)  # adds bytes_written to `update`
        self.applied_batches += 1
        log.info("applied %d journal jobs as version %d: %s", len(jobs), version, applied.stats)
        now = time.time()
        return {**update, "version": version, "lag_s": [now - j.accepted_at for j in jobs]}
