"""Listening sockets of a process tree, for tests that check what a service exposes.

`listening(pid)` walks the process and all its descendants (psutil) and returns every TCP socket
in LISTEN state and every bound UDP socket as `Listener(pid, name, ip, port)`. `exposed(...)` keeps
those not bound to a loopback address (`0.0.0.0` and `::` count as exposed: they accept from every
interface). Reusable for the whole-service check: pass `hygraph serve`'s pid, plus the pid recorded
in `<index>/milvus/server.json` (the managed Milvus server runs in its own session, so it is not a
descendant of the process that started it).

Only sockets of this (the host's) network namespace are listed: psutil matches a process's socket
descriptors against this namespace's socket tables. An isolated embedded Milvus server's own
sockets are in its private namespace, unreachable from here and invisible; its relay's listener,
created in this namespace, is listed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import psutil

from hygraph.runtime.loopback import is_loopback


@dataclass(frozen=True)
class Listener:
    pid: int
    name: str
    ip: str
    port: int
    kind: str  # "tcp" or "udp"

    def __str__(self) -> str:
        host = f"[{self.ip}]" if ":" in self.ip else self.ip
        return f"{host}:{self.port} ({self.kind}, pid {self.pid} {self.name})"


def tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def listening(*pids: int) -> list[Listener]:
    """Every listening TCP socket and bound UDP socket of the given processes and their descendants."""
    out: list[Listener] = []
    seen: set[int] = set()
    for pid in pids:
        for proc in tree(pid):
            if proc.pid in seen:
                continue
            seen.add(proc.pid)
            try:
                conns = proc.net_connections(kind="inet")
                name = proc.name()
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
            for c in conns:
                if not c.laddr:
                    continue
                if c.type == 1 and c.status == psutil.CONN_LISTEN:  # SOCK_STREAM
                    out.append(Listener(proc.pid, name, c.laddr.ip, c.laddr.port, "tcp"))
                elif c.type == 2 and not c.raddr:  # SOCK_DGRAM, bound and unconnected
                    out.append(Listener(proc.pid, name, c.laddr.ip, c.laddr.port, "udp"))
    return sorted(out, key=lambda l: (l.port, l.ip))


def exposed(listeners: Iterable[Listener]) -> list[Listener]:
    """The listeners that accept connections from outside this machine."""
    return [l for l in listeners if not is_loopback(l.ip.split("%", 1)[0])]
