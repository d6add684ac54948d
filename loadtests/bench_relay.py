"""What the network-namespace relay costs: one isolated embedded server, searched in turns through
the relay (as every hygraph client does) and from inside its namespace (straight to the proxy).

    python loadtests/bench_relay.py --index-dir /tmp/bench_relay --n 50000 --rounds 8

Random unit vectors (dim 384), one IP collection (HNSW by default), like bench_vectorstore.py.
Each round runs two client processes one after the other, each timing `--queries` single-query
searches: one on the host, through the relay's 127.0.0.1 port, and one entered into the server's
user and network namespaces with `nsenter` (util-linux; the namespaces' owner may enter them),
on the proxy's own port. Alternating rounds on the same server and data leave the relay as the
only difference. Prints one JSON line: every round's p50/p95 per path, the medians of the p50s,
and the paired p50 differences (relay minus direct).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hygraph.backends.vectorstore import connect  # noqa: E402
from hygraph.backends.vectorstore.milvus_server import StandaloneServer  # noqa: E402
from hygraph.config import VectorStoreConfig  # noqa: E402

NAME = "bench_relay_entities"
TOKEN_ENV = "HYGRAPH_BENCH_TOKEN"  # the password travels in the environment, not on a command line


def client(uri: str, queries: int, dim: int) -> None:
    """One client process: time `queries` searches against `uri`, print p50/p95 in ms."""
    from hygraph.backends.vectorstore.milvus import MilvusStore

    store = MilvusStore(VectorStoreConfig(), uri, token=os.environ[TOKEN_ENV])
    try:
        store.open(NAME)
        q = np.random.default_rng(1).standard_normal((queries + 20, dim)).astype(np.float32)
        for x in q[:20]:  # connection and first-call warm-up
            store.search(NAME, x[None], 10)
        lat = []
        for x in q[20:]:
            t = time.perf_counter()
            store.search(NAME, x[None], 10)
            lat.append((time.perf_counter() - t) * 1000)
    finally:
        store.client.close()
    print(json.dumps({"p50_ms": round(float(np.percentile(lat, 50)), 3),
                      "p95_ms": round(float(np.percentile(lat, 95)), 3)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index-dir", required=True, type=Path)
    ap.add_argument("--n", type=int, default=50000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--client", metavar="URI", help=argparse.SUPPRESS)  # a client process's own run
    args = ap.parse_args()
    if args.client:
        client(args.client, args.queries, args.dim)
        return

    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((args.n, args.dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    store = connect(VectorStoreConfig(isolation="netns"), args.index_dir)
    try:
        state = json.loads((args.index_dir / "milvus" / "server.json").read_text())
        store.create(NAME, args.dim, "IP")
        store.upsert(NAME, [f"e{i}" for i in range(args.n)], vecs, 1)
        store.seal(NAME)
        env = {**os.environ, TOKEN_ENV: StandaloneServer(args.index_dir / "milvus").token}
        me = [sys.executable, str(Path(__file__).resolve()), "--index-dir", str(args.index_dir),
              "--queries", str(args.queries), "--dim", str(args.dim), "--client"]
        paths = {"direct": ["nsenter", "-t", str(state["pid"]), "-U", "-n", "--preserve-credentials",
                            *me, f"http://127.0.0.1:{state['ports']['proxy_port']}"],
                 "relay": [*me, f"http://127.0.0.1:{state['port']}"]}
        rounds: list[dict[str, dict[str, float]]] = []
        for _ in range(args.rounds):
            rounds.append({path: json.loads(subprocess.run(argv, env=env, check=True, capture_output=True,
                                                           text=True).stdout.strip().splitlines()[-1])
                           for path, argv in paths.items()})
        store.drop(NAME)
    finally:
        store.close()
    out = {"n": args.n, "dim": args.dim, "queries": args.queries, "rounds": rounds,
           **{f"{path}_p50_median_ms": round(statistics.median(r[path]["p50_ms"] for r in rounds), 3)
              for path in paths},
           "relay_minus_direct_p50_ms": [round(r["relay"]["p50_ms"] - r["direct"]["p50_ms"], 3) for r in rounds]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
