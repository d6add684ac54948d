"""Many small named indexes behind one `hygraph serve` (issue 31): views loaded and unloaded under a budget.

Starts `hygraph serve` (loopback, an admin key) with `serve.max_loaded_indexes` (`--budget`) below the
number of indexes, the answer cache off (every query reaches a view) and named updaters that stop after
`--idle-stop-s` idle seconds. Splits one dev corpus into 100 contiguous collections (`--indexes N` uses the
first N, each the same ~10 passages), creates one named index per collection through `POST /v1/indexes`,
inserts its passages and waits for the job. Then, through `Client(index=...)`:

- pass 1: every index answers a question whose gold passage it holds (the dev set's question when one of its
  supporting passages is there, else the passage's own title and opening), the gold passage among the top k;
  its view is loaded for that query (first load);
- pass 2: each index again, in the same order: with more indexes than the budget its view was unloaded since
  (least recently queried out first), so the first query loads it again (cold); `--hot-queries` more follow
  (hot). Load time of a cold index = its cold query's latency minus its hot queries' median;
- Retriever replica RSS after every query (and the ingress's and the managed Milvus server's): the largest
  seen against the RSS with `--budget` views loaded, and what `N` loaded views would need (the per-view
  growth while the first `--budget` views loaded, times N);
- then every named index is deleted.

Writes <out>.json and <out>.md; prints the Markdown table.

    python loadtests/bench_tenants.py --indexes 100 --budget 8 --out runs/bench_tenants/report
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import psutil  # noqa: E402

from hygraph.client import ApiError, Client  # noqa: E402
from loadtests.common import DEFAULT_CORPUS, ServeProcess, log_excerpt, probe_question, say  # noqa: E402

TAG = "bench_tenants"
DEV = DEFAULT_CORPUS.parent  # ../shared/data/dev beside the checkout
SPLITS = 100  # the corpus is always split this way; --indexes takes the first N collections


def collections(corpus: Path, questions: Path, n: int, prefix: str) -> list[dict[str, Any]]:
    """The first n of SPLITS contiguous collections, each with a question whose gold passage it holds; the
    index of collection i is named `<prefix>-<i>`."""
    docs = [json.loads(line) for line in corpus.read_text().splitlines() if line.strip()]
    qs = [json.loads(line) for line in questions.read_text().splitlines() if line.strip()]
    out = []
    for i, part in enumerate(np.array_split(np.arange(len(docs)), SPLITS)[:n]):
        passages = [docs[j] for j in part]
        ids = {d["id"] for d in passages}
        q = next((q for q in qs if ids & set(q.get("supporting_ids", []))), None)
        if q is not None:
            question, gold = q["question"], sorted(ids & set(q["supporting_ids"]))
        else:
            question, gold = probe_question(passages[0]), [passages[0]["id"]]
        out.append({"name": f"{prefix}-{i:03d}", "documents": passages, "question": question, "gold": gold})
    return out


def rss_mb(procs: list[psutil.Process]) -> float:
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return round(total / 2**20, 1)


def titled(server: ServeProcess, needle: str) -> list[psutil.Process]:
    out = []
    for p in server.remember():
        try:
            if needle in " ".join(p.cmdline()):
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def retry(call: Callable[[], Any], deadline: float) -> Any:
    """`call`, again after a 429/503's Retry-After until `deadline` (a loaded 2-core machine is normal)."""
    while True:
        try:
            return call()
        except ApiError as exc:
            if exc.status not in (429, 503) or time.monotonic() > deadline:
                raise
            time.sleep(float(exc.retry_after or 1))


