"""Fault injection on the local stack (issue: Production): kill parts of a live `hygraph serve`
and measure what clients see and what the index keeps.

  retriever  under query load, SIGKILL one Retriever replica process; errors and recovery time;
  store      SIGKILL the managed Milvus server while inserting and querying; 503 + Retry-After
             (never 500) while it is down, recovery time, every acknowledged document present once;
  restart    SIGKILL the whole service tree while inserts are being acknowledged, start it again
             on the same index; journal replay: every acknowledged document present once, all jobs done.

One `hygraph serve` (fresh demo index under the report's folder, or `--index-dir`) serves the
faults in turn; `restart` replaces it. Writes <out>.json and <out>.md; prints the JSON path.

    python loadtests/faults.py --fault all --out runs/faults/report
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import sys
import time
import uuid
from collections import Counter
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python loadtests/x.py` finds the package

import httpx  # noqa: E402
import psutil  # noqa: E402

from hygraph.client import Client  # noqa: E402
from hygraph.store.artifacts import CHUNKS, DOCUMENTS  # noqa: E402
from hygraph.store.versions import IndexStore  # noqa: E402
from loadtests.common import (DEFAULT_CORPUS, MODES, Recorder, Sample, ServeProcess,  # noqa: E402
                              Write, demo_questions, fresh_documents, http_client, index_titles, log_excerpt,
                              pcts, probe_question, query_worker, say, timed, track_write, while_serving)

TAG = "faults"
FAULTS = ("retriever", "store", "restart")
STEADY = 20  # consecutive good queries that count as "recovered"
DOCS_PER_FAULT = 130  # each fault inserts its own documents, so none is checked twice


# -- load -------------------------------------------------------------------------------------------


class QueryLoad:
    """`concurrency` query workers over every mode, recording into `rec`, until `stop()`."""

    def __init__(self, http: httpx.AsyncClient, rec: Recorder, concurrency: int) -> None:
        self.http, self.rec, self.concurrency = http, rec, concurrency
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        questions = demo_questions()
        self._tasks = [asyncio.create_task(query_worker(self.http, self.rec, questions, list(MODES), i,
                                                        self.concurrency, self._stop))
                       for i in range(self.concurrency)]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)


class InsertStream:
    """An insert every `every_s` seconds, each followed to its outcome (job done, then retrievable)."""

    def __init__(self, http: httpx.AsyncClient, rec: Recorder, docs: list[dict[str, str]], every_s: float,
                 timeout_s: float) -> None:
        self.http, self.rec, self.docs, self.every_s, self.timeout_s = http, rec, docs, every_s, timeout_s
        self.writes: list[Write] = []
        self._trackers: list[asyncio.Task[None]] = []
        self._stop = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._loop = asyncio.create_task(self._run())

    async def _run(self) -> None:
        for doc in self.docs:
            if self._stop.is_set():
                return
            self.writes.append(w := Write(doc["id"], "insert", round(self.rec.now(), 3)))
            self._trackers.append(asyncio.create_task(track_write(self.http, self.rec, w, doc, self.timeout_s)))
            await asyncio.sleep(self.every_s)

    async def finish(self) -> list[Write]:
        """No new inserts; wait until every one sent has its outcome."""
        self._stop.set()
        assert self._loop is not None
        await self._loop
        await asyncio.gather(*self._trackers)
        return self.writes


# -- analysis (pure) -----------------------------------------------------------------------------


def _good(s: Sample, limit_ms: float) -> bool:
    return s.ok and s.ms <= limit_ms


def recovery(samples: list[Sample], t_fault: float, steady: int = STEADY) -> dict[str, Any]:
    """What the query load saw from `t_fault` on, against the baseline before it.

    Recovered = the first start time after which every query succeeded within 3x the baseline
    p95 (so slow-but-200 answers count as not yet recovered), for at least `steady` queries.
    """
    before = [s for s in samples if s.endpoint == "query" and s.t < t_fault]
    after = sorted((s for s in samples if s.endpoint == "query" and s.t >= t_fault), key=lambda s: s.t)
    base = pcts(s.ms for s in before if s.ok)
    limit = 3 * (base["p95_ms"] or 1000.0)
    bad = [i for i, s in enumerate(after) if not _good(s, limit)]
    streak = after[bad[-1] + 1:] if bad else after
    recovered = round(streak[0].t - t_fault, 2) if len(streak) >= steady else None
    errors = [s for s in after if not s.ok]
    return {"baseline": {"queries": len(before), "errors": sum(not s.ok for s in before), **base},
            "after_fault": {"queries": len(after), "errors": len(errors),
                            "status_codes": dict(sorted(Counter(str(s.status) for s in errors).items())),
                            "error_examples": _examples(errors),
                            "max_ms": max((s.ms for s in after), default=None),
                            "first_error_s": round(errors[0].t - t_fault, 2) if errors else None,
                            "last_error_s": round(errors[-1].t - t_fault, 2) if errors else None},
            "slow_limit_ms": round(limit, 1), "recovered_s": recovered}


def _examples(errors: Iterable[Sample], limit: int = 8) -> list[dict[str, Any]]:
    counts = Counter((s.status, s.error, s.retry_after) for s in errors)
    return [{"status": st, "error": e, "retry_after": ra, "count": n} for (st, e, ra), n in counts.most_common(limit)]


def unavailable_answers(samples: list[Sample], t_fault: float) -> dict[str, Any]:
    """The contract while the store is down: 503 with Retry-After, never a 500."""
    after = [s for s in samples if s.t >= t_fault and not s.ok]
    return {"503_with_retry_after": sum(s.status == 503 and bool(s.retry_after) for s in after),
            "503_without_retry_after": sum(s.status == 503 and not s.retry_after for s in after),
            "500": sum(s.status == 500 for s in after),
            "other": dict(Counter(str(s.status) for s in after if s.status not in (500, 503)))}


def write_summary(writes: list[Write]) -> dict[str, Any]:
    acked = [w for w in writes if w.acked_t is not None]
    return {"sent": len(writes), "acked": len(acked), "outcomes": dict(Counter(w.outcome for w in writes)),
            "lag_job_done_s": pcts((w.done_s for w in acked if w.done_s is not None), unit="s", digits=3),
            "lag_retrievable_s": pcts((w.visible_s for w in acked if w.visible_s is not None), unit="s", digits=3),
            "not_ok": [asdict(w) for w in writes if w.outcome != "ok"]}


# -- exactly once ----------------------------------------------------------------------------------


def exactly_once(index_dir: Path, client: Client, docs: list[dict[str, str]]) -> dict[str, Any]:
    """Each document in the current version's documents table once, with its chunks, retrievable by
    its own text, and no chunk id twice among the dense hits or in the chunks table."""
    version = IndexStore(index_dir).open()
    doc_ids = Counter(version.table(DOCUMENTS).values("id"))
    chunks = version.table(CHUNKS)
    chunk_ids = Counter(chunks.values("id"))
    chunks_per_doc = Counter(chunks.values("doc_id"))
    rows = []
    for doc in docs:
        out = client.query(probe_question(doc), mode="dense", top_k=10)
        hits = [c["id"] for c in out["context"]["chunks"] if doc["id"] in c["sources"]]
        rows.append({"id": doc["id"], "in_documents": doc_ids[doc["id"]], "chunks": chunks_per_doc[doc["id"]],
                     "retrieved": doc["id"] in [p["id"] for p in out["passages"]],
                     "duplicate_chunk_hits": sorted(c for c, n in Counter(hits).items() if n > 1)})
    bad = [r for r in rows if r["in_documents"] != 1 or not r["chunks"] or not r["retrieved"]
           or r["duplicate_chunk_hits"]]
    return {"index_version": version.version,
            "documents_checked": len(rows), "present_exactly_once": len(rows) - len(bad),
            "duplicate_chunk_ids_in_index": sorted(c for c, n in chunk_ids.items() if n > 1)[:20],
            "problems": bad}


# -- the faults --------------------------------------------------------------------------------------


async def _until(check: Any, timeout_s: float, every_s: float = 0.5) -> float | None:
    """Seconds until `check()` is true, or None after `timeout_s`."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        if check():
            return round(time.perf_counter() - t0, 2)
        await asyncio.sleep(every_s)
    return None


