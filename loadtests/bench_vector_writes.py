"""A build's "write vectors" stage replayed on the vectors of a built index, with whichever hygraph
is first on PYTHONPATH (so main's code and a branch's run on the same vectors, one after the other).

    python loadtests/bench_vector_writes.py dump --index-dir /tmp/bv/base2k --out /tmp/bv/dump2k
    PYTHONPATH=/work/main python loadtests/bench_vector_writes.py replay --dump /tmp/bv/dump2k --index-dir /tmp/bv/a
    PYTHONPATH=$PWD python loadtests/bench_vector_writes.py replay --dump /tmp/bv/dump2k --index-dir /tmp/bv/b

`dump` writes every collection of the index's current version to <out>/<kind>.npz (ids, vectors,
layers) with info.json. `replay` writes them into a fresh index directory (its own managed server,
started before the clock) through the build's CollectionWriter, checks a sample reads back
bit for bit, and prints one JSON line (vectors, seconds, vectors/s) after the seconds each store
call took per collection (the calls of collections written side by side overlap). With `--recall Q`, it
then searches each collection for Q queries (passage vectors of the chunk collection where the
dimensions match, as the question-like vectors the retrieval modes send; the collection's own vectors
otherwise) and prints recall@10 of the server's index against an exact numpy search, and the median
wall time of a one-vector search. The index parameters are the config's
(`HYGRAPH__VECTOR_STORE__HNSW_EF_CONSTRUCTION=64 ...` or `HYGRAPH__VECTOR_STORE__INDEX_TYPE=IVF_FLAT` to compare).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from hygraph.backends.vectorstore import connect
from hygraph.config import load_config
from hygraph.indexing.stages.vectors import CollectionWriter
from hygraph.store.versions import IndexStore

KINDS = ("chunks", "entities", "relations", "hyperedges", "summaries", "hyperbolic")


def dump(index_dir: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    manifest = IndexStore(index_dir).manifest()
    vs = connect(load_config(None).vector_store, index_dir)
    info: dict[str, Any] = {}
    try:
        for kind, name in manifest.collections.items():
            vs.open(name)
            it = vs.client.query_iterator(name, batch_size=1000, output_fields=["item_id", "vec", "layer"])
            ids, vecs, layers = [], [], []
            while rows := it.next():
                for r in rows:
                    ids.append(r["item_id"])
                    vecs.append(r["vec"])
                    layers.append(r["layer"])
            it.close()
            np.savez(out / f"{kind}.npz", ids=np.asarray(ids, dtype=object), vecs=np.asarray(vecs, np.float32),
                     layers=np.asarray(layers, np.int64))
            metric = next(iter(vs.client.describe_index(name, i)["metric_type"]
                               for i in vs.client.list_indexes(name)), "IP")
            info[kind] = {"rows": len(ids), "dim": len(vecs[0]), "metric": metric}
            print(kind, info[kind], flush=True)
    finally:
        vs.close()
    (out / "info.json").write_text(json.dumps(info))
    print("seconds_per_stage", json.dumps(manifest.stats.get("seconds_per_stage")))


def _timed(vs: Any) -> dict[tuple[str, str], float]:
    """Wrap the store's write calls and its client's seal calls with per-collection timers."""
    seconds: dict[tuple[str, str], float] = defaultdict(float)
    lock = threading.Lock()
    for obj, names in ((vs, ("create", "fill", "upsert")),
                       (vs.client, ("flush", "create_index", "load_collection"))):
        for n in names:
            if not hasattr(obj, n):
                continue

            def timed(*a: Any, _f: Any = getattr(obj, n), _n: str = n, **k: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return _f(*a, **k)
                finally:
                    with lock:
                        seconds[(str(a[0]), _n)] += time.perf_counter() - t0
            setattr(obj, n, timed)
    return seconds


def recall_at_10(vs: Any, name: str, ids: list[str], vecs: np.ndarray, metric: str, queries: np.ndarray) -> float:
    """The share of the exact top 10 (numpy, over every stored vector) that the store's search returns."""
    scores = queries @ vecs.T
    if metric != "IP":  # L2: minus the squared distance, without a queries x vectors x dim array
        scores = 2 * scores - (vecs ** 2).sum(1)[None, :]
    exact = np.asarray(ids, dtype=object)[np.argsort(-scores, axis=1)[:, :10]]
    got = vs.search(name, queries, 10)
    return float(np.mean([len({h.id for h in hits} & set(row)) / 10 for hits, row in zip(got, exact, strict=True)]))


