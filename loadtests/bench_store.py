"""The index store's own costs on a local directory or an S3 prefix: a full version, small updates, a cold open.

    python -m loadtests.bench_store --index-dir DIR|s3://bucket/prefix [--docs 20000] [--updates 10]

Writes DOCUMENTS rows (id, title, ~600 bytes of text) as one full version, then `--updates` versions of one
changed and one deleted row each, then opens the newest version in a fresh store and reads every row once
(on S3 with an empty node cache: every segment is fetched). Prints one JSON line of seconds and bytes. Runs
against any release whose IndexStore has `begin`/`replace`/`change`/`commit`/`open` (the local baseline).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

from hygraph.store.artifacts import DOCUMENTS, DocumentRow
from hygraph.store.manifest import Manifest
from hygraph.store.versions import IndexStore

TEXT = "lorem ipsum dolor sit amet " * 22


def _docs(ids: range | list[int]) -> list[DocumentRow]:
    return [DocumentRow(f"d{i}", f"title {i}", TEXT, (f"d{i}:0",)) for i in ids]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--index-dir", required=True)
    parser.add_argument("--docs", type=int, default=20000)
    parser.add_argument("--updates", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        options = {"cache_dir": cache} if args.index_dir.startswith("s3://") else {}
        store = IndexStore(args.index_dir, create=True, **options)
        t0 = time.perf_counter()
        with store.begin() as w:
            w.replace(DOCUMENTS, _docs(range(args.docs)), {})
            w.commit(Manifest())
            full_bytes = w.bytes_written
        t_full = time.perf_counter() - t0
        t0 = time.perf_counter()
        for n in range(args.updates):
            base = store.open().table(DOCUMENTS)
            with store.begin() as w:
                w.change(base, DOCUMENTS, _docs([args.docs + n]), [f"d{n}"], {})
                w.commit(Manifest())
        t_update = (time.perf_counter() - t0) / max(args.updates, 1)
    with tempfile.TemporaryDirectory() as cache:
        options = {"cache_dir": cache} if args.index_dir.startswith("s3://") else {}
        t0 = time.perf_counter()
        table = IndexStore(args.index_dir, **options).open().table(DOCUMENTS)
        t_open = time.perf_counter() - t0
        t0 = time.perf_counter()
        found = sum(1 for i in range(args.docs + args.updates) if table.locate(f"d{i}") is not None)
        t_read = time.perf_counter() - t0
    print(json.dumps({"index_dir": args.index_dir, "docs": args.docs, "full_version_s": round(t_full, 3),
                      "full_version_bytes": full_bytes, "update_s": round(t_update, 4),
                      "cold_open_s": round(t_open, 3), "read_all_rows_s": round(t_read, 3), "rows_found": found}))


if __name__ == "__main__":
    main()
