"""Running a local server in a private network namespace, reachable only through sockets we hand it.

`unshare -rn` (util-linux) creates a user namespace and, inside it, a network namespace that has
only its own loopback; it needs no privileges where unprivileged user namespaces are allowed.
Nothing outside that namespace can reach a socket bound inside it, on any address. The listening
sockets clients need are created here, in the host namespace (127.0.0.1, or a Unix socket in a
private directory), and passed to `netns_relay.py`, the namespace's first process, which starts the
server and forwards each connection to it (see that module).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Sequence

RELAY = Path(__file__).with_name("netns_relay.py")

_probed: str | None = None


def unavailable() -> str:
    """Why a private network namespace cannot be made here ("" when `unshare -rn` works). Probed
    once per process: one `unshare -rn true`, a few milliseconds."""
    global _probed
    if _probed is None:
        exe = shutil.which("unshare")
        if exe is None:
            _probed = "`unshare` (util-linux) is not installed"
        else:
            try:
                out = subprocess.run([exe, "-rn", "true"], capture_output=True, text=True, timeout=10)
                err = (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
                _probed = "" if out.returncode == 0 else f"`unshare -rn` failed: {err[:200]}"
            except (OSError, subprocess.TimeoutExpired) as exc:
                _probed = f"`unshare -rn` failed: {type(exc).__name__}"
    return _probed


def loopback_listener() -> socket.socket:
    """A TCP socket listening on 127.0.0.1 on a free port, in this (the host) namespace."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    return sock


def unix_listener(path: Path) -> socket.socket:
    """A Unix socket listening at `path`; who may connect is decided by its directory's permissions."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        sock.listen(64)
    except OSError:
        sock.close()
        raise
    return sock


def relay_command(forwards: Sequence[tuple[socket.socket, int]], command: Sequence[str]) -> list[str]:
    """The command line that runs `command` in a new private network namespace, with each listening
    socket relayed to 127.0.0.1:<port> inside it; start it with `pass_fds` = the sockets' fds."""
    # By path, with -I -S: the relay is standard-library only, so it neither depends on nor can be
    # redirected by the environment (PYTHONPATH, site-packages) that the server gets.
    spec = [f"--forward={sock.fileno()}:{port}" for sock, port in forwards]
    return [shutil.which("unshare") or "unshare", "-rn", sys.executable, "-I", "-S", str(RELAY), *spec,
            "--", *command]
