"""`hygraph index | query | eval | insert | delete | gc | serve` (CONTRACT.md).

Progress goes to stderr; the result is one JSON object on the last stdout line. Bad input
exits 2 with one line on stderr that names the problem; no traceback. Any other failure, Ray's
included, exits 1 and ends with one `hygraph: failed: <reason>` line on stderr. Run as a program,
the command stops Ray before its last line and then closes stdout and stderr, so nothing a dying
Ray prints late can follow the result; the commands that start Ray run in a watched child process,
which reports for them when Ray ends them outright.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import textwrap
import traceback
from pathlib import Path
from typing import Any, Callable, NoReturn

from hygraph.runtime.loopback import request_loopback
from hygraph.runtime.watch import CHILD_ENV, is_child, run_watched
from hygraph.config import HygraphConfig, load_config
from hygraph.core.retrieval.modes import MODE_NAMES
from hygraph.errors import HygraphError, InputError, StoreError
from hygraph.store.objects import index_uri, is_remote


# Commands that start Ray in their process: run as a program, they run in a watched child (runtime/watch.py),
# because Ray ends a driver whose node died without letting it report.
RAY_COMMANDS = ("index", "demo")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"hygraph: error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(2)


def _emit(result: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(result, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def readable_answer(result: dict[str, Any], width: int = 100) -> str:
    """A query result for a person: the answer, the context items it cites, the passages retrieved."""
    titles = {p["id"]: p["title"] for p in result["passages"]}
    ctx = result["context"]
    items = {i["number"]: i for kind in ("summaries", "chunks", "entities", "relations", "hyperedges")
             for i in ctx.get(kind, ())}
    lines = textwrap.wrap(f"Answer: {result['answer'] or '(none)'}", width, subsequent_indent="  ")
    cited = [items[n] for n in result["context"].get("citations", ()) if n in items]
    lines += ["", "Cited:" if cited else "Cited: nothing"]
    for item in cited:
        sources = ", ".join(f"{titles[s]} ({s})" if titles.get(s) else s for s in item["sources"][:3])
        lines.append(f"  [{item['number']}] {item['kind']}" + (f" from {sources}" if sources else ""))
        text = " ".join(item["text"].split())
        lines += textwrap.wrap(text if len(text) <= 300 else text[:297] + "...", width,
                               initial_indent="      ", subsequent_indent="      ")
    total = result["timings_ms"].get("total")
    lines += ["", f"Passages ({result['mode']}, index version {result['index_version']}"
              + (f", {total:.0f} ms" if total is not None else "") + "):"]
    lines += [f"  {n}. {p['title'] or p['id']}  [{p['id']}]  score {p['score']:.3f}"
              + (f"  {json.dumps(p['metadata'], ensure_ascii=False)}" if p.get("metadata") else "")
              for n, p in enumerate(result["passages"], 1)]
    return "\n".join(lines)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _filter(text: str) -> dict[str, Any]:
    """`--filter`: a JSON object under the query filter's rules (input_rules.check_filter)."""
    from hygraph.input_rules import check_filter

    def not_json(constant: str) -> NoReturn:
        raise ValueError(f"{constant} is not JSON")
    try:
        return check_filter(json.loads(text, parse_constant=not_json), "filter")
    except ValueError as exc:  # json.JSONDecodeError too
        raise argparse.ArgumentTypeError(f"not a JSON object ({exc})") from None
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _modes(text: str) -> str:
    for mode in (m.strip() for m in text.split(",") if m.strip()):
        if mode not in MODE_NAMES:
            raise argparse.ArgumentTypeError(f"unknown mode '{mode[:40]}' (one of {', '.join(MODE_NAMES)})")
    return text


def cmd_index(cfg: HygraphConfig, args: argparse.Namespace) -> dict[str, Any]:
    from hygraph.indexing.build import build_index

    return build_index(cfg, args.corpus, args.index_dir, triples=args.triples, kg=args.kg,
                       graph=not args.dense_only, restart=args.restart)


