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

`--kill-at F` (issue 29's kill test): after each size's build, the same corpus is built into a new index
directory by the same command, its driver SIGKILLed once F times the first build's wall seconds have passed,
and the command run again to the end. The report's "Kill and resume" table gives what was running at the
kill, the seconds of both runs and the work repeated, what the rerun kept and redid; once the cluster is
gone, every table of the two indexes' versions is compared sorted by id, column by column, with the rows of
each Milvus collection and a sample of stored vectors, and the collections on the resumed index's server are
checked against those its versions name (none of a build that never committed may be left).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import psutil  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute  # noqa: E402,F401 - pa.compute

from hygraph.backends.vectorstore import connect  # noqa: E402
from hygraph.config import load_config  # noqa: E402
from hygraph.indexing.checkpoint import BUILDS, RECORD  # noqa: E402
from hygraph.store.artifacts import ARTIFACTS  # noqa: E402
from hygraph.store.lease import newest  # noqa: E402
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
COUNTS = ("documents", "chunks", "entities", "relations", "hyperedges", "summaries")


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


def index_command(corpus: Path, index_dir: Path, restart: bool = True) -> list[str]:
    """`hygraph index` of `corpus` into `index_dir`; `restart`: discard an unfinished build's checkpoint."""
    return [sys.executable, "-m", "hygraph.cli", "index", "--corpus", str(corpus), "--index-dir", str(index_dir),
            *(["--restart"] if restart else [])]


def build(cluster: RayCluster, corpus: Path, index_dir: Path, env: dict[str, str], log: Path,
          restart: bool = True) -> dict[str, Any]:
    """One `hygraph index` on the cluster; its JSON result plus the snapshot's bytes and the load average."""
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    with log.open("w") as err:  # the build's progress, as it goes
        proc = cluster.popen(index_command(corpus, index_dir, restart), env=env, cwd=REPO, stdout=subprocess.PIPE,
                             stderr=err, text=True)
        stdout, _ = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"hygraph index failed ({proc.returncode}); log in {log}:\n{log.read_text()[-3000:]}")
    result = json.loads(stdout.strip().splitlines()[-1])
    result["wall_s"] = round(wall, 1)
    result["snapshot_bytes"] = IndexStore(index_dir).size_bytes()
    result["load_average_1m"] = [round(load, 1), round(os.getloadavg()[0], 1)]
    return result


# The driver's progress lines (indexing/progress.py, beside.py, stages/ingest.py) that say what ran and what a
# resumed build kept.
STAGE_STARTED = re.compile(r"^\[index\] (.+?) \.\.\.( \(a Ray task beside the assembler\))?$")
STAGE_DONE = re.compile(r"^\[index\] (.+?) done in [\d.]+s")
INGEST_KEPT = re.compile(r"^\[index\] ingest: ([\d,]+) of ([\d,]+) documents kept from the checkpoint")


def running_stages(log: str) -> list[str]:
    """The stages a progress log shows started and not done (several: the assembler's and those beside it)."""
    running: list[str] = []
    for line in log.splitlines():
        if m := STAGE_DONE.match(line):
            if m.group(1) in running:
                running.remove(m.group(1))
        elif m := STAGE_STARTED.match(line):
            running.append(m.group(1))
    return running


def checkpoint_record(index_dir: Path) -> dict[str, Any]:
    """The unfinished build's checkpoint record (`builds/<fingerprint>/build.json`); {} once none is left."""
    records = sorted((index_dir / BUILDS).glob(f"*/{RECORD}"))
    return json.loads(records[0].read_text()) if records else {}


def kill_driver(proc: subprocess.Popen) -> list[str]:
    """SIGKILL the `hygraph index` that `proc` (nsenter) runs: the command's process, which watches a child
    running the driver (runtime/watch.py), and the driver's process group (the child has one of its own).
    The Milvus server and its watchdog run in sessions of their own and outlive it, as after a real crash.
    The processes killed, as "pid command"."""
    watcher = psutil.Process(proc.pid).children()[0]
    drivers = [c for c in watcher.children() if "hygraph.cli" in " ".join(c.cmdline())]
    if len(drivers) != 1:
        raise RuntimeError(f"expected one driver under the command's process {watcher.pid}, found {drivers}")
    pgid = os.getpgid(drivers[0].pid)
    if pgid == os.getpgrp():
        raise RuntimeError("the driver runs in this process's group: killing it would kill the benchmark")
    group = [p for p in watcher.children(recursive=True) if _pgid(p) == pgid]
    killed = [f"{p.pid} {' '.join(p.cmdline())[:120]}" for p in (watcher, *group)]
    os.killpg(pgid, signal.SIGKILL)
    watcher.kill()
    _, alive = psutil.wait_procs([watcher, *group], timeout=30)
    if alive:
        raise RuntimeError(f"still alive 30 s after SIGKILL: {alive}")
    proc.wait(60)
    return killed


