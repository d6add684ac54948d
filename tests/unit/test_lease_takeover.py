"""A writer lease whose holder certainly died on this machine is taken at once, not a term later; any doubt
(another machine or pid space, a live pid, a record without the process's identity) waits for the expiry."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from hygraph.errors import StoreError
from hygraph.processes import pid_space, stat
from hygraph.store import lease
from hygraph.store.lease import LeaseHeld, WriterLease
from hygraph.store.objects import LocalObjects


def _dead_pid() -> tuple[int, int]:
    """The pid and start ticks of a process that ran and was reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    started = stat(proc.pid)
    assert started is not None
    proc.kill()
    proc.wait()
    return proc.pid, started[1]


def _put(objects: LocalObjects, holder: str, term_s: float = 60.0, version: int = 4) -> None:
    record = {"holder": holder, "expires": time.time() + term_s, "version": version}
    assert objects.put_if_absent(lease.key(1), json.dumps(record).encode())


def _holder(pid: int, started: int | str, space: str | None = None, host: str | None = None) -> str:
    return f"{host or socket.gethostname()}:{pid}:abcd1234:{pid_space() if space is None else space}:{started}"


@pytest.fixture
def objects(tmp_path) -> LocalObjects:
    return LocalObjects(tmp_path)


def test_a_dead_holder_on_this_machine_is_taken_over_at_once(objects):
    pid, started = _dead_pid()
    _put(objects, _holder(pid, started))
    seen: list[lease.LeaseRecord | None] = []
    contender = WriterLease(objects, term_s=5.0)
    t0 = time.monotonic()
    assert contender.acquire(lambda previous: seen.append(previous) or 5, wait_s=0.0) == 5
    assert time.monotonic() - t0 < 1.0 and contender.epoch == 2
    assert seen[0] is not None and seen[0].version == 4  # numbered past the version the dead holder wrote
    contender.check()
    contender.release()


def test_a_reused_pid_is_told_by_its_start_time(objects):
    """The record names a live pid (this test's parent) with another start time: the pid was reused."""
    ppid = os.getppid()
    started = stat(ppid)
    assert started is not None
    _put(objects, _holder(ppid, started[1] + 1))
    contender = WriterLease(objects, term_s=5.0)
    assert contender.acquire(lambda previous: 1, wait_s=0.0) == 1
    contender.release()


@pytest.mark.parametrize("why", ["alive", "other space", "no start time", "older format", "own process"])
def test_a_holder_not_certainly_dead_keeps_its_term(objects, why):
    pid, started = _dead_pid()
    live = stat(os.getppid())
    assert live is not None
    holder = {"alive": _holder(os.getppid(), live[1]),
              "other space": _holder(pid, started, space="0123456789ab"),
              # Alive with an unknown start time: the pid may be the holder's, it is not certainly dead.
              "no start time": _holder(os.getppid(), ""),
              "older format": f"{socket.gethostname()}:{pid}:abcd1234",
              "own process": _holder(os.getpid(), stat(os.getpid())[1] + 1)}[why]  # type: ignore[index]
    _put(objects, holder)
    with pytest.raises(LeaseHeld, match="holds the index's writer lease"):
        WriterLease(objects, term_s=5.0).acquire(lambda previous: 1, wait_s=0.2)


def test_a_zombie_holder_is_dead(objects):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    started = stat(proc.pid)
    deadline = time.monotonic() + 10
    while (now := stat(proc.pid)) is not None and now[0] != "Z" and time.monotonic() < deadline:
        time.sleep(0.02)  # not reaped: it stays a zombie until `wait`
    assert started is not None and stat(proc.pid)[0] == "Z"  # type: ignore[index]
    _put(objects, _holder(proc.pid, started[1]))
    contender = WriterLease(objects, term_s=5.0)
    assert contender.acquire(lambda previous: 1, wait_s=0.0) == 1
    contender.release()
    proc.wait()


def test_the_taken_over_holder_is_fenced(objects):
    """Same semantics as after an expiry: a holder that was taken over cannot publish."""
    pid, started = _dead_pid()
    first = WriterLease(objects, term_s=60.0)
    first.acquire(lambda previous: 1)
    lease._RENEWER.remove(first)
    # Its record rewritten as if a process now dead had written it (a lease object of this process cannot be).
    objects.put(lease.key(first.epoch), json.dumps({"holder": _holder(pid, started),  # type: ignore[arg-type]
                                                    "expires": time.time() + 60, "version": 1}).encode())
    second = WriterLease(objects, term_s=60.0)
    assert second.acquire(lambda previous: 2, wait_s=0.0) == 2
    with pytest.raises(StoreError, match="taken over"):
        first.check()
    second.release()


def test_a_contender_says_who_holds_the_lease_while_it_waits(objects, monkeypatch):
    monkeypatch.setattr(lease, "WAIT_NOTE_S", 0.3)
    _put(objects, "elsewhere:1:abcd1234", term_s=1.2)
    lines: list[str] = []
    contender = WriterLease(objects, term_s=5.0)
    assert contender.acquire(lambda previous: 1, waiting=lines.append) == 1
    contender.release()
    assert 2 <= len(lines) <= 6, lines  # one as the wait starts, then one per WAIT_NOTE_S
    assert "waiting for the writer lease" in lines[0] and "elsewhere:1:abcd1234 holds it until" in lines[0]


def test_a_build_waiting_for_the_writer_lease_says_so(tmp_path, monkeypatch):
    from hygraph.store.versions import IndexStore

    monkeypatch.setattr(lease, "WAIT_NOTE_S", 0.3)
    store = IndexStore(tmp_path, create=True)
    _put(store.objects, "elsewhere:1:abcd1234", term_s=0.8)  # type: ignore[arg-type]
    lines: list[str] = []
    with store.begin(waiting=lines.append) as w:
        assert w.version == 5  # past the version the previous holder wrote
    assert lines and "elsewhere:1:abcd1234 holds it until" in lines[0]


def test_a_holder_names_its_process():
    host, pid, nonce, space, started = lease._holder().split(":")
    assert (host, int(pid), space) == (socket.gethostname(), os.getpid(), pid_space())
    assert int(started) == stat(os.getpid())[1] and len(nonce) == 8  # type: ignore[index]


def test_a_proc_of_another_pid_namespace_tells_nothing(objects, monkeypatch):
    """Where /proc shows another namespace's pids (its /proc/self is not this process's pid), the start time read
    there could be another process's: no holder counts as dead, so its term is waited for."""
    pid, started = _dead_pid()
    _put(objects, _holder(pid, started), term_s=60.0)
    real = os.getpid()
    from hygraph import processes

    monkeypatch.setattr(processes.os, "getpid", lambda: real + 1)
    assert pid_space() == ""
    with pytest.raises(LeaseHeld):
        WriterLease(objects, term_s=5.0).acquire(lambda previous: 5, wait_s=0.0)
