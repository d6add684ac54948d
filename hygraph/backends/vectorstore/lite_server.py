"""Milvus Lite (`vector_store.uri: lite`) as the managed engine: `milvus-lite server` on 127.0.0.1.

Milvus Lite lets only one process open a data file, so every local process (a second CLI, Ray
workers, Serve replicas) reaches it through this one gRPC server; the lifecycle is `managed.py`'s.
Its engine is Python: each search costs about 1 µs per stored vector, so the embedded standalone
server (`uri: embedded`, the default) is the local engine for anything but small indexes.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from hygraph.backends.vectorstore.managed import CLIENT_GRPC_OPTIONS, ManagedServer, free_ports

__all__ = ["CLIENT_GRPC_OPTIONS", "LiteServer"]


def _executable() -> str:
    beside = Path(sys.executable).with_name("milvus-lite")
    return str(beside) if beside.exists() else (shutil.which("milvus-lite") or "milvus-lite")


class LiteServer(ManagedServer):
    engine = "lite"
    title = "Milvus Lite"

    def __init__(self, data_dir: Any, host: str = "127.0.0.1", port: int = 0,
                 start_timeout_s: float = 30.0) -> None:
        super().__init__(data_dir, host, start_timeout_s)
        self.wanted_port = port

    def _launch(self, log: Any, previous: dict[str, Any] | None) -> tuple[subprocess.Popen, dict[str, Any]]:
        port = self.wanted_port or free_ports(1)[0]
        proc = subprocess.Popen(
            [_executable(), "server", "--data-dir", str(self.data_dir / "data"), "--host", self.host,
             "--port", str(port)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        return proc, {"host": self.host, "port": port}
