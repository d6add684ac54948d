"""`hygraph index` on a real multi-node Ray cluster, by corpus size: seconds per stage, the nodes each Ray stage
ran on, driver and per-worker peak RSS, vectors/s, snapshot bytes, entity counts, and an extrapolation to
10^6 and 10^7 passages.

    pip install 'model2vec[distill]'   # for --embedder m2v only; hygraph does not depend on it
    python loadtests/bench_build.py --sizes 20000,50000,200000 --embedder m2v --out docs/bench/build

The cluster is a head with no CPUs and `--workers` worker nodes of `--cpus-per-worker` CPUs, each its own
`ray start` on this machine, in private namespaces (tests/raycluster.py); every build's driver (the CLI) runs
on the head and joins it through `HYGRAPH__RAY__ADDRESS`. Corpora: the real dev passages, then passages composed
of their sentences (bench_scale's `passage_pool`), and every capitalised word of the k-th copy's worth of
passages (k = position // number of real passages) gets copy k's suffix, so the number of distinct names,
and of entities, grows with the corpus as it does in real collections rather than recurring. `--corpus FILE`
builds one given corpus instead (e.g. 2wiki with `--embedder bundled`).

`--embedder m2v` distils a static model2vec model from the bundled all-MiniLM-L6-v2 (bench_scale's
`embedder_dir`), `bundled` is MiniLM itself. No embedding cache: every build embeds everything it indexes.
Writes <out>.json, <out>.md and the log-log chart <out>.png.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import psutil  # noqa: E402

from hygraph.store.versions import IndexStore  # noqa: E402
from loadtests.bench_scale import embedder_dir, passage_pool, real_passages, write_jsonl  # noqa: E402
from loadtests.common import OFFLINE_ENV, rename_capitalised, say  # noqa: E402
from tests.raycluster import RayCluster  # noqa: E402

TAG = "bench_build"
TARGETS = (10**6, 10**7)
# Stages spread over actor pools (more workers divide them); the others run in the one assembling actor.
PARALLEL_STAGES = ("chunk+embed+extract", "chunk+embed", "embed entities, relations, hyperedges", "hierarchy")
# Stages the assembler runs as Ray tasks beside its own (hygraph/indexing/beside.py): each on one worker, while
# the assembler's stages run.
BESIDE_STAGES = ("hyperbolic", "lexical")
GiB = 2**30


def renamed_pool(n: int) -> list[dict[str, str]]:
    """bench_scale's n passages, the capitalised words of each copy's worth renamed with its suffix."""
    per_copy = len(real_passages())
    out = []
    for k, p in enumerate(passage_pool(n)):
        copy = k // per_copy
        out.append({"id": p["id"] if not copy else f"{p['id']}~{copy}", "title": rename_capitalised(p["title"], copy),
                    "text": rename_capitalised(p["text"], copy)})
    return out


def build_env(model: str, embed_cpus: float) -> dict[str, str]:
    # Each 1-CPU worker node holds one embedding actor, the extraction actor and the chunk tasks beside it
    # (an actor pool whose CPUs reach a node's stalls in Ray 2.60): embedder.pool_size = one per worker.
    return {**os.environ, **OFFLINE_ENV, "HYGRAPH__EMBEDDER__MODEL": model,
            "HYGRAPH__EMBEDDER__NUM_CPUS": str(embed_cpus)}


def build(cluster: RayCluster, corpus: Path, index_dir: Path, env: dict[str, str], log: Path) -> dict[str, Any]:
    """One `hygraph index` on the cluster; its JSON result plus the snapshot's bytes and the load average."""
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    with log.open("w") as err:  # the build's progress, as it goes
        proc = cluster.popen([sys.executable, "-m", "hygraph.cli", "index", "--corpus", str(corpus), "--index-dir",
                              str(index_dir), "--restart"], env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=err,
                             text=True)
        stdout, _ = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"hygraph index failed ({proc.returncode}); log in {log}:\n{log.read_text()[-3000:]}")
    result = json.loads(stdout.strip().splitlines()[-1])
    result["wall_s"] = round(wall, 1)
    result["snapshot_bytes"] = IndexStore(index_dir).size_bytes()
    result["load_average_1m"] = [round(load, 1), round(os.getloadavg()[0], 1)]
    return result


