"""Times graph propagation (personalized PageRank, core/ppr.py) at an index's size, with the seeds real questions give.

For every question the seeds are built as `hybrid` builds them (linked entities and the dense +
BM25 passages); then `propagate` (reset vector + power iteration, propagation.py) is timed
`--repeats` times. The walk's size and the iterations taken are reported with the latencies.

Run: python -m hygraph.eval.bench_ppr --index-dir D --questions Q.jsonl [--repeats 5] [--limit N]
Progress goes to stderr; the last stdout line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from hygraph.config import load_config
from hygraph.core.ppr import power_iteration
from hygraph.core.retrieval import propagation
from hygraph.core.retrieval.fusion import bm25_hits, rrf
from hygraph.core.retrieval.hybrid import pool_size
from hygraph.core.retrieval.linking import link_entities
from hygraph.engine import QueryEngine
from hygraph.model import load_questions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=None)
    parser.add_argument("--index-dir", required=True)
    parser.add_argument("--questions", required=True)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args(argv)
    engine = QueryEngine(load_config(args.config), args.index_dir)
    try:
        view = engine.loaded.view
        if view.walk is None or view.graph is None:
            parser.error(f"{args.index_dir}: the index version has no hybrid graph")
        search = engine._searcher(engine.loaded)
        questions = load_questions(args.questions)[:args.limit]
        vecs = engine.embedder.encode([q.question for q in questions])
        times_ms: list[float] = []
        steps: list[int] = []
        depth = pool_size(args.k)
        for q, v in zip(questions, vecs):
            relation_hits = search("relations", v[None, :], propagation.RELATION_SEEDS, None)[0]
            chunk_hits = search("chunks", v[None, :], depth, None)[0]
            seeds = link_entities(engine._question_entities(q.question), relation_hits, view)
            fused = rrf([[c for c, _ in chunk_hits], [c for c, _ in bm25_hits(q.question, depth, view)]])
            propagation.propagate(view, seeds, fused)  # warm caches once
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                propagation.propagate(view, seeds, fused)
                times_ms.append((time.perf_counter() - t0) * 1e3)
            reset = propagation.reset_vector(view, seeds, fused)
            if reset is not None:
                steps.append(power_iteration(view.walk, reset, propagation.DAMPING, propagation.TOLERANCE)[1])
        result = {
            "index_dir": args.index_dir, "questions": len(questions), "repeats": args.repeats,
            "nodes": view.graph.n_nodes, "chunks": len(view.graph.chunk_ids), "entities": len(view.graph.entity_ids),
            "hyperedges": len(view.graph.hyperedge_ids), "transition_nnz": int(view.walk.matrix.nnz),
            "damping": propagation.DAMPING, "tolerance": propagation.TOLERANCE,
            "iterations_median": float(np.median(steps)) if steps else 0.0,
            "propagate_ms_p50": round(float(np.percentile(times_ms, 50)), 2),
            "propagate_ms_p95": round(float(np.percentile(times_ms, 95)), 2),
            "propagate_ms_max": round(float(np.max(times_ms)), 2),
        }
    finally:
        engine.close()
    print(f"propagation p50 {result['propagate_ms_p50']} ms, p95 {result['propagate_ms_p95']} ms over "
          f"{len(times_ms)} runs ({result['nodes']} nodes, {result['transition_nnz']} transitions, "
          f"{result['iterations_median']:.0f} iterations)", file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
