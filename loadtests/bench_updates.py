"""EraRAG's growing-corpus experiment: build on half a corpus, insert the rest in steps, compare with rebuilds.

    python loadtests/bench_updates.py --corpus ../shared/data/dev/2wiki_dev.corpus.jsonl \
        --questions ../shared/data/dev/2wiki_dev.questions.jsonl --docs 1000 --out runs/bench_updates

Per step it reports the insert's seconds and summarize calls against a full `hygraph index`
of the same corpus (every `--rebuild-every` steps; the last step always), then recall@5 of
`hybrid` on the incrementally grown index against the static build of the full corpus, on
the questions whose supporting passages all lie in the corpus used. Last, one single-document
insert into the grown index. Writes <out>.json and <out>.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from hygraph.updater.index_updater import IndexUpdater
from hygraph.config import load_config
from hygraph.eval.runner import run_eval
from hygraph.indexing.build import build_index
from hygraph.model import load_corpus, load_questions
from hygraph.store.journal import request_of
from hygraph.store.object_journal import open_journal


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _insert(cfg, index_dir: Path, rows: list[dict]) -> dict:  # noqa: ANN001
    open_journal(index_dir).append(request_of("insert", {"documents": rows}))
    updater = IndexUpdater(cfg, index_dir)
    try:
        t0 = time.perf_counter()
        results = updater.run_until_idle()
        wall = time.perf_counter() - t0
    finally:
        updater.close()
    calls: dict[str, int] = {}
    for r in results:
        for role, n in r["llm_calls"].items():
            calls[role] = calls.get(role, 0) + n
    return {"seconds": round(wall, 2), "apply_seconds": round(sum(r["seconds"] for r in results), 2),
            "summarize_calls": calls.get("summarize", 0), "extract_calls": calls.get("extract", 0),
            "summaries_rebuilt": sum(r["summaries_rebuilt"] for r in results)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", required=True)
    p.add_argument("--questions", required=True)
    p.add_argument("--docs", type=int, default=1000, help="use the first N documents of the corpus")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rebuild-every", type=int, default=5)
    p.add_argument("--modes", default="hybrid,dense", help="modes whose recall@5 grown and static are compared")
    p.add_argument("--config", default=None)
    p.add_argument("--out", required=True, help="path prefix for the work directory, .json and .md")
    args = p.parse_args()
    cfg = load_config(args.config)
    out = Path(args.out)
    work = out.with_suffix(".work")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    docs = [{"id": d.id, "title": d.title, "text": d.text, "metadata": {}}
            for d in load_corpus(args.corpus)][:args.docs]
    half = len(docs) // 2
    step = (len(docs) - half + args.steps - 1) // args.steps
    grown = work / "grown"
    t0 = time.perf_counter()
    base = build_index(cfg, _write(work / "base.jsonl", docs[:half]), grown)
    report: dict = {"docs": len(docs), "base_docs": half, "base_build_seconds": round(time.perf_counter() - t0, 1),
                    "base_summarize_calls": base["llm_calls"].get("summarize", 0), "steps": []}
    for i in range(args.steps):
        upto = min(len(docs), half + (i + 1) * step)
        rows = docs[half + i * step:upto]
        if not rows:
            break
        row = {"step": i + 1, "docs": upto, "inserted": len(rows), "insert": _insert(cfg, grown, rows)}
        if (i + 1) % args.rebuild_every == 0 or upto == len(docs):
            static = work / f"static_{upto}"
            t0 = time.perf_counter()
            built = build_index(cfg, _write(work / f"corpus_{upto}.jsonl", docs[:upto]), static)
            row["rebuild"] = {"seconds": round(time.perf_counter() - t0, 1),
                              "summarize_calls": built["llm_calls"].get("summarize", 0),
                              "extract_calls": built["llm_calls"].get("extract", 0)}
            if upto != len(docs):
                shutil.rmtree(static)
        print(json.dumps(row), file=sys.stderr, flush=True)
        report["steps"].append(row)
    ids = {d["id"] for d in docs}
    questions = [q for q in load_questions(args.questions) if q.supporting_ids and set(q.supporting_ids) <= ids]
    qpath = _write(work / "questions.jsonl", [{"id": q.id, "question": q.question, "answers": list(q.answers),
                                                "supporting_ids": list(q.supporting_ids)} for q in questions])
    modes = args.modes.split(",")
    runs = {name: run_eval(cfg, index, qpath, modes, 5)
            for name, index in (("incremental", grown), ("static", work / f"static_{len(docs)}"))}
    recall = {mode: {name: res["modes"][mode]["recall@5"] for name, res in runs.items()} for mode in modes}
    # Share of questions whose five passages are the same, in the same order, in both indexes.
    same = {mode: round(sum(runs["incremental"]["ranked"][mode][q] == ranked
                            for q, ranked in runs["static"]["ranked"][mode].items()) / max(1, len(questions)), 4)
            for mode in modes}
    report["recall@5"], report["same_top5"] = recall, same
    report["questions"] = len(questions)
    single = [{"id": "bench-single-doc", "title": "Bench single document",
               "text": "A single new document inserted into the full index to time one small update."}]
    report["single_document_insert"] = _insert(cfg, grown, single)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    lines = [f"# Growing corpus ({len(docs)} documents of {Path(args.corpus).name}, base {half}, "
             f"{args.steps} steps)", "",
             "| step | docs | inserted | insert s | insert summarize | rebuild s | rebuild summarize |",
             "|---|---|---|---|---|---|---|"]
    for r in report["steps"]:
        rb = r.get("rebuild", {})
        lines.append(f"| {r['step']} | {r['docs']} | {r['inserted']} | {r['insert']['seconds']} | "
                     f"{r['insert']['summarize_calls']} | {rb.get('seconds', '')} | {rb.get('summarize_calls', '')} |")
    lines += ["", f"recall@5 on {len(questions)} questions (grown by inserts vs a static build of the same "
                  "documents; same top 5 = share of questions given the same five passages in the same order):", "",
              "| mode | grown | static | grown - static | same top 5 |", "|---|---|---|---|---|"]
    lines += [f"| {m} | {r['incremental']:.4f} | {r['static']:.4f} | {r['incremental'] - r['static']:+.4f} | "
              f"{same[m]:.2f} |" for m, r in recall.items()]
    lines += ["", f"single-document insert: {report['single_document_insert']}", "",
              f"Command: `python loadtests/bench_updates.py {' '.join(sys.argv[1:])}`"]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