def node_names(cluster: RayCluster) -> dict[str, str]:
    """Node id prefix (as `nodes_per_stage` writes it) -> "head", "worker 0", ..."""
    names = {n["node_id"][:8]: "head" for n in cluster.nodes() if n["head"]}
    for i in range(cluster.workers):
        names[cluster.worker_node_id(i)[:8]] = f"worker {i}"
    return names


def fit(ns: list[int], values: list[float]) -> tuple[float, float] | None:
    """Least squares of log v = a + b log n: (a, b); None below two positive points."""
    pts = [(math.log(n), math.log(v)) for n, v in zip(ns, values) if v and v > 0]
    if len(pts) < 2:
        return None
    x, y = np.array(pts).T
    b, a = np.polyfit(x, y, 1)
    return float(a), float(b)


def extrapolate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per stage and per memory figure: the fitted exponent and the value at each target size."""
    ns = [r["passages"] for r in rows]
    series: dict[str, list[float]] = {}
    for s in dict.fromkeys(s for r in rows for s in r["stats"]["seconds_per_stage"]):
        series[f"s: {s}"] = [r["stats"]["seconds_per_stage"].get(s, 0.0) for r in rows]
    series["s: total"] = [r["seconds"] for r in rows]
    series["driver peak RSS GiB"] = [r["stats"]["driver_peak_rss_bytes"] / GiB for r in rows]
    series["largest worker peak RSS GiB"] = [r["stats"]["worker_peak_rss_bytes"] / GiB for r in rows]
    series["snapshot GiB"] = [r["snapshot_bytes"] / GiB for r in rows]
    series["entities"] = [r["entities"] for r in rows]
    out = {}
    for key, values in series.items():
        f = fit(ns, values)
        out[key] = {"exponent": None, **{str(t): None for t in TARGETS}} if f is None else {
            "exponent": round(f[1], 2), **{str(t): float(math.exp(f[0] + f[1] * math.log(t))) for t in TARGETS}}
    return out


def cluster_needed(ext: dict[str, Any], workers: int) -> dict[str, str]:
    """What each target size asks of a cluster, from the fits: the head's memory (the driver's), the largest
    worker's (the assembling actor holds the graph stages), and the time split into parallel stages (which
    more workers divide, if they scale linearly) and the assembler's (one worker; the vector writes among them)."""
    out = {}
    for t in map(str, TARGETS):
        if ext["s: total"][t] is None:
            out[t] = "no fit: it needs two sizes or more"
            continue
        # The sum of the per-stage fits (each stage grows at its own rate), not the total's fit.
        stage_s = {k[3:]: v[t] or 0.0 for k, v in ext.items() if k.startswith("s: ") and k != "s: total"}
        pool_s = sum(v for k, v in stage_s.items() if k in PARALLEL_STAGES)
        beside_s = {k: v for k, v in stage_s.items() if k in BESIDE_STAGES}
        one_s = sum(stage_s.values()) - pool_s - sum(beside_s.values())
        ten = pool_s * workers / 10
        out[t] = (f"head ≥ {1.5 * (ext['driver peak RSS GiB'][t] or 0):.1f} GiB RAM (1.5 × the driver's peak); "
                  f"the assembler's worker ≥ {1.5 * (ext['largest worker peak RSS GiB'][t] or 0):.1f} GiB; "
                  f"parallel stages {pool_s / 3600:.1f} h on {workers} worker(s) of this kind, "
                  f"about {ten / 3600:.1f} h on 10 if they scale linearly; assembler stages {one_s / 3600:.1f} h "
                  "on one worker, beside them "
                  + ", ".join(f"{k} {v / 3600:.1f} h" for k, v in beside_s.items()) + " on one worker each")
    return out


