"""Does the online hyperbolic learner (HyperRAG §3.3) raise `hyperbolic` recall on questions it never served?

The question set is split in two: every other question is served in `hyperbolic` mode, in
order, and each served query's implicit subgraph goes through the updater's own learner
(indexing/online.py): one L_inc step per query and a full recalibration every
`--recalibrate-every` queries, exactly as the OnlineUpdater runs them. The other half is held
apart: its recall@k is measured before serving and after every `--report-every` served
queries. The learner moves points in memory here (a copy of the version's hyperbolic collection), so
the index on disk is left as it was; the "hyperbolic" vector search is answered exactly from
those points.

Run: python -m hygraph.eval.online_hyperbolic --index-dir D --questions Q.jsonl [--k 5]
     [--recalibrate-every 25] [--report-every 10] [--out F.json]
Progress goes to stderr; the last stdout line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from hygraph.config import HygraphConfig, load_config
from hygraph.core import hyperbolic
from hygraph.core.retrieval.context import Hits, Search
from hygraph.core.retrieval.view import Points
from hygraph.engine import QueryEngine
from hygraph.store.reading import Loaded, VersionSearch
from hygraph.eval.metrics import recall_at_k
from hygraph.indexing.online import OnlineLearner, install, observation, retrain
from hygraph.indexing.stages.hyperbolic import explicit_graph
from hygraph.model import Question, load_questions
from hygraph.store.files import write_atomic


class MemoryPoints:
    """The live points as the learner reads them (indexing/online.py LivePoints), held in memory: a copy of the
    version's hyperbolic collection, so learning never writes to the index."""

    def __init__(self, ids: list[str], points: np.ndarray, m: float, neighbours: Mapping[str, Sequence[str]]) -> None:
        self.ids, self.current, self.M, self._neighbours = ids, points, m, neighbours
        self.row = {cid: i for i, cid in enumerate(ids)}

    def exists(self, chunk_id: str) -> bool:
        return chunk_id in self.row

    def points(self, chunk_ids: Sequence[str]) -> np.ndarray:
        return self.current[[self.row[c] for c in chunk_ids]]

    def neighbours(self, chunk_id: str) -> Sequence[str]:
        return self._neighbours.get(chunk_id, ())

    def sample(self, k: int, rng: np.random.Generator, exclude: set[str]) -> list[str]:
        return hyperbolic.sample_present(self.ids, k, rng, exclude)

    def move(self, chunk_ids: Sequence[str], storage: np.ndarray) -> None:
        """A step's moved points, given as the storage vectors the updater would upsert."""
        if len(chunk_ids):
            self.current[[self.row[c] for c in chunk_ids]] = hyperbolic.from_storage(storage)


class LearnedSearch(VersionSearch):
    """The "hyperbolic" search answered exactly from the learner's points; the other kinds from the store."""

    def __init__(self, engine: "LearningEngine", loaded: Loaded) -> None:
        super().__init__(engine.index.vectors, loaded, engine.search_pool)
        self.engine = engine

    def __call__(self, kind: str, queries: np.ndarray, k: int, layer: int | None) -> Hits:
        if kind != "hyperbolic":
            return super().__call__(kind, queries, k, layer)
        storage, ids = self.engine.storage, self.engine.live.ids
        out = []
        for row in np.asarray(queries, dtype=np.float32):
            d = ((storage - row) ** 2).sum(axis=1)
            top = np.argpartition(d, min(k, len(d)) - 1)[:k]
            out.append([(ids[i], float(d[i])) for i in top[np.argsort(d[top], kind="stable")]])
        return out


class LearningEngine(QueryEngine):
    """The query engine with the Poincaré points read from a learner's in-memory copy instead of the store."""

    def __init__(self, cfg: HygraphConfig, index_dir: str | Path) -> None:
        super().__init__(cfg, index_dir)
        loaded = self.loaded
        info = loaded.version.manifest.hyperbolic
        if info is None:
            raise SystemExit(f"{index_dir}: index version {self.version} has no hyperbolic embeddings")
        self.graph = explicit_graph(loaded.version)
        ids = self.graph[0]
        current = hyperbolic.from_storage(self.index.vectors.fetch(loaded.collections["hyperbolic"], ids))
        self.live = MemoryPoints(ids, current, info.M, loaded.view.hyper_neighbours)
        self.refresh_storage()

    def refresh_storage(self) -> None:
        """Storage vectors of the current points (the rows an updated "hyperbolic" collection would hold)."""
        self.storage = hyperbolic.storage_vectors(self.live.current, self.live.M).astype(np.float32)

    def _points(self, loaded: Loaded) -> Points:
        return self.live.points

    def _searcher(self, loaded: Loaded) -> Search:
        return LearnedSearch(self, loaded)


