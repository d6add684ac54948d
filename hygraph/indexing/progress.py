"""Progress on stderr for long work: one line per stage with its duration, bars for streams."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Iterator

from tqdm import tqdm


class Stages:
    """Times named stages; `seconds` goes into the manifest and the command's JSON."""

    def __init__(self, prefix: str = "index") -> None:
        self.prefix = prefix
        self.seconds: dict[str, float] = {}
        self._t0 = time.perf_counter()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        print(f"[{self.prefix}] {name} ...", file=sys.stderr, flush=True)
        t = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + time.perf_counter() - t, 3)
            print(f"[{self.prefix}] {name} done in {self.seconds[name]:.1f}s", file=sys.stderr, flush=True)

    def bar(self, total: int, desc: str) -> tqdm:
        return tqdm(total=total, desc=f"[{self.prefix}] {desc}", file=sys.stderr, unit="it",
                    dynamic_ncols=True, mininterval=1.0, disable=None)

    @property
    def total(self) -> float:
        return round(time.perf_counter() - self._t0, 3)