def cmd_query(cfg: HygraphConfig, args: argparse.Namespace) -> dict[str, Any]:
    from hygraph.engine import QueryEngine
    from hygraph.pipeline import QueryPipeline, QueryRequest

    req = QueryRequest.make(cfg.retrieval, args.question, args.mode, args.k, filter=args.filter)
    engine = QueryEngine(cfg, args.index_dir)
    try:
        result = QueryPipeline(engine).run(req).to_json()
    finally:
        engine.close()
    print(readable_answer(result, shutil.get_terminal_size((100, 24)).columns - 2), file=sys.stderr, flush=True)
    return result


def cmd_eval(cfg: HygraphConfig, args: argparse.Namespace) -> dict[str, Any]:
    from hygraph.eval.runner import run_eval

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    result = run_eval(cfg, args.index_dir, args.questions, modes, args.k, out=args.out,
                      report=args.report, limit=args.limit, baselines=args.baselines)
    # Which passages each question got is for comparing runs, in `--out`; stdout gets the summary.
    return {key: value for key, value in result.items() if key != "ranked"}


def cmd_insert(cfg: HygraphConfig, args: argparse.Namespace) -> dict[str, Any]:
    from hygraph.updater.client import submit
    from hygraph.model import load_corpus

    from hygraph.store.journal import InsertDocuments

    return submit(cfg, args.index_dir, InsertDocuments(tuple(load_corpus(args.corpus))))


def cmd_delete(cfg: HygraphConfig, args: argparse.Namespace) -> dict[str, Any]:
    from hygraph.updater.client import submit

    ids = [i.strip() for i in args.ids.split(",") if i.strip()]
    if not ids:
        raise InputError("--ids: no document id given")
    from hygraph.store.journal import DeleteDocuments

    out = submit(cfg, args.index_dir, DeleteDocuments(tuple(ids)))
    return {"version": out["version"], "documents_removed": out["documents_removed"],
            "summaries_rebuilt": out["summaries_rebuilt"], "seconds": out["seconds"],
            "chunks_removed": out["chunks_removed"], "llm_calls": out["llm_calls"], "compaction": out["compaction"]}


def cmd_gc(cfg: HygraphConfig, args: argparse.Namespace) -> dict[str, Any]:
    from hygraph.indexing.build import gc_index

    return gc_index(cfg, args.index_dir)


def cmd_demo(cfg: HygraphConfig, args: argparse.Namespace) -> dict[str, Any]:
    """Builds the bundled demo index when the directory has none, then answers sample questions."""
    from hygraph.data import DEMO_DIR
    from hygraph.engine import QueryEngine
    from hygraph.model import load_questions
    from hygraph.pipeline import QueryPipeline, QueryRequest

    index_dir = Path(args.index_dir)
    _build_demo_index(str(index_dir), args.config)
    engine = QueryEngine(cfg, index_dir)
    pipeline = QueryPipeline(engine)
    try:
        answers = []
        for q in load_questions(DEMO_DIR / "questions.jsonl")[:args.questions]:
            res = pipeline.run(QueryRequest.make(cfg.retrieval, q.question, args.mode)).to_json()
            print(f"\nQ: {q.question}\nA: {res['answer']}\n   gold: {q.answers[0]}   "
                  f"passages: {', '.join(p['title'] for p in res['passages'])}", file=sys.stderr)
            answers.append({"question": q.question, "answer": res["answer"], "gold": q.answers[0]})
        return {"index_dir": str(index_dir), "index_version": engine.version, "answers": answers}
    finally:
        engine.close()


def cmd_serve(cfg: HygraphConfig, args: argparse.Namespace) -> dict[str, Any]:
    from hygraph.serve.runner import run_server

    _build_demo_index(args.index_dir or cfg.index_dir, args.config)
    return run_server(cfg, str(args.index_dir or cfg.index_dir), host=args.host or cfg.serve.host,
                      port=args.port or cfg.serve.port, address=args.address)