def _recovered(rec: Recorder, t_fault: float) -> bool:
    return recovery(rec.samples, t_fault)["recovered_s"] is not None


async def fault_retriever(server: ServeProcess, args: argparse.Namespace, docs: list[dict[str, str]]) -> dict[str, Any]:
    rec = Recorder("retriever")
    async with http_client(server.url, args.concurrency, server.api_key) as http:
        load = QueryLoad(http, rec, args.concurrency)
        load.start()
        await asyncio.sleep(args.baseline_s)
        victims = server.replicas("Retriever")
        if not victims:
            raise RuntimeError("no process titled ServeReplica:hygraph:Retriever among the server's descendants")
        victim = victims[0]
        t_kill = rec.now()
        victim.send_signal(signal.SIGKILL)
        rec.event("kill", what="Retriever replica", pid=victim.pid)
        say(TAG, f"retriever: SIGKILL Retriever replica pid {victim.pid} ({len(victims)} replica(s)) under load")
        replaced = await _until(lambda: any(p.pid != victim.pid for p in server.replicas("Retriever")),
                                args.recovery_timeout)
        await _until(lambda: _recovered(rec, t_kill), args.recovery_timeout)
        await asyncio.sleep(args.tail_s)
        await load.stop()
    out = {"killed_pid": victim.pid, "replicas_before": len(victims), "replica_replaced_s": replaced,
           **recovery(rec.samples, t_kill), "raw": rec.dump()}
    say(TAG, f"retriever: {_line(out)}; new replica process after {replaced} s")
    return out


