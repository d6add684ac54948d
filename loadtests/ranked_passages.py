"""Which passages each question gets, per mode, and whether two builds give the same.

    python loadtests/ranked_passages.py dump --index-dir I --questions Q.jsonl --out A.json [--modes ...]
    python loadtests/ranked_passages.py compare A.json B.json

`dump` runs every question through each mode with the query pipeline (the calls `hygraph eval` makes)
and writes {mode: {question id: [passage ids]}}; it uses only interfaces that older hygraph versions
have too, so the same file can be produced by the code before a change and after it. `compare` prints,
per mode, how many questions got the same passages in the same order, and exits 1 when any differ.
Build both indexes with exact search (`HYGRAPH__VECTOR_STORE__BACKEND=faiss
HYGRAPH__VECTOR_STORE__INDEX_TYPE=FLAT`): an HNSW graph differs from build to build.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ALL_MODES = "dense,bm25,dense+bm25,hybrid,ppr,collapsed,hypergraph,hyperbolic,local,global,auto"


def dump(index_dir: str, questions: str, modes: list[str], k: int, out: str) -> None:
    from hygraph.config import load_config
    from hygraph.engine import QueryEngine
    from hygraph.model import load_questions
    from hygraph.pipeline import QueryPipeline, QueryRequest

    cfg = load_config(None)
    engine = QueryEngine(cfg, index_dir)
    pipeline = QueryPipeline(engine)
    ranked: dict[str, dict[str, list[str]]] = {m: {} for m in modes}
    try:
        for q in load_questions(questions):
            for mode in modes:
                res = pipeline.run(QueryRequest.make(cfg.retrieval, q.question, mode, k)).to_json()
                ranked[mode][q.id] = [p["id"] for p in res["passages"]]
    finally:
        engine.close()
    Path(out).write_text(json.dumps(ranked))


def compare(a_path: str, b_path: str) -> bool:
    a, b = json.loads(Path(a_path).read_text()), json.loads(Path(b_path).read_text())
    same_everywhere = True
    for mode, questions in a.items():
        other = b.get(mode, {})
        differ = [q for q, ids in questions.items() if other.get(q) != ids]
        same_everywhere &= not differ
        first = f"  first difference: {differ[0]}" if differ else ""
        print(f"{mode:12s} {len(questions) - len(differ)}/{len(questions)} the same{first}")
    return same_everywhere


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump")
    d.add_argument("--index-dir", required=True)
    d.add_argument("--questions", required=True)
    d.add_argument("--modes", default=ALL_MODES)
    d.add_argument("--k", type=int, default=5)
    d.add_argument("--out", required=True)
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    args = p.parse_args()
    if args.command == "dump":
        dump(args.index_dir, args.questions, args.modes.split(","), args.k, args.out)
    elif not compare(args.a, args.b):
        sys.exit(1)


if __name__ == "__main__":
    main()
