"""Times graph propagation (personalized PageRank, core/ppr.py) at an index's size, with the seeds real questions give.

For every question the seeds are built as `hybrid` builds them (linked entities and the dense +
BM25 passages); then `propagate` (reset vector + forward push, propagation.py) is timed
`--repeats` times, beside the whole-graph power iteration it replaced (tolerance 3e-2, its last
setting) as the baseline. The walk's size, the push rounds and power iterations taken, and how
many of the top-k passages the two agree on are reported with the latencies.

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
from hygraph.core.ppr import forward_push, power_iteration
from hygraph.core.retrieval import propagation
from hygraph.core.retrieval.fusion import bm25_hits, rrf
from hygraph.core.retrieval.context import pool_size
from hygraph.core.retrieval.linking import link_entities
from hygraph.engine import QueryEngine
from hygraph.model import load_questions

POWER_TOLERANCE = 3e-2  # the power iteration's stopping L1 change when it ranked passages (the baseline)


def _ms(times: list[float]) -> dict[str, float]:
    return {"p50": round(float(np.percentile(times, 50)), 2), "p95": round(float(np.percentile(times, 95)), 2),
            "max": round(float(np.max(times)), 2)}


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
        push_ms: list[float] = []
        power_ms: list[float] = []
        rounds: list[int] = []
        steps: list[int] = []
        agree: list[float] = []
        depth = pool_size(args.k)
        n_chunks = len(view.graph.chunk_ids)
        for q, v in zip(questions, vecs):
            relation_hits = search("relations", v[None, :], propagation.RELATION_SEEDS, None)[0]
            chunk_hits = search("chunks", v[None, :], depth, None)[0]
            seeds = link_entities(engine._question_entities(q.question), relation_hits, view)
            fused = rrf([[c for c, _ in chunk_hits], [c for c, _ in bm25_hits(q.question, depth, view)]])
            reset = propagation.reset_vector(view, seeds, fused)
            if reset is None:
                continue
            forward_push(view.walk, reset, propagation.DAMPING, propagation.PUSH_EPSILON)  # warm caches once
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                pushed, n_rounds = forward_push(view.walk, reset, propagation.DAMPING, propagation.PUSH_EPSILON)
                push_ms.append((time.perf_counter() - t0) * 1e3)
                t0 = time.perf_counter()
                powered, n_steps = power_iteration(view.walk, reset, propagation.DAMPING, POWER_TOLERANCE)
                power_ms.append((time.perf_counter() - t0) * 1e3)
            rounds.append(n_rounds)
            steps.append(n_steps)
            top = [{view.chunk_doc[c] for c, _ in propagation.by_mass(p[:n_chunks], view, args.k)}
                   for p in (pushed, powered)]
            agree.append(len(top[0] & top[1]) / max(1, len(top[1])))
        result = {
            "index_dir": args.index_dir, "questions": len(questions), "repeats": args.repeats,
            "nodes": view.graph.n_nodes, "chunks": n_chunks, "entities": len(view.graph.entity_ids),
            "hyperedges": len(view.graph.hyperedge_ids), "transition_nnz": int(view.walk.matrix.nnz),
            "damping": propagation.DAMPING, "push_epsilon": propagation.PUSH_EPSILON,
            "power_tolerance": POWER_TOLERANCE,
            "push_rounds_median": float(np.median(rounds)) if rounds else 0.0,
            "power_iterations_median": float(np.median(steps)) if steps else 0.0,
            "push_ms": _ms(push_ms) if push_ms else None, "power_ms": _ms(power_ms) if power_ms else None,
            f"top{args.k}_passages_agree": round(float(np.mean(agree)), 4) if agree else None,
        }
    finally:
        engine.close()
    if push_ms:
        print(f"forward push p50 {result['push_ms']['p50']} ms vs power iteration p50 {result['power_ms']['p50']} ms "
              f"over {len(push_ms)} runs ({result['nodes']} nodes, {result['transition_nnz']} transitions); "
              f"top-{args.k} passages agree {result[f'top{args.k}_passages_agree']:.3f}", file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
