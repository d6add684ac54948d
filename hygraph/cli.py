"""`hygraph index | query | eval | insert | delete | serve` (CONTRACT.md).

Progress goes to stderr; the result is one JSON object on the last stdout line. Bad input
exits 2 with one line on stderr that names the problem; no traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn

from hygraph.config import HygraphConfig, load_config
from hygraph.errors import HygraphError, InputError, StoreError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"hygraph: error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(2)


def _emit(result: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(result, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def cmd_index(cfg: HygraphConfig, args: argparse.Namespace) -> dict[str, Any]:
    from hygraph.indexing.build import build_index

    return build_index(cfg, args.corpus, args.index_dir, triples=args.triples, kg=args.kg,
                       graph=not args.dense_only)


def cmd_query(cfg: HygraphConfig, args: argparse.Namespace) -> dict[str, Any]:
    from hygraph.engine import QueryEngine

    if not args.question.strip():
        raise InputError("question: must not be empty")
    engine = QueryEngine(cfg, args.index_dir)
    try:
        return engine.query(args.question, mode=args.mode, k=args.k)
    finally:
        engine.close()


def cmd_eval(cfg: HygraphConfig, args: argparse.Namespace) -> dict[str, Any]:
    from hygraph.eval.runner import run_eval

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    return run_eval(cfg, args.index_dir, args.questions, modes, args.k, out=args.out,
                    report=args.report, limit=args.limit)


DEMO_DIR = Path(__file__).resolve().parent / "data" / "demo"


def cmd_demo(cfg: HygraphConfig, args: argparse.Namespace) -> dict[str, Any]:
    """Builds the bundled demo index when the directory has none, then answers sample questions."""
    from hygraph.engine import QueryEngine
    from hygraph.indexing.build import build_index
    from hygraph.model import load_questions
    from hygraph.store.snapshot import SnapshotStore

    index_dir = Path(args.index_dir)
    if not index_dir.is_dir() or SnapshotStore(index_dir).current_version() is None:
        print(f"[demo] building the bundled demo index in {index_dir}", file=sys.stderr)
        build_index(cfg, DEMO_DIR / "corpus.jsonl", index_dir)
    engine = QueryEngine(cfg, index_dir)
    try:
        answers = []
        for q in load_questions(DEMO_DIR / "questions.jsonl")[:args.questions]:
            res = engine.query(q.question, mode=args.mode)
            print(f"\nQ: {q.question}\nA: {res['answer']}\n   gold: {q.answers[0]}   "
                  f"passages: {', '.join(p['title'] for p in res['passages'])}", file=sys.stderr)
            answers.append({"question": q.question, "answer": res["answer"], "gold": q.answers[0]})
        return {"index_dir": str(index_dir), "index_version": engine.version, "answers": answers}
    finally:
        engine.close()


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="hygraph", description="Graph-RAG indexing and serving on Ray.")
    p.add_argument("--config", default=None, help="YAML config (default: configs/local.yaml)")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("index", help="build a new index version from a JSONL corpus")
    s.add_argument("--corpus", required=True)
    s.add_argument("--index-dir", required=True)
    s.add_argument("--triples", default=None,
                   help="precomputed OpenIE triples ({passage_id, triples, entities} per line) instead of extraction")
    s.add_argument("--kg", default=None, help="an existing knowledge graph: [head, relation, tail] per line")
    s.add_argument("--dense-only", action="store_true",
                   help="chunks and their vectors only: no graph, hierarchy or hyperbolic stages")
    s.set_defaults(run=cmd_index)

    s = sub.add_parser("query", help="answer one question")
    s.add_argument("--index-dir", required=True)
    s.add_argument("--mode", default=None)
    s.add_argument("--k", type=_positive, default=None)
    s.add_argument("question")
    s.set_defaults(run=cmd_query)

    s = sub.add_parser("eval", help="retrieval and answer quality per mode")
    s.add_argument("--index-dir", required=True)
    s.add_argument("--questions", required=True)
    s.add_argument("--modes", default="dense")
    s.add_argument("--k", type=_positive, default=5)
    s.add_argument("--limit", type=_positive, default=None, help="evaluate only the first N questions")
    s.add_argument("--out", default=None, help="write the result JSON here")
    s.add_argument("--report", default=None,
                   help="write a Markdown table and a PNG chart with this path prefix")
    s.set_defaults(run=cmd_eval)

    s = sub.add_parser("demo", help="build the bundled demo index if needed and answer sample questions")
    s.add_argument("--index-dir", default="runs/demo")
    s.add_argument("--mode", default=None, help="default: retrieval.mode of the config (hybrid)")
    s.add_argument("--questions", type=_positive, default=3)
    s.set_defaults(run=cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    run: Callable[[HygraphConfig, argparse.Namespace], dict[str, Any]] = args.run
    try:
        cfg = load_config(args.config)
        if getattr(args, "index_dir", None) is not None and args.command not in ("index", "demo"):
            if not Path(args.index_dir).is_dir():
                raise InputError(f"--index-dir {args.index_dir}: no such directory")
        _emit(run(cfg, args))
        return 0
    except (InputError, StoreError) as exc:
        print(f"hygraph: error: {exc}", file=sys.stderr)
        return 2
    except HygraphError as exc:
        print(f"hygraph: failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("hygraph: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
