"""`hygraph serve`'s supervising process: the service runs in a child (`hygraph serve --no-restart`, see
runner.py) and is started again when it exits for any reason but a stop or bad input. This module imports
neither Ray nor the serving stack, so the supervisor stays small and survives whatever kills the child."""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Sequence

from hygraph.config import HygraphConfig
from hygraph.errors import HygraphError, InputError


def say(message: str) -> None:
    print(f"[hygraph] {message}", file=sys.stderr, flush=True)


def supervise(child: Sequence[str], cfg: HygraphConfig) -> dict[str, Any]:
    """`hygraph serve`: run the service (`child`: the same command with `--no-restart`) in a child process and
    start it again when it exits for any reason but a stop or bad input (exit status 2): a lost Ray node
    (the child's RayLost) or a crash. Restarts back off exponentially from `serve.restart_backoff_s`; after
    `serve.max_restarts` in a row (a run that served `HEALTHY_RUN_S` resets the count) it gives up. The
    journal makes a restart lose nothing: the new updater applies every acknowledged job it finds."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    restarts, in_a_row = 0, 0
    while True:
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "hygraph.cli", *child], preexec_fn=_die_with_parent)
        while proc.poll() is None and not stop.wait(0.5):
            pass
        if stop.is_set():
            _stop_child(proc)
            return {"stopped": True, "restarts": restarts}
        if proc.returncode in (0, 2):
            if proc.returncode == 2:
                raise InputError("serve: the service refused its configuration (see the line above)")
            return {"stopped": True, "restarts": restarts}
        in_a_row = 1 if time.monotonic() - started >= HEALTHY_RUN_S else in_a_row + 1
        if in_a_row > cfg.serve.max_restarts:
            raise HygraphError(f"serve: the service exited {in_a_row} times in a row (last status "
                               f"{proc.returncode}); not restarting it again")
        delay = cfg.serve.restart_backoff_s * 2 ** (in_a_row - 1)
        say(f"the service exited with status {proc.returncode}; restarting it in {delay:.0f} s "
             f"(restart {in_a_row} of at most {cfg.serve.max_restarts} in a row)")
        if stop.wait(delay):
            return {"stopped": True, "restarts": restarts}
        restarts += 1


# A service that ran this long before exiting counts as healthy: its exit starts a new run of restarts.
HEALTHY_RUN_S = 600.0
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the supervisor dies, even by SIGKILL, so no service outlives it."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _stop_child(proc: subprocess.Popen) -> None:
    """SIGINT (a clean stop: Serve, the updater, Ray and the store's server go down), then SIGKILL if it hangs."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


STOP_WAIT_S = 120.0