def _pgid(p: psutil.Process) -> int | None:
    try:
        return os.getpgid(p.pid)
    except ProcessLookupError:
        return None  # it ended since it was listed: nothing of it to kill


def killed_build(cluster: RayCluster, corpus: Path, index_dir: Path, env: dict[str, str], log: Path,
                 after_s: float) -> dict[str, Any]:
    """`hygraph index` (no --restart: the command a user reruns) whose driver is SIGKILLed `after_s` seconds
    after it started: when, what was running then (from its progress log) and what its checkpoint held."""
    t0 = time.perf_counter()
    with log.open("w") as err:
        proc = cluster.popen(index_command(corpus, index_dir, restart=False), env=env, cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=err)
        while proc.poll() is None and time.perf_counter() - t0 < after_s:
            time.sleep(0.05)
        if proc.poll() is not None:
            raise RuntimeError(f"the build ended ({proc.returncode}) before its kill at {after_s:.0f} s; "
                               f"log in {log}:\n{log.read_text()[-3000:]}")
        running = running_stages(log.read_text())  # read before the kill: the stages its driver last reported
        killed = kill_driver(proc)
    seconds = time.perf_counter() - t0
    lines = [line for line in log.read_text().splitlines() if line.startswith("[index]")]
    return {"killed_after_s": round(seconds, 1), "running_at_kill": running,
            "last_progress_line": lines[-1] if lines else "", "killed_processes": killed,
            "record_at_kill": checkpoint_record(index_dir)}


def kill_and_resume(cluster: RayCluster, corpus: Path, index_dir: Path, env: dict[str, str], log: Path,
                    uninterrupted: dict[str, Any], fraction: float) -> dict[str, Any]:
    """A build of `corpus` into the new `index_dir` killed at `fraction` of the uninterrupted build's wall
    seconds, then the same command run again to the end: what each run did and the work repeated."""
    shutil.rmtree(index_dir, ignore_errors=True)
    killed = killed_build(cluster, corpus, index_dir, env, log.with_suffix(".killed.log"),
                          fraction * uninterrupted["wall_s"])
    # Read after the kill, when Ray has ended the killed build's actors: what the rerun finds. The killed
    # build's assembler held the writer lease: the rerun cannot take it (nor publish) before its term ends.
    killed["record_at_rerun"] = checkpoint_record(index_dir)
    _, lease = newest(IndexStore(index_dir).objects)
    killed["writer_lease_left_s"] = round(max(0.0, lease.expires - time.time()), 1) if lease is not None else 0.0
    resumed = build(cluster, corpus, index_dir, env, log.with_suffix(".resumed.log"), restart=False)
    text = log.with_suffix(".resumed.log").read_text()
    ingest_kept = [m.group(0)[len("[index] "):] for line in text.splitlines() if (m := INGEST_KEPT.match(line))]
    kept = resumed["resumed_stages"]
    redone = {s: t for s, t in resumed["stats"]["seconds_per_stage"].items() if s not in kept}
    base = uninterrupted["wall_s"]
    return {"fraction": fraction, **killed, "resumed_s": resumed["wall_s"], "resumed_build_s": resumed["seconds"],
            "uninterrupted_s": base,
            "repeated_work": round((killed["killed_after_s"] + resumed["wall_s"] - base) / base, 3),
            "stages_kept": kept, "seconds_of_kept_stages": resumed["stats"]["seconds_of_resumed_stages"],
            "collections_kept": resumed["stats"]["collections_kept"],
            "collections_continued": resumed["stats"].get("collections_continued", {}), "ingest_kept": ingest_kept,
            "stages_redone_s": redone, "stages_redone_share": round(sum(redone.values()) / base, 3),
            "tables_kept": resumed["stats"].get("tables_kept", []),
            "vectors_written": resumed["stats"]["vectors_written"],
            "driver_peak_rss_bytes": resumed["stats"]["driver_peak_rss_bytes"],
            "worker_peak_rss_bytes": resumed["stats"]["worker_peak_rss_bytes"],
            "worker_peak_rss_bytes_per_node": resumed["stats"]["worker_peak_rss_bytes_per_node"],
            "version": resumed["version"], "result": {k: resumed[k] for k in COUNTS},
            "load_average_1m": resumed["load_average_1m"]}


