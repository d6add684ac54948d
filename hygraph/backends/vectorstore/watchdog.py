"""Stops a managed local Milvus server that every client left without stopping it.

The last client out stops the server (managed.py), but a client killed by SIGKILL, the OOM killer
or a lost terminal leaves no one to do it, and the server (hundreds of MB, nine ports) would run
until the next connect to that index. The process that starts a server starts this watchdog
beside it, in its own session: every `vector_store.server_watch_s` it looks at the server's
leases, and stops the server once no live process holds one. It exits when the server is gone
(stopped by its last client, by itself, or replaced after a crash).

Its settings come on stdin, not on its command line, so nothing that looks for the server's
processes by their command line (the data directory, "milvus") mistakes it for the server.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from hygraph.backends.vectorstore import managed_server
from hygraph.config import VectorStoreConfig
from hygraph.processes import pid_alive

EXIT_POLL_S = 0.5  # how often the server's process is checked for between lease checks


def start_watchdog(cfg: VectorStoreConfig, index_dir: str | Path, pid: int) -> None:
    """Launch the watchdog of server `pid` (just started for `index_dir`) and return at once."""
    proc = subprocess.Popen([sys.executable, "-m", "hygraph.backends.vectorstore.watchdog"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/", start_new_session=True)
    assert proc.stdin is not None
    proc.stdin.write(json.dumps({"config": cfg.model_dump(mode="json"), "index_dir": str(Path(index_dir).resolve()),
                                 "pid": pid}).encode())
    proc.stdin.close()


def watch(cfg: VectorStoreConfig, index_dir: str, pid: int) -> None:
    server = managed_server(cfg, index_dir)
    while not server.stop_if_abandoned(pid):
        # Leases are read every server_watch_s, but a server its last client stopped is seen gone within
        # EXIT_POLL_S: a stopped service leaves no watchdog behind (a load test's sweep found one 3 s later).
        deadline = time.monotonic() + cfg.server_watch_s
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(min(EXIT_POLL_S, cfg.server_watch_s))


def main() -> None:
    settings = json.loads(sys.stdin.read())
    watch(VectorStoreConfig.model_validate(settings["config"]), settings["index_dir"], int(settings["pid"]))


if __name__ == "__main__":
    main()