def _build_demo_index(index_dir: str, config: str | None) -> None:
    """An index directory that holds no index yet gets the bundled demo index first, built by `hygraph index`
    in a process of its own: the terminal then shows that command's progress lines and none of Ray's, as
    it would for the command itself. Built in the service's process, each line came twice (the assembling
    actor's copy, forwarded by the service's Ray, which hands its workers' output to the server's log, and
    the relayed one), among Ray Data's own lines."""
    from hygraph.data import DEMO_DIR
    from hygraph.store.versions import IndexStore

    if is_remote(index_dir):  # a bucket gets no demo: an index on object storage is built with `hygraph index`
        return
    if Path(index_dir).is_dir() and IndexStore(index_dir).current_version() is not None:
        return
    print(f"[hygraph] {index_dir} holds no index: building the bundled demo index "
          "(about 4 minutes on 2 CPU cores)", file=sys.stderr, flush=True)
    command = [sys.executable, "-m", "hygraph.cli", "index", "--corpus", str(DEMO_DIR / "corpus.jsonl"),
               "--index-dir", index_dir, *(["--config", config] if config else [])]
    env = {k: v for k, v in os.environ.items() if k != CHILD_ENV}  # a command of its own, watched as one
    # Its stdout is the build's JSON result, which is not the service's to print.
    status = subprocess.run(command, stdout=subprocess.DEVNULL, env=env).returncode
    if status:
        raise HygraphError(f"building the demo index into {index_dir} failed (status {status}; why is above)")


def cmd_serve_config(cfg: HygraphConfig, args: argparse.Namespace) -> dict[str, Any]:
    import yaml

    from hygraph.serve.app import serve_config

    doc = serve_config(cfg, args.config or "configs/local.yaml", args.index_dir or cfg.index_dir)
    text = ("# Generated by `hygraph serve-config`; regenerate instead of editing.\n"
            + yaml.safe_dump(doc, sort_keys=False))
    Path(args.out).write_text(text)
    return {"out": args.out, "applications": [a["name"] for a in doc["applications"]]}