def _table(store: IndexStore, version: int, name: str) -> pa.Table:
    """Every live row of one table of a version, sorted by id."""
    table = store.open(version).table(ARTIFACTS[name])
    return pa.Table.from_batches(list(table.batches())).sort_by("id")


def _column_difference(a: pa.ChunkedArray, b: pa.ChunkedArray) -> str:
    """How two columns of equal length differ: the rows that differ, and the largest difference of a float one."""
    a, b = a.combine_chunks(), b.combine_chunks()
    if len(a) != len(b):
        return f"{len(a)} against {len(b)} rows"
    rows = sum(1 for x, y in zip(a, b) if x != y)
    flat = a.type
    while pa.types.is_list(flat) or pa.types.is_fixed_size_list(flat):
        flat = flat.value_type
    if pa.types.is_floating(flat):
        x = np.asarray(pa.compute.list_flatten(a) if flat is not a.type else a, np.float64)
        y = np.asarray(pa.compute.list_flatten(b) if flat is not b.type else b, np.float64)
        if x.shape == y.shape:
            return f"{rows} rows differ, largest difference {np.abs(x - y).max():.3g}"
    return f"{rows} rows differ"


def compare_tables(a_dir: Path, b_dir: Path) -> dict[str, Any]:
    """Every table of the two indexes' current versions, sorted by id, column by column; and the manifests'
    counts, dims, hierarchy, hyperbolic bound and LLM calls."""
    a, b = IndexStore(a_dir), IndexStore(b_dir)
    ma, mb = a.manifest(), b.manifest()
    out: dict[str, Any] = {"versions": [ma.version, mb.version], "tables": {}, "manifest_differs": []}
    for key in ("counts", "dims", "graph", "hierarchy", "hyperbolic", "llm_calls"):
        if getattr(ma, key) != getattr(mb, key):
            out["manifest_differs"].append(f"{key}: {getattr(ma, key)} against {getattr(mb, key)}")
    for name in sorted(set(ma.tables) | set(mb.tables)):
        if name not in ma.tables or name not in mb.tables:
            out["tables"][name] = {"equal": False, "note": "in one index only"}
            continue
        ta, tb = _table(a, ma.version, name), _table(b, mb.version, name)
        differs = {c: _column_difference(ta.column(c), tb.column(c)) for c in ta.column_names
                   if c not in tb.column_names or not ta.column(c).equals(tb.column(c))}
        out["tables"][name] = {"rows": [ta.num_rows, tb.num_rows], "columns": ta.num_columns,
                               "equal": ta.schema == tb.schema and not differs, "differs": differs}
        del ta, tb
    out["equal"] = not out["manifest_differs"] and all(t["equal"] for t in out["tables"].values())
    return out


def stored_vectors(index_dir: Path, sample: int, ids: dict[str, list[str]] | None = None
                   ) -> tuple[dict[str, Any], dict[str, list[str]], dict[str, np.ndarray]]:
    """Of the index's managed Milvus server: every collection on it; the row count of each collection the
    current version names (kind -> count); `sample` stored vectors of each (`ids`: those ids per kind, else
    the first `sample` rows)."""
    cfg = load_config(None)
    store = IndexStore(index_dir)
    vs = connect(cfg.vector_store, index_dir)
    try:
        present = sorted(vs.client.list_collections())
        counts, chosen, vectors = {}, {}, {}
        for kind, name in sorted(store.manifest().collections.items()):
            counts[kind] = int(vs.client.get_collection_stats(name)["row_count"])
            vs.open(name)
            chosen[kind] = ids[kind] if ids is not None else [
                r["item_id"] for r in vs.client.query(name, filter='item_id != ""', output_fields=["item_id"],
                                                       limit=sample)]
            vectors[kind] = vs.fetch(name, chosen[kind])
            vs.client.release_collection(name)  # one collection loaded at a time
    finally:
        vs.close()
    return {"collections_on_server": present, "rows": counts}, chosen, vectors


