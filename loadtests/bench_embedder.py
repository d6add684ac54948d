"""The embedder's runtimes side by side: torch float32 (the baseline), torch bfloat16 autocast, and ONNX Runtime
(`embedder.runtime: onnx`, the CPU default), on the texts hygraph embeds.

Four workloads, each embedded `--repeats` times per variant in rotating order (medians reported): one question
per call (what a Retriever replica does for a query), questions in one batch, passages (corpus documents, the
build's) and summaries (the extractive LLM's summaries of groups of passages, the updater's work after an
insert). Per variant: wall and CPU ms per text, and the cosine of its vectors to the baseline's.

    python loadtests/bench_embedder.py --corpus ../shared/data/dev/2wiki_dev.corpus.jsonl --out runs/bench_embedder
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python loadtests/x.py` finds the package

from hygraph.backends import resolve_precision  # noqa: E402
from hygraph.backends.embedder import make_embedder  # noqa: E402
from hygraph.backends.llm.base import SummaryRequest  # noqa: E402
from hygraph.backends.llm.extractive import ExtractiveLLM  # noqa: E402
from hygraph.config import EmbedderConfig  # noqa: E402
from hygraph.data import DEMO_DIR  # noqa: E402

VARIANTS = {"torch_float32": {"precision": "float32", "runtime": "torch"},
            "torch_bfloat16": {"precision": "bfloat16", "runtime": "torch"},
            "onnx_float32": {"precision": "float32", "runtime": "onnx"}}
BASELINE = "torch_float32"


def workloads(corpus: Path, n: int) -> dict[str, list[str]]:
    docs = [json.loads(line) for line in corpus.open(encoding="utf-8") if line.strip()][:n * 8]
    llm = ExtractiveLLM()
    groups = [docs[i:i + 8] for i in range(0, len(docs), 8)][:n]
    # Entities are the group's titles, as the knowledge stage names them; relations are left to the summary.
    summaries = llm.summarize([SummaryRequest(tuple(f"{d['title']}\n{d['text']}" for d in g),
                                              tuple(d["title"] for d in g)) for g in groups])
    questions = [f"What is known about {d['title']}?" for d in docs[:n]]
    return {"question_per_call": questions, "questions": questions,
            "passages": [d["text"] for d in docs[:n]], "summaries": summaries}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=DEMO_DIR / "corpus.jsonl")
    ap.add_argument("--n", type=int, default=64, help="texts per workload")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=float, default=1.0, help="torch threads, as a replica with this CPU share")
    ap.add_argument("--out", type=Path, default=Path("runs/bench_embedder"))
    args = ap.parse_args()
    texts = workloads(args.corpus, args.n)
    models = {v: make_embedder(EmbedderConfig(device="cpu", **opts), threads=args.threads)
              for v, opts in VARIANTS.items()}
    for m in models.values():
        m.encode(["warm up"])
    names = list(VARIANTS)
    wall: dict[str, dict[str, list[float]]] = {w: {v: [] for v in names} for w in texts}
    cpu: dict[str, dict[str, list[float]]] = {w: {v: [] for v in names} for w in texts}
    vectors: dict[str, dict[str, np.ndarray]] = {w: {} for w in texts}
    for r in range(args.repeats):
        for w, batch in texts.items():
            for v in names[r % len(names):] + names[:r % len(names)]:
                t0, c0 = time.perf_counter(), time.process_time()
                if w == "question_per_call":
                    vectors[w][v] = np.vstack([models[v].encode([q]) for q in batch])
                else:
                    vectors[w][v] = models[v].encode(batch)
                wall[w][v].append(time.perf_counter() - t0)
                cpu[w][v].append(time.process_time() - c0)
    rows = []
    for w, batch in texts.items():
        row: dict = {"workload": w, "texts": len(batch), "mean_chars": round(float(np.mean([len(t) for t in batch])))}
        for v in names:
            cos = (vectors[w][BASELINE] * vectors[w][v]).sum(axis=1)
            row[v] = {"wall_ms_per_text": round(1000 * statistics.median(wall[w][v]) / len(batch), 2),
                      "cpu_ms_per_text": round(1000 * statistics.median(cpu[w][v]) / len(batch), 2),
                      "cpu_ratio_to_baseline": round(statistics.median(cpu[w][v]) / statistics.median(cpu[w][BASELINE]),
                                                     3),
                      "cosine_min": round(float(cos.min()), 6)}
        rows.append(row)
    report = {"machine": f"{platform.machine()}, {platform.processor() or 'cpu'}", "threads": args.threads,
              "repeats": args.repeats, "auto_precision": resolve_precision("auto", "cpu"),
              "auto_runtime": type(make_embedder(EmbedderConfig(device="cpu"), workload="questions")).__name__,
              "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2))
    lines = [f"# Embedder runtimes ({report['machine']}, {args.threads:g} thread(s), median of {args.repeats}; "
             f"`auto` for questions here: {report['auto_runtime']}, precision {report['auto_precision']})", "",
             "| workload | texts | mean chars | " + " | ".join(f"{v} CPU ms/text (x baseline, cos min)" for v in names)
             + " |", "|---|---|---|" + "---|" * len(names)]
    lines += [f"| {r['workload']} | {r['texts']} | {r['mean_chars']} | " + " | ".join(
        f"{r[v]['cpu_ms_per_text']} ({r[v]['cpu_ratio_to_baseline']}x, {r[v]['cosine_min']})" for v in names) + " |"
        for r in rows]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
