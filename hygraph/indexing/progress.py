"""Progress on stderr for long work: one line per stage with its duration, counts with their rate.

On a terminal a counter is a tqdm bar; anywhere else (a log file, CI, a Ray job) it is a line
every `LINE_EVERY_S` seconds with the count, the rate and the time left, so long stages are
never silent in logs.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from tqdm import tqdm

LINE_EVERY_S = 10.0


def to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Counter:
    """Counts items of one stream; a bar on a terminal, periodic lines elsewhere."""

    def __init__(self, total: int, label: str, emit: Callable[[str], None] = to_stderr) -> None:
        self.total, self.label, self.done, self.emit = total, label, 0, emit
        self._t0 = self._last = time.monotonic()
        self._shown = 0  # the count of the last line
        self._bar = tqdm(total=total, desc=label, file=sys.stderr, unit="it", dynamic_ncols=True,
                         mininterval=1.0) if sys.stderr.isatty() else None

    def update(self, n: int) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        elif time.monotonic() - self._last >= LINE_EVERY_S:
            self._line()

    def _line(self) -> None:
        self._last = time.monotonic()
        elapsed = max(self._last - self._t0, 1e-9)
        rate = self.done / elapsed
        left = f", about {(self.total - self.done) / rate:.0f} s left" if rate > 0 and self.done < self.total else ""
        self.emit(f"{self.label}: {self.done:,}/{self.total:,} ({rate:,.0f}/s{left})")
        self._shown = self.done

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif time.monotonic() - self._t0 >= LINE_EVERY_S and self.done != self._shown:  # not the same line twice
            self._line()

    def __enter__(self) -> "Counter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Stages:
    """Times named stages; `seconds` goes into the manifest and the command's JSON.

    Its lines go to `emit` (stderr by default; a Ray actor that runs stages keeps them for the process that
    shows them, indexing/assemble.py). With `own_report` set (a Ray worker running stages itself), each
    stage also records that process's peak RSS and node as a worker of the stage; with `own_rss` set, its
    RSS when the stage ended too (`rss_after`: what the stage left held, where the peak only ever grows).
    """

    def __init__(self, prefix: str = "index") -> None:
        self.prefix = prefix
        self.emit: Callable[[str], None] = to_stderr
        self.own_report: Callable[[], tuple[int, str]] | None = None
        self.own_rss: Callable[[], int] | None = None
        self.rss_after: dict[str, int] = {}  # stage -> this process's RSS (bytes) when it ended (`own_rss`)
        self.seconds: dict[str, float] = {}
        # Ray workers that ran a stage's work: their largest peak RSS (bytes) and their nodes; and the largest
        # peak RSS of a worker per node.
        self.worker_rss: dict[str, int] = {}
        self.worker_nodes: dict[str, set[str]] = {}
        self.node_rss: dict[str, int] = {}
        self.bytes_written = 0  # intermediate files (a build's checkpoint)
        self._open: list[str] = []
        self._t0 = time.perf_counter()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self.note(f"{name} ...")
        t = time.perf_counter()
        self._open.append(name)
        try:
            yield
        finally:
            self._open.pop()
            if self.own_report is not None:
                rss, node = self.own_report()
                self.worker(rss, {node}, name)
            self.seconds[name] = round(self.seconds.get(name, 0.0) + time.perf_counter() - t, 3)
            memory = ""
            if self.own_rss is not None:
                self.rss_after[name] = self.own_rss()
                memory = (f" (RSS {self.rss_after[name] / 2**20:,.0f} MiB, peak "
                          f"{self.worker_rss.get(name, 0) / 2**20:,.0f} MiB)")
            self.note(f"{name} done in {self.seconds[name]:.1f}s{memory}")

    def worker(self, rss_bytes: int, nodes: set[str], stage: str | None = None) -> None:
        """A Ray worker of `stage` (default: the innermost open stage) reported its peak RSS and node
        (`ingest.worker_report`)."""
        name = stage or (self._open[-1] if self._open else "other")
        self.worker_rss[name] = max(self.worker_rss.get(name, 0), rss_bytes)
        self.worker_nodes.setdefault(name, set()).update(nodes)
        for node in nodes:
            self.node_rss[node] = max(self.node_rss.get(node, 0), rss_bytes)

    def note(self, message: str) -> None:
        self.emit(f"[{self.prefix}] {message}")

    def bar(self, total: int, desc: str) -> Counter:
        return Counter(total, f"[{self.prefix}] {desc}", self.emit)

    @property
    def total(self) -> float:
        return round(time.perf_counter() - self._t0, 3)
