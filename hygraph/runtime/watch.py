"""A command that runs Ray in its own process, watched from a parent that keeps the CLI's output contract.

When a driver's raylet dies, Ray ends the driver with a bare `_exit` (no Python handler, `finally` or
`atexit` runs) after printing the raylet's last words on stdout. Run in a child, the command can die
like that and still: stdout holds only its JSON result line (anything else the child wrote there is
passed to stderr as it comes), and stderr ends with one `hygraph: failed: <reason>` line, written
here when the child could not write its own.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from typing import IO, Any, Sequence

CHILD_ENV = "HYGRAPH_WATCHED"  # set in the child: it runs the command itself
RAY_LOGS = "[ray] Ray's logs: "  # the line init_ray writes; named again in a failure line
READ_AFTER_EXIT_S = 5.0  # a process the child left behind may hold its pipes: output is read this long after
# The child's first program: it asks for SIGKILL when the watcher dies (prctl(2) PR_SET_PDEATHSIG = 1; the
# setting outlives execve), gives up if the watcher is gone already, and becomes the command. This is not a
# `preexec_fn`: Python code between fork and exec can crash or deadlock the child when the watcher has threads
# (it aborted the child with SIGABRT once in a test process full of them).
DIE_WITH_WATCHER = ("import ctypes, os, signal, sys\n"
                    "if ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != int(sys.argv[1]):\n"
                    "    os._exit(1)\n"
                    "os.execvp(sys.argv[2], sys.argv[2:])\n")


def is_child() -> bool:
    return os.environ.get(CHILD_ENV) == "1"


def run_watched(argv: Sequence[str], program: Sequence[str] = (sys.executable, "-m", "hygraph.cli"),
                signalled: threading.Event | None = None) -> int:
    """Run `program argv` (the CLI) in a child process; relay its output; return its exit status.

    The child has its own process group, so a terminal's Ctrl-C reaches it once, through this process
    (SIGINT and SIGTERM are forwarded, and `signalled` is set)."""
    command = [*program, *argv]
    if sys.platform.startswith("linux"):  # the child dies with this process, as the command did before it ran here
        command = [sys.executable, "-S", "-c", DIE_WITH_WATCHER, str(os.getpid()), *command]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, CHILD_ENV: "1"}, process_group=0)

    def forward(signum: int, _frame: Any) -> None:
        if signalled is not None:
            signalled.set()
        proc.send_signal(signum)

    before = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    results: list[dict[str, Any]] = []
    last_err: list[str] = [""]
    readers = [threading.Thread(target=_stdout, args=(proc.stdout, results), daemon=True),
               threading.Thread(target=_stderr, args=(proc.stderr, last_err), daemon=True)]
    for reader in readers:
        reader.start()
    try:
        status = proc.wait()
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    for reader in readers:
        reader.join(READ_AFTER_EXIT_S)
    if status == 0 and results:
        sys.stdout.write(json.dumps(results[-1], ensure_ascii=False) + "\n")
        sys.stdout.flush()
        return 0
    if last_err[0].startswith("hygraph: "):
        return status  # the child named its failure on its last line
    if status < 0:
        how = f"the command's process was killed by {signal.Signals(-status).name}"
    elif status:
        how = (f"the command's process ended with status {status} without saying why "
               "(Ray ends a driver so when its node dies)")
    else:
        how = "the command printed no result"
    logs = f"; Ray's logs: {last_err[1]}" if len(last_err) > 1 else ""
    print(f"hygraph: failed: {how}{logs}", file=sys.stderr, flush=True)
    return 128 - status if status < 0 else status or 1


def _stdout(stream: IO[bytes], results: list[dict[str, Any]]) -> None:
    """The child's stdout: its JSON result line is kept for the end; anything else goes to stderr now."""
    for raw in stream:
        line = raw.decode("utf-8", "replace")
        try:
            parsed = json.loads(line)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            results.append(parsed)
        else:
            sys.stderr.write(line)
            sys.stderr.flush()


# A line of Ray's C++ runtime in the driver (glog's format: `[2026-11-26 18:37:00,985 E 23626 23626]
# core_worker.cc:2465: ...`): hints about Ray's own internals, such as the warning every Ray Data build gets
# about an actor's constructor arguments. They go to `DRIVER_LOG` in Ray's logs directory once it is known.
RAY_RUNTIME_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,.]+ [DIWEF] \d+ \d+\] \S+\.(cc|h):\d+:")
DRIVER_LOG = "hygraph-driver.log"


def _stderr(stream: IO[bytes], last: list[str]) -> None:
    """The child's stderr, passed on as it comes, but for the Ray runtime's own lines once Ray's logs
    directory is known (they go to a file there); remembers its last line and where Ray's logs are."""
    for raw in stream:
        line = raw.decode("utf-8", "replace")
        if len(last) > 1 and RAY_RUNTIME_LINE.match(line):
            try:
                with open(os.path.join(last[1], DRIVER_LOG), "a", encoding="utf-8") as log:
                    log.write(line)
                continue
            except OSError:
                pass  # Ray's directory is gone: the terminal, as for any other line
        sys.stderr.write(line)
        sys.stderr.flush()
        if line.strip():
            last[0] = line.strip()
        if line.startswith(RAY_LOGS):
            last[1:] = [line[len(RAY_LOGS):].strip()]
