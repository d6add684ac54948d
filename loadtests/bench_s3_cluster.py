"""An index on object storage served by a three-node Ray cluster under a stream of writes (issue 30).

    python loadtests/bench_s3_cluster.py --out docs/bench/s3_cluster

On this machine, inside private namespaces (tests/raycluster.py): a Ray head with no CPUs and three 1-CPU
worker nodes, each with a HOME of its own (so each node keeps its own segment cache, as separate machines
would), SeaweedFS serving S3, an index built into the bucket with `hygraph index`, and `hygraph serve
--index-dir s3://...` with two Retriever replicas (0.6 CPU each: one per node) and the updater (0.5 CPU: a
third node). A stream of inserts and deletes runs from several writers while queries run at the same time;
after a share of the writes the worker node running the updater is killed (SIGKILL of its raylet) and a new
node joins, as an autoscaler would add one; later the S3 server is stopped for `--outage-s` seconds.

Printed and written to `--out`.{json,md}: where each actor ran, failed queries (every one counts, during the
outage too), writes refused (503 with Retry-After, then retried), the status of each write a prober asks for while
S3 is away (the writers are waiting on their jobs then; each must be a 503 with Retry-After), read-your-writes checks
(after a job is done, a query at its version finds an insert and misses a delete), every acknowledged
document present exactly once at the end, the updater's takeover time (kill to the first job done after it), and
the bytes each node fetched into its segment cache against the bytes written to the bucket during the stream
(every object that appeared, compaction's included).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hygraph.data import DEMO_DIR  # noqa: E402
from loadtests.common import OFFLINE_ENV, pcts, say  # noqa: E402
from tests.raycluster import RayCluster  # noqa: E402
from tests.s3server import weed_command  # noqa: E402

TAG = "bench_s3_cluster"
BUCKET, PREFIX = "hygraph-bench", "index"
S3_PORTS = (18333, 18334, 19333, 19334, 18080, 18081, 18888, 18889)  # inside the namespace: nobody else's
SERVE_PORT, METRICS_PORT = 8000, 8080
KEY = "bench-s3-cluster-key"
AWS = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{S3_PORTS[0]}", "AWS_ACCESS_KEY_ID": "bench",
       "AWS_SECRET_ACCESS_KEY": "bench-secret", "AWS_DEFAULT_REGION": "us-east-1"}


# ---------------------------------------------------------------------------------------------- outside


def start_weed(cluster: RayCluster, work: Path) -> subprocess.Popen:
    (work / "weed").mkdir(exist_ok=True)
    with (work / "weed.log").open("a") as log:
        proc = cluster.popen(weed_command(work / "weed", S3_PORTS), env={**os.environ, **AWS}, stdout=log, stderr=log)
    wait = ("import boto3, time\n"
            "c = boto3.client('s3')\n"
            "for _ in range(240):\n"
            "    try:\n"
            f"        c.create_bucket(Bucket='{BUCKET}'); break\n"
            "    except Exception as e:\n"
            "        if type(e).__name__ in ('BucketAlreadyOwnedByYou', 'BucketAlreadyExists'): break\n"
            "        time.sleep(0.5)\n"
            "else:\n"
            "    raise SystemExit('S3 did not answer')\n")
    out = cluster.run([sys.executable, "-c", wait], env={**os.environ, **AWS}, timeout=180)
    if out.returncode != 0:
        raise RuntimeError(f"SeaweedFS did not start: {out.stderr[-2000:]}\n{(work / 'weed.log').read_text()[-2000:]}")
    return proc


def node_of(cluster: RayCluster, title: str, nodes: int) -> int | None:
    """The worker node (number) whose raylet runs a process titled `title`."""
    for i in range(nodes):
        try:
            if any(title in p for p in cluster.worker_processes(i)):
                return i
        except LookupError:  # a node killed earlier
            continue
    return None


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="s3c-", dir="/tmp"))
    corpus = [json.loads(line) for line in (DEMO_DIR / "corpus.jsonl").open()]
    base, fresh = corpus[:args.base_docs], corpus[args.base_docs:]
    (work / "base.jsonl").write_text("".join(json.dumps(d) + "\n" for d in base))
    uri = f"s3://{BUCKET}/{PREFIX}"
    env = {**os.environ, **OFFLINE_ENV, **AWS, "HYGRAPH_API_KEYS": KEY,
           "HYGRAPH__VECTOR_STORE__SERVER_DIR": str(work / "milvus"),
           # The driver's node-local directories are this run's too (HOME); what is costly to make stays shared.
           "HOME": str(work / "driver-home"),
           "HYGRAPH__EMBEDDER__ONNX_DIR": str(Path.home() / ".cache" / "hygraph" / "onnx"),
           "HYGRAPH__VECTOR_STORE__SERVER_CACHE_DIR": str(Path.home() / ".cache" / "hygraph"),
           "HYGRAPH__SERVE__RETRIEVER__NUM_REPLICAS": "2", "HYGRAPH__SERVE__RETRIEVER__NUM_CPUS": "0.6",
           "HYGRAPH__UPDATES__NUM_CPUS": "0.5", "HYGRAPH__STORE__LEASE_S": str(args.lease_s),
           "HYGRAPH__UPDATES__GC_GRACE_S": "20", "HYGRAPH__UPDATES__KEEP_VERSIONS": "2",
           "HYGRAPH__UPDATES__COMPACT_MAX_SEGMENTS": "4", "HYGRAPH__SERVE__METRICS_PORT": str(METRICS_PORT)}
    homes = [work / f"home{i}" for i in range(8)]  # worker node i's; the head's is the driver's
    # Every node reads the bucket with its own credentials, as pods get them from a Secret.
    def node_env(i: int) -> dict[str, str]:
        return {"HOME": str(homes[i] if i >= 0 else work / "driver-home"), **AWS}

    with RayCluster(workers=3, node_env=node_env) as cluster:
        weed = start_weed(cluster, work)
        say(TAG, f"S3 up; building {len(base)} passages into {uri}")
        t0 = time.monotonic()
        built = cluster.run([sys.executable, "-m", "hygraph.cli", "index", "--corpus", str(work / "base.jsonl"),
                             "--index-dir", uri], env=env, timeout=1800, cwd=REPO)
        if built.returncode != 0:
            raise RuntimeError(f"hygraph index failed: {built.stderr[-3000:]}")
        build_s = time.monotonic() - t0
        serve_log = (work / "serve.log").open("w")
        serve = cluster.popen([sys.executable, "-m", "hygraph.cli", "serve", "--index-dir", uri, "--port",
                               str(SERVE_PORT), "--no-restart"], env=env, stdout=serve_log, stderr=serve_log,
                              cwd=REPO)
        plan = {"work": str(work), "uri": uri, "writes": args.writes, "writers": args.writers,
                "queriers": args.queriers, "kill_at": args.kill_at, "outage_at": args.outage_at,
                "fresh": fresh[:args.writes], "questions": [d["title"] for d in base], "homes": [str(h) for h in homes]}
        (work / "plan.json").write_text(json.dumps(plan))
        with (work / "stream.log").open("w") as log:
            inner = cluster.popen([sys.executable, str(Path(__file__).resolve()), "--inner", str(work / "plan.json")],
                                  env=env, stdout=log, stderr=log, cwd=REPO)
        events: dict[str, Any] = {}
        while inner.poll() is None:
            if (work / "kill.request").exists() and "killed" not in events:
                node = node_of(cluster, "OnlineUpdater", cluster._started)
                if node is None:
                    raise RuntimeError("no worker node runs the OnlineUpdater")
                lost = cluster.kill_worker(node)
                added = cluster.add_worker()
                events["killed"] = {"node": node, "node_id": lost[:8], "added": added, "at": time.time()}
                say(TAG, f"killed worker node {node} ({lost[:8]}), which ran the updater; node {added} joins")
                (work / "kill.done").write_text(json.dumps(events["killed"]))
            if (work / "outage.request").exists() and "outage" not in events:
                say(TAG, f"stopping S3 for {args.outage_s:g} s")
                stopped = time.time()
                RayCluster.kill(weed)
                (work / "outage.started").write_text(str(stopped))
                time.sleep(args.outage_s)
                weed = start_weed(cluster, work)
                events["outage"] = {"from": stopped, "to": time.time()}
                say(TAG, f"S3 back after {time.time() - stopped:.1f} s")
                (work / "outage.done").write_text(json.dumps(events["outage"]))
            time.sleep(0.5)
        RayCluster.kill(serve)
        serve_log.close()
        if args.keep:  # the nodes' Ray logs (Serve's replicas and proxies) go with the cluster's temp dir
            shutil.copytree(cluster.temp_dir, work / "ray", ignore=shutil.ignore_patterns("*.sock", "sockets"),
                            ignore_dangling_symlinks=True, dirs_exist_ok=True)
        stream_log = (work / "stream.log").read_text()
        line = next((x for x in reversed(stream_log.splitlines()) if x.startswith("{")), None)
        if inner.returncode != 0 or line is None:
            raise RuntimeError(f"the stream failed ({inner.returncode}):\n{stream_log[-4000:]}\n"
                               f"{(work / 'serve.log').read_text()[-3000:]}")
        result = json.loads(line)
    result.update({"build_s": round(build_s, 1), "base_docs": len(base), "events": events, "work": str(work)})
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return result


# ---------------------------------------------------------------------------------------------- inside


class Stream:
    """Writers, queriers and the checks, run inside the cluster's namespace next to the service."""

    def __init__(self, plan: dict[str, Any]) -> None:
        import httpx

        self.plan, self.work = plan, Path(plan["work"])
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{SERVE_PORT}", timeout=120,
                                 headers={"Authorization": f"Bearer {KEY}"})
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.acked: list[dict[str, Any]] = []  # {"op", "id", "job", "version", "acked"}
        self.query_ms: list[float] = []
        self.failed_queries: list[str] = []
        self.refused: list[float] = []
        self.ryw: list[str] = []  # read-your-writes misses
        self.ryw_503 = 0  # read-your-writes queries answered 503 (S3 away), asked again
        self.placement: dict[str, list[str]] = {}  # just before the updater's node is killed
        self.failed_jobs: list[str] = []
        self.outage_writes: list[dict[str, Any]] = []  # the prober's writes while S3 was away

    def ready(self, timeout_s: float = 900) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if self.http.get("/readyz").status_code == 200 and self.http.post(
                        "/v1/query", json={"question": "warm up", "mode": "dense"}).status_code == 200:
                    return
            except Exception:  # noqa: BLE001 - not up yet
                pass
            time.sleep(1)
        raise RuntimeError("the service did not become ready")

    def query(self, question: str, mode: str = "dense") -> dict[str, Any] | None:
        """One query of the load: every answer but a 200 is a failed query."""
        t = time.perf_counter()
        try:
            r = self.http.post("/v1/query", json={"question": question, "mode": mode, "top_k": 5})
        except Exception as exc:  # noqa: BLE001 - a failed query, counted
            with self.lock:
                self.failed_queries.append(f"{time.time():.1f} {type(exc).__name__}: {exc}")
            return None
        with self.lock:
            if r.status_code == 200:
                self.query_ms.append((time.perf_counter() - t) * 1000)
            else:  # the time, to set beside the events (the kill, the outage)
                self.failed_queries.append(f"{time.time():.1f} {r.status_code} {r.text[:200]}")
        return r.json() if r.status_code == 200 else None

    def query_at(self, question: str, version: int, timeout_s: float = 300) -> dict[str, Any]:
        """A read-your-writes query (`min_index_version`): a replica that has not loaded that version must
        read the bucket, so while S3 is away it answers 503 with Retry-After (counted), and is asked again."""
        body = {"question": question, "mode": "bm25", "top_k": 5, "min_index_version": version}
        deadline = time.monotonic() + timeout_s
        while True:
            r = self.http.post("/v1/query", json=body)
            if r.status_code == 200:
                return r.json()
            if r.status_code != 503 or time.monotonic() > deadline:
                raise RuntimeError(f"read-your-writes query at version {version}: {r.status_code} {r.text[:300]}")
            with self.lock:
                self.ryw_503 += 1
            time.sleep(float(r.headers.get("retry-after", "1")))

    def outage_prober(self) -> None:
        """Writes while S3 is away: the writers are waiting on their jobs then (no job is applied without the
        bucket), so this one asks, every 2 s from the server's stop to its return, to insert a document of its
        own. Each must be a 503 with Retry-After; one accepted anyway counts as acknowledged, so the check at
        the end looks for it."""
        started, done = self.work / "outage.started", self.work / "outage.done"
        while not started.exists() and not self.stop.is_set():
            time.sleep(0.2)
        n = 0
        while not done.exists() and not self.stop.is_set():
            doc = {"id": f"outage-probe-{n}", "title": f"Outage probe {n}",
                   "text": f"Outage probe {n} was written while the object store was stopped."}
            try:
                r = self.http.post("/v1/documents", json={"documents": [doc]})
                got = {"status": r.status_code, "retry_after": r.headers.get("retry-after")}
                if r.status_code == 202:
                    with self.lock:
                        self.acked.append({"op": "insert", "id": doc["id"], "job": r.json()["job_id"],
                                           "acked": time.time()})
            except Exception as exc:  # noqa: BLE001 - recorded: a write must be answered, not dropped
                got = {"status": 0, "error": type(exc).__name__}
            self.outage_writes.append(got)
            n += 1
            time.sleep(2)

    def querier(self, seed: int) -> None:
        rng = random.Random(seed)
        while not self.stop.is_set():
            self.query(rng.choice(self.plan["questions"]), rng.choice(["dense", "hybrid", "bm25"]))

    def write(self, method: str, path: str, body: dict[str, Any] | None = None) -> str:
        """The job id once accepted; a 503 (S3 away) or 429 is retried after its Retry-After."""
        while True:
            try:
                r = self.http.request(method, path, json=body)
            except Exception:  # noqa: BLE001 - the proxy was busy; tried again
                time.sleep(1)
                continue
            if r.status_code == 202:
                return r.json()["job_id"]
            if r.status_code in (429, 503):
                with self.lock:
                    self.refused.append(time.time())
                time.sleep(float(r.headers.get("retry-after", "1")))
                continue
            raise RuntimeError(f"{method} {path}: {r.status_code} {r.text[:300]}")

    def done(self, job: str, timeout_s: float = 600) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                r = self.http.get(f"/v1/jobs/{job}")
                if r.status_code == 200:
                    status = r.json()
                    if status["status"] == "done":
                        return int(status["index_version"])
                    if status["status"] == "failed":
                        self.failed_jobs.append(f"{job}: {status.get('error')}")
                        return -1
            except Exception:  # noqa: BLE001 - asked again
                pass
            time.sleep(0.5)
        raise RuntimeError(f"job {job} not done after {timeout_s:g} s")

    def writer(self, w: int, docs: list[dict[str, Any]]) -> None:
        mine: list[str] = []
        for n, doc in enumerate(docs):
            for op, target in [("insert", doc)] + ([("delete", mine.pop(0))] if n % 4 == 3 and mine else []):
                self._milestones()
                if op == "insert":
                    job = self.write("POST", "/v1/documents", {"documents": [target]})
                    doc_id = target["id"]
                else:
                    doc_id = target
                    job = self.write("DELETE", f"/v1/documents/{doc_id}")
                entry = {"op": op, "id": doc_id, "job": job, "acked": time.time()}
                with self.lock:
                    self.acked.append(entry)
                version = self.done(job)
                entry["done"] = time.time()  # this writer's own entry: the list's last may be another writer's
                if version < 0:
                    continue
                if op == "insert":
                    mine.append(doc_id)
                    title = target["title"]
                else:
                    title = next(d["title"] for d in self.plan["fresh"] if d["id"] == doc_id)
                ids = [p["id"] for p in self.query_at(title, version)["passages"]]
                if (op == "insert") != (doc_id in ids):
                    with self.lock:
                        self.ryw.append(f"{op} {doc_id} at version {version}: {ids}")

    def _milestones(self) -> None:
        with self.lock:
            n = len(self.acked)
        for name, at in (("kill", self.plan["kill_at"]), ("outage", self.plan["outage_at"])):
            request = self.work / f"{name}.request"
            if n >= at and not request.exists():
                if name == "kill":
                    self.placement = placement()
                request.write_text(str(time.time()))

    def documents(self) -> list[str]:
        ids, cursor = [], None
        while True:
            params = {"limit": 500, **({"cursor": cursor} if cursor else {})}
            page = self.http.get("/v1/documents", params=params).json()
            ids.extend(d["id"] for d in page["documents"])
            cursor = page.get("next_cursor")
            if not cursor:
                return ids