def markdown(res: dict[str, Any]) -> str:
    rows = res["sizes"]
    lines = [f"# `hygraph index` on a {res['cluster']} ({res['embedder_note']})", "",
             f"{res['date']}, {res['machine']}. Command: `{res['command']}`", "",
             f"**{res['note']}**", "",
             "| | " + " | ".join(f"{r['passages']:,} passages" for r in rows) + " |", "|---|" + "---|" * len(rows)]

    def line(label: str, values: list[Any]) -> None:
        lines.append(f"| {label} | " + " | ".join(str(v) for v in values) + " |")

    line("chunks / entities / relations", [f"{r['chunks']:,} / {r['entities']:,} / {r['relations']:,}" for r in rows])
    line("build s (total) / wall s of the command", [f"{r['seconds']:.1f} / {r['wall_s']:.1f}" for r in rows])
    line("load average (1 min) at start / end", [" / ".join(map(str, r["load_average_1m"])) for r in rows])
    for s in dict.fromkeys(s for r in rows for s in r["stats"]["seconds_per_stage"]):
        line(f"s: {s}", [f"{r['stats']['seconds_per_stage'].get(s, 0.0):.1f}" for r in rows])
    for s in dict.fromkeys(s for r in rows for s in r["stats"]["nodes_per_stage"]):
        line(f"nodes: {s}", [", ".join(r["nodes_named"].get(s, [])) for r in rows])
    line("driver peak RSS MiB", [f"{r['stats']['driver_peak_rss_bytes'] / 2**20:.0f}" for r in rows])
    line("worker peak RSS MiB, per node", ["; ".join(f"{n} {b / 2**20:.0f}" for n, b in r["rss_per_node_named"].items())
                                           for r in rows])
    line("vectors written / vectors/s (write step)", [f"{r['stats']['vectors_written']:,} / "
                                                      f"{r['stats']['vectors_per_s']:,.0f}" for r in rows])
    line("snapshot MiB", [f"{r['snapshot_bytes'] / 2**20:.1f}" for r in rows])
    ext = res["extrapolation"]
    lines += ["", f"## Extrapolation (least-squares fit of log value on log passages over {len(rows)} sizes)", "",
              "Each stage is fitted alone; over two sizes an exponent is a single ratio, and a load average that "
              "rose between the builds inflates it.", "",
              "| | exponent | " + " | ".join(f"{t:.0e} passages" for t in TARGETS) + " |", "|---|---|" +
              "---|" * len(TARGETS)]
    for key, v in ext.items():
        cells = ["" if v[str(t)] is None else f"{v[str(t)]:,.1f}" for t in TARGETS]
        lines.append(f"| {key} | {v['exponent']} | " + " | ".join(cells) + " |")
    lines += ["", "Cluster each target would need (from the fits):", ""]
    lines += [f"- {int(t):.0e} passages: {what}" for t, what in res["cluster_needed"].items()]
    return "\n".join(lines) + "\n"


