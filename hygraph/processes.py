"""Process liveness and file locks, for the lock and lease files of the snapshot store and the managed Milvus
server."""

from __future__ import annotations

import fcntl
import hashlib
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def pid_alive(pid: int) -> bool:
    """True while `pid` exists (a process owned by another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pid_space() -> str:
    """This machine's boot and pid namespace ("" where the system does not say): two processes whose spaces
    are equal see the same pids, so one can tell whether the other's pid still names it. A hostname is not
    enough (two machines, or two containers of one pod name, may share one)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
        # A /proc mounted for another pid namespace (`unshare --pid` without a new /proc) shows that namespace's
        # pids: `stat` would read another process's start time, so nothing here can be told for certain.
        if os.readlink("/proc/self") != str(os.getpid()):
            return ""
    except OSError:
        return ""
    return hashlib.blake2b(f"{boot}/{namespace}".encode(), digest_size=6).hexdigest()


def stat(pid: int) -> tuple[str, int] | None:
    """Process `pid`'s state letter and its start time in clock ticks since boot (None: no such process, or no
    /proc). The start time and the pid name one process, where a pid alone may since name another."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: the fields after it follow its last ")".
    fields = text[text.rfind(")") + 2:].split()
    return (fields[0], int(fields[19])) if len(fields) >= 20 else None


def certainly_dead(space: str, pid: int, started: int | None) -> bool:
    """Whether process `pid` of the pid space `space` (`pid_space` where it ran) has ended, for certain: only
    from within the same space; where its start time was recorded, also when the pid names another process
    since."""
    if not space or space != pid_space() or pid == os.getpid():
        return False
    if not pid_alive(pid):
        return True
    now = stat(pid)
    if now is None:
        return False  # no /proc to tell a reused pid by (or it ended just now: the next look sees it)
    state, ticks = now
    return state == "Z" or (started is not None and ticks != started)  # a zombie only waits to be reaped


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created, with its directory, if absent) between processes, and between
    threads that each enter this (each opens its own file description)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
