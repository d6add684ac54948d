"""The leases of an index: one writer at a time, and the versions readers serve, across processes and machines,
with no lock service.

The lease is a numbered series of objects `leases/writer/<epoch>.json`, each `{"holder", "expires",
"version"}`. The newest epoch is the lease. Taking it means writing epoch E+1 with `put_if_absent` once epoch
E has expired (or was released: `expires` 0): of several contenders only one creates that key. The holder
renews by rewriting its own epoch with a later `expires` (every third of the term, from one thread per
process), and
records the version it is writing, so that the next holder numbers its version past it and garbage
collection spares that version's files. Before publishing, the holder checks that no newer epoch exists
(fencing): a holder that stalled past its term and was taken over gets a StoreError instead of publishing.

Readers hold leases too: each process serving a version of the index keeps `leases/readers/<holder>.json`,
`{"holder", "expires", "version"}`, renewed by the same thread, naming the version it serves. Garbage
collection removes no version a live reader lease names (`IndexStore.gc`), so a replica on another node never
finds its version's objects gone; a reader that stalled past its term has lost that promise, and says so
(`ReaderLease.lapsed`) so that it reloads the current version before it reads again.

The updater of an index on object storage holds a lease of the same kind, `leases/updater/<epoch>.json`, for
as long as it runs (a local index's updater locks a file instead): one updater applies the journal, on
whatever node.

`expires` is the holder's wall clock: the machines of one index must keep their clocks within a small
fraction of the term (NTP does); a contender never takes a lease before its expiry on its own clock, with one
exception: a holder that certainly died. `holder` is `host:pid:nonce:space:start` (space: the machine's boot
and pid namespace, start: the process's start time, hygraph/processes.py), so a contender that sees the same
pids (the same space) takes a live term at once when that pid is gone, a zombie, or names a process started
at another time: a killed `hygraph index` is rerun at once, not a term later. From any other machine, or for
a record without those fields (an older hygraph's), only the expiry counts. Taking it is the same
`put_if_absent` of the next epoch, and fencing is unchanged.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Callable

from hygraph.errors import StoreError
from hygraph.processes import certainly_dead, pid_space, stat
from hygraph.store.objects import Objects

log = logging.getLogger(__name__)

PREFIX = "leases/writer/"
UPDATER = "leases/updater/"
READERS = "leases/readers/"
DEFAULT_TERM_S = 30.0
WAIT_NOTE_S = 5.0  # at most one line per this many seconds while a contender waits (`WriterLease.acquire`)


@dataclass
class LeaseRecord:
    holder: str
    expires: float  # epoch seconds; 0: released
    version: int  # the index version the holder is writing

    def live(self, now: float | None = None) -> bool:
        return self.expires > (time.time() if now is None else now)

    def holder_dead(self) -> bool:
        """Whether the holder's process certainly ended (it ran in this process's pid space and is gone)."""
        parts = self.holder.split(":")
        if len(parts) != 5 or not parts[1].isdigit():
            return False
        return certainly_dead(parts[3], int(parts[1]), int(parts[4]) if parts[4].isdigit() else None)


class LeaseHeld(StoreError):
    """Another holder's term of the lease runs past the time a contender would wait."""


def key(epoch: int, prefix: str = PREFIX) -> str:
    return f"{prefix}{epoch:09d}.json"


def epochs(objects: Objects, prefix: str = PREFIX) -> list[int]:
    out = []
    for key in objects.list(prefix):
        name = key[len(prefix):]
        if name.endswith(".json") and name[:-5].isdigit():
            out.append(int(name[:-5]))
    return sorted(out)


def _read(objects: Objects, epoch: int, prefix: str) -> LeaseRecord | None:
    data = objects.get(key(epoch, prefix))
    if data is None:
        return None
    try:
        return LeaseRecord(**json.loads(data))
    except (ValueError, TypeError) as exc:
        raise StoreError(f"{objects.uri}/{key(epoch, prefix)}: not a lease record ({exc})") from None


