"""The managed `milvus-lite server`: one per data directory, shared by every local process.

Milvus Lite lets only one process open a data file, so the first hygraph process that
needs it starts the gRPC server on 127.0.0.1 and records its port in `server.json`;
later processes (a second CLI, Ray workers, Serve replicas) attach by URI. Each
process registers a client file; the last one to leave stops the server, so two
`hygraph query` runs can share an index and `hygraph serve` leaves no orphan behind.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from hygraph.errors import StoreUnavailable
from hygraph.processes import pid_alive

START_TIMEOUT_S = 30.0

# pymilvus pings every 10 s even with no call in flight; the Lite server keeps gRPC's default
# policy (at most one ping per 5 minutes without data) and answers a client that sat idle
# through a long build stage with GOAWAY "too_many_pings", after which that client could not
# reconnect. A loopback server needs no keepalive while nothing is in flight.
CLIENT_GRPC_OPTIONS = {"grpc.keepalive_permit_without_calls": False}


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _executable() -> str:
    beside = Path(sys.executable).with_name("milvus-lite")
    return str(beside) if beside.exists() else (shutil.which("milvus-lite") or "milvus-lite")


def _reap(pid: int) -> None:
    """Collect the server's exit status if this process started it; otherwise init reaps it."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return


class LiteServer:
    """Attach to, or start, the Milvus Lite server of `data_dir`; `uri` is what clients connect to."""

    def __init__(self, data_dir: str | os.PathLike[str], host: str = "127.0.0.1", port: int = 0) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self.port = port
        self.pid = 0
        self._client_file: Path | None = None

    @property
    def uri(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def _state(self) -> Path:
        return self.data_dir / "server.json"

    def _live_clients(self) -> list[Path]:
        clients = self.data_dir / "clients"
        live = []
        for f in clients.glob("*") if clients.is_dir() else []:
            if f.name.isdigit() and pid_alive(int(f.name)):
                live.append(f)
            else:
                f.unlink(missing_ok=True)
        return live

    def start(self) -> "LiteServer":
        with _locked(self.data_dir / "server.lock"):
            state = json.loads(self._state.read_text()) if self._state.is_file() else None
            if state and pid_alive(state["pid"]) and _listening(state["host"], state["port"]):
                self.host, self.port, self.pid = state["host"], state["port"], state["pid"]
            else:
                self._spawn()
            self._client_file = self.data_dir / "clients" / str(os.getpid())
            self._client_file.parent.mkdir(parents=True, exist_ok=True)
            self._client_file.touch()
        atexit.register(self.stop)
        return self

    def _spawn(self) -> None:
        port = self.port or _free_port(self.host)
        log = (self.data_dir / "server.log").open("ab")
        # Own session: a Ctrl-C aimed at one client must not kill the server others share.
        proc = subprocess.Popen(
            [_executable(), "server", "--data-dir", str(self.data_dir / "data"), "--host", self.host,
             "--port", str(port)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _listening(self.host, port):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise StoreUnavailable(
                    f"milvus-lite server did not start on {self.host}:{port} (see {self.data_dir / 'server.log'})")
            time.sleep(0.1)
        self.port, self.pid = port, proc.pid
        tmp = self._state.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pid": proc.pid, "host": self.host, "port": port}))
        os.replace(tmp, self._state)

    def stop(self) -> None:
        """Leave; the last client out terminates the server and waits for it to exit."""
        if self._client_file is None:
            return
        with _locked(self.data_dir / "server.lock"):
            self._client_file.unlink(missing_ok=True)
            self._client_file = None
            if self._live_clients() or not self.pid or not pid_alive(self.pid):
                return
            os.kill(self.pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while pid_alive(self.pid) and time.monotonic() < deadline:
                _reap(self.pid)
                time.sleep(0.05)
            if pid_alive(self.pid):
                os.kill(self.pid, signal.SIGKILL)
                _reap(self.pid)
            self._state.unlink(missing_ok=True)
