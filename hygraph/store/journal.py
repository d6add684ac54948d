"""The ingest journal: every acknowledged write, appended and fsynced before the 202 is sent.

Each job holds a typed request (`InsertDocuments` or `DeleteDocuments`): the one form in which the routes,
the CLI and the updater see a write. A job's position is its end offset; the updater records the offset it
has applied up to in each version's manifest (`journal_offset`), so a job is done exactly when a version's
offset reaches it, and a restart replays the jobs after the current version's offset (ARCHITECTURE.md §7).

Two journals, one meaning (`Journal`): a local index's `FileJournal`, one JSON line per job in
`<index>/journal/journal.jsonl` whose offset is the byte offset just past its line, appends from several
processes serialised with an advisory lock; and an index on object storage's `ObjectJournal`
(store/object_journal.py), one object per job numbered by a conditional create.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import threading
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Iterator, Literal

from hygraph.errors import InputError, StoreError
from hygraph.input_rules import check_id, check_metadata, check_nonblank_text, check_text, preview
from hygraph.model import Document
from hygraph.store.manifest import Manifest

Op = Literal["insert", "delete", "invalid"]
MAX_ERROR_CHARS = 300
_JOB_ID = re.compile(r"^[0-9a-f]{32}$")  # a failed job's recorded error: one bounded line


def check_payload(op: str, payload: dict[str, Any]) -> None:
    """The input rules on a journal line's fields: the journal holds nothing the updater would choke on."""
    if op == "insert":
        for i, doc in enumerate(payload.get("documents") or []):
            where = f"documents.{i}"
            check_id(doc.get("id"), f"{where}.id")
            check_nonblank_text(doc.get("text"), f"{where}.text")
            check_text(doc.get("title", ""), f"{where}.title")
            check_metadata(doc.get("metadata") or {}, f"{where}.metadata")
    elif op == "delete":
        for i, doc_id in enumerate(payload.get("ids") or []):
            check_id(doc_id, f"ids.{i}")
    else:
        raise InputError(f"op: unknown journal operation {preview(str(op))}")


@dataclass(frozen=True)
class InsertDocuments:
    """Add documents, or replace those with the same id."""

    documents: tuple[Document, ...]
    op: ClassVar[Op] = "insert"

    def payload(self) -> dict[str, Any]:
        return {"documents": [{"id": d.id, "title": d.title, "text": d.text, "metadata": d.metadata}
                              for d in self.documents]}


@dataclass(frozen=True)
class DeleteDocuments:
    """Remove the documents with these ids."""

    ids: tuple[str, ...]
    op: ClassVar[Op] = "delete"

    def payload(self) -> dict[str, Any]:
        return {"ids": list(self.ids)}


@dataclass(frozen=True)
class Malformed:
    """A journal line that is not a well-formed job (written by hand, or by a version without the input
    rules): the updater marks it failed and moves past it."""

    error: str
    op: ClassVar[Op] = "invalid"


Request = InsertDocuments | DeleteDocuments


def request_of(op: str, payload: dict[str, Any]) -> Request:
    """A journal line's fields as a typed request, under the input rules (InputError naming the field)."""
    check_payload(op, payload)
    if op == "insert":
        return InsertDocuments(tuple(Document(d["id"], d["text"], d.get("title", ""), d.get("metadata") or {})
                                     for d in payload.get("documents") or []))
    return DeleteDocuments(tuple(payload.get("ids") or []))


def bounded_error(text: str) -> str:
    """One line of at most MAX_ERROR_CHARS printable characters (errors may quote user input)."""
    first = text.splitlines()[0] if text else ""
    return preview(first, MAX_ERROR_CHARS)


def job_error(exc: BaseException) -> str:
    """What a failed job's status says (anyone holding a key may poll it): an input rule's message, which
    names a field of this job's own payload, else only the kind of failure. Other exceptions can quote
    other documents (a vector store's key clash names the stored id), so their text goes to the
    updater's log only."""
    if isinstance(exc, InputError):
        return bounded_error(f"InputError: {exc}")
    return f"{type(exc).__name__}: the job could not be applied (the updater's log has the details)"


@dataclass(frozen=True)
class Job:
    job_id: str
    request: Request | Malformed | None  # None: a status lookup's record, read without its documents
    end_offset: int  # its position: the byte offset just past its line, or its object's number + 1
    accepted_at: float
    op: Op  # the request's, kept in a status lookup's record too


