"""Where a Retriever replica's memory goes: USS after each step of its start, in one plain process, and
a running process's /proc/PID/smaps grouped by mapping.

    python loadtests/mem_breakdown.py steps --index-dir IDX [--model DIR] [--cache-dir DIR]
    python loadtests/mem_breakdown.py smaps PID [PID ...]
    python loadtests/mem_breakdown.py floor [--imports bare|hygraph]

`steps` runs, in this process, what a Retriever replica runs (imports, the question embedder, the vector
store connection, the version's view, a few hybrid queries) and prints RSS / USS after each step and
the USS each step added. `smaps` sums Rss / Private (USS) / Pss by mapping group: anonymous (heap,
arenas, stacks), each shared library, each memory-mapped data file (the index's segments), other files.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402


def mem() -> tuple[float, float]:
    info = psutil.Process().memory_full_info()
    return info.rss / 2**20, info.uss / 2**20


def smaps(pid: int, top: int = 25) -> dict[str, dict[str, float]]:
    """kB -> MiB per mapping group of one process."""
    groups: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    name = "?"
    head = re.compile(r"^[0-9a-f]+-[0-9a-f]+ ")
    for line in open(f"/proc/{pid}/smaps"):
        if head.match(line):
            parts = line.split(None, 5)
            path = parts[5].strip() if len(parts) > 5 else ""
            if not path:
                name = "[anon]"
            elif path.startswith("["):
                name = "[heap]" if path == "[heap]" else ("[stack]" if "stack" in path else path)
            elif re.search(r"\.so(\.|$)|\.so\.[0-9]", path) or ".cpython-" in path:
                name = "so:" + Path(path).name
            elif "/segments/" in path:
                name = "segments:" + path.split("/segments/")[1].split("/")[0]
            elif "/dev/shm" in path or "plasma" in path:
                name = "shm:" + Path(path).name
            else:
                name = "file:" + path
            continue
        key, _, rest = line.partition(":")
        if key in ("Rss", "Pss", "Private_Clean", "Private_Dirty", "Shared_Clean", "Shared_Dirty"):
            groups[name][key] += float(rest.split()[0]) / 1024
    out = {k: {"rss": v["Rss"], "uss": v["Private_Clean"] + v["Private_Dirty"], "pss": v["Pss"],
               "private_dirty": v["Private_Dirty"]} for k, v in groups.items()}
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["uss"])[:top]) | {
        "TOTAL": {f: sum(g[f] for g in out.values()) for f in ("rss", "uss", "pss", "private_dirty")},
        "ALL .so": {f: sum(g[f] for k, g in out.items() if k.startswith("so:")) for f in ("rss", "uss", "pss")},
        "ALL anon+heap": {f: sum(g[f] for k, g in out.items() if k in ("[anon]", "[heap]")) for f in
                          ("rss", "uss", "pss")},
        "ALL segments": {f: sum(g[f] for k, g in out.items() if k.startswith("segments:")) for f in
                         ("rss", "uss", "pss")}}


def print_smaps(pid: int) -> None:
    print(f"pid {pid}: MiB by mapping (top by USS)")
    for k, v in smaps(pid).items():
        print(f"  {k[:70]:70s} rss {v['rss']:7.1f}  uss {v['uss']:7.1f}  pss {v['pss']:7.1f}")


def steps(args: argparse.Namespace) -> None:
    last = [mem()[1]]
    rows = []

    def step(label: str) -> None:
        import gc

        gc.collect()
        if args.trim:  # what is retained, without the allocator's free pages
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)
        rss, uss = mem()
        rows.append((label, rss, uss, uss - last[0]))
        last[0] = uss
        print(f"{label:48s} rss {rss:7.1f}  uss {uss:7.1f}  (+{rows[-1][3]:6.1f})", flush=True)

    step("python")
    import numpy  # noqa: F401
    import pyarrow  # noqa: F401
    import scipy.sparse  # noqa: F401
    step("numpy, pyarrow, scipy.sparse")
    import ray  # noqa: F401
    from ray import serve  # noqa: F401
    step("ray, ray.serve")
    from hygraph.config import load_config
    cfg = load_config(None)
    import hygraph.serve.deployments  # noqa: F401
    step("hygraph.serve.deployments (its imports)")
    from hygraph.backends.embedder import is_static_model, make_embedder, model_path
    if not is_static_model(model_path(cfg.embedder)):
        import torch  # noqa: F401
        step("torch")
        import sentence_transformers  # noqa: F401
        step("sentence_transformers (transformers)")
    emb = make_embedder(cfg.embedder, threads=1.0)
    step(f"embedder loaded ({cfg.embedder.model})")
    emb.encode(["warm up the embedder with a question"])
    step("embedder: one question encoded")
    from hygraph.backends import vectorstore
    vs = vectorstore.connect(cfg.vector_store, args.index_dir)
    step("vector store connected (pymilvus)")
    from hygraph.store.versions import IndexStore
    version = IndexStore(args.index_dir).open()
    for name in version.manifest.collections.values():
        vs.open(name)
    step("version opened, collections opened")
    from hygraph.store.view_loader import load_view
    t0 = time.perf_counter()
    view = load_view(version)
    step(f"view loaded ({time.perf_counter() - t0:.2f} s)")
    from hygraph.engine import QueryEngine
    engine = QueryEngine(cfg, args.index_dir, embedder=emb)
    step("QueryEngine (a second view, the LLM)")
    del view
    step("first view dropped")
    questions = [json.loads(line)["question"] for line in open(args.questions)][:args.queries]
    for q in questions:
        engine.retrieve(q, emb.encode([q])[0], "hybrid", 5)
    step(f"{len(questions)} hybrid queries")
    for mode in ("ppr", "hypergraph", "local", "global", "collapsed", "hyperbolic", "bm25", "dense+bm25"):
        try:
            for q in questions[:5]:
                engine.retrieve(q, emb.encode([q])[0], mode, 5)
        except Exception as exc:  # noqa: BLE001 - a mode the index lacks
            print(f"  {mode}: {exc}")
    step("5 queries of every other mode")
    print("torch imported:", "torch" in sys.modules)
    print_smaps(os.getpid())
    engine.close()


def floor(imports: str) -> None:
    import ray
    from ray import serve

    from loadtests.common import free_port

    @serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0})
    class Floor:
        def __init__(self, what: str) -> None:
            if what == "hygraph":
                import pyarrow.compute  # noqa: F401
                import pymilvus  # noqa: F401

                import hygraph.serve.deployments  # noqa: F401

        def pid(self) -> int:
            return os.getpid()

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"port": free_port()})
        handle = serve.run(Floor.bind(imports), name="floor", route_prefix=None)
        pids = {handle.pid.remote().result() for _ in range(40)}
        time.sleep(3)
        for pid in sorted(pids):
            info = psutil.Process(pid).memory_full_info()
            print(json.dumps({"imports": imports, "pid": pid, "rss_mb": round(info.rss / 2**20, 1),
                              "uss_mb": round(info.uss / 2**20, 1)}))
    finally:
        serve.shutdown()
        ray.shutdown()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("steps")
    s.add_argument("--index-dir", required=True)
    s.add_argument("--questions", default=str("/work/shared/data/dev/2wiki_dev.questions.jsonl"))
    s.add_argument("--queries", type=int, default=20)
    s.add_argument("--trim", action="store_true", help="malloc_trim before each measurement")
    m = sub.add_parser("smaps")
    m.add_argument("pids", nargs="+", type=int)
    f = sub.add_parser("floor")
    f.add_argument("--imports", choices=["bare", "hygraph"], default="hygraph")
    args = p.parse_args()
    if args.cmd == "steps":
        steps(args)
    elif args.cmd == "floor":
        floor(args.imports)
    else:
        for pid in args.pids:
            print_smaps(pid)


if __name__ == "__main__":
    main()
