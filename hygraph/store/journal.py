"""The ingest journal: every acknowledged write, appended and fsynced before the 202 is sent.

One JSON line per job in `<index>/journal/journal.jsonl`. A job's position is the byte
offset just past its line; the updater records the offset it has applied up to in each
version's manifest (`journal_offset`), so a job is done exactly when a version's offset
reaches it, and a restart replays the lines after the current version's offset
(ARCHITECTURE.md §7). Appends from several processes are serialised with an advisory lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Literal

from hygraph.errors import StoreError

Op = Literal["insert", "delete"]


@dataclass(frozen=True)
class Job:
    job_id: str
    op: Op
    end_offset: int  # byte offset just past this job's line
    payload: dict[str, Any]
    accepted_at: float


class Journal:
    def __init__(self, index_dir: str | Path) -> None:
        self.path = Path(index_dir) / "journal" / "journal.jsonl"

    def append(self, op: Op, payload: dict[str, Any]) -> Job:
        """Durably record one job; returns only after the line and its directory entry are on disk."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        job_id = uuid.uuid4().hex
        accepted_at = time.time()
        line = json.dumps({"job_id": job_id, "op": op, "accepted_at": accepted_at, **payload},
                          ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                os.write(fd, line)
                os.fsync(fd)
                end = os.lseek(fd, 0, os.SEEK_END)
            finally:
                os.close(fd)  # closing releases the lock
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            raise StoreError(f"journal {self.path}: could not record the write: {exc.strerror}") from None
        return Job(job_id, op, end, payload, accepted_at)

    def jobs(self, after_offset: int = 0) -> Iterator[Job]:
        """Complete jobs whose line starts at or after `after_offset`, in order.

        A torn last line (a crash mid-append, never acknowledged) is skipped.
        """
        if not self.path.is_file():
            return
        with self.path.open("rb") as fh:
            fh.seek(after_offset)
            offset = after_offset
            for raw in fh:
                offset += len(raw)
                if not raw.endswith(b"\n"):
                    return
                rec = json.loads(raw)
                job_id, op, accepted_at = rec.pop("job_id"), rec.pop("op"), rec.pop("accepted_at")
                yield Job(job_id, op, offset, rec, accepted_at)

    def find(self, job_id: str) -> Job | None:
        return next((job for job in self.jobs() if job.job_id == job_id), None)

    @property
    def _failed_path(self) -> Path:
        return self.path.parent / "failed.jsonl"

    @property
    def _running_path(self) -> Path:
        return self.path.parent / "running.json"

    def mark_failed(self, job_id: str, error: str) -> None:
        """Record a job the updater could not apply (it is skipped from then on)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._failed_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"job_id": job_id, "error": error}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def failed(self) -> dict[str, str]:
        if not self._failed_path.is_file():
            return {}
        rows = [json.loads(line) for line in self._failed_path.read_text(encoding="utf-8").splitlines()
                if line.endswith("}")]
        return {r["job_id"]: r["error"] for r in rows}

    def set_running(self, job_ids: list[str]) -> None:
        """The jobs the updater is applying now (advisory, for `GET /v1/jobs`)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._running_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(job_ids))
        os.replace(tmp, self._running_path)

    def running(self) -> set[str]:
        try:
            return set(json.loads(self._running_path.read_text()))
        except (OSError, ValueError):
            return set()

    def status(self, job: Job, applied_offset: int) -> tuple[str, str | None]:
        """(`queued`|`running`|`done`|`failed`, error) of a job, given the serving version's offset."""
        failed = self.failed()
        if job.job_id in failed:
            return "failed", failed[job.job_id]
        if applied_offset >= job.end_offset:
            return "done", None
        return ("running" if job.job_id in self.running() else "queued"), None