def _store_pid(index_dir: Path) -> int | None:
    """The managed Milvus server recorded in `<index>/milvus/server.json` (`pid`: the process to kill),
    the embedded standalone server or Milvus Lite, while it is alive. With network isolation it is
    the namespace's relay, whose Milvus child gets SIGKILL when the relay dies."""
    state = index_dir / "milvus" / "server.json"
    pid = json.loads(state.read_text())["pid"] if state.is_file() else None
    return pid if pid and psutil.pid_exists(pid) else None


async def fault_store(server: ServeProcess, args: argparse.Namespace, docs: list[dict[str, str]]) -> dict[str, Any]:
    rec = Recorder("store")
    async with http_client(server.url, args.concurrency, server.api_key) as http:
        load, inserts = QueryLoad(http, rec, args.concurrency), InsertStream(http, rec, docs, args.insert_every,
                                                                             args.recovery_timeout)
        load.start()
        inserts.start()
        await asyncio.sleep(args.baseline_s)
        victim = _store_pid(server.index_dir)
        engine = json.loads((server.index_dir / "milvus" / "server.json").read_text()).get("engine", "lite") \
            if victim else None
        if victim is None or "milvus" not in " ".join(psutil.Process(victim).cmdline()):
            raise RuntimeError(f"no live Milvus server recorded in {server.index_dir / 'milvus' / 'server.json'}")
        what = "Milvus Lite server" if engine == "lite" else "embedded Milvus server"
        t_kill = rec.now()
        os.kill(victim, signal.SIGKILL)
        rec.event("kill", what=what, pid=victim)
        say(TAG, f"store: SIGKILL {what} pid {victim} while inserting and querying")
        restarted = await _until(lambda: _store_pid(server.index_dir) not in (None, victim), args.recovery_timeout)
        await _until(lambda: _recovered(rec, t_kill), args.recovery_timeout)
        await asyncio.sleep(args.tail_s)
        writes = await inserts.finish()
        await load.stop()
    out = {"killed_pid": victim, "store_restarted_s": restarted, **recovery(rec.samples, t_kill),
           "answers_while_down": unavailable_answers(rec.samples, t_kill), "inserts": write_summary(writes)}
    acked = [d for d in docs if d["id"] in {w.doc_id for w in writes if w.acked_t is not None}]
    with Client(server.url) as client:
        out["exactly_once"] = exactly_once(server.index_dir, client, acked)
    out["raw"] = {**rec.dump(), "writes": [asdict(w) for w in writes]}
    say(TAG, f"store: {_line(out)}; {out['answers_while_down']}; store back after {restarted} s; "
             f"{out['exactly_once']['present_exactly_once']}/{len(acked)} acknowledged documents present once")
    return out