class Journal(ABC):
    """The journal of one index: `open_journal` (store/object_journal.py) picks the file journal for a local
    directory, the object journal for an index on object storage. A job's `end_offset` orders it: the
    manifest's `journal_offset` is the end offset of the last job applied, and `jobs(after_offset)` yields
    the jobs past it."""

    def __init__(self) -> None:
        self._index: dict[str, Job] = {}
        self._indexed_to = 0
        self._index_lock = threading.Lock()

    @abstractmethod
    def append(self, request: Request) -> Job:
        """Durably record one job (checked against the input rules first: InputError naming the field);
        returns only once the job outlives a crash: a 202 means durable."""

    @abstractmethod
    def jobs(self, after_offset: int = 0) -> Iterator[Job]:
        """Complete jobs past `after_offset` (a job's end offset, or 0 for all), in order."""

    @abstractmethod
    def mark_failed(self, job_id: str, error: str) -> None:
        """Record a job the updater could not apply (it is skipped from then on), with a bounded error."""

    @abstractmethod
    def failed(self) -> dict[str, str]:
        """The failed jobs' errors by job id."""

    @abstractmethod
    def set_running(self, job_ids: list[str]) -> None:
        """The jobs the updater is applying now (advisory, for `GET /v1/jobs`)."""

    @abstractmethod
    def running(self) -> set[str]:
        """What `set_running` last recorded (empty when nothing readable was)."""

    def find(self, job_id: str) -> Job | None:
        """The job with this id, without its payload; jobs are read once, later calls read only what was
        appended since."""
        with self._index_lock:
            for job in self.jobs(self._indexed_to):
                # Status needs no documents: the index stays small however much text was journaled.
                self._index[job.job_id] = Job(job.job_id, None, job.end_offset, job.accepted_at, job.op)
                self._indexed_to = job.end_offset
            return self._index.get(job_id)

    def holds_after(self, doc_id: str, applied_offset: int, held: bool) -> bool:
        """Whether the document is held once the jobs after `applied_offset` are applied, given whether the
        version at that offset holds it (`held`): a queued insert counts, a queued delete removes; failed
        jobs change nothing."""
        failed = self.failed()
        for job in self.jobs(applied_offset):
            if job.job_id in failed:
                continue
            if isinstance(job.request, InsertDocuments) and any(d.id == doc_id for d in job.request.documents):
                held = True
            elif isinstance(job.request, DeleteDocuments) and doc_id in job.request.ids:
                held = False
        return held

    def pending(self, applied_offset: int) -> int:
        """How many well-formed jobs after `applied_offset` are not applied yet (failed ones excluded)."""
        failed = self.failed()
        return sum(1 for job in self.jobs(applied_offset) if job.op != "invalid" and job.job_id not in failed)

    def status(self, job: Job, manifest: Manifest | None) -> tuple[str, str | None]:
        """(`queued`|`running`|`done`|`failed`, error) of a job in the serving version (None: none yet). Done
        once the version's offset passed it and no document of it waits for slices (`chunks_pending`)."""
        failed = self.failed()
        if job.job_id in failed:
            return "failed", failed[job.job_id]
        if manifest is not None and manifest.journal_offset >= job.end_offset:
            unfinished = any(p.job_id == job.job_id for p in manifest.chunks_pending)
            return ("running", None) if unfinished else ("done", None)
        return ("running" if job.job_id in self.running() else "queued"), None


class FileJournal(Journal):
    """A local index's journal: one JSON line per job in `<index>/journal/journal.jsonl`, a job's offset the
    byte offset just past its line, appends serialised across processes by an advisory lock."""

    def __init__(self, index_dir: str | Path) -> None:
        super().__init__()
        self.path = Path(index_dir) / "journal" / "journal.jsonl"

    def append(self, request: Request) -> Job:
        """Returns only after the line and its directory entry are on disk."""
        payload = request.payload()
        check_payload(request.op, payload)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        job_id = uuid.uuid4().hex
        accepted_at = time.time()
        line = record(job_id, request.op, accepted_at, payload) + b"\n"
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
        return Job(job_id, request, end, accepted_at, request.op)

    def jobs(self, after_offset: int = 0) -> Iterator[Job]:
        """The lines starting at or after byte `after_offset`; a torn last line (a crash mid-append, never
        acknowledged) is skipped."""
        if not self.path.is_file():
            return
        with self.path.open("rb") as fh:
            fh.seek(after_offset)
            offset = after_offset
            for raw in fh:
                offset += len(raw)
                if not raw.endswith(b"\n"):
                    return
                yield parse_job(raw, offset)

    @property
    def _failed_path(self) -> Path:
        return self.path.parent / "failed.jsonl"

    @property
    def _running_path(self) -> Path:
        return self.path.parent / "running.json"

    def mark_failed(self, job_id: str, error: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._failed_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"job_id": job_id, "error": bounded_error(error)}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def failed(self) -> dict[str, str]:
        if not self._failed_path.is_file():
            return {}
        out = {}
        for line in self._failed_path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
                out[str(row["job_id"])] = str(row["error"])
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line (a crash mid-write): that job is retried
        return out

    def set_running(self, job_ids: list[str]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._running_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(job_ids))
        os.replace(tmp, self._running_path)

    def running(self) -> set[str]:
        try:
            return set(json.loads(self._running_path.read_text()))
        except (OSError, ValueError):
            return set()


def record(job_id: str, op: Op, accepted_at: float, payload: dict[str, Any]) -> bytes:
    """A job as stored: one compact JSON object (a file journal's line, an object journal's object)."""
    return json.dumps({"job_id": job_id, "op": op, "accepted_at": accepted_at, **payload},
                      ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def parse_job(raw: bytes, offset: int) -> Job:
    """One stored job as a Job ending at `offset`; one that is not a well-formed job (written by hand, or by a
    version without the input rules) becomes an `invalid` job, which the updater marks failed and moves past."""
    try:
        rec = json.loads(raw)
        job_id, op, accepted_at = str(rec.pop("job_id")), rec.pop("op"), float(rec.pop("accepted_at"))
        request = request_of(op, rec)
        return Job(job_id, request, offset, accepted_at, request.op)
    except (ValueError, KeyError, TypeError, AttributeError, InputError) as exc:
        reason = bounded_error(str(exc)) if isinstance(exc, InputError) else "not a well-formed job"
        return Job(_job_id(raw) or f"offset-{offset}", Malformed(reason), offset, 0.0, "invalid")


def _job_id(raw: bytes) -> str | None:
    """The job id of a malformed line when it has a well-formed one (the client may poll it)."""
    try:
        job_id = json.loads(raw).get("job_id")
    except (ValueError, AttributeError):
        return None
    return job_id if isinstance(job_id, str) and _JOB_ID.match(job_id) else None
