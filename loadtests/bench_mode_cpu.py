"""CPU per query of every retrieval mode in one process (no Serve, no HTTP): where a query's CPU goes.

Loads the index once (QueryEngine), then for each mode runs `QueryPipeline.retrieve` over the first
`--questions-n` questions (after one warm-up query) and prints the process CPU time and wall time per
query, and, for a managed local Milvus (`vector_store.uri` embedded or lite), the CPU its server process tree spent
over the same queries (`store_cpu_ms_per_query`): each search costs the server CPU that the query process's figure
leaves out, and a served query pays both.
`--answer` runs what a served `/v1/query` runs in its replica: retrieval, the answer role and the response's JSON.
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

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python loadtests/x.py` finds the package

from hygraph.backends.vectorstore import EMBEDDED, LITE  # noqa: E402
from hygraph.config import HygraphConfig, load_config  # noqa: E402
from hygraph.core.retrieval.modes import MODE_NAMES  # noqa: E402
from hygraph.engine import QueryEngine  # noqa: E402
from hygraph.pipeline import QueryPipeline, QueryRequest  # noqa: E402
from loadtests.common import tree_cpu_s  # noqa: E402


def _store_server(cfg: HygraphConfig, index_dir: str) -> psutil.Process | None:
    """The managed Milvus server of `index_dir` (its `server.json`, managed.py), or None for another store."""
    vs = cfg.vector_store
    if vs.backend != "milvus" or vs.uri not in (EMBEDDED, LITE):
        return None
    data_dir = Path(vs.server_dir) if vs.server_dir else Path(index_dir) / "milvus"
    state = json.loads((data_dir / "server.json").read_text())
    return psutil.Process(int(state["pid"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index-dir", required=True)
    ap.add_argument("--questions", required=True)
    ap.add_argument("--questions-n", type=int, default=40)
    ap.add_argument("--config", default=None)
    ap.add_argument("--modes", default=",".join(MODE_NAMES))
    ap.add_argument("--profile", default=None, help="a mode to profile (cProfile, by own time)")
    ap.add_argument("--answer", action="store_true", help="answer too, and make the response's JSON, as served")
    args = ap.parse_args()
    cfg = load_config(args.config)
    questions = [json.loads(line)["question"] for line in open(args.questions)][:args.questions_n]
    engine = QueryEngine(cfg, args.index_dir)
    pipeline = QueryPipeline(engine)
    server = _store_server(cfg, args.index_dir)

    def query(question: str, mode: str) -> None:
        req = QueryRequest.make(cfg.retrieval, question, mode)
        if args.answer:
            pipeline.run(req).render().json()
        else:
            pipeline.retrieve(req)

    def store_cpu_s() -> float:  # the store server's tree (0 without a managed server)
        return tree_cpu_s([server.pid]) if server is not None else 0.0

    try:
        for mode in [args.profile] if args.profile else args.modes.split(","):
            query(questions[0], mode)  # warm-up: lazy loads
            profile = cProfile.Profile(timer=time.process_time) if args.profile else None
            cpu, wall, store_cpu = time.process_time(), time.perf_counter(), store_cpu_s()
            if profile:
                profile.enable()
            for q in questions:
                query(q, mode)
            if profile:
                profile.disable()
                pstats.Stats(profile).sort_stats("tottime").print_stats(25)
            n = len(questions)
            store_ms = (store_cpu_s() - store_cpu) / n * 1e3
            cpu_ms = (time.process_time() - cpu) / n * 1e3
            print(json.dumps({"mode": mode, "cpu_ms_per_query": round(cpu_ms, 2),
                              "store_cpu_ms_per_query": round(store_ms, 2),
                              "total_cpu_ms_per_query": round(cpu_ms + store_ms, 2),
                              "wall_ms_per_query": round((time.perf_counter() - wall) / n * 1e3, 2)}), flush=True)
    finally:
        engine.close()


if __name__ == "__main__":
    main()
