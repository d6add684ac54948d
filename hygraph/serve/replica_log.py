"""hygraph's log lines in a Serve replica go to the replica's own log file, an error at once.

With `RAY_SERVE_LOG_TO_STDERR=0` (runtime.QUIET_SERVE_ENV) Serve turns a replica's stderr into INFO records
of its `ray.serve` logger, behind a buffer that the throughput-optimized Serve flushes every 1,000 records.
Our loggers had no handler, so Python's last-resort handler wrote an error to that stderr: a 500's
traceback ("logged with the request id") sat in the buffer as INFO lines, or was lost with the replica.
Written to Serve's handlers directly, an ERROR record flushes the buffer, with Serve's request context.
"""

from __future__ import annotations

import logging

SERVE_LOGGER = "ray.serve"


def log_to_replica_file(level: int = logging.INFO) -> None:
    """Send the `hygraph` loggers' records at `level` and above to this replica's Serve log handlers (only
    there: the stderr Serve redirects would log them twice). Without Serve's handlers, nothing changes."""
    ours = logging.getLogger("hygraph")
    serve_handlers = logging.getLogger(SERVE_LOGGER).handlers
    if not serve_handlers:
        return
    for handler in serve_handlers:
        if handler not in ours.handlers:
            ours.addHandler(handler)
    ours.setLevel(level)
    ours.propagate = False