def cache_bytes(home: Path) -> int:
    root = home / ".cache" / "hygraph" / "indexes"
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file() and "objects" in f.parts) \
        if root.is_dir() else 0


def bucket_objects() -> dict[str, int]:
    """Every object under the index's prefix now, with its size."""
    import boto3

    out: dict[str, int] = {}
    for page in boto3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=PREFIX + "/"):
        out.update((o["Key"], o["Size"]) for o in page.get("Contents", ()))
    return out


class BucketWatch:
    """The bytes written to the bucket during the stream: every object seen by a listing every `every_s`
    seconds that was not there at the start. Net growth would undercount: GC deletes older versions' segments
    and compaction replaces segments. An object made and deleted between two listings is missed; GC's grace
    (far longer than `every_s`) keeps that to the journal's short-lived leases."""

    def __init__(self, every_s: float = 2.0) -> None:
        self.start = bucket_objects()
        self.seen = dict(self.start)
        self.every_s = every_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(self.every_s):
            try:
                self.seen.update(bucket_objects())
            except Exception:  # noqa: BLE001 - the S3 outage of the run: list again after it
                continue

    def written(self) -> int:
        self.stop.set()
        self.thread.join()
        self.seen.update(bucket_objects())
        return sum(size for key, size in self.seen.items() if key not in self.start)


