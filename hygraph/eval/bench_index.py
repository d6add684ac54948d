"""Times LSH clustering alone (hash + partition, EraRAG Alg. 1 lines 3-11) on random vectors.

Run: python -m hygraph.eval.bench_index [--n 250000 --dim 384 --k 16 --s-min 5 --s-max 50 --runs 5]
Progress goes to stderr; the last stdout line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np
import torch

from hygraph.core.lsh import hash_codes, make_hyperplanes, partition


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=250_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--k", type=int, default=16)
    parser.add_argument("--s-min", type=int, default=5)
    parser.add_argument("--s-max", type=int, default=50)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.runs < 1 or args.n < 1:
        parser.error("--runs and --n must be >= 1")

    vectors = np.random.default_rng(args.seed).standard_normal((args.n, args.dim), dtype=np.float32)
    hyperplanes = make_hyperplanes(args.dim, args.k, args.seed)
    hash_s: list[float] = []
    partition_s: list[float] = []
    total_s: list[float] = []
    sizes = np.empty(0, dtype=np.int64)
    for run in range(args.runs):
        start = time.perf_counter()
        codes = hash_codes(vectors, hyperplanes, device=args.device)
        hashed = time.perf_counter()
        segments = partition(codes, args.s_min, args.s_max)
        done = time.perf_counter()
        hash_s.append(hashed - start)
        partition_s.append(done - hashed)
        total_s.append(done - start)
        sizes = np.array([s.size for s in segments], dtype=np.int64)
        print(f"run {run + 1}/{args.runs}: hash {hash_s[-1]:.3f}s partition {partition_s[-1]:.3f}s "
              f"total {total_s[-1]:.3f}s, {sizes.size} segments", file=sys.stderr)

    result = {
        "n": args.n, "dim": args.dim, "k": args.k, "s_min": args.s_min, "s_max": args.s_max,
        "runs": args.runs, "device": args.device, "torch_threads": torch.get_num_threads(),
        "hash_s_median": round(statistics.median(hash_s), 4),
        "partition_s_median": round(statistics.median(partition_s), 4),
        "total_s_median": round(statistics.median(total_s), 4),
        "segments": int(sizes.size),
        "segment_size_min": int(sizes.min()) if sizes.size else 0,
        "segment_size_max": int(sizes.max()) if sizes.size else 0,
        "segment_size_mean": round(float(sizes.mean()), 2) if sizes.size else 0.0,
    }
    print(f"median total {result['total_s_median']:.3f}s (hash {result['hash_s_median']:.3f}s, "
          f"partition {result['partition_s_median']:.3f}s)")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