async def _insert_until_kill(server: ServeProcess, rec: Recorder, docs: list[dict[str, str]],
                             args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Acknowledged inserts, one every `insert_every` s, then a crash right after the last 202 while
    the next insert is on the wire. Returns the acknowledged (doc, job) pairs and what the jobs were at the kill."""
    acked: list[dict[str, Any]] = []
    async with http_client(server.url, 4, server.api_key) as http:
        for doc in docs[:args.restart_inserts]:
            s, body = await timed(http, rec, "insert", "POST", "/v1/documents", {"documents": [doc]})
            if s.status == 202:
                acked.append({"doc": doc, "job_id": body["job_id"]})
            await asyncio.sleep(args.insert_every)
        states = Counter()
        for a in acked:
            s, body = await timed(http, rec, "job", "GET", f"/v1/jobs/{a['job_id']}")
            states[body["status"] if s.ok else f"HTTP {s.status}"] += 1
        last = docs[args.restart_inserts]
        s, body = await timed(http, rec, "insert", "POST", "/v1/documents", {"documents": [last]})
        if s.status == 202:
            acked.append({"doc": last, "job_id": body["job_id"]})
        on_the_wire = asyncio.create_task(timed(http, rec, "insert", "POST", "/v1/documents",
                                                {"documents": [docs[args.restart_inserts + 1]]}))
        await asyncio.sleep(0.005)
        left = server.crash()
        rec.event("kill", what="service tree (SIGKILL)")
        wire, _ = await on_the_wire
    return acked, {"jobs_at_kill": dict(states), "insert_on_the_wire": {"status": wire.status, "error": wire.error},
                   "outside_the_tree_after_kill": left}


async def _await_jobs(client: Client, acked: list[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
    deadline = time.perf_counter() + timeout_s
    final: dict[str, str] = {}
    for a in acked:
        while True:
            try:
                job = await asyncio.to_thread(client.job, a["job_id"])
                final[a["job_id"]] = job["status"] + (f": {job.get('error')}" if job.get("error") else "")
            except Exception as exc:  # noqa: BLE001 - recorded: any failure here is a finding
                final[a["job_id"]] = f"{type(exc).__name__}: {exc}"
                job = {"status": "error"}
            if job["status"] in ("done", "failed") or time.perf_counter() > deadline:
                break
            await asyncio.sleep(1)
    return {"statuses": dict(Counter(v.split(":")[0] for v in final.values())),
            "not_done": {k: v for k, v in final.items() if v != "done"}}


async def fault_restart(server: ServeProcess, args: argparse.Namespace, docs: list[dict[str, str]]) -> dict[str, Any]:
    rec = Recorder("restart")
    say(TAG, f"restart: {args.restart_inserts} inserts, then SIGKILL of the whole service tree")
    acked, at_kill = await _insert_until_kill(server, rec, docs, args)
    say(TAG, f"restart: killed; {len(acked)} inserts acknowledged; starting hygraph serve again on the same index")
    t0 = time.perf_counter()
    server.start()
    restart_s = await asyncio.to_thread(server.wait_ready)
    with Client(server.url) as client:
        jobs = await while_serving(server, _await_jobs(client, acked, args.recovery_timeout))
        applied = time.perf_counter() - t0
        await _until(lambda: _all_retrievable(client, [a["doc"] for a in acked]), args.recovery_timeout, every_s=2)
        once = exactly_once(server.index_dir, client, [a["doc"] for a in acked])
    out = {"acknowledged": len(acked), **at_kill, "ready_after_restart_s": restart_s,
           "all_jobs_settled_s": round(applied, 1), "jobs_after_restart": jobs, "exactly_once": once,
           "raw": rec.dump()}
    say(TAG, f"restart: ready again after {restart_s} s, jobs {jobs['statuses']}, "
             f"{once['present_exactly_once']}/{len(acked)} acknowledged documents present once")
    return out


def _all_retrievable(client: Client, docs: list[dict[str, str]]) -> bool:
    return all(d["id"] in [p["id"] for p in client.query(probe_question(d), mode="dense", top_k=10)["passages"]]
               for d in docs)


def _line(out: dict[str, Any]) -> str:
    a = out["after_fault"]
    return (f"{a['errors']} errors of {a['queries']} queries after the kill {a['status_codes']}, "
            f"recovered after {out['recovered_s']} s (baseline p95 {out['baseline']['p95_ms']} ms)")


# -- report ------------------------------------------------------------------------------------------


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# Fault injection ({report['started_at']}, {report['machine']})", "",
             f"Server: {report['server']['summary']}. Query load: {report['config']['concurrency']} workers over "
             f"every mode. Recovered = from the kill until every query succeeds within 3x the baseline p95, "
             f"for at least {STEADY} queries in a row.", ""]
    for name, res in report["faults"].items():
        lines += [f"## {name}", ""]
        if "error" in res:
            lines += [f"**Did not complete:** {res['error']}", ""]
            continue
        if "after_fault" in res:
            a = res["after_fault"]
            lines += [f"- queries after the kill: {a['queries']}, errors {a['errors']} {a['status_codes']}, "
                      f"first/last error at {a['first_error_s']}/{a['last_error_s']} s, slowest {a['max_ms']} ms",
                      f"- recovered after **{res['recovered_s']} s** (baseline p50/p95 {res['baseline']['p50_ms']}/"
                      f"{res['baseline']['p95_ms']} ms)"]
            lines += [f"  - {e['count']}x status {e['status']} Retry-After {e['retry_after']}: {e['error']}"
                      for e in a["error_examples"]]
        for key in ("replica_replaced_s", "store_restarted_s", "answers_while_down", "inserts", "acknowledged",
                    "jobs_at_kill", "insert_on_the_wire", "outside_the_tree_after_kill", "ready_after_restart_s",
                    "all_jobs_settled_s", "jobs_after_restart", "exactly_once"):
            if key in res:
                lines.append(f"- {key}: `{json.dumps(res[key])[:1500]}`")
        lines.append("")
    left = report["server"].get("left_running_after_stop")
    lines += [f"Processes still running after the final Ctrl-C (then killed): {left or 'none'}", ""]
    if report["server"].get("log_errors"):
        lines += ["Server log, error lines:", "", "```", *report["server"]["log_errors"], "```", ""]
    return "\n".join(lines)


# -- command line ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fault", choices=[*FAULTS, "all"], default="all")
    ap.add_argument("--index-dir", help="serve this index (it gets the inserts) instead of a fresh demo index")
    ap.add_argument("--keep-index", action="store_true", help="keep the fresh index directory afterwards")
    ap.add_argument("--out", default="runs/faults/report", help="path prefix of .json and .md")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--baseline-s", type=float, default=15.0, help="load before each kill")
    ap.add_argument("--tail-s", type=float, default=10.0, help="load after recovery")
    ap.add_argument("--insert-every", type=float, default=2.0)
    ap.add_argument("--restart-inserts", type=int, default=8, help="acknowledged inserts before the crash")
    ap.add_argument("--recovery-timeout", type=float, default=300.0)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    args = ap.parse_args(argv)
    args.faults = list(FAULTS) if args.fault == "all" else [args.fault]
    return args


def _raise_interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


async def _run_fault(name: str, server: ServeProcess, args: argparse.Namespace,
                     docs: list[dict[str, str]]) -> dict[str, Any]:
    work = {"retriever": fault_retriever, "store": fault_store, "restart": fault_restart}[name](server, args, docs)
    # `restart` kills the server on purpose; the others need it alive throughout.
    return await (work if name == "restart" else while_serving(server, work))


def _attempt(name: str, server: ServeProcess, args: argparse.Namespace, docs: list[dict[str, str]]) -> dict[str, Any]:
    """One fault's result, or {"error"} when it could not be carried out (a finding, reported as such)."""
    try:
        return asyncio.run(_run_fault(name, server, args, docs))
    except RuntimeError as exc:  # ServerExited included
        say(TAG, f"{name}: did not complete: {exc}")
        return {"error": str(exc)[:4000]}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tag = datetime.now().strftime("%Y%m%d-%H%M%S")
    index_dir = Path(args.index_dir) if args.index_dir else out.parent / f"index-{tag}"
    docs = fresh_documents(args.corpus, DOCS_PER_FAULT * len(FAULTS), index_titles(index_dir), tag)
    server = ServeProcess(index_dir, out.parent / f"serve-{tag}.log", uuid.uuid4().hex, TAG)
    results: dict[str, Any] = {}
    info: dict[str, Any] = {"index_dir": str(index_dir)}
    try:
        server.start()
        info["startup_s"] = server.wait_ready()
        say(TAG, f"server ready after {info['startup_s']} s")
        for i, name in enumerate(args.faults):
            results[name] = _attempt(name, server, args, docs[i * DOCS_PER_FAULT:(i + 1) * DOCS_PER_FAULT])
            if server.exit_code() is not None:
                break
    finally:
        info["left_running_after_stop"] = server.stop()
        info["log_errors"] = log_excerpt(server.log_tail(5_000_000))
        if not args.index_dir and not args.keep_index:
            shutil.rmtree(index_dir, ignore_errors=True)
    info["summary"] = (f"hygraph serve on {'a fresh demo index' if not args.index_dir else index_dir}, "
                       f"ready after {info.get('startup_s')} s")
    report = {"started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": f"{os.cpu_count()} CPUs", "server": info,
              "config": {k: getattr(args, k) for k in ("faults", "concurrency", "baseline_s", "tail_s",
                                                       "insert_every", "restart_inserts", "recovery_timeout")},
              "faults": results}
    out.with_suffix(".json").write_text(json.dumps(report, indent=1, default=str))
    out.with_suffix(".md").write_text(markdown(report))
    print(out.with_suffix(".json"))
    return 0 if all("error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