def newest(objects: Objects, prefix: str = PREFIX) -> tuple[int, LeaseRecord | None]:
    """The newest epoch and its record ((0, None) before any writer)."""
    found = epochs(objects, prefix)
    return (found[-1], _read(objects, found[-1], prefix)) if found else (0, None)


class WriterLease:
    """One writer's hold on an index: `acquire`, `check` before publishing, `release` (the series under
    `prefix`: the writer lease, or the updater's)."""

    def __init__(self, objects: Objects, term_s: float = DEFAULT_TERM_S, prefix: str = PREFIX) -> None:
        self.objects, self.term_s, self.prefix = objects, term_s, prefix
        self.holder = _holder()
        self.epoch: int | None = None
        self.version = 0
        self.renewed = 0.0  # time.monotonic() of the last write
        self._put = threading.Lock()

    def acquire(self, number: Callable[[LeaseRecord | None], int], wait_s: float | None = None,
                waiting: Callable[[str], None] | None = None) -> int:
        """Take the lease, waiting while another live holder's term runs (at most `wait_s`, None: as long as it
        takes), for the version `number(previous holder's record or None)`; returns that version. `waiting` is
        told who holds it and until when, as the wait starts and every WAIT_NOTE_S while it lasts."""
        deadline = None if wait_s is None else time.monotonic() + wait_s
        noted = float("-inf")
        while True:
            epoch, record = newest(self.objects, self.prefix)
            now = time.time()
            if record is None or not record.live(now) or record.holder_dead():
                # Numbered before the lease is won: only a holder publishes, and the last one is done or fenced.
                self.version = number(record)
                if self.objects.put_if_absent(key(epoch + 1, self.prefix), self._record(now + self.term_s),
                                              durable=False):
                    self.epoch, self.renewed = epoch + 1, time.monotonic()
                    _RENEWER.add(self)
                    return self.version
                continue  # another contender took epoch + 1 first: read it
            until, kind = time.strftime("%H:%M:%S", time.localtime(record.expires)), self.prefix.split("/")[1]
            if deadline is not None and time.monotonic() >= deadline:
                raise LeaseHeld(f"{self.objects.uri}: another {kind} ({record.holder}) holds the index's {kind} "
                                f"lease until {until}")
            if waiting is not None and time.monotonic() - noted >= WAIT_NOTE_S:
                noted = time.monotonic()
                waiting(f"waiting for the {kind} lease of {self.objects.uri}: {record.holder} holds it until "
                        f"{until} ({record.expires - now:.0f} s left)")
            time.sleep(max(0.0, min(record.expires - now, self.term_s / 10, 1.0)))

    def _record(self, expires: float) -> bytes:
        return json.dumps(asdict(LeaseRecord(self.holder, expires, self.version))).encode()

    def _write(self, expires: float) -> None:
        with self._put:
            if self.epoch is not None:  # not after `release`: a late renewal must not revive the lease
                self.objects.put(key(self.epoch, self.prefix), self._record(expires), durable=False)
                self.renewed = time.monotonic()

    def renew(self) -> None:
        self._write(time.time() + self.term_s)

    def check(self) -> None:
        """StoreError unless this writer still holds the lease (no newer epoch was taken)."""
        epoch, record = newest(self.objects, self.prefix)
        if self.epoch is None or epoch != self.epoch:
            holder = record.holder if record is not None else "?"
            raise StoreError(f"{self.objects.uri}: this writer's lease (epoch {self.epoch}) was taken over by "
                             f"{holder} (epoch {epoch}) after it expired; version {self.version} is not published")

    def release(self) -> None:
        _RENEWER.remove(self)
        with self._put:
            if self.epoch is not None:
                self.objects.put(key(self.epoch, self.prefix), self._record(0.0), durable=False)
                self.epoch = None


def _holder() -> str:
    """`host:pid:nonce:space:start` (the module's docstring); space and start are empty where unknown."""
    own = stat(os.getpid())
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}:{pid_space()}:{own[1] if own else ''}"


