"""A real multi-node Ray cluster on this one machine: a head (0 CPUs) and N worker nodes, each its own
`ray start`, inside private user, network, pid and mount namespaces.

Multi-node Ray binds every interface (its loopback mode refuses a second node), so the cluster and every
process that talks to it run in a network namespace of their own (`unshare -rn`): nothing outside can
reach it and it can reach nothing outside, and its ports cannot collide with anyone's. The namespace's
first process is a reaper under `unshare --kill-child`; commands enter the namespaces with `nsenter` (the
namespaces' owner may). Ending `unshare` (or the process that started it: it dies with its parent) ends
that first process, and with it the kernel kills every process of the pid namespace: nothing leaks, and
`ray stop` is never needed. The cluster uses Ray's token authentication (RAY_AUTH_MODE=token, a fresh
token in RAY_AUTH_TOKEN for every process of the cluster).

    with RayCluster(workers=2) as cluster:
        cluster.run([sys.executable, "-m", "hygraph.cli", "index", ...], env=cluster.env(os.environ))
        cluster.kill_worker(1)      # SIGKILL worker node 1's raylet: Ray sees a node death
"""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import psutil

REPO = Path(__file__).resolve().parents[1]
RAY = str(Path(sys.executable).with_name("ray"))
HEAD_PORT = 26379  # inside the private network namespace: no other process can hold it
NODE_MANAGER_PORT = 27000  # worker node i's raylet listens on NODE_MANAGER_PORT + i (found by it)
_PR_SET_PDEATHSIG = 1
# The namespace's first process: the processes `ray start` leaves behind are orphans it adopts, and it
# reaps them (a killed raylet must not stay a zombie).
_REAPER = """
import os, time
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.2)
"""


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the process that started it dies (no orphaned cluster)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class RayCluster:
    """A head with 0 CPUs and `workers` nodes of `cpus_per_worker` CPUs each, in private namespaces."""

    def __init__(self, workers: int = 2, cpus_per_worker: int = 1, object_store_mb: int = 300,
                 start_timeout_s: float = 240, node_env: Callable[[int], Mapping[str, str]] | None = None) -> None:
        """`node_env(i)`: variables worker node i's raylet (and so every worker process on it) gets, e.g. a
        HOME of its own where nodes must not share a disk cache; `node_env(-1)`: the head's."""
        self.workers, self.cpus, self.object_store_mb = workers, cpus_per_worker, object_store_mb
        self.node_env = node_env
        self.start_timeout_s = start_timeout_s
        self.address = f"127.0.0.1:{HEAD_PORT}"
        self._token = secrets.token_hex(16)
        # Ray's sockets live under its temp dir and must fit a 107-byte path: a short one under /tmp.
        self.temp_dir = Path(tempfile.mkdtemp(prefix="rc-", dir="/tmp"))
        self._ns: subprocess.Popen | None = None
        self._started = 0  # worker nodes started so far (a replacement gets the next number)

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> "RayCluster":
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def start(self) -> None:
        self._ns = subprocess.Popen(["unshare", "-rn", "--pid", "--fork", "--mount-proc", "--kill-child",
                                     sys.executable, "-I", "-S", "-c", _REAPER], preexec_fn=_die_with_parent,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while not self._init_pid():
            if self._ns.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"unshare failed: {self._ns.stderr.read().decode() if self._ns.stderr else ''}")
            time.sleep(0.05)
        self._ray("ip", "link", "set", "lo", "up", exe=True)
        self._ray("start", "--head", "--node-ip-address=127.0.0.1", "--num-cpus=0", f"--port={HEAD_PORT}",
                  f"--temp-dir={self.temp_dir}", "--include-dashboard=false", "--disable-usage-stats",
                  f"--object-store-memory={self.object_store_mb * 2**20}",
                  env=self.node_env(-1) if self.node_env else None)
        for _ in range(self.workers):
            self.add_worker()
        self.wait_nodes(self.workers)

    def add_worker(self) -> int:
        """Start one more worker node; its number (for `kill_worker`)."""
        i = self._started
        self._started += 1
        self._ray("start", f"--address={self.address}", "--node-ip-address=127.0.0.1", f"--num-cpus={self.cpus}",
                  f"--node-manager-port={NODE_MANAGER_PORT + i}", f"--temp-dir={self.temp_dir}",
                  f"--object-store-memory={self.object_store_mb * 2**20}", "--disable-usage-stats",
                  env=self.node_env(i) if self.node_env else None)
        return i

    def close(self) -> None:
        """End the namespace's first process: the kernel kills every process of the pid namespace."""
        if self._ns is not None and self._ns.poll() is None:
            self._ns.kill()
            self._ns.wait(30)
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    # ------------------------------------------------------------------ running things in it

    def env(self, base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
        """`base` (default: this process's environment) with what a process needs to join the cluster."""
        env = dict(os.environ if base is None else base)
        env.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self._token, "RAY_ADDRESS": self.address,
                    "HYGRAPH__RAY__ADDRESS": self.address, "RAY_USAGE_STATS_ENABLED": "0"}, **extra)
        return env

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` entering the cluster's namespaces (its pid is the namespace's; `popen(...).pid` is nsenter's)."""
        return ["nsenter", "-t", str(self._init_pid()), "-U", "-n", "-p", "-m", "--preserve-credentials",
                "--", *argv]

    def popen(self, argv: Sequence[str], env: Mapping[str, str] | None = None, **kw: Any) -> subprocess.Popen:
        return subprocess.Popen(self.command(argv), env=self.env(env), **kw)

    def run(self, argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 600,
            **kw: Any) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(argv), env=self.env(env), capture_output=True, text=True,
                              timeout=timeout, **kw)

    @staticmethod
    def kill(proc: subprocess.Popen) -> None:
        """SIGKILL the command a `popen` started (nsenter's child: nsenter passes no SIGKILL on)."""
        try:
            for child in psutil.Process(proc.pid).children():
                child.kill()
        except psutil.NoSuchProcess:
            pass
        proc.wait(60)

    # ------------------------------------------------------------------ nodes

    def nodes(self) -> list[dict[str, Any]]:
        """Every node Ray knows: {"node_id", "alive", "cpus", "head"}, from `ray.nodes()` in the namespace."""
        code = ("import json, ray; ray.init(logging_level='ERROR'); print(json.dumps([{'node_id': n['NodeID'], "
                "'alive': n['Alive'], 'cpus': n['Resources'].get('CPU', 0), "
                "'head': 'node:__internal_head__' in n['Resources']} for n in ray.nodes()]))")
        out = self.run([sys.executable, "-c", code], timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"ray.nodes() failed: {out.stderr[-2000:]}")
        # Ray may print warnings (lagging heartbeats, ...) to stdout too: the answer is the line that is a list.
        return json.loads(next(line for line in reversed(out.stdout.splitlines()) if line.startswith("[")))

    def wait_nodes(self, workers: int) -> list[dict[str, Any]]:
        """Wait until the head and `workers` worker nodes are alive; the nodes then."""
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            nodes = self.nodes()
            if sum(n["alive"] and not n["head"] for n in nodes) >= workers and any(n["head"] for n in nodes):
                return nodes
            if time.monotonic() > deadline:
                raise RuntimeError(f"{workers} worker nodes not alive after {self.start_timeout_s:g} s: {nodes}")
            time.sleep(1)

    def worker_node_id(self, i: int) -> str:
        return self._raylet_arg(self._raylet(i), "--node_id")

    def worker_processes(self, i: int) -> list[str]:
        """The command lines (Ray's process titles, e.g. `ray::MapWorker(MapBatches(EmbedStage))`) of the
        processes worker node i's raylet runs."""
        out = []
        for p in self._raylet(i).children(recursive=True):
            try:
                out.append(" ".join(p.cmdline()))
            except psutil.NoSuchProcess:
                continue
        return out

    def kill_worker(self, i: int) -> str:
        """SIGKILL worker node i's raylet (its workers and agents die with it); the node id Ray loses."""
        raylet = self._raylet(i)
        node_id = self._raylet_arg(raylet, "--node_id")
        raylet.kill()
        raylet.wait(30)
        return node_id

    # ------------------------------------------------------------------ internals

    def _init_pid(self) -> int | None:
        """The host pid of the namespace's first process (the reaper unshare forked)."""
        if self._ns is None:
            return None
        try:
            children = psutil.Process(self._ns.pid).children()
        except psutil.NoSuchProcess:
            return None
        return children[0].pid if children else None

    def _ray(self, *args: str, exe: bool = False, env: Mapping[str, str] | None = None) -> None:
        # A node's workers inherit its environment: this checkout first on their path, as on the driver's.
        path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
        out = self.run(list(args) if exe else [RAY, *args], env={**os.environ, "PYTHONPATH": path, **(env or {})},
                       timeout=self.start_timeout_s)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:2])} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")

    def _raylet(self, i: int) -> psutil.Process:
        port = f"--node_manager_port={NODE_MANAGER_PORT + i}"
        init = self._init_pid()
        for p in psutil.Process(init).children(recursive=True) if init else []:
            try:
                if p.name() == "raylet" and port in p.cmdline():
                    return p
            except psutil.NoSuchProcess:
                continue
        raise LookupError(f"no raylet of worker node {i} is running")

    @staticmethod
    def _raylet_arg(raylet: psutil.Process, flag: str) -> str:
        for arg in raylet.cmdline():
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
        raise LookupError(f"the raylet's command line has no {flag}")