def chart(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = res["sizes"]
    n = [r["passages"] for r in rows]
    fig, axes = plt.subplots(1, 4, figsize=(20, 5))
    for s in dict.fromkeys(s for r in rows for s in r["stats"]["seconds_per_stage"]):
        values = [r["stats"]["seconds_per_stage"].get(s, 0.0) for r in rows]
        if max(values) >= 0.5:  # the sub-second stages would only crowd the legend
            axes[0].loglog(n, values, "o-", label=s)
    axes[0].loglog(n, [r["seconds"] for r in rows], "k--", label="total")
    axes[0].set_title("seconds per stage")
    axes[0].legend(fontsize=7)
    axes[1].loglog(n, [r["stats"]["driver_peak_rss_bytes"] / 2**20 for r in rows], "o-", label="driver")
    axes[1].loglog(n, [r["stats"]["worker_peak_rss_bytes"] / 2**20 for r in rows], "o-", label="largest worker")
    axes[1].set_title("peak RSS MiB")
    axes[1].legend(fontsize=8)
    axes[2].loglog(n, [max(r["stats"]["vectors_per_s"], 1e-3) for r in rows], "o-")
    axes[2].set_title("vectors/s (write step)")
    axes[3].loglog(n, [r["snapshot_bytes"] / 2**20 for r in rows], "o-", label="snapshot MiB")
    axes[3].loglog(n, [r["entities"] for r in rows], "o-", label="entities")
    axes[3].set_title("snapshot MiB, entities")
    axes[3].legend(fontsize=8)
    for ax in axes:
        ax.set_xlabel("passages")
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(f"hygraph index on a {res['cluster']} ({res['embedder_note']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="20000,50000,200000")
    p.add_argument("--corpus", help="build this corpus file instead of the composed ones (one size: all of it)")
    p.add_argument("--embedder", default="m2v", help="m2v (distilled from the bundled MiniLM), bundled, or a path")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--cpus-per-worker", type=int, default=1)
    p.add_argument("--embed-cpus", type=float, default=0.6,
                   help="embedder.num_cpus: with the extraction actor (0.25) and chunk tasks (0.1) below a node's CPUs")
    p.add_argument("--object-store-mb", type=int, default=2048, help="each node's object store")
    p.add_argument("--work", default="runs/bench_build", help="corpora, indexes, logs and the distilled model")
    p.add_argument("--out", default="runs/bench_build/report")
    args = p.parse_args()
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    model = embedder_dir(args.embedder, work)
    if args.corpus:
        corpora = [(sum(1 for _ in open(args.corpus)), Path(args.corpus).resolve())]
    else:
        sizes = sorted(int(s) for s in args.sizes.split(","))
        pool = renamed_pool(max(sizes))
        corpora = [(n, write_jsonl(work / f"corpus_{n}.jsonl", pool[:n])) for n in sizes]
    res: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"), "command": " ".join(["python", *sys.argv]),
        "machine": f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
                   f"{psutil.virtual_memory().total / 2**30:.0f} GiB",
        "cluster": f"head (0 CPUs) + {args.workers} worker nodes of {args.cpus_per_worker} CPU on one machine",
        "embedder_note": ("model2vec static model distilled from the bundled all-MiniLM-L6-v2"
                          if args.embedder == "m2v" else f"embedder {args.embedder}"),
        "note": "Measured on a shared, loaded machine: the load average of each build is given; "
                "absolute seconds are inflated by the other processes.",
        "sizes": []}
    tag = re.sub(r"\W+", "_", args.embedder)
    with RayCluster(workers=args.workers, cpus_per_worker=args.cpus_per_worker,
                    object_store_mb=args.object_store_mb) as cluster:
        names = node_names(cluster)
        say(TAG, f"cluster up: {names}")
        for n, corpus in corpora:
            say(TAG, f"building {n:,} passages ({args.embedder})")
            r = build(cluster, corpus, work / f"index_{tag}_{n}", build_env(model, args.embed_cpus),
                      work / f"build_{tag}_{n}.log")
            r["passages"] = n
            named = {s: sorted(names.get(node.split("/")[-1], node) for node in nodes)
                     for s, nodes in r["stats"]["nodes_per_stage"].items()}
            r["nodes_named"] = named
            r["rss_per_node_named"] = dict(sorted((names.get(node.split("/")[-1], node), b)
                                                  for node, b in r["stats"]["worker_peak_rss_bytes_per_node"].items()))
            res["sizes"].append(r)
            res["extrapolation"] = extrapolate(res["sizes"])
            res["cluster_needed"] = cluster_needed(res["extrapolation"], args.workers)
            out.with_suffix(".json").write_text(json.dumps(res, indent=1))
            out.with_suffix(".md").write_text(markdown(res))
    chart(res, out.with_suffix(".png"))
    print(markdown(res))


if __name__ == "__main__":
    main()
