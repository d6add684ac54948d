"""The vector store alone: start, write, index and search one collection through `vectorstore.connect`.

    python loadtests/bench_vectorstore.py --uri embedded --n 50000 --index-dir /tmp/bench_embedded
    python loadtests/bench_vectorstore.py --uri embedded --isolation none --n 50000 --index-dir /tmp/bench_direct
    python loadtests/bench_vectorstore.py --uri lite --n 50000 --index-dir /tmp/bench_lite

Random unit vectors (dim 384, like MiniLM's), one IP collection with the configured index
(HNSW by default). Prints one JSON line: seconds to start (or attach to) the managed server, to
upsert, to seal (flush, build the index) and to open (load), single-query search p50/p95 over 200 queries
with and without the layer filter, a 2,000-id fetch, and the server process's RSS afterwards
(with network isolation, Milvus's and the relay's). `--isolation none` against the default
measures the relay: every call then goes to the proxy directly.
The collection is dropped and the store closed at the end (the last client stops the server).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hygraph.backends.vectorstore import connect  # noqa: E402
from hygraph.config import VectorStoreConfig  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--uri", default="embedded", help="vector_store.uri: embedded, lite or a Milvus URI")
    ap.add_argument("--backend", default="milvus", choices=["milvus", "faiss"])
    ap.add_argument("--isolation", default="auto", choices=["auto", "netns", "none"],
                    help="vector_store.isolation for the embedded server")
    ap.add_argument("--index-dir", required=True, type=Path)
    ap.add_argument("--n", type=int, default=50000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((args.n, args.dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    ids = [f"e{i}" for i in range(args.n)]
    queries = rng.standard_normal((args.queries, args.dim)).astype(np.float32)
    out: dict = {"uri": args.uri, "backend": args.backend, "n": args.n, "dim": args.dim}

    t = time.perf_counter()
    store = connect(VectorStoreConfig(backend=args.backend, uri=args.uri, isolation=args.isolation), args.index_dir)
    out["start_s"] = round(time.perf_counter() - t, 2)
    state_file = args.index_dir / "milvus" / "server.json"
    state = json.loads(state_file.read_text()) if state_file.is_file() else {}
    out["isolation"] = state.get("isolation", "")
    name = "bench_entities"
    try:
        t = time.perf_counter()
        store.create(name, args.dim, "IP")
        store.upsert(name, ids, vecs, 1)
        out["upsert_s"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        store.seal(name)
        out["seal_s"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        store.open(name)
        out["open_s"] = round(time.perf_counter() - t, 1)
        for q in queries[:10]:
            store.search(name, q[None], 10)
        for label, layer in (("search", None), ("search_layer_filter", 0)):
            lat = []
            for q in queries:
                t = time.perf_counter()
                store.search(name, q[None], 10, layer=layer)
                lat.append((time.perf_counter() - t) * 1000)
            out[f"{label}_p50_ms"] = round(float(np.percentile(lat, 50)), 2)
            out[f"{label}_p95_ms"] = round(float(np.percentile(lat, 95)), 2)
        t = time.perf_counter()
        store.fetch(name, ids[:2000])
        out["fetch_2000_ms"] = round((time.perf_counter() - t) * 1000, 1)
        if state:
            import psutil

            milvus = state.get("milvus_pid", state["pid"])
            out["server_rss_mb"] = round(psutil.Process(milvus).memory_info().rss / 1e6)
            if milvus != state["pid"]:
                out["relay_rss_mb"] = round(psutil.Process(state["pid"]).memory_info().rss / 1e6)
        store.drop(name)
    finally:
        store.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
