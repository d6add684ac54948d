"""Per-update cost of the index store on a local directory: fsyncs, wall and CPU of begin..commit.

    python loadtests/bench_store_updates.py DIR

One 2000-row DOCUMENTS version, then 30 versions of one added and one deleted row; prints the fsyncs per
update and the median wall and CPU milliseconds of `begin` through `commit`. Runs against any release whose
IndexStore has `begin`/`replace`/`change`/`commit`/`open` (the baseline of a change to the commit path).
"""

import os
import statistics
import sys
import time

from hygraph.store.artifacts import DOCUMENTS
from hygraph.store.manifest import Manifest
from hygraph.store.versions import IndexStore
from loadtests.bench_store import _docs

calls = {"fsync": 0}
real = os.fsync


def counting(fd: int) -> None:
    calls["fsync"] += 1
    real(fd)


os.fsync = counting


def main() -> None:
    store = IndexStore(sys.argv[1], create=True)
    with store.begin() as w:
        w.replace(DOCUMENTS, _docs(range(2000)), {})
        w.commit(Manifest())
    calls["fsync"] = 0
    wall: list[float] = []
    cpu: list[float] = []
    for n in range(30):
        base = store.open().table(DOCUMENTS)
        t, c = time.perf_counter(), time.process_time()
        with store.begin() as w:
            w.change(base, DOCUMENTS, _docs([5000 + n]), [f"d{n}"], {})
            w.commit(Manifest())
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    print(f"fsync per update {calls['fsync'] / 30:.1f}, begin..commit median "
          f"{statistics.median(wall) * 1000:.1f} ms wall, {statistics.median(cpu) * 1000:.1f} ms cpu")


if __name__ == "__main__":
    main()