class ReaderLease:
    """A reader's promise from garbage collection: `hold(version)` while serving it, `release` when done."""

    def __init__(self, objects: Objects, term_s: float = DEFAULT_TERM_S) -> None:
        self.objects, self.term_s = objects, term_s
        self.holder = _holder()
        self.key = f"{READERS}{self.holder.replace(':', '-')}.json"
        self.version: int | None = None
        self.expires = 0.0  # wall clock of the last record written
        self.renewed = 0.0  # time.monotonic() of the last write
        self._lapsed = False
        self.unwritable = False  # the store refused the lease: served without one
        self._put = threading.Lock()

    def hold(self, version: int) -> None:
        """Name `version` as the one this reader serves (before it reads it, so GC spares it from now on).

        A reader that may not write to the store (a read-only mount, read-only credentials) serves without a
        lease: GC spares its version only for `updates.gc_grace_s`, as before leases; that is logged once."""
        with self._put:
            self.version, self._lapsed = version, False
            if self.unwritable:
                return
            try:
                self._write_locked()
            except (StoreError, OSError) as exc:
                self.unwritable = True
                log.warning("%s: cannot write this reader's lease (%s); garbage collection spares the version it "
                            "serves only for updates.gc_grace_s", self.objects.uri, exc)
                return
        _RENEWER.add(self)

    def _write_locked(self) -> None:
        now = time.time()
        record = LeaseRecord(self.holder, now + self.term_s, self.version or 0)
        self.objects.put(self.key, json.dumps(asdict(record)).encode(), durable=False)
        self.expires, self.renewed = record.expires, time.monotonic()

    def renew(self) -> None:
        with self._put:
            if self.version is None or self._lapsed:
                return
            if time.time() > self.expires:
                # Renewing now would revive a promise GC may already have acted on: the reader reloads instead.
                self._lapsed = True
                return
            self._write_locked()

    @property
    def lapsed(self) -> bool:
        """Whether the term ran out before a renewal: GC may since have removed what the version named, so
        the reader must `hold` the current version (and load it) before it reads again."""
        return self.version is not None and not self.unwritable and (self._lapsed or time.time() > self.expires)

    def release(self) -> None:
        _RENEWER.remove(self)
        with self._put:
            if self.version is not None:
                self.version = None
                if not self.unwritable:
                    self.objects.delete(self.key)


def served_versions(objects: Objects, now: float | None = None) -> set[int]:
    """The versions live reader leases name; the records of lapsed ones are removed (their readers reload
    before reading again, and write a new record when they do)."""
    now = time.time() if now is None else now
    served: set[int] = set()
    for key in objects.list(READERS):
        data = objects.get(key)
        if data is None:
            continue
        try:
            record = LeaseRecord(**json.loads(data))
        except (ValueError, TypeError):
            raise StoreError(f"{objects.uri}/{key}: not a lease record") from None
        if record.live(now):
            served.add(record.version)
        else:
            objects.delete(key)
    return served


class _Renewer:
    """One thread per process renews every lease it holds, each every third of its term (a thread per
    lease would cost its start and join on every small update)."""

    def __init__(self) -> None:
        self._held: set[WriterLease | ReaderLease] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, held: WriterLease | ReaderLease) -> None:
        with self._lock:
            self._held.add(held)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="hygraph-lease", daemon=True)
                self._thread.start()

    def remove(self, held: WriterLease | ReaderLease) -> None:
        with self._lock:
            self._held.discard(held)

    def _run(self) -> None:
        while True:
            with self._lock:
                due = [h for h in self._held if time.monotonic() - h.renewed >= h.term_s / 3]
                wait = min((h.term_s / 10 for h in self._held), default=1.0)
            for held in due:
                try:
                    held.renew()
                except (StoreError, OSError) as exc:  # the next round retries; a writer checks its lease before
                    # publishing, a reader its term before reading
                    log.warning("renewing a lease of %s failed: %s", held.objects.uri, exc)
            time.sleep(min(wait, 1.0))


_RENEWER = _Renewer()