INDEX_HELP = "a named index of the service whose default index is --index-dir (POST /v1/indexes)"


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="hygraph", description="Graph-RAG indexing and serving on Ray.")
    p.add_argument("--config", default=None, help="YAML config (default: configs/local.yaml)")
    # Also accepted after the command; SUPPRESS keeps a subcommand from resetting one given before it.
    config_after = _Parser(add_help=False)
    config_after.add_argument("--config", default=argparse.SUPPRESS, help="YAML config (default: configs/local.yaml)")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("index", parents=[config_after],
                       help="build a new index version from a JSONL corpus (rerun after a crash: it resumes)")
    s.add_argument("--corpus", required=True)
    s.add_argument("--index-dir", required=True)
    s.add_argument("--index", default=None, metavar="NAME", help=INDEX_HELP)
    s.add_argument("--triples", default=None,
                   help="precomputed OpenIE triples ({passage_id, triples, entities} per line) instead of extraction")
    s.add_argument("--kg", default=None, help="an existing knowledge graph: [head, relation, tail] per line")
    s.add_argument("--dense-only", action="store_true",
                   help="chunks and their vectors only: no graph, hierarchy or hyperbolic stages")
    s.add_argument("--restart", action="store_true",
                   help="discard the unfinished build of the same inputs instead of resuming it (a rerun after "
                        "a crash or Ctrl-C otherwise keeps every stage that finished: <index-dir>/builds/)")
    s.set_defaults(run=cmd_index)

    s = sub.add_parser("query", parents=[config_after], help="answer one question")
    s.add_argument("--index-dir", required=True)
    s.add_argument("--index", default=None, metavar="NAME", help=INDEX_HELP)
    s.add_argument("--mode", default=None, choices=MODE_NAMES, help="default: retrieval.mode of the config (hybrid)")
    s.add_argument("--k", type=_positive, default=None)
    s.add_argument("--filter", type=_filter, default=None, metavar="JSON",
                   help='passages only from documents whose metadata matches, e.g. \'{"lang": "en", "year": [2023, '
                        '2024]}\' (README: Documents and metadata)')
    s.add_argument("question")
    s.set_defaults(run=cmd_query)

    s = sub.add_parser("eval", parents=[config_after], help="retrieval and answer quality per mode")
    s.add_argument("--index-dir", required=True)
    s.add_argument("--index", default=None, metavar="NAME", help=INDEX_HELP)
    s.add_argument("--questions", required=True)
    s.add_argument("--modes", type=_modes, default="dense", help=f"comma-separated, of {', '.join(MODE_NAMES)}")
    s.add_argument("--k", type=_positive, default=5)
    s.add_argument("--limit", type=_positive, default=None, help="evaluate only the first N questions")
    s.add_argument("--baselines", action="store_true",
                   help="also run the baselines dense, bm25 and dense+bm25 (in front of the modes asked for)")
    s.add_argument("--out", default=None,
                   help="write the full result JSON here, with every question's ranked passages per mode")
    s.add_argument("--report", default=None,
                   help="write a Markdown table and a PNG chart with this path prefix")
    s.set_defaults(run=cmd_eval)

    s = sub.add_parser("insert", parents=[config_after],
                       help="add documents to an index without a rebuild (journaled; applied here, or by the "
                       "running server's updater)")
    s.add_argument("--index-dir", required=True)
    s.add_argument("--index", default=None, metavar="NAME", help=INDEX_HELP)
    s.add_argument("--corpus", required=True, help="JSONL documents; an existing id with new text replaces it")
    s.set_defaults(run=cmd_insert)

    s = sub.add_parser("delete", parents=[config_after],
                       help="remove documents and everything derived only from them")
    s.add_argument("--index-dir", required=True)
    s.add_argument("--index", default=None, metavar="NAME", help=INDEX_HELP)
    s.add_argument("--ids", required=True, help="comma-separated document ids")
    s.set_defaults(run=cmd_delete)

    s = sub.add_parser("gc", parents=[config_after],
                       help="remove old index versions (updates.keep_versions, updates.gc_grace_s), unreferenced "
                       "segments, and the vector collections of those versions and of builds that never committed")
    s.add_argument("--index-dir", required=True)
    s.add_argument("--index", default=None, metavar="NAME", help=INDEX_HELP)
    s.set_defaults(run=cmd_gc)

    s = sub.add_parser("demo", parents=[config_after],
                       help="build the bundled demo index if needed and answer sample questions")
    s.add_argument("--index-dir", default="runs/demo")
    s.add_argument("--mode", default=None, choices=MODE_NAMES, help="default: retrieval.mode of the config (hybrid)")
    s.add_argument("--questions", type=_positive, default=3)
    s.set_defaults(run=cmd_demo)

    s = sub.add_parser("serve", parents=[config_after], help="run the Ray Serve application until interrupted")
    s.add_argument("--index-dir", default=None, help="default: index_dir of the config; "
                   "the bundled demo index is built there first when it holds none")
    s.add_argument("--host", default=None, help="default: serve.host (127.0.0.1)")
    s.add_argument("--port", type=_positive, default=None, help="default: serve.port (8000)")
    s.add_argument("--address", default=None, help="join this Ray cluster instead of starting one")
    s.add_argument("--no-restart", action="store_true",
                   help="run the service in this process and exit when its Ray is lost (by default a supervising "
                        "process restarts it, up to serve.max_restarts times in a row)")
    s.set_defaults(run=cmd_serve)

    s = sub.add_parser("serve-config", parents=[config_after],
                       help="write the Serve config YAML (serve run / serve deploy / KubeRay)")
    s.add_argument("--index-dir", default=None)
    s.add_argument("--out", required=True, help="YAML file to write")
    s.set_defaults(run=cmd_serve_config)
    return p


