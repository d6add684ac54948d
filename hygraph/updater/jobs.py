"""Job records: what a journaled write's status says, read from the journal and the published manifest."""

from __future__ import annotations

from typing import Any

from hygraph.store.journal import Job, Journal
from hygraph.store.manifest import Manifest
from hygraph.store.versions import IndexStore


def summaries_pending(manifest: Manifest, job: Job) -> bool:
    """Whether a done job's documents still wait for their summaries (a deferred hierarchy step)."""
    pending = manifest.summaries_pending
    return pending is not None and job.end_offset > pending.after_offset


def job_status(store: IndexStore, journal: Journal, job: Job) -> dict[str, Any]:
    """`GET /v1/jobs/{id}`: queued, running, done (with the version holding it and, for an insert, whether
    its summaries landed) or failed (with its error). Before the first build every job is queued."""
    manifest = store.manifest() if store.current_version() is not None else None
    status, error = journal.status(job, manifest)
    body: dict[str, Any] = {"job_id": job.job_id, "op": job.op, "status": status,
                            "index_version": manifest.version if status == "done" and manifest is not None else None}
    if status == "done" and manifest is not None and job.op == "insert":
        body["summaries"] = "pending" if summaries_pending(manifest, job) else "done"
    if error:
        body["error"] = error
    return body


def totals(results: list[dict[str, Any]], version: int | None) -> dict[str, Any]:
    """The CONTRACT result of `hygraph insert/delete`: the sums over the versions that applied the job."""
    calls: dict[str, int] = {}
    for r in results:
        for role, n in r.get("llm_calls", {}).items():
            calls[role] = calls.get(role, 0) + n
    total = {key: sum(r.get(key, 0) for r in results) for key in
             ("documents_added", "documents_removed", "chunks_added", "chunks_removed", "summaries_rebuilt",
              "nodes_touched", "bytes_written")}
    return {"version": version, "documents": total["documents_added"],
            "chunks": total["chunks_added"], "documents_removed": total["documents_removed"],
            "chunks_removed": total["chunks_removed"], "summaries_rebuilt": total["summaries_rebuilt"],
            "nodes_touched": total["nodes_touched"], "bytes_written": total["bytes_written"], "llm_calls": calls,
            "seconds": round(sum(r.get("seconds", 0.0) for r in results), 3), "batches": len(results)}
