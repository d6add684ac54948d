"""The managed local Milvus engine: one server process per data directory, shared by every local process.

Both local engines (the Milvus standalone server of the `milvus` package, `milvus_server.py`, and
Milvus Lite, `lite_server.py`) run under this one lifecycle:

- one server per `<index_dir>/milvus/` directory, recorded in `server.json` (`engine`, `pid`: the
  server process to kill, `host`, `port`, `status`, and the engine's own fields);
- an exclusive file lock (`server.lock`) around every start and stop;
- the first process that needs the server starts it in its own session (a Ctrl-C aimed at one
  client must not kill the server others share) on ports chosen free at start;
- each process holds a lease file `clients/<pid>`; the last one to leave stops the server with
  SIGTERM, then SIGKILL after a bounded grace;
- a dead, unreachable or half-started server is replaced by the next connect;
- a watchdog started with the server (watchdog.py) stops it once every client died without leaving.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Iterable

from hygraph.errors import StoreError, StoreUnavailable
from hygraph.processes import locked, pid_alive

STOP_GRACE_S = 10.0
EXITED_WHILE_STARTING = "exited while starting"  # the StoreUnavailable of a server that died before it answered

# pymilvus pings every 10 s even with no call in flight; Milvus Lite keeps gRPC's default policy
# (at most one ping per 5 minutes without data) and answers a client that sat idle through a long
# build stage with GOAWAY "too_many_pings", after which that client could not reconnect. A loopback
# server needs no keepalive while nothing is in flight.
CLIENT_GRPC_OPTIONS = {"grpc.keepalive_permit_without_calls": False}


def listening(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def free_ports(n: int, avoid: Iterable[int] = ()) -> list[int]:
    """`n` distinct ports that are free on every interface (a server that binds all of them, as
    Milvus 2.3.5's do, needs that; a loopback one needs less). The probe sockets bind the wildcard
    address without listening, and all are held until all are chosen."""
    avoid = set(avoid)
    chosen: list[int] = []
    with ExitStack() as held:
        for _ in range(n + len(avoid) + 64):
            if len(chosen) == n:
                break
            s = held.enter_context(socket.socket())
            s.bind(("0.0.0.0", 0))
            port = int(s.getsockname()[1])
            if port not in avoid:
                chosen.append(port)
    if len(chosen) < n:
        raise OSError(f"could not find {n} free ports")
    return chosen


def reap(pid: int) -> None:
    """Collect the server's exit status if this process started it; otherwise init reaps it."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return


class ManagedServer:
    """Attach to, or start, the engine's server for `data_dir`; `uri` (and `token`) is what clients use.

    Subclasses name the engine and implement `_launch` and, if they need to, `_answering`,
    `_wait_ready` and `_after_exit`.
    """

    engine = "?"
    title = "Milvus"

    def __init__(self, data_dir: str | os.PathLike[str], host: str = "127.0.0.1",
                 start_timeout_s: float = 60.0) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self.port = 0
        self.pid = 0
        self.start_timeout_s = start_timeout_s
        self.state: dict[str, Any] = {}
        self.spawned = False  # whether `start` launched the server (rather than attaching to a running one)
        self._client_file: Path | None = None

    # ---- what clients use -------------------------------------------------------------------
    @property
    def uri(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def token(self) -> str:
        return ""

    @property
    def log_path(self) -> Path:
        return self.data_dir / "server.log"

    # ---- engine hooks -------------------------------------------------------------------------
    def _launch(self, log: Any, previous: dict[str, Any] | None) -> tuple[subprocess.Popen, dict[str, Any]]:
        """Start the server process (own session, output to `log`); return it and its state fields."""
        raise NotImplementedError

    def _answering(self, state: dict[str, Any]) -> bool:
        """A cheap check that the recorded server accepts connections."""
        return listening(state["host"], int(state["port"]))

    def _wait_ready(self, proc: subprocess.Popen, state: dict[str, Any], deadline: float) -> None:
        """Return once the new server answers; raise StoreUnavailable when it exits or the deadline passes."""
        while not self._answering(state):
            self._check_alive(proc, deadline)
            time.sleep(0.1)

    def _is_server(self, pid: int) -> bool:
        """Whether `pid` is (still) a Milvus server of this directory, of either engine, and not a
        recycled pid: its command line or working directory names the data directory."""
        if not pid_alive(pid):
            return False
        proc = Path(f"/proc/{pid}")
        if not proc.is_dir():
            return True  # no procfs: trust the record
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            cwd = os.readlink(proc / "cwd")
        except OSError:
            return True  # not ours to inspect (another user): trust the record
        here = str(self.data_dir)
        return "milvus" in cmd and (here in cmd or cwd == here or cwd.startswith(here + os.sep))

    def _after_exit(self, state: dict[str, Any]) -> None:
        """Clean up what the server leaves behind once its process is gone."""

    # ---- lifecycle ----------------------------------------------------------------------------
    @property
    def _state_file(self) -> Path:
        return self.data_dir / "server.json"

    def _read_state(self) -> dict[str, Any] | None:
        try:
            state = json.loads(self._state_file.read_text())
        except (OSError, ValueError):
            return None
        return state if isinstance(state, dict) and isinstance(state.get("pid"), int) else None

    def _write_state(self, state: dict[str, Any]) -> None:
        tmp = self._state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self._state_file)

    def _live_clients(self) -> list[Path]:
        """Leases (`clients/<pid>-<tag>`, one per attached object) whose process is alive; drops the rest."""
        clients = self.data_dir / "clients"
        live = []
        for f in clients.glob("*") if clients.is_dir() else []:
            pid = f.name.split("-", 1)[0]
            if pid.isdigit() and pid_alive(int(pid)):
                live.append(f)
            else:
                f.unlink(missing_ok=True)
        return live

    def _usable(self, state: dict[str, Any] | None) -> bool:
        if not state or state.get("engine", "lite") != self.engine or state.get("status", "ready") != "ready":
            return False
        if not self._is_server(state["pid"]):
            return False
        for attempt in range(3):  # a server under load may be slow to accept; a dead one refuses at once
            if self._answering(state):
                return True
            time.sleep(0.3)
        return False

    def start(self) -> "ManagedServer":
        with locked(self.data_dir / "server.lock"):
            state = self._read_state()
            if self._usable(state):
                assert state is not None
                self._adopt(state)
            else:
                if state and self._is_server(state["pid"]):
                    if state.get("engine", "lite") != self.engine and self._live_clients():
                        raise StoreError(
                            f"{self.data_dir} is served by a running {state.get('engine', 'lite')} server "
                            f"(pid {state['pid']}) that other processes use; stop them or use the same "
                            f"vector_store.uri")
                    # Recorded but unusable (half started, hung, or another engine nobody uses): replace it.
                    self._kill(state)
                elif state:
                    # It died (killed, crashed): clean up what it left before a new one starts.
                    self._after_exit(state)
                self._spawn(state)
            self._client_file = self.data_dir / "clients" / f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
            self._client_file.parent.mkdir(parents=True, exist_ok=True)
            self._client_file.touch()
        atexit.register(self.stop)
        return self

    def _adopt(self, state: dict[str, Any]) -> None:
        self.state = state
        self.host, self.port, self.pid = state["host"], int(state["port"]), int(state["pid"])

    def _check_alive(self, proc: subprocess.Popen, deadline: float) -> None:
        if proc.poll() is not None:
            raise StoreUnavailable(f"the {self.title} server {EXITED_WHILE_STARTING} (status {proc.returncode}; see "
                                   f"{self.log_path})")
        if time.monotonic() > deadline:
            raise StoreUnavailable(f"the {self.title} server did not answer within {self.start_timeout_s:g} s "
                                   f"(see {self.log_path})")

    def _spawn(self, previous: dict[str, Any] | None) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            proc, fields = self._launch(log, previous)
        state = {"engine": self.engine, "pid": proc.pid, "status": "starting", **fields}
        # Recorded before it is ready: if this process dies mid-start, the next one kills the orphan.
        self._write_state(state)
        try:
            self._wait_ready(proc, state, time.monotonic() + self.start_timeout_s)
        except BaseException:
            self._kill(state)
            raise
        state["status"] = "ready"
        self._write_state(state)
        self._adopt(state)
        self.spawned = True

    def _kill(self, state: dict[str, Any]) -> None:
        """SIGTERM, then SIGKILL after the grace; wait for the exit; forget the state."""
        pid = int(state["pid"])
        reap(pid)  # a child of this process that already exited is a zombie until collected
        if self._is_server(pid):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + STOP_GRACE_S
            while pid_alive(pid) and time.monotonic() < deadline:
                reap(pid)
                time.sleep(0.05)
            if pid_alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                deadline = time.monotonic() + 10
                while pid_alive(pid) and time.monotonic() < deadline:
                    reap(pid)
                    time.sleep(0.05)
        self._after_exit(state)
        self._state_file.unlink(missing_ok=True)

    def stop_if_abandoned(self, pid: int) -> bool:
        """The watchdog's check: stop server `pid` when no live process holds a lease on it. True once that
        server is gone (stopped here, by its last client, or replaced), when there is nothing left to watch."""
        with locked(self.data_dir / "server.lock"):
            state = self._read_state()
            if state is None or int(state["pid"]) != pid or not pid_alive(pid):
                return True
            if state.get("status") != "ready" or self._live_clients():
                return False
            self._kill(state)
            return True

    def stop(self) -> None:
        """Leave; the last client out stops the server and waits for it to exit."""
        if self._client_file is None:
            return
        with locked(self.data_dir / "server.lock"):
            self._client_file.unlink(missing_ok=True)
            self._client_file = None
            if self._live_clients():
                return
            state = self._read_state()
            if state:
                self._kill(state)