def versions() -> dict[str, Any]:
    """The index's versions in the bucket at the end, and the most segments any artifact of the current one has
    (garbage collection keeps a few versions; compaction keeps the segments per artifact few)."""
    from hygraph.store.versions import IndexStore

    store = IndexStore(f"s3://{BUCKET}/{PREFIX}", cache_dir=tempfile.mkdtemp())
    kept = store.versions()
    manifest = store.manifest()
    return {"current": kept[-1], "kept": len(kept),
            "max_segments_per_artifact": max(len(t.segments) for t in manifest.tables.values())}


def placement() -> dict[str, list[str]]:
    """Which node (the first 8 of its id) runs each Retriever and Ingress replica, Serve's proxies and the updater:
    the process titles under each raylet (the Ray state API needs the dashboard, which the cluster does not
    run)."""
    import psutil

    out: dict[str, list[str]] = {}
    for raylet in psutil.process_iter(["name", "cmdline"]):
        if raylet.info["name"] != "raylet":
            continue
        node = next((a.split("=", 1)[1][:8] for a in raylet.info["cmdline"] or () if a.startswith("--node_id=")), "?")
        for child in raylet.children(recursive=True):
            try:
                title = " ".join(child.cmdline())
            except psutil.NoSuchProcess:
                continue
            for name in ("Retriever", "OnlineUpdater", "Ingress", "ProxyActor"):
                if f"{name}" in title and title.startswith("ray::"):
                    out.setdefault(name, []).append(node)
    return out


