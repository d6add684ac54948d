"""Hyperbolic online learning benchmark (issue: Live updates, HyperRAG §3.3).

Part 1, in process (no Ray): `--steps` questions are answered in `hyperbolic` mode and each
one's implicit subgraph goes through the updater's L_inc step; reports the step's seconds
(the step alone, and with the upsert of the moved vectors), then one recalibration over all
accumulated subgraphs (retrain seconds, publish seconds).

Part 2, served (`hygraph serve`, Ray, Milvus Lite): closed-loop `hyperbolic` queries at
`--concurrency`; latency without a recalibration for `--baseline-s`, then `--recalibrations`
recalibrations requested over HTTP, with every query that ran while one was in progress
counted as "during". Automatic recalibration is off for the run, so only the requested ones
happen. Writes `<out>.json` and `<out>.md`.

The index directory is modified (each recalibration publishes a version): use a copy.

    cp -r /tmp/i2w /tmp/bhyp
    python loadtests/bench_hyperbolic.py --index-dir /tmp/bhyp \\
        --questions ../shared/data/dev/2wiki_dev.questions.jsonl --out docs/bench/hyperbolic_2wiki
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from hygraph.updater.index_updater import IndexUpdater
from hygraph.config import load_config
from hygraph.engine import QueryEngine
from hygraph.model import load_questions

KEY = "bench-hyperbolic"


def _pcts(values: list[float], scale: float = 1e3) -> dict[str, float]:
    a = np.asarray(values) * scale
    return {"n": int(a.size), "p50": round(float(np.percentile(a, 50)), 2),
            "p95": round(float(np.percentile(a, 95)), 2),
            "p99": round(float(np.percentile(a, 99)), 2), "max": round(float(a.max()), 2)}


def in_process(index_dir: Path, questions: list[str]) -> dict[str, Any]:
    cfg = load_config(None)
    cfg = cfg.model_copy(update={"updates": cfg.updates.model_copy(update={"recalibrate_every": 10 ** 9})})
    engine, updater = QueryEngine(cfg, index_dir), IndexUpdater(cfg, index_dir)
    try:
        step_s, learn_s, edges = [], [], []
        for i, q in enumerate(questions):
            vec = engine.embedder.encode([q])[0]
            sub = engine.retrieve(q, vec, "hyperbolic", cfg.retrieval.top_k).notes["implicit_subgraph"]
            updater.learning.observe(sub, vec)
            before = updater.learning.learner.steps
            t0 = time.perf_counter()
            [s] = updater.learning.learn(max_steps=1)
            learn_s.append(time.perf_counter() - t0)
            assert updater.learning.learner.steps == before + 1
            step_s.append(s)
            edges.append(len(sub["edges"]))
            if (i + 1) % 20 == 0:
                print(f"[bench] {i + 1}/{len(questions)} steps, median {np.median(step_s) * 1e3:.1f} ms",
                      file=sys.stderr, flush=True)
        n_chunks = updater.store.manifest().counts["chunks"]
        updater.learning.request_recalibration()
        t0 = time.perf_counter()
        while (published := updater.learning.recalibrate_step()) is None:
            time.sleep(0.05)
        total = time.perf_counter() - t0
        return {"chunks": n_chunks, "queries": len(questions), "subgraph_edges": _pcts(edges, 1),
                "step_ms": _pcts(step_s), "step_with_upsert_ms": _pcts(learn_s),
                "recalibration": {**published["recalibration"], "total_seconds": round(total, 3),
                                  "version": published["version"]}}
    finally:
        updater.close()
        engine.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _worker(http: httpx.AsyncClient, questions: list[str], offset: int, stop: asyncio.Event,
                  samples: list[tuple[float, float, bool]]) -> None:
    i = offset
    while not stop.is_set():
        t = time.perf_counter()
        try:
            resp = await http.post("/v1/query", json={"question": questions[i % len(questions)], "mode": "hyperbolic"})
            ok = resp.status_code == 200
        except httpx.HTTPError:
            ok = False
        samples.append((t, time.perf_counter() - t, ok))
        i += 7


async def served(url: str, questions: list[str], concurrency: int, baseline_s: float, recalibrations: int,
                 timeout_s: float) -> dict[str, Any]:
    samples: list[tuple[float, float, bool]] = []
    windows: list[tuple[float, float]] = []
    stop = asyncio.Event()
    auth = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        while "online" not in (await http.get("/v1/updater", headers=auth)).json():
            await asyncio.sleep(1)  # the updater is still loading its models
        workers = [asyncio.create_task(_worker(http, questions, k, stop, samples)) for k in range(concurrency)]
        await asyncio.sleep(baseline_s)
        baseline_end = time.perf_counter()
        for r in range(recalibrations):
            done_before = (await http.get("/v1/updater", headers=auth)).json()["online"]["recalibrations"]
            start = time.perf_counter()
            assert (await http.post("/v1/updater/recalibrate", headers=auth)).status_code == 202
            deadline = start + timeout_s
            while (await http.get("/v1/updater", headers=auth)).json()["online"]["recalibrations"] == done_before:
                if time.perf_counter() > deadline:
                    raise RuntimeError("a recalibration did not finish in time")
                await asyncio.sleep(0.2)
            windows.append((start, time.perf_counter()))
            print(f"[bench] recalibration {r + 1}: {windows[-1][1] - start:.1f} s under load", file=sys.stderr,
                  flush=True)
            await asyncio.sleep(2.0)  # let the Retriever settle on the new version between windows
        stop.set()
        await asyncio.gather(*workers)
        status = (await http.get("/v1/updater", headers=auth)).json()

    def during(t: float) -> bool:
        return any(a <= t <= b for a, b in windows)

    base = [s for t, s, ok in samples if t < baseline_end and ok]
    rec = [s for t, s, ok in samples if during(t) and ok]
    errors = sum(not ok for _, _, ok in samples)
    out = {"concurrency": concurrency, "baseline_ms": _pcts(base), "during_recalibration_ms": _pcts(rec),
           "recalibration_seconds_under_load": [round(b - a, 2) for a, b in windows], "errors": errors,
           "online_steps_served": status["online"]["steps"]}
    out["p99_ratio"] = round(out["during_recalibration_ms"]["p99"] / out["baseline_ms"]["p99"], 3)
    out["p50_ratio"] = round(out["during_recalibration_ms"]["p50"] / out["baseline_ms"]["p50"], 3)
    return out


def run_served(index_dir: Path, questions: list[str], args: argparse.Namespace) -> dict[str, Any]:
    port, metrics_port = _free_port(), _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HYGRAPH_API_KEYS": KEY,
           "HYGRAPH__SERVE__METRICS_PORT": str(metrics_port), "HYGRAPH__UPDATES__RECALIBRATE_EVERY": str(10 ** 9)}
    log = open(f"{args.out}.serve.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "hygraph.cli", "serve", "--index-dir", str(index_dir),
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=log, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                if httpx.get(url + "/readyz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"hygraph serve did not start; see {args.out}.serve.log")
            time.sleep(2)
        print("[bench] server ready", file=sys.stderr, flush=True)
        return asyncio.run(served(url, questions, args.concurrency, args.baseline_s, args.recalibrations,
                                  args.timeout_s))
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def markdown(report: dict[str, Any]) -> str:
    a, b = report["in_process"], report["served"]
    r = a["recalibration"]
    lines = [f"# Hyperbolic online learning: {report['index']}", "",
             f"Machine: {report['machine']}. Command: `{report['command']}`", "",
             f"## L_inc step ({a['queries']} hyperbolic queries, {a['chunks']} chunks)", "",
             "| | p50 ms | p95 ms | p99 ms | max ms |", "|---|---|---|---|---|"]
    for name in ("step_ms", "step_with_upsert_ms"):
        s = a[name]
        lines.append(f"| {name} | {s['p50']} | {s['p95']} | {s['p99']} | {s['max']} |")
    lines += ["", f"Subgraph edges per query: median {a['subgraph_edges']['p50']}.", "",
              "## Recalibration (in process, before the server starts)", "",
              f"{r['subgraphs']} subgraphs; retrain {r['train_seconds']} s, publish {r['publish_seconds']} s, "
              f"total {r['total_seconds']} s; M = {r['M']:.4f}.", "",
              f"## Query latency during recalibration (served, concurrency {b['concurrency']}, hyperbolic mode)", "",
              "| | n | p50 ms | p95 ms | p99 ms |", "|---|---|---|---|---|"]
    for name in ("baseline_ms", "during_recalibration_ms"):
        s = b[name]
        lines.append(f"| {name} | {s['n']} | {s['p50']} | {s['p95']} | {s['p99']} |")
    lines += ["", f"p99 ratio {b['p99_ratio']}, p50 ratio {b['p50_ratio']}; errors {b['errors']}; recalibrations under "
              f"load took {b['recalibration_seconds_under_load']} s.", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index-dir", type=Path, required=True)
    ap.add_argument("--questions", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--baseline-s", type=float, default=40.0)
    ap.add_argument("--recalibrations", type=int, default=3)
    ap.add_argument("--timeout-s", type=float, default=600.0)
    ap.add_argument("--out", default="runs/bench_hyperbolic")
    args = ap.parse_args()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    questions = [q.question for q in load_questions(args.questions)]
    report = {"index": str(args.index_dir),
              "machine": f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}",
              "command": " ".join(sys.argv)}
    report["in_process"] = in_process(args.index_dir, questions[:args.steps])
    print(json.dumps(report["in_process"]), file=sys.stderr, flush=True)
    report["served"] = run_served(args.index_dir, questions, args)
    Path(f"{args.out}.json").write_text(json.dumps(report, indent=1))
    Path(f"{args.out}.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
