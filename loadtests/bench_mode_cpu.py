"""CPU per query of every retrieval mode in one process (no Serve, no HTTP): where a query's CPU goes.

Loads the index once (QueryEngine), then for each mode runs `QueryPipeline.retrieve` over the first
`--questions-n` questions (after one warm-up query) and prints the process CPU time and wall time per
query. The vector store's own CPU (the Milvus server) is not counted: this is the query process's share.
`--profile MODE` prints the top of a cProfile of that mode instead.

    python loadtests/bench_mode_cpu.py --index-dir /tmp/mq \
        --questions ../shared/data/dev/musique_train100.questions.jsonl
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python loadtests/x.py` finds the package

from hygraph.config import load_config  # noqa: E402
from hygraph.core.retrieval.modes import MODE_NAMES  # noqa: E402
from hygraph.engine import QueryEngine  # noqa: E402
from hygraph.pipeline import QueryPipeline, QueryRequest  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index-dir", required=True)
    ap.add_argument("--questions", required=True)
    ap.add_argument("--questions-n", type=int, default=40)
    ap.add_argument("--config", default=None)
    ap.add_argument("--modes", default=",".join(MODE_NAMES))
    ap.add_argument("--profile", default=None, help="a mode to profile (cProfile, by own time)")
    args = ap.parse_args()
    cfg = load_config(args.config)
    questions = [json.loads(line)["question"] for line in open(args.questions)][:args.questions_n]
    engine = QueryEngine(cfg, args.index_dir)
    pipeline = QueryPipeline(engine)
    try:
        for mode in [args.profile] if args.profile else args.modes.split(","):
            pipeline.retrieve(QueryRequest.make(cfg.retrieval, questions[0], mode))  # warm-up: lazy loads
            profile = cProfile.Profile(timer=time.process_time) if args.profile else None
            cpu, wall = time.process_time(), time.perf_counter()
            if profile:
                profile.enable()
            for q in questions:
                pipeline.retrieve(QueryRequest.make(cfg.retrieval, q, mode))
            if profile:
                profile.disable()
                pstats.Stats(profile).sort_stats("tottime").print_stats(25)
            n = len(questions)
            print(json.dumps({"mode": mode, "cpu_ms_per_query": round((time.process_time() - cpu) / n * 1e3, 2),
                              "wall_ms_per_query": round((time.perf_counter() - wall) / n * 1e3, 2)}), flush=True)
    finally:
        engine.close()


if __name__ == "__main__":
    main()