def compare_vectors(a_dir: Path, b_dir: Path, sample: int) -> dict[str, Any]:
    """The rows of each collection of both indexes' current versions, and `sample` vectors of each, fetched
    by id from both."""
    a, ids, va = stored_vectors(a_dir, sample)
    b, _, vb = stored_vectors(b_dir, sample, ids)
    sampled = {k: {"ids": len(ids[k]), "equal": bool(np.array_equal(va[k], vb[k])),
                   "largest_difference": float(np.abs(va[k] - vb[k]).max()) if len(ids[k]) else 0.0} for k in ids}
    return {"rows": {k: [a["rows"][k], b["rows"].get(k)] for k in a["rows"]}, "sampled": sampled,
            "equal": a["rows"] == b["rows"] and all(s["equal"] for s in sampled.values())}


def orphans(index_dir: Path) -> dict[str, Any]:
    """The collections on the index's Milvus server against those its versions name: a collection of a build
    that never committed (hg_<uid>_g<N>_*, N not a published version's generation) is an orphan. Also what
    the build left recorded (collections/ records, builds/ checkpoints)."""
    store = IndexStore(index_dir)
    named = {n for v in store.versions() for n in store.manifest(v).collections.values()}
    vs = connect(load_config(None).vector_store, index_dir)
    try:
        present = sorted(vs.client.list_collections())
    finally:
        vs.close()
    return {"collections_on_server": present, "named_by_versions": sorted(named),
            "orphans": sorted(set(present) - named), "missing": sorted(named - set(present)),
            "collection_records_left": store.objects.list("collections/"),
            "checkpoints_left": sorted(p.name for p in (index_dir / BUILDS).iterdir() if p.is_dir())
            if (index_dir / BUILDS).is_dir() else []}


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
    killed = [r for r in rows if "kill_resume" in r]
    if killed:
        lines += ["", *kill_resume_markdown(killed)]
    return "\n".join(lines) + "\n"


