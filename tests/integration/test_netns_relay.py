"""The network-namespace relay (`hygraph/backends/vectorstore/netns_relay.py`) with a real server.

The server is a small echo server started by the relay inside a new private network namespace
(`unshare -rn`); the test talks to it only through the host-side socket it handed the relay.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from hygraph.backends.vectorstore import netns
from tests.sockets import exposed, listening

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(bool(netns.unavailable()), reason=f"no private network namespace: "
                                                                  f"{netns.unavailable()}")]

INSIDE = 7000
# Echoes each connection until EOF, then half-closes; `SIGTERM` exits with status 3 a second later.
ECHO = f"""
import signal, socket, sys, threading, time
def stop(*args):
    time.sleep(1)
    sys.exit(3)
signal.signal(signal.SIGTERM, stop)
srv = socket.socket()
srv.bind(("127.0.0.1", {INSIDE}))
srv.listen(512)
print("echo listening", flush=True)
def echo(c):
    with c:
        while data := c.recv(1 << 16):
            c.sendall(data)
        c.shutdown(socket.SHUT_WR)
while True:
    c, _ = srv.accept()
    threading.Thread(target=echo, args=(c,), daemon=True).start()
"""


class Relayed:
    """The relay with a command in a new namespace; `port` is its host side on 127.0.0.1."""

    def __init__(self, tmp: Path, command: list[str]) -> None:
        listener = netns.loopback_listener()
        self.port = listener.getsockname()[1]
        self.log = tmp / "relay.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(netns.relay_command([(listener, INSIDE)], command), stdout=out,
                                         stderr=subprocess.STDOUT, pass_fds=[listener.fileno()],
                                         start_new_session=True)
        listener.close()

    def child(self, timeout: float = 10) -> psutil.Process:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            kids = psutil.Process(self.proc.pid).children()
            if kids:
                return kids[0]
            time.sleep(0.02)
        raise AssertionError(f"the relay started no child; log: {self.log.read_text()[-2000:]}")

    def wait_listening(self, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while b"echo listening" not in self.log.read_bytes():
            assert time.monotonic() < deadline and self.proc.poll() is None, self.log.read_text()[-2000:]
            time.sleep(0.02)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def echo(tmp_path):
    relayed = Relayed(tmp_path, [sys.executable, "-c", ECHO])
    relayed.wait_listening()
    yield relayed
    relayed.close()


def _round_trip(port: int, payload: bytes, chunk: int = 1 << 16) -> bytes:
    """Send everything, half-close, read until EOF, concurrently (a large echo would fill both
    directions' buffers if sending waited for nothing to be read)."""
    got: list[bytes] = []
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        reader = threading.Thread(target=lambda: got.extend(iter(lambda: s.recv(1 << 20), b"")))
        reader.start()
        view = memoryview(payload)
        for start in range(0, len(payload), chunk):
            s.sendall(view[start:start + chunk])
        s.shutdown(socket.SHUT_WR)
        reader.join(60)
        assert not reader.is_alive()
    return b"".join(got)


def test_many_concurrent_connections_half_close_and_large_payloads(echo):
    payloads = [os.urandom(n) for n in (0, 1, 17, 65536, 1 << 20, 300_000)] * 20  # 120 connections
    with ThreadPoolExecutor(64) as pool:
        echoed = list(pool.map(lambda p: _round_trip(echo.port, p), payloads))
    assert [hashlib.sha256(e).digest() for e in echoed] == [hashlib.sha256(p).digest() for p in payloads]
    big = os.urandom(64 << 20)  # both directions at once, far beyond every socket buffer
    t0 = time.monotonic()
    assert hashlib.sha256(_round_trip(echo.port, big, 1 << 20)).digest() == hashlib.sha256(big).digest()
    print(f"64 MiB echoed through the relay in {time.monotonic() - t0:.2f} s")


def test_a_half_closed_connection_still_receives(echo):
    with socket.create_connection(("127.0.0.1", echo.port), timeout=10) as s:
        s.sendall(b"ping")
        s.shutdown(socket.SHUT_WR)  # our side is done; the reply must still arrive, then EOF
        data = b""
        while chunk := s.recv(100):
            data += chunk
    assert data == b"ping"


def test_the_only_socket_seen_from_the_host_is_the_relayed_one_on_loopback(echo):
    socks = listening(echo.proc.pid)
    assert [(s.ip, s.port) for s in socks] == [("127.0.0.1", echo.port)] and not exposed(socks)
    echo.child()
    for addr in ("127.0.0.1", *_outside_addresses()):  # the port inside is no port of the host
        with pytest.raises(OSError):
            socket.create_connection((addr, INSIDE), timeout=2).close()


def test_a_connection_before_the_server_listens_is_closed(tmp_path):
    relayed = Relayed(tmp_path, [sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        relayed.child()
        with socket.create_connection(("127.0.0.1", relayed.port), timeout=10) as s:
            assert s.recv(10) == b""  # at once, not after the timeout: a client retries elsewhere
    finally:
        relayed.close()


def test_sigterm_is_forwarded_and_the_relay_exits_with_the_servers_status(echo):
    child = echo.child()
    echo.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    # While the server shuts down, new clients are refused rather than left waiting.
    assert echo.proc.poll() is None and child.is_running()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", echo.port), timeout=2).close()
    assert echo.proc.wait(10) == 3  # the echo server's own exit status on SIGTERM
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", echo.port), timeout=2).close()


def test_the_relay_exits_when_the_server_exits(echo):
    with socket.create_connection(("127.0.0.1", echo.port), timeout=10) as open_conn:
        echo.child().kill()
        assert echo.proc.wait(10) == 128 + signal.SIGKILL
        assert open_conn.recv(10) == b""  # connections in flight are closed, not left hanging
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", echo.port), timeout=2).close()


def test_sigkill_of_the_relay_takes_the_server_down(echo):
    child = echo.child()
    echo.proc.kill()
    echo.proc.wait(10)
    psutil.wait_procs([child], timeout=10)
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE


@pytest.mark.skipif(not psutil.net_if_addrs().keys() - {"lo"}, reason="this namespace has only loopback")
def test_the_relay_refuses_to_run_outside_a_private_namespace(tmp_path):
    out = subprocess.run([sys.executable, "-I", "-S", str(netns.RELAY), "--", "true"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 2 and "not in a private network namespace" in out.stderr


def _outside_addresses() -> list[str]:
    """This machine's addresses other than loopback (link-local IPv6 left out: it needs a scope)."""
    return [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
            if a.family in (socket.AF_INET, socket.AF_INET6) and not a.address.startswith(("127.", "::1", "fe80"))]
