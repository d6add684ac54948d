"""The listening sockets of process trees, for the loopback-only checks."""

from __future__ import annotations

import psutil

from hygraph.runtime.loopback import is_loopback


def listening_sockets(roots: list[psutil.Process]) -> list[tuple[str, int, str]]:
    """(address, port, process name) of every TCP socket in LISTEN state owned by `roots` or a descendant."""
    pids = set()
    for root in roots:
        pids.add(root.pid)
        pids.update(p.pid for p in root.children(recursive=True))
    found = set()
    for conn in psutil.net_connections(kind="inet"):
        if conn.status == psutil.CONN_LISTEN and conn.pid in pids:
            try:
                name = psutil.Process(conn.pid).name()
            except psutil.NoSuchProcess:
                continue
            found.add((conn.laddr.ip, conn.laddr.port, name))
    return sorted(found)


def non_loopback(sockets: list[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    return [s for s in sockets if not is_loopback(s[0])]
