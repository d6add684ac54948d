"""Retrieval-only serving benchmark (issue: Serving): the real application vs a trivial echo.

Deploys the hygraph application (extractive generator) and a one-line Ray Serve echo
endpoint side by side on one local Ray, then measures over HTTP:
- concurrency 1: p50/p95/p99 latency of `--requests` sequential requests per target;
- concurrency 16: sustained QPS for `--seconds`, with the error count.
The echo is the floor this machine allows (proxy + one replica hop); the report gives
each mode's ratio to it. Run:

    python loadtests/bench_serve.py --index-dir /tmp/i2w \
        --questions ../shared/data/dev/2wiki_dev.questions.jsonl --out runs/bench_serve
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python loadtests/x.py` finds the package

import httpx  # noqa: E402
from ray import serve  # noqa: E402
from starlette.requests import Request  # noqa: E402

from hygraph.runtime import init_ray  # noqa: E402
from hygraph.config import load_config  # noqa: E402
from hygraph.model import load_questions  # noqa: E402
from hygraph.serve.app import APP_NAME, build_app  # noqa: E402
from loadtests.common import pcts  # noqa: E402


@serve.deployment(max_ongoing_requests=64, ray_actor_options={"num_cpus": 0})
class Echo:
    async def __call__(self, request: Request) -> dict[str, Any]:
        return await request.json()


async def _one(http: httpx.AsyncClient, path: str, body: dict[str, Any]) -> tuple[float, bool]:
    t = time.perf_counter()
    try:
        resp = await http.post(path, json=body)
        ok = resp.status_code == 200
    except httpx.HTTPError:
        ok = False
    return (time.perf_counter() - t) * 1e3, ok


async def sequential(http: httpx.AsyncClient, path: str, bodies: list[dict[str, Any]]) -> dict[str, Any]:
    ms, errors = [], 0
    for body in bodies:
        t, ok = await _one(http, path, body)
        ms.append(t)
        errors += not ok
    return {**pcts(ms), "requests": len(bodies), "errors": errors}


async def sustained(http: httpx.AsyncClient, path: str, bodies: list[dict[str, Any]], concurrency: int,
                    seconds: float) -> dict[str, Any]:
    stop = time.perf_counter() + seconds
    ms: list[float] = []
    errors = 0

    async def worker(offset: int) -> None:
        nonlocal errors
        i = offset
        while time.perf_counter() < stop:
            t, ok = await _one(http, path, bodies[i % len(bodies)])
            ms.append(t)
            errors += not ok
            i += concurrency

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    wall = time.perf_counter() - t0
    return {"qps": round(len(ms) / wall, 1), **pcts(ms), "requests": len(ms), "errors": errors,
            "concurrency": concurrency, "seconds": round(wall, 1)}


async def measure(url: str, questions: list[str], modes: list[str], n: int, seconds: float,
                  concurrency: int) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=concurrency * 2, max_keepalive_connections=concurrency * 2)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
        targets = {"echo": ("/echo", [{"question": q} for q in questions])}
        targets.update({m: ("/v1/query", [{"question": q, "mode": m} for q in questions]) for m in modes})
        out: dict[str, Any] = {}
        for name, (path, bodies) in targets.items():
            await sequential(http, path, bodies[:10])  # warm-up: connections, caches, lazy loads
            c1 = await sequential(http, path, bodies[10:10 + n])
            cn = await sustained(http, path, bodies, concurrency, seconds)
            out[name] = {"c1": c1, f"c{concurrency}": cn}
            print(f"[bench] {name:>10}: c1 p50 {c1['p50_ms']} ms p99 {c1['p99_ms']} ms | "
                  f"c{concurrency} {cn['qps']} QPS, errors {cn['errors']}", file=sys.stderr, flush=True)
    return out


def markdown(res: dict[str, Any], concurrency: int) -> str:
    echo = res["targets"]["echo"]
    lines = [f"# Serving benchmark ({res['index_dir']}, backend {res['vector_store']})", "",
             f"| target | c1 p50 ms | c1 p95 ms | c1 p99 ms | p50 / echo | c{concurrency} QPS | "
             f"c{concurrency} p50 ms | QPS / echo | errors |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, r in res["targets"].items():
        c1, cn = r["c1"], r[f"c{concurrency}"]
        lines.append(f"| {name} | {c1['p50_ms']} | {c1['p95_ms']} | {c1['p99_ms']} | "
                     f"{c1['p50_ms'] / echo['c1']['p50_ms']:.1f}x | {cn['qps']} | {cn['p50_ms']} | "
                     f"{cn['qps'] / echo[f'c{concurrency}']['qps']:.2f} | {c1['errors'] + cn['errors']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index-dir", required=True)
    ap.add_argument("--questions", required=True)
    ap.add_argument("--config", default=None)
    ap.add_argument("--modes", default="dense,hybrid")
    ap.add_argument("--requests", type=int, default=100, help="sequential requests per target at concurrency 1")
    ap.add_argument("--seconds", type=float, default=20.0, help="duration of the concurrent phase per target")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--port", type=int, default=8123)
    ap.add_argument("--out", default="runs/bench_serve", help="path prefix of the .json and .md reports")
    args = ap.parse_args()

    cfg = load_config(args.config)
    questions = [q.question for q in load_questions(args.questions)]
    init_ray(cfg.ray)
    serve.start(http_options={"host": "127.0.0.1", "port": args.port})
    serve.run(build_app(cfg, args.index_dir), name=APP_NAME, route_prefix="/")
    serve.run(Echo.bind(), name="echo", route_prefix="/echo")
    try:
        targets = asyncio.run(measure(f"http://127.0.0.1:{args.port}", questions, args.modes.split(","),
                                      args.requests, args.seconds, args.concurrency))
    finally:
        serve.shutdown()
    res = {"index_dir": args.index_dir, "vector_store": cfg.vector_store.backend, "targets": targets,
           "machine": f"{os.cpu_count()} CPUs"}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=2))
    out.with_suffix(".md").write_text(markdown(res, args.concurrency))
    print(markdown(res, args.concurrency), file=sys.stderr)
    print(json.dumps({t: {"c1_p50_ms": v["c1"]["p50_ms"], "qps": v[f"c{args.concurrency}"]["qps"]}
                      for t, v in targets.items()}))


if __name__ == "__main__":
    main()
