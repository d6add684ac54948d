"""`hygraph serve`'s supervising process: the service runs in a watched child (runtime/watch.py) and is
started again when it exits for any reason but a stop or bad input: a lost Ray node (runner.RayLost) or a
crash. This module imports neither Ray nor the serving stack, so the supervisor stays small and survives
whatever kills the child."""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Sequence

from hygraph.config import ServeConfig, load_config
from hygraph.errors import HygraphError
from hygraph.runtime.watch import run_watched

# A service that ran this long before exiting counts as healthy: its exit starts a new run of restarts.
HEALTHY_RUN_S = 600.0


def say(message: str) -> None:
    print(f"[hygraph] {message}", file=sys.stderr, flush=True)


def supervise(argv: Sequence[str], config: str | None) -> int:
    """Run `hygraph argv` (a `serve` command) until it stops on a signal or refuses its input (status 2);
    return its last exit status. Restarts back off exponentially from `serve.restart_backoff_s`; after
    `serve.max_restarts` in a row it gives up. The journal makes a restart lose nothing: the new updater
    applies every acknowledged job it finds."""
    try:
        policy = load_config(config).serve
    except HygraphError:
        policy = ServeConfig()  # the child reports the configuration's error itself
    stop = threading.Event()
    in_a_row = 0
    while True:
        started = time.monotonic()
        status = run_watched(argv, signalled=stop)
        if stop.is_set() or status in (0, 2):
            return status
        in_a_row = 1 if time.monotonic() - started >= HEALTHY_RUN_S else in_a_row + 1
        if in_a_row > policy.max_restarts:
            print(f"hygraph: failed: the service exited {in_a_row} times in a row (last status {status}); "
                  "not restarting it again", file=sys.stderr, flush=True)
            return status
        delay = policy.restart_backoff_s * 2 ** (in_a_row - 1)
        say(f"the service exited with status {status}; restarting it in {delay:.0f} s "
            f"(restart {in_a_row} of at most {policy.max_restarts} in a row)")
        before = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            if stop.wait(delay):
                return status
        finally:
            for sig, handler in before.items():
                signal.signal(sig, handler)
