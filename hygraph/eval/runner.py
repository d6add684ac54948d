"""`hygraph eval`: run every question through each mode and summarize quality and latency.

Exactly the modes asked for run; `--baselines` adds the ones a user would run instead (`dense`,
`bm25`, `dense+bm25`) in front of them when missing. With `--report` the result also carries what
a reader needs to judge the graph modes:
- `by_type`: the per-mode summary for each question type of the set's `NAME.meta.jsonl`
  (2Wiki types, MuSiQue hop counts, HotpotQA bridge/comparison), when that file exists;
- `recall_curve`: recall@k for k = 1..10 per mode, from a second, retrieval-only pass at
  depth max(10, k) (the first pass retrieves at k, as served).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from hygraph.config import HygraphConfig
from hygraph.core.retrieval.modes import MODE_NAMES
from hygraph.engine import QueryEngine
from hygraph.pipeline import QueryPipeline, QueryRequest
from hygraph.errors import InputError
from hygraph.eval.metrics import EvalRow, ModeStats, recall_at_k
from hygraph.eval.report import write_report
from hygraph.indexing.progress import Stages
from hygraph.model import Question, load_questions
from hygraph.store.files import write_atomic

BASELINES = ("dense", "bm25", "dense+bm25")
CURVE_DEPTH = 10


def question_types(questions_path: str | Path) -> dict[str, str]:
    """Question id -> type from the `NAME.meta.jsonl` beside `NAME.questions.jsonl` ({} when there is none).

    MuSiQue's types are hop counts with a composition shape ("3hop1"); they are grouped by hops.
    """
    path = Path(questions_path)
    meta = path.with_name(path.name.replace(".questions.jsonl", ".meta.jsonl"))
    if meta == path or not meta.is_file():
        return {}
    out: dict[str, str] = {}
    for n, line in enumerate(meta.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            out[str(row["id"])] = f"{row['hops']}-hop" if "hops" in row else str(row["type"])
        except (ValueError, KeyError, TypeError):
            raise InputError(f"{meta}:{n}: expected a JSON object with 'id' and 'type'") from None
    return out


def recall_curve(engine: QueryEngine, questions: list[Question], query_vecs: np.ndarray, mode: str,
                 depth: int) -> list[float | None]:
    """Mean recall@k for k = 1..CURVE_DEPTH over questions with supporting ids, from one retrieval at `depth`."""
    sums = np.zeros(CURVE_DEPTH)
    rows = 0
    for q, qv in zip(questions, query_vecs):
        if not q.supporting_ids:
            continue
        ranked = [p.id for p in engine.retrieve(q.question, qv, mode, depth).passages]
        sums += [recall_at_k(ranked, q.supporting_ids, k) for k in range(1, CURVE_DEPTH + 1)]
        rows += 1
    return [round(float(s / rows), 4) for s in sums] if rows else [None] * CURVE_DEPTH


def run_eval(cfg: HygraphConfig, index_dir: str | Path, questions_path: str | Path, modes: list[str],
             k: int, out: str | None = None, report: str | None = None,
             limit: int | None = None, baselines: bool = False) -> dict[str, Any]:
    """The full result, per-question rankings (`ranked`) included; `out` gets the same."""
    if not modes:
        raise InputError("--modes: give at least one mode")
    for m in modes:
        if m not in MODE_NAMES:
            raise InputError(f"--modes: unknown mode '{m}' (one of {', '.join(MODE_NAMES)})")
    if baselines:
        modes = [*(b for b in BASELINES if b not in modes), *modes]
    questions = load_questions(questions_path)[:limit]
    types = question_types(questions_path) if report else {}
    engine = QueryEngine(cfg, index_dir)
    pipeline = QueryPipeline(engine)
    progress = Stages("eval")
    result: dict[str, Any] = {"questions": len(questions), "k": k, "modes": {},
                              "dataset": Path(questions_path).name.split(".")[0],
                              "index_version": engine.version}
    stats = {mode: ModeStats(mode) for mode in modes}
    by_type: dict[str, dict[str, ModeStats]] = {mode: {} for mode in modes}
    retrieval_ms: dict[str, list[float]] = {mode: [] for mode in modes}
    retrieve_ms: dict[str, list[float]] = {mode: [] for mode in modes}
    ranked: dict[str, dict[str, list[str]]] = {mode: {} for mode in modes}
    try:
        # One untimed query per mode loads what each mode touches first (collections, caches), and
        # the modes take turns on every question, so a busy machine slows them all alike and the
        # latencies of one run compare fairly.
        for mode in modes if questions else ():
            pipeline.run(QueryRequest.make(cfg.retrieval, questions[0].question, mode, k))
        with progress.stage(f"modes {', '.join(modes)}"), progress.bar(len(questions), "questions") as bar:
            for q in questions:
                for mode in modes:
                    res = pipeline.run(QueryRequest.make(cfg.retrieval, q.question, mode, k)).to_json()
                    row = EvalRow(question_id=q.id, mode=mode, ranked_ids=[p["id"] for p in res["passages"]],
                                  answer=res["answer"], golds=q.answers, supporting_ids=q.supporting_ids,
                                  latency_ms=res["timings_ms"]["total"])
                    stats[mode].add(row)
                    ranked[mode][q.id] = row.ranked_ids
                    if q.id in types:
                        by_type[mode].setdefault(types[q.id], ModeStats(mode)).add(row)
                    retrieval_ms[mode].append(res["timings_ms"]["embed"] + res["timings_ms"]["retrieve"])
                    retrieve_ms[mode].append(res["timings_ms"]["retrieve"])
                bar.update(1)
        for mode in modes:
            # Beyond CONTRACT.md's fields: latency without the answer step (question embedding + retrieval), and
            # of the retrieval alone (the embedding is the same model call for every mode).
            result["modes"][mode] = {**stats[mode].summary(),
                                     "retrieval_p50_ms": round(float(np.percentile(retrieval_ms[mode], 50)), 1),
                                     "retrieval_p95_ms": round(float(np.percentile(retrieval_ms[mode], 95)), 1),
                                     "retrieve_only_p50_ms": round(float(np.percentile(retrieve_ms[mode], 50)), 2)}
            print(f"[eval] {mode}: {json.dumps(result['modes'][mode])}", file=sys.stderr, flush=True)
        # Which passages each question got: two runs (two builds, two versions) compare passage by passage.
        result["ranked"] = ranked
        if types:
            result["by_type"] = {mode: {t: {**s.summary(), "questions": s.count} for t, s in sorted(typed.items())}
                                 for mode, typed in by_type.items()}
        if report:
            with progress.stage(f"recall@1..{CURVE_DEPTH}"):
                vecs = engine.embedder.encode([q.question for q in questions])
                result["recall_curve"] = {mode: recall_curve(engine, questions, vecs, mode, max(CURVE_DEPTH, k))
                                          for mode in modes}
    finally:
        engine.close()
    if out:
        write_atomic(Path(out), json.dumps(result, indent=1).encode())
    if report:
        for path in write_report(result, report, f"hygraph eval: {result['dataset']}"):
            print(f"[eval] wrote {path}", file=sys.stderr)
    return result
