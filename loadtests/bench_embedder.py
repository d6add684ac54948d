"""The embedder's arithmetic side by side: float32 against bfloat16 autocast, on the texts hygraph embeds.

Three workloads, each embedded `--repeats` times per precision in alternating order (medians reported):
questions (one short sentence each, the Retriever's work), passages (corpus documents, the build's) and
summaries (the extractive LLM's summaries of groups of passages, the updater's work after an insert).
Also the cosine between the two precisions' vectors of the same text, and the precision `auto` picks here.

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

PRECISIONS = ("float32", "bfloat16")


def workloads(corpus: Path, n: int) -> dict[str, list[str]]:
    docs = [json.loads(line) for line in corpus.open(encoding="utf-8") if line.strip()][:n * 8]
    llm = ExtractiveLLM()
    groups = [docs[i:i + 8] for i in range(0, len(docs), 8)][:n]
    # Entities are the group's titles, as the knowledge stage names them; relations are left to the summary.
    summaries = llm.summarize([SummaryRequest(tuple(f"{d['title']}\n{d['text']}" for d in g),
                                              tuple(d["title"] for d in g)) for g in groups])
    return {"questions": [f"What is known about {d['title']}?" for d in docs[:n]],
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
    models = {p: make_embedder(EmbedderConfig(precision=p, device="cpu"), threads=args.threads) for p in PRECISIONS}
    for m in models.values():
        m.encode(["warm up"])
    seconds: dict[str, dict[str, list[float]]] = {w: {p: [] for p in PRECISIONS} for w in texts}
    vectors: dict[str, dict[str, np.ndarray]] = {w: {} for w in texts}
    for r in range(args.repeats):
        for w, batch in texts.items():
            for p in (PRECISIONS if r % 2 == 0 else PRECISIONS[::-1]):
                t0 = time.perf_counter()
                vectors[w][p] = models[p].encode(batch)
                seconds[w][p].append(time.perf_counter() - t0)
    rows = []
    for w, batch in texts.items():
        med = {p: statistics.median(seconds[w][p]) for p in PRECISIONS}
        cos = (vectors[w]["float32"] * vectors[w]["bfloat16"]).sum(axis=1)
        rows.append({"workload": w, "texts": len(batch), "mean_chars": round(float(np.mean([len(t) for t in batch]))),
                     **{f"{p}_ms_per_text": round(1000 * med[p] / len(batch), 2) for p in PRECISIONS},
                     "speedup": round(med["float32"] / med["bfloat16"], 2),
                     "cosine_min": round(float(cos.min()), 6), "cosine_median": round(float(np.median(cos)), 6)})
    report = {"machine": f"{platform.machine()}, {platform.processor() or 'cpu'}", "threads": args.threads,
              "repeats": args.repeats, "auto_precision": resolve_precision("auto", "cpu"), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2))
    lines = [f"# Embedder precision: float32 vs bfloat16 autocast ({report['machine']}, {args.threads:g} thread(s), "
             f"median of {args.repeats}; `auto` here: {report['auto_precision']})", "",
             "| workload | texts | mean chars | float32 ms/text | bfloat16 ms/text | speedup | cosine min "
             "| cosine median |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['workload']} | {r['texts']} | {r['mean_chars']} | {r['float32_ms_per_text']} | "
              f"{r['bfloat16_ms_per_text']} | {r['speedup']}x | {r['cosine_min']} | {r['cosine_median']} |"
              for r in rows]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