def _named_index(cfg: HygraphConfig, args: argparse.Namespace) -> HygraphConfig:
    """`--index NAME`: the named index NAME of the service whose root (default index) is `--index-dir`, with the
    config it is served with (the service's vector store server); `hygraph index` makes it when it is new."""
    from hygraph.store.registry import IndexExists, IndexRegistry, NoSuchIndex, check_name

    registry = IndexRegistry(index_uri(args.index_dir), cfg.store.cache_dir)
    name = check_name(args.index, "--index")
    if args.command == "index" and not registry.exists(name):
        try:
            registry.reserve(name)
        except IndexExists:
            pass  # made meanwhile by the service: built into all the same
    named = cfg.for_named_index(registry.root)
    try:
        args.index_dir = registry.location(name)
    except NoSuchIndex:
        raise InputError(f"--index: no index named '{name}' under {args.index_dir}") from None
    return named


# What an index on object storage (s3://) takes in this release: building, reading, collecting it, writes
# applied in process (its journal is objects too) and serving it, for the default index and named ones.
REMOTE_COMMANDS = ("index", "query", "eval", "gc", "insert", "delete", "serve")


def _check_remote(command: str, index_dir: str) -> None:
    if command not in REMOTE_COMMANDS:
        raise InputError(f"--index-dir {index_dir}: `hygraph {command}` does not take an index on object storage "
                         f"yet; `hygraph {'/'.join(REMOTE_COMMANDS)}` do")


def main(argv: list[str] | None = None) -> int:
    """The command; `argv` None means this process is the command (its own command line): then stdout
    and stderr are closed after its last line."""
    args = _parser().parse_args(argv)
    # Model-loading bars ("Loading weights") would bury the command's own progress lines.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if argv is None and args.command in RAY_COMMANDS and not is_child():
        status = run_watched(sys.argv[1:])
        _close_output()
        return status
    if argv is None and args.command == "serve" and not args.no_restart and not is_child():
        from hygraph.serve.supervisor import supervise

        status = supervise(sys.argv[1:], args.config)
        _close_output()
        return status
    run: Callable[[HygraphConfig, argparse.Namespace], dict[str, Any]] = args.run
    try:
        cfg = load_config(args.config)
        if not cfg.ray.address and cfg.ray.loopback_only:
            request_loopback()  # before anything imports ray: a local Ray then listens on 127.0.0.1 only
        index_dir = getattr(args, "index_dir", None)
        if index_dir is not None and is_remote(index_dir):
            _check_remote(args.command, index_dir)
        elif index_dir is not None and args.command not in ("index", "demo", "serve", "serve-config"):
            if not Path(index_dir).is_dir():
                raise InputError(f"--index-dir {index_dir}: no such directory")
        if getattr(args, "index", None) is not None:
            cfg = _named_index(cfg, args)
        result = run(cfg, args)
        _stop_ray()
        _emit(result)
        status = 0
    except (InputError, StoreError) as exc:
        status = _fail(2, f"hygraph: error: {exc}")
    except HygraphError as exc:
        status = _fail(1, f"hygraph: failed: {exc}")
    except KeyboardInterrupt:
        status = _fail(130, "hygraph: interrupted")
    except Exception as exc:  # noqa: BLE001 - every failure ends with one line naming it (Ray's errors too)
        if not _is_ray_error(exc):
            traceback.print_exc()  # a bug: its traceback, then the line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        status = _fail(1, f"hygraph: failed: {type(exc).__name__}" + (f": {first[:300]}" if first else ""))
    if argv is None:
        _close_output()
    return status


def _fail(status: int, line: str) -> int:
    _stop_ray()  # what Ray prints while it stops comes before the line, not after it
    print(line, file=sys.stderr, flush=True)
    return status


def _is_ray_error(exc: BaseException) -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and isinstance(exc, ray.exceptions.RayError)


def _stop_ray() -> None:
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return
    try:
        ray.shutdown()
    except Exception as exc:  # noqa: BLE001 - the command's outcome stands; Ray's own failure to stop is noted
        print(f"[hygraph] Ray did not stop cleanly: {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)


def _close_output() -> None:
    """Point fds 1 and 2 at /dev/null: the result (or the failure line) was the last word; a Ray thread or
    process still holding them (a late "(raylet) terminated") writes nowhere."""
    sys.stdout.flush()
    sys.stderr.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
