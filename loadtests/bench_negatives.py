"""The online learner's negative sampling per step (`core.hyperbolic.sample_present`) against the pass over every
live chunk it replaced, at growing index sizes (a tenth of the chunk numbers removed, 57 excluded, 512 drawn).

    python loadtests/bench_negatives.py --out runs/bench_negatives/report

Medians of 21 draws per size; writes <out>.json and <out>.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python loadtests/x.py` finds the package

from hygraph.core.hyperbolic import sample_present  # noqa: E402
from hygraph.indexing.online import NEGATIVE_POOL  # noqa: E402


def every_live_chunk(ids: list[str | None], k: int, rng: np.random.Generator, exclude: set[str]) -> list[str]:
    """The baseline: the sampler before sample_present (a list of every live, unexcluded chunk, then a choice)."""
    alive = [c for c in ids if c is not None and c not in exclude]
    picked = rng.choice(len(alive), size=min(k, len(alive)), replace=False) if alive else []
    return [alive[i] for i in sorted(picked)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="2400,100000,1000000")
    p.add_argument("--out", default="runs/bench_negatives/report")
    args = p.parse_args()
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        ids: list[str | None] = [f"chunk-{i}" if i % 10 else None for i in range(n)]
        exclude = {c for c in ids[1:400:7] if c is not None}
        row: dict[str, float | int] = {"chunks": n}
        for name, sample in (("every_live_chunk_ms", every_live_chunk), ("sample_present_ms", sample_present)):
            rng, took = np.random.default_rng(0), []
            for _ in range(21):
                t0 = time.perf_counter()
                sample(ids, NEGATIVE_POOL, rng, exclude)
                took.append(time.perf_counter() - t0)
            row[name] = round(statistics.median(took) * 1e3, 3)
        row["ratio"] = round(row["every_live_chunk_ms"] / row["sample_present_ms"], 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = ["# Negative sampling per online step", "",
             f"{NEGATIVE_POOL} negatives drawn; medians of 21 draws (ms).", "",
             "| chunks | pass over every live chunk | sample_present | ratio |", "|---|---|---|---|"]
    lines += [f"| {r['chunks']:,} | {r['every_live_chunk_ms']} | {r['sample_present_ms']} | {r['ratio']}x |"
              for r in rows]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