def ingest(url: str, admin_key: str, coll: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    with Client(url, api_key=admin_key, timeout_s=timeout_s) as admin:
        retry(lambda: admin.create_index(coll["name"]), deadline)
    created = time.monotonic() - t0
    with Client(url, api_key=admin_key, index=coll["name"], timeout_s=timeout_s) as c:
        job = retry(lambda: c.add_documents(coll["documents"]), deadline)["job_id"]
        done = c.wait(job, timeout_s=max(1.0, deadline - time.monotonic()))
    return {"name": coll["name"], "create_s": round(created, 2), "ingest_s": round(time.monotonic() - t0, 2),
            "index_version": done.get("index_version")}


def timed_query(url: str, key: str, coll: dict[str, Any], mode: str, top_k: int) -> dict[str, Any]:
    with Client(url, api_key=key, index=coll["name"], timeout_s=120) as c:
        t0 = time.perf_counter()
        try:
            out = retry(lambda: c.query(coll["question"], mode=mode, top_k=top_k), time.monotonic() + 120)
        except ApiError as exc:
            return {"ms": round((time.perf_counter() - t0) * 1e3, 1), "status": exc.status, "answered": False}
        ms = (time.perf_counter() - t0) * 1e3
    found = {p["id"] for p in out.get("passages", [])}
    return {"ms": round(ms, 1), "status": 200, "answered": bool(found & set(coll["gold"]))}


def run(args: argparse.Namespace) -> dict[str, Any]:
    tag = datetime.now().strftime("%Y%m%d-%H%M%S")
    prefix = f"b{tag[-6:]}"  # a run's own names: a run that died before deleting its indexes is no 409 later
    colls = collections(args.corpus, args.questions, args.indexes, prefix)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    index_dir = Path(args.index_dir) if args.index_dir else out.parent / f"index-{tag}"
    admin_key, api_key = uuid.uuid4().hex, uuid.uuid4().hex
    env = {"HYGRAPH_ADMIN_KEYS": admin_key, "HYGRAPH__SERVE__MAX_LOADED_INDEXES": str(args.budget),
           "HYGRAPH__SERVE__ANSWER_CACHE_ENTRIES": "0",
           "HYGRAPH__UPDATES__NAMED_IDLE_STOP_S": str(args.idle_stop_s)}
    server = ServeProcess(index_dir, out.parent / f"serve-{tag}.log", api_key, TAG, env=env)
    report: dict[str, Any] = {"started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                              "machine": f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start",
                              "config": {"indexes": args.indexes, "budget": args.budget, "mode": args.mode,
                                         "top_k": args.top_k, "hot_queries": args.hot_queries,
                                         "idle_stop_s": args.idle_stop_s, "corpus": str(args.corpus),
                                         "passages": sum(len(c["documents"]) for c in colls)}}
    try:
        server.start()
        report["startup_s"] = server.wait_ready()
        say(TAG, f"server ready after {report['startup_s']} s")
        url = server.url

        def memory() -> dict[str, float]:
            return {"retriever": rss_mb(server.replicas("Retriever")), "ingress": rss_mb(server.replicas("Ingress")),
                    "milvus": rss_mb(titled(server, "milvus")), "updaters": len(titled(server, "OnlineUpdater"))}

        report["memory_before"] = memory()
        t0 = time.monotonic()
        with ThreadPoolExecutor(args.ingest_concurrency) as pool:
            futures = [pool.submit(ingest, url, admin_key, c, args.job_timeout_s) for c in colls]
            ingested = []
            for f in futures:
                ingested.append(f.result())
                if len(ingested) % 10 == 0 or len(ingested) == len(colls):
                    say(TAG, f"{len(ingested)}/{len(colls)} indexes filled, {time.monotonic() - t0:.0f} s")
        report["ingest"] = {"seconds": round(time.monotonic() - t0, 1), "per_index": ingested,
                            "memory_after": memory()}
        time.sleep(args.idle_stop_s + 40)  # the named updaters end after their idle spell (and deferred summaries)
        report["memory_after_idle"] = memory()

        samples: list[dict[str, Any]] = []

        def query(coll: dict[str, Any], kind: str) -> dict[str, Any]:
            got = timed_query(url, admin_key, coll, args.mode, args.top_k) | {"index": coll["name"], "kind": kind}
            got["memory"] = memory()
            samples.append(got)
            return got

        for coll in colls:
            query(coll, "first")
        for coll in colls:
            cold = query(coll, "cold" if len(colls) > args.budget else "hot")
            hot = [query(coll, "hot")["ms"] for _ in range(args.hot_queries)]
            if cold["kind"] == "cold":
                cold["hot_median_ms"] = statistics.median(hot)
                cold["load_ms"] = round(cold["ms"] - cold["hot_median_ms"], 1)
        report["queries"] = samples

        t1 = time.monotonic()
        deleted = 0
        with Client(url, api_key=admin_key) as admin:
            for coll in colls:
                deleted += bool(admin.delete_index(coll["name"]).get("job_id"))
            left = [i["name"] for i in admin.indexes() if i["name"].startswith(prefix + "-")]
        report["delete"] = {"deleted": deleted, "seconds": round(time.monotonic() - t1, 1), "still_listed": left}
    finally:
        report["left_running_after_stop"] = server.stop()
        report["log_errors"] = log_excerpt(server.log_tail(2_000_000))
    report["summary"] = summarize(report)
    return report


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    qs, budget = report["queries"], report["config"]["budget"]
    first = [q for q in qs if q["kind"] == "first"]
    by_kind = {k: [q["ms"] for q in qs if q["kind"] == k and q["status"] == 200] for k in ("first", "cold", "hot")}
    rss = [q["memory"]["retriever"] for q in qs]
    base = report["memory_after_idle"]["retriever"]
    at_budget = first[min(budget, len(first)) - 1]["memory"]["retriever"]
    per_view = (at_budget - base) / min(budget, len(first))
    n = len(first)
    loads = [q["load_ms"] for q in qs if q.get("load_ms") is not None]
    return {
        "indexes": n, "answered": sum(q["answered"] for q in first),
        "not_answered": [q["index"] for q in first if not q["answered"]],
        "errors": sorted({q["status"] for q in qs if q["status"] != 200}),
        "ingest_s": report["ingest"]["seconds"],
        "ingest_p50_s": round(statistics.median(i["ingest_s"] for i in report["ingest"]["per_index"]), 1),
        "retriever_rss_mb": {"before_views": base, "with_budget_views": at_budget, "max": max(rss), "last": rss[-1],
                             "per_view_mb": round(per_view, 2),
                             "estimated_all_views": round(base + per_view * n, 1)},
        "inside_budget": max(rss) <= at_budget * 1.10 + per_view,
        "milvus_rss_mb": {"first": qs[0]["memory"]["milvus"], "max": max(q["memory"]["milvus"] for q in qs)},
        "ingress_rss_mb": {"first": qs[0]["memory"]["ingress"], "max": max(q["memory"]["ingress"] for q in qs)},
        "updaters_alive": {"after_ingest": report["ingest"]["memory_after"]["updaters"],
                           "after_idle": report["memory_after_idle"]["updaters"]},
        "latency_ms": {k: {"n": len(v), "p50": round(statistics.median(v), 1) if v else None,
                           "p95": round(float(np.percentile(v, 95)), 1) if v else None} for k, v in by_kind.items()},
        "cold_load_ms": {"n": len(loads), "p50": round(statistics.median(loads), 1) if loads else None,
                         "max": max(loads) if loads else None},
        # The Retriever logs its unloads at INFO, which its replicas do not emit: a view that was unloaded shows as a
        # cold query at least twice its index's hot median.
        "reloaded": sum(q["ms"] >= 2 * q["hot_median_ms"] for q in qs if q.get("load_ms") is not None),
        "delete": report["delete"],
    }


def markdown(report: dict[str, Any]) -> str:
    s, c = report["summary"], report["config"]
    r, lat = s["retriever_rss_mb"], s["latency_ms"]
    rows = [
        ("named indexes (passages)", f"{s['indexes']} ({c['passages']})"),
        ("`serve.max_loaded_indexes` (budget)", str(c["budget"])),
        ("fill: create + insert + job done, all / p50 per index",
         f"{s['ingest_s']} s / {s['ingest_p50_s']} s ({report['config']['idle_stop_s']} s idle stop)"),
        ("indexes answering with their gold passage in the top k", f"{s['answered']} / {s['indexes']}"),
        ("non-200 answers", ", ".join(map(str, s["errors"])) or "none"),
        ("Retriever RSS MiB: no named view / budget loaded / max / last",
         f"{r['before_views']} / {r['with_budget_views']} / {r['max']} / {r['last']}"),
        ("Retriever RSS MiB per loaded view; all views loaded (estimate)",
         f"{r['per_view_mb']}; {r['estimated_all_views']}"),
        ("Retriever stays inside the budget (max <= budget RSS +10% + one view)",
         "yes" if s["inside_budget"] else "NO"),
        ("views reloaded: cold queries >= 2x their index's hot median", f"{s['reloaded']} / {s['cold_load_ms']['n']}"),
        ("managed Milvus RSS MiB first / max", f"{s['milvus_rss_mb']['first']} / {s['milvus_rss_mb']['max']}"),
        ("ingress RSS MiB first / max", f"{s['ingress_rss_mb']['first']} / {s['ingress_rss_mb']['max']}"),
        ("named updater processes after fill / after idle stop",
         f"{s['updaters_alive']['after_ingest']} / {s['updaters_alive']['after_idle']}"),
        *[(f"query p50 / p95 ms, {c['mode']}: {what}", "{p50} / {p95} (n={n})".format(**lat[kind]))
          for kind, what in (("first", "first load"), ("cold", "cold (view unloaded before)"), ("hot", "hot"))],
        ("cold index load ms (cold - its hot median) p50 / max",
         f"{s['cold_load_ms']['p50']} / {s['cold_load_ms']['max']}"),
        ("delete every named index: 202s / seconds / still listed",
         f"{s['delete']['deleted']} / {s['delete']['seconds']} / {len(s['delete']['still_listed'])}"),
    ]
    lines = [f"Started {report['started_at']}, {report['machine']}; server ready after {report['startup_s']} s.", "",
             "| measure | value |", "|---|---|", *[f"| {k} | {v} |" for k, v in rows]]
    if s["not_answered"]:
        lines += ["", f"Not answered: {', '.join(s['not_answered'])}"]
    if report.get("log_errors"):
        lines += ["", "Server log, error lines:", "", "```", *report["log_errors"], "```"]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--indexes", type=int, default=SPLITS, help=f"the first N of the {SPLITS} collections")
    ap.add_argument("--budget", type=int, default=8, help="serve.max_loaded_indexes (below --indexes)")
    ap.add_argument("--corpus", type=Path, default=DEV / "hotpotqa_train100.corpus.jsonl")
    ap.add_argument("--questions", type=Path, default=DEV / "hotpotqa_train100.questions.jsonl")
    ap.add_argument("--index-dir", help="the default index to serve (default: a fresh demo index under --out's "
                                        "folder); the named indexes are made inside it and deleted at the end")
    ap.add_argument("--mode", default="hybrid")
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--hot-queries", type=int, default=3, help="queries after each cold one")
    ap.add_argument("--ingest-concurrency", type=int, default=2, help="indexes filled at once")
    ap.add_argument("--idle-stop-s", type=float, default=15.0, help="updates.named_idle_stop_s")
    ap.add_argument("--job-timeout-s", type=float, default=900.0, help="one index's create + insert + job")
    ap.add_argument("--out", default="runs/bench_tenants/report", help="path prefix of .json and .md")
    args = ap.parse_args(argv)
    if not 1 <= args.indexes <= SPLITS:
        ap.error(f"--indexes: 1 to {SPLITS}")
    if args.budget < 1:
        ap.error("--budget: at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = run(args)
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    text = markdown(report)
    out.with_suffix(".md").write_text(text)
    print(text)
    say(TAG, f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')}")
    s = report["summary"]
    return 0 if s["answered"] == s["indexes"] and not s["errors"] and s["inside_budget"] else 1


if __name__ == "__main__":
    sys.exit(main())
