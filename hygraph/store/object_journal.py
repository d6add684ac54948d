"""The journal of an index on object storage, and `open_journal`, which picks an index's journal.

Every key is under the index root (store/objects.py):
- `journal/jobs/<seq>.json` (12 digits): one job, the same JSON object a file journal's line holds. Its
  number is taken with `put_if_absent`: of two writers of the same number one wins and the other takes a
  later one, so the numbers are a total order, and a job is acknowledged only once its object is stored
  (on S3 a PUT that returned is durable). A writer takes number n only once n - 1 exists (it starts past a
  number it saw, and a lost race at n that lists no n, an S3 409 while another write of n is in flight, is
  retried at n), so the numbers have no gaps: once the updater has applied up to n, no job can still
  appear below it, and replay is exactly once. The job's end offset is seq + 1: the manifest's
  `journal_offset` means "applied up to" as it does for a file journal.
- `journal/next.json`: a hint of the next number, written every `HINT_EVERY` jobs, so that a new process
  lists only the tail of the journal before its first append (never more than an existing number + 1).
- `journal/failed/<job_id>.json`: a failed job's bounded error; `journal/running.json`: the jobs the
  updater is applying now (advisory).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
import uuid
from typing import Iterator

from hygraph.errors import StoreError
from hygraph.store.journal import FileJournal, Job, Journal, Request, bounded_error, check_payload, parse_job, record
from hygraph.store.objects import Objects, is_remote, open_objects

log = logging.getLogger("hygraph.journal")
JOBS = "journal/jobs/"
HINT = "journal/next.json"
FAILED = "journal/failed/"
RUNNING = "journal/running.json"
HINT_EVERY = 64
APPEND_WAIT_S = 30.0  # how long an append keeps racing (or waiting on an S3 409) before it gives up
_JOB_KEY = re.compile(r"^journal/jobs/(\d{12})\.json$")


def job_key(seq: int) -> str:
    return f"{JOBS}{seq:012d}.json"


class ObjectJournal(Journal):
    def __init__(self, objects: Objects) -> None:
        super().__init__()
        self.objects = objects
        self._next: int | None = None  # the number this process tries first: one past its last append
        self._append_lock = threading.Lock()

    def append(self, request: Request) -> Job:
        """Returns once the job's object is stored under the first free number."""
        payload = request.payload()
        check_payload(request.op, payload)
        job_id = uuid.uuid4().hex
        accepted_at = time.time()
        data = record(job_id, request.op, accepted_at, payload)
        deadline = time.monotonic() + APPEND_WAIT_S
        with self._append_lock:
            seq = self._tail(self._hint()) if self._next is None else self._next
            while not self.objects.put_if_absent(job_key(seq), data):
                # A PUT retried after its answer was lost is refused (412) by the object it wrote itself: that
                # object holds this job's uuid, so it is ours, and taking seq + 1 would record the job twice.
                if self.objects.get(job_key(seq)) == data:
                    break
                after = self._tail(seq)  # lost the race: past everything appended since
                if after == seq:  # no object at seq yet: another write of it is in flight (S3 409)
                    if time.monotonic() > deadline:
                        raise StoreError(f"{self.objects.uri}/{job_key(seq)}: the job number stays contended "
                                         f"for {APPEND_WAIT_S:.0f} s; nothing was recorded")
                    time.sleep(0.05)
                seq = after
            self._next = seq + 1
        if seq % HINT_EVERY == 0:
            self._write_hint(seq + 1)
        return Job(job_id, request, seq + 1, accepted_at, request.op)

    def _hint(self) -> int:
        data = self.objects.get(HINT)
        try:
            return max(0, int(json.loads(data)["next"])) if data is not None else 0
        except (ValueError, KeyError, TypeError):
            return 0  # a hint only: listing from the start finds the tail too

    def _write_hint(self, next_seq: int) -> None:
        try:
            self.objects.put(HINT, json.dumps({"next": next_seq}).encode(), durable=False)
        except StoreError as exc:  # the job is stored: failing its 202 now would make the client send it twice
            log.warning("journal hint not written (the next new writer lists a longer tail): %s", exc)

    def _seqs(self, from_seq: int) -> Iterator[tuple[int, str]]:
        """(number, key) of the job objects numbered `from_seq` or more, in order."""
        start = job_key(from_seq - 1) if from_seq > 0 else ""
        for key in self.objects.list(JOBS, start_after=start):
            if m := _JOB_KEY.match(key):
                yield int(m.group(1)), key

    def _tail(self, from_seq: int) -> int:
        """The first free number at or after `from_seq` (numbers have no gaps: one past the last listed)."""
        last = from_seq - 1
        for seq, _ in self._seqs(from_seq):
            last = seq
        return last + 1

    def jobs(self, after_offset: int = 0) -> Iterator[Job]:
        """The jobs numbered `after_offset` or more (an end offset is the number + 1), listed from there."""
        for seq, key in self._seqs(max(0, after_offset)):
            data = self.objects.get(key)
            if data is not None:  # job objects are never removed; a key listed and gone was not a job
                yield parse_job(data, seq + 1)

    def mark_failed(self, job_id: str, error: str) -> None:
        self.objects.put(f"{FAILED}{job_id}.json",
                         json.dumps({"job_id": job_id, "error": bounded_error(error)}).encode())

    def failed(self) -> dict[str, str]:
        out = {}
        for key in self.objects.list(FAILED):
            data = self.objects.get(key)
            try:
                row = json.loads(data) if data is not None else None
                out[str(row["job_id"])] = str(row["error"])
            except (ValueError, KeyError, TypeError):
                continue  # not a failure record (written by hand): that job is not failed
        return out

    def set_running(self, job_ids: list[str]) -> None:
        self.objects.put(RUNNING, json.dumps(job_ids).encode(), durable=False)

    def running(self) -> set[str]:
        data = self.objects.get(RUNNING)
        try:
            return set(json.loads(data)) if data is not None else set()
        except (ValueError, TypeError):
            return set()


def open_journal(index_dir: str | os.PathLike[str], objects: Objects | None = None) -> Journal:
    """The journal of the index at `index_dir`: the file journal of a local directory (its format and byte
    offsets unchanged), the object journal of `s3://bucket/prefix` (on `objects` when given: the caller's
    open store)."""
    if is_remote(index_dir):
        return ObjectJournal(objects if objects is not None else open_objects(index_dir))
    return FileJournal(index_dir)