def search_p50_ms(vs: Any, name: str, queries: np.ndarray) -> float:
    """The median wall time of a one-question search (top 10), as a query sends it."""
    times = []
    for q in queries:
        t0 = time.perf_counter()
        vs.search(name, q[None, :], 10)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1000


def replay(dump_dir: Path, index_dir: str, recall_queries: int = 0) -> None:
    info = json.loads((dump_dir / "info.json").read_text())
    data = {}
    for kind in (k for k in KINDS if k in info):
        z = np.load(dump_dir / f"{kind}.npz", allow_pickle=True)
        layers = [int(x) for x in z["layers"]] if kind == "summaries" else None
        data[kind] = (list(z["ids"]), z["vecs"], layers, info[kind]["metric"])
    total = sum(len(d[0]) for d in data.values())
    store = IndexStore(index_dir, create=True)
    vs = connect(load_config(None).vector_store, index_dir)
    seconds = _timed(vs)
    try:
        with store.begin() as w:
            writer = CollectionWriter(vs, store, w.version)
            t0 = time.perf_counter()
            if hasattr(writer, "finish"):  # each kind started as it is added, then waited for
                for kind, (ids, vecs, layers, metric) in data.items():
                    writer.add(kind, ids, vecs, metric=metric, layers=layers)
                writer.finish()
            elif hasattr(writer, "add"):  # queued, then written side by side
                for kind, (ids, vecs, layers, metric) in data.items():
                    writer.add(kind, ids, vecs, metric=metric, layers=layers)
                writer.write()
            else:  # main before it: one kind after another
                for kind, (ids, vecs, layers, metric) in data.items():
                    writer.write(kind, ids, vecs, metric=metric, layers=layers)
            dt = time.perf_counter() - t0
            for name in writer.collections.values():
                vs.open(name)  # as the version's readers do (a build leaves its collections released)
            for kind, (ids, vecs, _, _) in data.items():
                step = max(1, len(ids) // 500)
                assert np.array_equal(vs.fetch(writer.collections[kind], ids[::step]), vecs[::step]), kind
            for (name, call), s in sorted(seconds.items()):
                print(f"  {name.rsplit('_', 1)[-1]:>10} {call:>16} {s:7.1f} s")
            recall: dict[str, float] = {}
            search_ms: dict[str, float] = {}
            if recall_queries:
                rng = np.random.default_rng(0)
                chunk_vecs = data["chunks"][1]
                for kind, (ids, vecs, _, metric) in data.items():
                    pool = chunk_vecs if chunk_vecs.shape[1] == vecs.shape[1] else vecs
                    queries = pool[rng.choice(len(pool), min(recall_queries, len(pool)), replace=False)]
                    recall[kind] = round(recall_at_10(vs, writer.collections[kind], ids, vecs, metric, queries), 4)
                    search_ms[kind] = round(search_p50_ms(vs, writer.collections[kind], queries[:50]), 2)
            cfg = load_config(None).vector_store
            print(json.dumps({"hygraph": sys.modules["hygraph"].__file__, "vectors": total,
                              "write_vectors_s": round(dt, 1), "vectors_per_s": round(total / dt),
                              "index": {"type": cfg.index_type, "M": cfg.hnsw_m,
                                        "efConstruction": cfg.hnsw_ef_construction, "ef": cfg.hnsw_ef_search},
                              **({"recall_at_10": recall, "search_p50_ms": search_ms} if recall else {})}),
                  flush=True)
            for name in writer.collections.values():
                vs.drop(name)
    finally:
        vs.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("--index-dir", required=True)
    d.add_argument("--out", required=True, type=Path)
    r = sub.add_parser("replay")
    r.add_argument("--dump", required=True, type=Path)
    r.add_argument("--index-dir", required=True)
    r.add_argument("--recall", type=int, default=0, help="queries per collection for recall@10 (0: none)")
    args = ap.parse_args()
    if args.cmd == "dump":
        dump(args.index_dir, args.out)
    else:
        replay(args.dump, args.index_dir, args.recall)


if __name__ == "__main__":
    main()
