"""`hygraph insert` and `hygraph delete`: journal the job, then apply it here or wait for the running updater."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from hygraph.updater.jobs import summaries_pending, totals
from hygraph.updater.index_updater import IndexUpdater
from hygraph.updater.publishing import UpdaterBusy
from hygraph.config import HygraphConfig
from hygraph.errors import StoreError
from hygraph.store.journal import Job, Journal, Request
from hygraph.store.object_journal import open_journal
from hygraph.store.versions import IndexStore


def submit(cfg: HygraphConfig, index_dir: str | Path, request: Request, wait_s: float = 3600.0) -> dict[str, Any]:
    """Journal the job, then apply it in this process, or wait for the running updater to.

    Returns the totals of the versions that applied it (with a server running, the batch that
    carried the job may have carried others too) and the current version, which holds it (a
    compaction that came due after it publishes the same rows as a version of its own).
    """
    store = IndexStore(index_dir, **cfg.store.model_dump())
    store.manifest()  # a clear error when the directory holds no index
    journal = open_journal(index_dir, store.objects)
    job = journal.append(request)
    try:
        updater = IndexUpdater(cfg, index_dir)
    except UpdaterBusy:
        print(f"[hygraph] job {job.job_id} journaled; the running updater applies it", file=sys.stderr)
        return _wait(store, journal, job, wait_s)
    try:
        results = updater.run_until_idle()
        status, error = journal.status(job, store.manifest())
        if status != "done":
            raise StoreError(f"job {job.job_id} {status}: {error or 'not applied'}")
        # No server compacts this index in the background: do it here when due (same rows, fewer segments).
        compacted = updater.compactor.compact()
    finally:
        updater.close()
    return {**totals(results, store.current_version()), "compaction": compacted}


def _wait(store: IndexStore, journal: Journal, job: Job, wait_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + wait_s
    seen = store.current_version()
    results = []
    while time.monotonic() < deadline:
        current = store.current_version()
        if current != seen:
            for v in range((seen or 0) + 1, (current or 0) + 1):
                try:
                    update = store.manifest(v).update
                except StoreError:
                    continue  # already garbage-collected
                if update and "compaction" not in update:
                    results.append({"version": v, **update})
            seen = current
        manifest = store.manifest()
        status, error = journal.status(job, manifest)
        if status == "failed":
            raise StoreError(f"job {job.job_id} failed: {error}")
        if status == "done" and not summaries_pending(manifest, job):
            # The running updater compacts on its own schedule, not as part of this job.
            return {**totals(results, store.current_version()), "compaction": None}
        time.sleep(0.2)
    raise StoreError(f"job {job.job_id} was not applied within {wait_s:.0f} s; it stays journaled "
                     f"(GET /v1/jobs/{job.job_id})")