def inner(plan_path: Path) -> dict[str, Any]:
    plan = json.loads(plan_path.read_text())
    s = Stream(plan)
    s.ready()
    homes = [Path(h) for h in plan["homes"]]
    before = {"cache": [cache_bytes(h) for h in homes]}
    watch = BucketWatch()
    queriers = [threading.Thread(target=s.querier, args=(i,), daemon=True) for i in range(plan["queriers"])]
    for t in queriers:
        t.start()
    prober = threading.Thread(target=s.outage_prober, daemon=True)
    prober.start()
    per = [plan["fresh"][w::plan["writers"]] for w in range(plan["writers"])]
    writers = [threading.Thread(target=s.writer, args=(w, docs)) for w, docs in enumerate(per)]
    t0 = time.time()
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    stream_s = time.time() - t0
    s.stop.set()
    for t in queriers:
        t.join(120)
    after = {"placement": placement(), "cache": [cache_bytes(h) for h in homes]}
    wrote = watch.written()
    inserted = {a["id"] for a in s.acked if a["op"] == "insert"}
    deleted = {a["id"] for a in s.acked if a["op"] == "delete"}
    listed = s.documents()
    fresh_listed = [i for i in listed if i in inserted]
    kill = json.loads((s.work / "kill.done").read_text()) if (s.work / "kill.done").exists() else None
    takeover = None
    if kill:
        # Until the first job is seen done after the kill: the new updater's first publish (writes kept coming,
        # so jobs were waiting), within one status poll.
        after_kill = [a["done"] for a in s.acked if a.get("done") and a["done"] > kill["at"]]
        takeover = round(min(after_kill) - kill["at"], 1) if after_kill else None
    writes = len(s.acked)
    grown = [after["cache"][i] - before["cache"][i] for i in range(len(homes))]
    return {
        "writes_acknowledged": writes, "inserts": len(inserted), "deletes": len(deleted),
        "stream_s": round(stream_s, 1),
        "queries": len(s.query_ms) + len(s.failed_queries), "failed_queries": len(s.failed_queries),
        "failed_query_samples": s.failed_queries[:5], "query_ms": pcts(s.query_ms),
        "writes_refused_503": len(s.refused), "failed_jobs": s.failed_jobs[:5],
        "outage_writes": dict(Counter(str(w["status"]) for w in s.outage_writes)),
        "outage_503_without_retry_after": sum(1 for w in s.outage_writes
                                              if w["status"] == 503 and not w["retry_after"]),
        "read_your_writes_misses": len(s.ryw), "ryw_samples": s.ryw[:5], "read_your_writes_503_retried": s.ryw_503,
        "present_exactly_once": sorted(fresh_listed) == sorted(inserted - deleted)
        and len(fresh_listed) == len(set(fresh_listed)),
        "missing": sorted(inserted - deleted - set(fresh_listed))[:5], "extra": sorted(set(fresh_listed) & deleted)[:5],
        "takeover_s": takeover, "versions": versions(), "placement_before_kill": s.placement,
        "placement_after": after["placement"],
        "bucket_bytes_written": wrote, "bucket_bytes_written_per_write": round(wrote / max(writes, 1)),
        "node_cache_bytes_added": {f"node{i}": g for i, g in enumerate(grown) if g},
        "node_fetch_per_write_over_written": {f"node{i}": round(g / max(wrote, 1), 3) for i, g in enumerate(grown)
                                              if g},
    }


def report(res: dict[str, Any], out: Path, command: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    rows = [(k, json.dumps(v) if isinstance(v, (dict, list)) else v) for k, v in res.items() if k != "work"]
    md = [f"# {TAG}", "", f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Command: `{command}`", "",
          "| figure | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows), ""]
    out.with_suffix(".md").write_text("\n".join(md))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--inner", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--base-docs", type=int, default=200)
    p.add_argument("--writes", type=int, default=160, help="documents inserted (a quarter of them deleted again)")
    p.add_argument("--writers", type=int, default=4)
    p.add_argument("--queriers", type=int, default=2)
    p.add_argument("--kill-at", type=int, default=60, help="acknowledged writes before the updater's node dies")
    p.add_argument("--outage-at", type=int, default=130, help="acknowledged writes before S3 stops")
    p.add_argument("--outage-s", type=float, default=30.0)
    p.add_argument("--lease-s", type=float, default=10.0)
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    if args.inner:
        print(json.dumps(inner(args.inner)), flush=True)
        return
    res = run(args)
    print(json.dumps(res, indent=1))
    if args.out:
        report(res, args.out, "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]))


if __name__ == "__main__":
    main()