def held_out_recall(engine: QueryEngine, questions: list[Question], vecs: np.ndarray, k: int) -> float:
    """Mean `hyperbolic` recall@k over the questions (no learning happens while measuring)."""
    ranked = [[p.id for p in engine.retrieve(q.question, v, "hyperbolic", k).passages]
              for q, v in zip(questions, vecs)]
    return round(float(np.mean([recall_at_k(r, q.supporting_ids, k) for r, q in zip(ranked, questions)])), 4)


def run(cfg: HygraphConfig, index_dir: str, questions_path: str, k: int, recalibrate_every: int,
        report_every: int) -> dict[str, Any]:
    questions = [q for q in load_questions(questions_path) if q.supporting_ids]
    served, held = questions[0::2], questions[1::2]
    engine = LearningEngine(cfg, index_dir)
    try:
        vec_served = engine.embedder.encode([q.question for q in served])
        vec_held = engine.embedder.encode([q.question for q in held])
        learner = OnlineLearner(cfg.hyperbolic, cfg.updates.model_copy(update={"recalibrate_every": recalibrate_every}))
        served_before = held_out_recall(engine, served, vec_served, k)
        curve = [{"served": 0, "held_out_recall": held_out_recall(engine, held, vec_held, k)}]
        print(f"[online] before: held-out recall@{k} {curve[0]['held_out_recall']}, served {served_before}",
              file=sys.stderr, flush=True)
        steps_s: list[float] = []
        recalibrations = 0
        for n, (q, v) in enumerate(zip(served, vec_served), 1):
            ctx = engine.retrieve(q.question, v, "hyperbolic", k)
            learner.observe(observation(ctx.notes["implicit_subgraph"], v))
            t0 = time.perf_counter()
            engine.live.move(*learner.step(engine.live))
            if learner.recalibration_due:
                job = learner.recalibration(*engine.graph)
                live = engine.live
                storage, live.M = install(live.ids, live.current, job.chunk_ids, retrain(job, cfg.hyperbolic, "cpu"))
                live.current = hyperbolic.from_storage(storage)
                recalibrations += 1
            steps_s.append(time.perf_counter() - t0)
            engine.refresh_storage()
            if n % report_every == 0 or n == len(served):
                curve.append({"served": n, "held_out_recall": held_out_recall(engine, held, vec_held, k)})
                print(f"[online] after {n} served queries ({recalibrations} recalibrations): held-out "
                      f"recall@{k} {curve[-1]['held_out_recall']}", file=sys.stderr, flush=True)
        # The questions it learned from, asked again: what L_inc is meant to refine.
        served_after = held_out_recall(engine, served, vec_served, k)
        print(f"[online] served questions asked again: recall@{k} {served_before} -> {served_after}",
              file=sys.stderr, flush=True)
    finally:
        engine.close()
    return {"index_dir": index_dir, "dataset": Path(questions_path).name.split(".")[0], "k": k,
            "served_questions": len(served), "held_out_questions": len(held),
            "online_steps": cfg.updates.online_steps, "recalibrate_every": recalibrate_every,
            "recalibrations": recalibrations, "learn_ms_median": round(float(np.median(steps_s)) * 1e3, 1),
            "held_out_recall_before": curve[0]["held_out_recall"],
            "held_out_recall_after": curve[-1]["held_out_recall"], "served_recall_before": served_before,
            "served_recall_after": served_after, "curve": curve}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=None)
    parser.add_argument("--index-dir", required=True)
    parser.add_argument("--questions", required=True)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--recalibrate-every", type=int, default=25)
    parser.add_argument("--report-every", type=int, default=10)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    result = run(load_config(args.config), args.index_dir, args.questions, args.k, args.recalibrate_every,
                 args.report_every)
    if args.out:
        write_atomic(Path(args.out), json.dumps(result, indent=1).encode())
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
