"""Lance (pylance) against the segment store on a real index: what a version costs to write and to read.

    pip install pylance   # only for this comparison; hygraph does not depend on it
    python loadtests/bench_formats.py --index-dir runs/i2w --artifact entities --out docs/bench/formats

Takes one artifact of an index built by `hygraph index` (its first, full segment) and a real
single-document change (the rows and deletions of the newest delta segment of that artifact,
written by an insert), then for each format: writes the full table, applies the change as a new
version (bytes added, seconds), opens the new version, and looks rows up by key (the access the
retrieval modes make: `view.x[key]`), alone and with a second reader process (memory added).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402
import pyarrow as pa  # noqa: E402

from hygraph.store.artifacts import ARTIFACTS  # noqa: E402
from hygraph.store.manifest import Manifest  # noqa: E402
from hygraph.store.versions import IndexStore  # noqa: E402


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def sql_string(key: str) -> str:
    """A key as a SQL literal (Lance's delete and filter take SQL): quotes doubled."""
    return "'" + key.replace("'", "''") + "'"


def lance_side(base: pa.Table, rows: pa.Table, dead: list[str], keys: list[str], work: Path) -> dict[str, Any]:
    import lance

    path = work / "table.lance"
    shutil.rmtree(path, ignore_errors=True)
    t0 = time.perf_counter()
    ds = lance.write_dataset(base, str(path))
    ds.create_scalar_index("id", "BTREE")
    write_s = time.perf_counter() - t0
    full = dir_bytes(path)
    t0 = time.perf_counter()
    ds = lance.dataset(str(path))
    if rows.num_rows:
        ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(rows)
    if dead:
        ds = lance.dataset(str(path))
        ds.delete("id IN (" + ", ".join(sql_string(k) for k in dead) + ")")
    ds = lance.dataset(str(path))
    ds.optimize.optimize_indices()  # the key index must cover the new rows for lookups to stay indexed
    change_s = time.perf_counter() - t0
    added = dir_bytes(path) - full
    t0 = time.perf_counter()
    ds = lance.dataset(str(path))
    open_s = time.perf_counter() - t0
    lookups = []
    for key in keys:
        t0 = time.perf_counter()
        got = ds.to_table(columns=["id", "chunks"], filter=f"id = {sql_string(key)}")
        lookups.append(time.perf_counter() - t0)
        assert got.num_rows == 1, key
    return {"write_full_s": round(write_s, 3), "full_bytes": full, "change_bytes": added,
            "change_s": round(change_s, 3), "open_s": round(open_s, 4),
            "lookup_us_median": round(statistics.median(lookups) * 1e6, 1), "versions": len(ds.versions())}


def segment_side(index_dir: Path, artifact_name: str, keys: list[str]) -> dict[str, Any]:
    store = IndexStore(index_dir)
    version = store.open()
    ref = version.manifest.tables[artifact_name]
    full = store.segment_bytes(artifact_name, ref.segments[0])
    change = store.segment_bytes(artifact_name, ref.segments[-1]) if len(ref.segments) > 1 else 0
    t0 = time.perf_counter()
    table = store.open().table(ARTIFACTS[artifact_name])
    open_s = time.perf_counter() - t0
    lookups = []
    for key in keys:
        t0 = time.perf_counter()
        table.value(key, "chunks")
        lookups.append(time.perf_counter() - t0)
    return {"full_bytes": full, "change_bytes": change, "open_s": round(open_s, 4),
            "lookup_us_median": round(statistics.median(lookups) * 1e6, 1), "segments": len(ref.segments)}


def reader(fmt: str, index_dir: str, artifact: str, keys_file: str, work: str) -> None:
    """Read every key's `chunks` the way a Retriever would, then report this process's memory."""
    keys = json.loads(Path(keys_file).read_text())
    if fmt == "lance":
        import lance

        ds = lance.dataset(str(Path(work) / "table.lance"))
        # A Retriever would hold the columns it reads in memory (Lance decodes into the process).
        table = ds.to_table(columns=["id", "name", "description", "chunks", "relations", "hyperedges", "score"])
        index = {k: i for i, k in enumerate(table.column("id").to_pylist())}
        for key in keys:
            table.column("chunks")[index[key]].as_py()
    else:
        table = IndexStore(index_dir).open().table(ARTIFACTS[artifact])
        for key in keys:
            table.value(key, "chunks")
    info = psutil.Process().memory_full_info()
    print(json.dumps({"rss_mb": round(info.rss / 2**20, 1), "pss_mb": round(info.pss / 2**20, 1),
                      "uss_mb": round(info.uss / 2**20, 1)}), flush=True)
    sys.stdin.readline()  # stay alive (and mapped) until the parent has measured the other reader


def two_readers(fmt: str, args: argparse.Namespace, keys_file: Path) -> list[dict[str, float]]:
    cmd = [sys.executable, __file__, "--reader", fmt, "--index-dir", args.index_dir, "--artifact", args.artifact,
           "--keys", str(keys_file), "--work", str(args.work)]
    procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    out = [json.loads(p.stdout.readline()) for p in procs]
    for p in procs:  # both alive now: measure PSS again, shared pages split between them
        info = psutil.Process(p.pid).memory_full_info()
        out.append({"pid_pss_mb_both_alive": round(info.pss / 2**20, 1)})
    for p in procs:
        p.communicate("\n", timeout=60)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--index-dir", required=True)
    p.add_argument("--artifact", default="entities")
    p.add_argument("--lookups", type=int, default=2000)
    p.add_argument("--work", default="runs/bench_formats")
    p.add_argument("--out", default=None)
    p.add_argument("--reader", choices=["lance", "segments"], help=argparse.SUPPRESS)
    p.add_argument("--keys", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.reader:
        reader(args.reader, args.index_dir, args.artifact, args.keys, args.work)
        return
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    store = IndexStore(args.index_dir)
    version = store.open()
    artifact = ARTIFACTS[args.artifact]
    table = version.table(artifact)
    first, last = table.segments[0], table.segments[-1]
    base = pa.Table.from_batches([first.batch])
    rows = pa.Table.from_batches([last.batch]) if last is not first else base.slice(0, 0)
    dead = last.dead_keys() if last is not first else []
    keys = random.Random(0).sample(list(table.ids()), min(args.lookups, len(table)))
    keys_file = work / "keys.json"
    keys_file.write_text(json.dumps(keys))
    res: dict[str, Any] = {"index": args.index_dir, "artifact": args.artifact, "rows": len(table),
                           "change_rows": rows.num_rows, "change_deleted": len(dead),
                           "segments": segment_side(Path(args.index_dir), args.artifact, keys),
                           "lance": lance_side(base, rows, dead, keys, work)}
    res["segments"]["readers"] = two_readers("segments", args, keys_file)
    res["lance"]["readers"] = two_readers("lance", args, keys_file)
    res["manifest_bytes"] = len(Manifest().to_json())
    print(json.dumps(res, indent=1))
    if args.out:
        Path(args.out).with_suffix(".json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