def kill_resume_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The "Kill and resume" table: one column per size."""
    ks = [r["kill_resume"] for r in rows]
    lines = ["## Kill and resume", "",
             "The same corpus built again into a new index directory with the same command (no `--restart`), its "
             "driver (the CLI's process and the driver process group it watches) SIGKILLed at the given fraction of "
             "the uninterrupted build's wall seconds, then the command run again to the end. Repeated work = "
             "(seconds until the kill + seconds of the resumed run - uninterrupted seconds) / uninterrupted "
             "seconds, all wall seconds of the command. The resumed run's memory is its own (the killed run "
             "reported none).", "",
             "| | " + " | ".join(f"{r['passages']:,} passages" for r in rows) + " |", "|---|" + "---|" * len(rows)]

    def line(label: str, values: list[Any]) -> None:
        lines.append(f"| {label} | " + " | ".join(str(v) for v in values) + " |")

    line("uninterrupted s", [f"{k['uninterrupted_s']:.1f}" for k in ks])
    line("killed at s (fraction)", [f"{k['killed_after_s']:.1f} ({k['fraction']:g})" for k in ks])
    line("running at the kill", [", ".join(k["running_at_kill"]) or "-" for k in ks])
    line("checkpoint at the rerun: stages done / collections",
         [f"{', '.join(k['record_at_rerun'].get('done', [])) or '-'} / "
          f"{', '.join(k['record_at_rerun'].get('collections', {})) or '-'}" for k in ks])
    line("the killed build's writer lease: s of its term left at the rerun", [f"{k['writer_lease_left_s']:.1f}"
                                                                             for k in ks])
    line("resumed run s (build s)", [f"{k['resumed_s']:.1f} ({k['resumed_build_s']:.1f})" for k in ks])
    line("**repeated work**", [f"**{100 * k['repeated_work']:.1f}%**" for k in ks])
    line("kept: stages (s they took)", [", ".join(f"{s} ({k['seconds_of_kept_stages'][s]:.1f})"
                                                  for s in k["stages_kept"]) or "-" for k in ks])
    line("kept: ingest", ["; ".join(k["ingest_kept"]) or "-" for k in ks])
    line("kept: collections", [", ".join(k["collections_kept"]) or "-" for k in ks])
    line("continued: collections cut off mid-write (rows they held)",
         [", ".join(f"{c} ({n:,})" for c, n in k.get("collections_continued", {}).items()) or "-" for k in ks])
    line("run again by the resumed run (not checkpointed, or not kept): stage s",
         [", ".join(f"{s} {t:.1f}" for s, t in k["stages_redone_s"].items()) for k in ks])
    line("their sum / uninterrupted s (an upper bound of the repeated work: it counts the work the killed run "
         "had not done)", [f"{100 * k['stages_redone_share']:.1f}%" for k in ks])
    line("kept: snapshot tables", [", ".join(k["tables_kept"]) or "-" for k in ks])
    line("vectors written by the resumed run", [f"{k['vectors_written']:,}" for k in ks])
    line("resumed run: driver peak RSS MiB", [f"{k['driver_peak_rss_bytes'] / 2**20:.0f}" for k in ks])
    line("resumed run: worker peak RSS MiB, per node",
         ["; ".join(f"{n.split('/')[-1]} {b / 2**20:.0f}" for n, b in k["worker_peak_rss_bytes_per_node"].items())
          for k in ks])
    line("load average (1 min) at start / end of the resumed run", [" / ".join(map(str, k["load_average_1m"]))
                                                                     for k in ks])
    if all("equality" in k for k in ks):
        line("tables equal (sorted by id, column by column)",
             [_equal_cell(k["equality"]["tables"]) for k in ks])
        line("vector rows per collection / sampled vectors by id", [_vectors_cell(k["equality"]["vectors"])
                                                                     for k in ks])
        line("collections on the resumed index's server", [", ".join(k["orphan_check"]["collections_on_server"])
                                                           for k in ks])
        line("orphans / collection records left / checkpoints left",
             [f"{k['orphan_check']['orphans'] or 'none'} / {k['orphan_check']['collection_records_left'] or 'none'}"
              f" / {k['orphan_check']['checkpoints_left'] or 'none'}" for k in ks])
    return lines


def _vectors_cell(vectors: dict[str, Any]) -> str:
    rows = "; ".join(f"{kind} {a:,}" + ("" if a == b else f" against {b}")
                     for kind, (a, b) in vectors["rows"].items())
    sampled = vectors["sampled"]
    same = sum(s["equal"] for s in sampled.values())
    return (f"{rows} / {same} of {len(sampled)} collections' samples equal "
            f"({max((s['ids'] for s in sampled.values()), default=0)} ids each)")


def _equal_cell(tables: dict[str, Any]) -> str:
    if tables["equal"]:
        return f"all {len(tables['tables'])} equal (manifest counts too)"
    differ = [f"{n}: {t.get('note') or t['differs']}" for n, t in tables["tables"].items() if not t["equal"]]
    return "; ".join(differ + tables["manifest_differs"])


def report(res: dict[str, Any], out: Path) -> None:
    out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    out.with_suffix(".md").write_text(markdown(res))


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
    p.add_argument("--kill-at", type=float, default=0.0,
                   help="after each build, build again into a new index dir, SIGKILL its driver at this fraction "
                        "of the first build's seconds, rerun the command, and compare the result with the first")
    p.add_argument("--vector-sample", type=int, default=200,
                   help="with --kill-at: stored vectors compared per collection (all collections' rows are counted)")
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
            report(res, out)  # kept if the kill test below fails
            if args.kill_at:
                say(TAG, f"building {n:,} passages again, killed at {args.kill_at:g} of {r['wall_s']:.0f} s")
                r["kill_resume"] = kill_and_resume(cluster, corpus, work / f"index_{tag}_{n}_killed",
                                                   build_env(model, args.embed_cpus),
                                                   work / f"build_{tag}_{n}_killed.log", r, args.kill_at)
            report(res, out)
    # Compared once the cluster is gone, and with it every process it ran (the builds' Milvus servers among
    # them): each index's server is then started here, alone on its data.
    for r in res["sizes"]:
        if "kill_resume" in r:
            kill_dir = work / f"index_{tag}_{r['passages']}_killed"
            say(TAG, f"comparing {kill_dir.name} with the uninterrupted build")
            r["kill_resume"]["equality"] = {
                "tables": compare_tables(work / f"index_{tag}_{r['passages']}", kill_dir),
                "vectors": compare_vectors(work / f"index_{tag}_{r['passages']}", kill_dir, args.vector_sample)}
            r["kill_resume"]["orphan_check"] = orphans(kill_dir)
            report(res, out)
    chart(res, out.with_suffix(".png"))
    print(markdown(res))


if __name__ == "__main__":
    main()
