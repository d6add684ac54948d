"""Serving benchmark: the hygraph application beside a plain dense server and a Ray Serve echo, in one run.

Two parts, each on a fresh local Ray per configuration:
1. **Topologies** (`--variants`): the ways a query can cross Serve, side by side with the echo
   of the same Ray: `split` (Ingress -> Embedder -> Retriever -> Generator, three handle calls),
   `retriever` (the default: the Retriever embeds, batching concurrent questions, and answers extractively,
   one handle call), `grpc` (`retriever` over Serve's gRPC inter-deployment transport),
   `haproxy` (`retriever` behind Serve's HAProxy ingress instead of its Python proxy), `direct` (`retriever`
   with Serve's direct ingress: the Ingress replica serves HTTP, no proxy; no echo row), `throughput`
   (Ray's RAY_SERVE_THROUGHPUT_OPTIMIZED bundle: direct ingress, gRPC, user code on the event loop) and
   `throughput-proxy` (the bundle, the load sent through the proxy Serve keeps on the head node).
   Echo, dense and hybrid at concurrency 1 and 16.
2. **Matrix** (the default topology): echo, dense and every mode at concurrency 1, 4, 16 and 32
   with QPS, p50, p99 and the CPU time of the whole service per query.
Both for each vector store in `--stores` (`faiss`, `milvus`: the configured Milvus engine).

With Milvus, every table has a `plain` row: the dense RAG server a team would run instead
(`plain_dense.py`: FastAPI under uvicorn, one worker per core, sentence-transformers on torch,
pymilvus against the same chunk collection, no Ray), measured while the hygraph stack is up and idle,
with its CPU counted over its own processes and the Milvus server's. Each row shows its QPS ratio to
`plain` at c1 and c16.

Load comes from `wrk` (a C client, so the 2-core machine spends its cycles on the service)
when it is installed, else from an httpx client in this process; the report says which.

    python loadtests/bench_serve.py --index-dir /tmp/i2w \\
        --questions ../shared/data/dev/2wiki_dev.questions.jsonl --out docs/bench/serve_2wiki
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python loadtests/x.py` finds the package
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # local Ray on loopback, before ray loads

import httpx  # noqa: E402
from ray import serve  # noqa: E402
from starlette.requests import Request  # noqa: E402

from hygraph.config import HygraphConfig, load_config  # noqa: E402
from hygraph.core.retrieval.modes import MODE_NAMES  # noqa: E402
from hygraph.runtime import init_ray  # noqa: E402
from hygraph.model import load_questions  # noqa: E402
from hygraph.serve.app import APP_NAME, build_app  # noqa: E402
from loadtests.common import free_port, pcts, tree_cpu_s  # noqa: E402

VARIANTS: dict[str, dict[str, Any]] = {
    "split": {"serve": {"embedding": "deployment", "answer": "deployment"}},
    "retriever": {},
    "grpc": {"env": {"RAY_SERVE_USE_GRPC_BY_DEFAULT": "1"}},
    "haproxy": {"env": {"RAY_SERVE_ENABLE_HA_PROXY": "1"}},
    # Serve's direct ingress: the Ingress replica serves HTTP itself on a port of its own, with no proxy actor in
    # the request's path (the echo app, a second ingress, is left out). `throughput` is Ray's bundle
    # of it with gRPC between deployments, user code on the replica's event loop and no per-request log
    # lines (RAY_SERVE_THROUGHPUT_OPTIMIZED).
    # `throughput-proxy` is that bundle with the load sent to the serve port, through the proxy Serve keeps on
    # the head node.
    "direct": {"env": {"RAY_SERVE_ENABLE_DIRECT_INGRESS": "1"}},
    "throughput": {"env": {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1"}},
    "throughput-proxy": {"env": {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1"}},
}
DIRECT = ("direct", "throughput", "throughput-proxy")  # direct ingress on: each ingress replica takes a port
TO_REPLICA = ("direct", "throughput")  # load sent to the Ingress replica's own port


@serve.deployment(max_ongoing_requests=64, ray_actor_options={"num_cpus": 0})
class Echo:
    async def __call__(self, request: Request) -> dict[str, Any]:
        return await request.json()


class Wrk:
    """Fixed-concurrency load from `wrk`, POSTing the bodies in turn (a Lua script)."""

    def __init__(self, base: str, tmp: Path) -> None:
        self.base, self.tmp = base, tmp

    def run(self, path: str, bodies: list[str], concurrency: int, seconds: float,
            base: str | None = None, cpu_roots: list[int] | None = None) -> dict[str, Any]:
        script = self.tmp / "bodies.lua"
        rows = ",\n".join(f"[==[{b}]==]" for b in bodies)
        script.write_text(f"bodies = {{\n{rows}\n}}\ni = 0\nrequest = function()\n  i = i + 1\n"
                          f"  return wrk.format('POST', '{path}', {{['Content-Type'] = 'application/json'}}, "
                          f"bodies[(i % #bodies) + 1])\nend\n")
        threads = min(concurrency, 2)
        cpu0 = tree_cpu_s(cpu_roots)
        out = subprocess.run(["wrk", f"-t{threads}", f"-c{concurrency}", f"-d{seconds:g}s", "--latency",
                              "--timeout", "60s", "-s", str(script), base or self.base], capture_output=True,
                             text=True, check=True).stdout
        cpu = tree_cpu_s(cpu_roots) - cpu0
        return _parse_wrk(out, cpu)


def _ms(value: str, unit: str) -> float:
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[unit]


def _parse_wrk(out: str, cpu_s: float) -> dict[str, Any]:
    lat = {int(p): _ms(v, u) for p, v, u in re.findall(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s|m)\s*$", out, re.M)}
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    seconds = float(re.search(r"requests in ([\d.]+)s", out).group(1))
    non2xx = int(m.group(1)) if (m := re.search(r"Non-2xx or 3xx responses: (\d+)", out)) else 0
    sock = sum(int(x) for x in re.findall(r"(?:connect|read|write|timeout) (\d+)", out))
    return {"qps": round(requests / seconds, 1), "p50_ms": round(lat[50], 2), "p99_ms": round(lat[99], 2),
            "requests": requests, "errors": non2xx + sock,
            "cpu_ms_per_query": round(1e3 * cpu_s / max(requests, 1), 2)}


class HttpxLoad:
    """The same measurement from this process, when wrk is not installed (it costs the service CPU)."""

    def __init__(self, base: str) -> None:
        self.base = base

    def run(self, path: str, bodies: list[str], concurrency: int, seconds: float,
            base: str | None = None, cpu_roots: list[int] | None = None) -> dict[str, Any]:
        return asyncio.run(self._run(path, bodies, concurrency, seconds, base or self.base, cpu_roots))

    async def _run(self, path: str, bodies: list[str], concurrency: int, seconds: float, base: str,
                   cpu_roots: list[int] | None) -> dict[str, Any]:
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        ms: list[float] = []
        errors = 0
        async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as http:
            stop = time.perf_counter() + seconds

            async def worker(offset: int) -> None:
                nonlocal errors
                i = offset
                while time.perf_counter() < stop:
                    t = time.perf_counter()
                    try:
                        ok = (await http.post(path, content=bodies[i % len(bodies)],
                                              headers={"Content-Type": "application/json"})).status_code == 200
                    except httpx.HTTPError:
                        ok = False
                    ms.append((time.perf_counter() - t) * 1e3)
                    errors += not ok
                    i += concurrency

            cpu0, t0 = tree_cpu_s(cpu_roots), time.perf_counter()
            await asyncio.gather(*(worker(i) for i in range(concurrency)))
            wall, cpu = time.perf_counter() - t0, tree_cpu_s(cpu_roots) - cpu0
        p = pcts(ms)
        return {"qps": round(len(ms) / wall, 1), "p50_ms": p["p50_ms"], "p99_ms": p["p99_ms"], "requests": len(ms),
                "errors": errors, "cpu_ms_per_query": round(1e3 * cpu / max(len(ms), 1), 2)}


@dataclass(frozen=True)
class Target:
    path: str
    bodies: list[str]
    base: str | None = None  # another server than the hygraph one (plain)
    cpu_roots: list[int] | None = None  # whose process trees its CPU is counted over (default: everything)


class PlainServer:
    """`plain_dense.py` under uvicorn against `index_dir`'s Milvus chunk collection, for the `with` block."""

    def __init__(self, cfg: HygraphConfig, index_dir: str, tmp: Path) -> None:
        self.cfg, self.index_dir, self.tmp = cfg, index_dir, tmp
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "PlainServer":
        from hygraph.backends.embedder import model_path
        from hygraph.backends.vectorstore import managed_server
        from hygraph.store.artifacts import CHUNKS
        from hygraph.store.versions import IndexStore

        store = IndexStore(self.index_dir)
        chunks = store.open().table(CHUNKS)
        passages = {}
        for batch in chunks.batches():
            for pid, title, text in zip(*(batch.column(c).to_pylist() for c in ("id", "title", "text"))):
                passages[pid] = (title, text)
        (self.tmp / "passages.json").write_text(json.dumps(passages))
        self.milvus = managed_server(self.cfg.vector_store, self.index_dir).start()  # attaches: hygraph started it
        env = {**os.environ, "PLAIN_MILVUS_URI": self.milvus.uri, "PLAIN_MILVUS_TOKEN": self.milvus.token,
               "PLAIN_COLLECTION": store.manifest().collections["chunks"],
               "PLAIN_PASSAGES": str(self.tmp / "passages.json"), "PLAIN_MODEL": str(model_path(self.cfg.embedder)),
               "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        self.proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "loadtests.plain_dense:app", "--host",
                                      "127.0.0.1", "--port", str(self.port), "--workers", str(os.cpu_count() or 1),
                                      "--log-level", "warning"], env=env)
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.post(f"{self.base}/v1/query", json={"question": "warm-up"}, timeout=30).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError("the plain dense server did not start")
            time.sleep(1)
        self.cpu_roots = [self.proc.pid, self.milvus.pid]
        return self

    def __exit__(self, *exc: Any) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.milvus.stop()


def _bodies(questions: list[str], mode: str | None) -> list[str]:
    return [json.dumps({"question": q, **({"mode": mode} if mode else {})}) for q in questions]


def _configure(base: HygraphConfig, store: str, variant: str) -> HygraphConfig:
    tree = base.model_dump(mode="json")
    tree["vector_store"]["backend"] = "faiss" if store == "faiss" else "milvus"
    # The question list repeats within a measurement: every query must run, as with questions that never
    # repeat (the answer cache's effect is scenario z of loadtest.py).
    tree["serve"]["answer_cache_entries"] = 0
    for section, values in VARIANTS[variant].items():
        if section != "env":
            tree[section] = {**tree[section], **values}
    return HygraphConfig.model_validate(tree)


def _env(variant: str, replica_port: int) -> dict[str, str]:
    env = dict(VARIANTS[variant].get("env", {}))
    if variant in DIRECT:  # the Ingress replica's own HTTP port: the allocator's range is that port alone
        env.update(RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT=str(replica_port),
                   RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT=str(replica_port + 1))
    return env


def _deployed(cfg: HygraphConfig, variant: str, index_dir: str, port: int, replica_port: int) -> None:
    os.environ.update(_env(variant, replica_port))
    init_ray(cfg.ray)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(build_app(cfg, index_dir), name=APP_NAME, route_prefix="/")
    if variant not in DIRECT:
        serve.run(Echo.bind(), name="echo", route_prefix="/echo")


def _teardown(variant: str, replica_port: int) -> None:
    import ray

    serve.shutdown()
    ray.shutdown()
    for key in _env(variant, replica_port):
        os.environ.pop(key, None)


def _measure(load: Any, targets: dict[str, Target], levels: list[int], seconds: float,
             tag: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, t in targets.items():
        load.run(t.path, t.bodies[:20], 1, 2, t.base, t.cpu_roots)  # warm-up: connections, caches, lazy loads
        out[name] = {}
        for c in levels:
            r = load.run(t.path, t.bodies, c, seconds, t.base, t.cpu_roots)
            out[name][f"c{c}"] = r
            print(f"[bench] {tag} {name:>10} c{c:<2}: {r['qps']:7.1f} QPS  p50 {r['p50_ms']:7.1f} ms  "
                  f"p99 {r['p99_ms']:7.1f} ms  cpu/q {r['cpu_ms_per_query']:6.1f} ms  errors {r['errors']}",
                  file=sys.stderr, flush=True)
    return out


def _loader(base: str, tmp: Path) -> Any:
    return Wrk(base, tmp) if shutil.which("wrk") else HttpxLoad(base)


def run(args: argparse.Namespace) -> dict[str, Any]:
    base_cfg = load_config(args.config)
    questions = [q.question for q in load_questions(args.questions)]
    report: dict[str, Any] = {"index_dir": args.index_dir, "machine": f"{platform.processor() or platform.machine()}, "
                              f"{os.cpu_count()} CPUs", "load": "wrk" if shutil.which("wrk") else "httpx (in process)",
                              "date": time.strftime("%Y-%m-%d %H:%M"), "topologies": {}, "matrix": {}}
    modes = [m for m in MODE_NAMES if m != "dense"]
    with tempfile.TemporaryDirectory() as tmp:
        for store in args.stores.split(","):
            for variant in args.variants.split(","):
                # With direct ingress Serve still runs a proxy on the serve port (head node only), and each
                # ingress replica listens on a port of its own, where the load goes (a cluster's load balancer
                # would send it there).
                port, replica_port = free_port(), free_port()
                cfg = _configure(base_cfg, store, variant)
                try:
                    _deployed(cfg, variant, args.index_dir, port, replica_port)
                except Exception as exc:  # noqa: BLE001 - a variant this Ray cannot run is reported, not hidden
                    report["topologies"].setdefault(store, {})[variant] = {
                        "error": f"{type(exc).__name__}: {exc}"[:300]}
                    print(f"[bench] {store}/{variant}: could not deploy: {exc}", file=sys.stderr)
                    _teardown(variant, replica_port)
                    continue
                try:
                    with ExitStack() as stack:
                        load = _loader(f"http://127.0.0.1:{replica_port if variant in TO_REPLICA else port}",
                                       Path(tmp))
                        targets = {} if variant in DIRECT else {"echo": Target("/echo", _bodies(questions, None))}
                        if store == "milvus" and not args.no_plain:
                            plain = stack.enter_context(PlainServer(cfg, args.index_dir, Path(tmp)))
                            targets["plain"] = Target("/v1/query", _bodies(questions, None), plain.base,
                                                      plain.cpu_roots)
                        targets.update({m: Target("/v1/query", _bodies(questions, m)) for m in ("dense", "hybrid")})
                        report["topologies"].setdefault(store, {})[variant] = _measure(
                            load, targets, [1, 16], args.seconds, f"{store}/{variant}")
                        if variant == args.matrix_variant:
                            targets.update({m: Target("/v1/query", _bodies(questions, m))
                                            for m in modes if m != "hybrid"})
                            report["matrix"][store] = _measure(load, targets,
                                                               [int(c) for c in args.levels.split(",")],
                                                               args.seconds, f"{store}/matrix")
                finally:
                    _teardown(variant, replica_port)
    return report


def _ratio(r: dict[str, Any], base: dict[str, Any] | None, level: str) -> str:
    return f"{r[level]['qps'] / base[level]['qps']:.2f}" if base and level in base and base[level]["qps"] else "–"


def markdown(res: dict[str, Any]) -> str:
    lines = [f"# Serving benchmark: {res['index_dir']}", "",
             f"{res['machine']}; load from {res['load']}; {res['date']}. `plain`: loadtests/plain_dense.py, the "
             "dense server a team would run instead (uvicorn, one worker per core, torch, pymilvus, same Milvus "
             "collection); its CPU is its own processes' and Milvus's, every other row's the whole service's.", ""]
    for store, variants in res["topologies"].items():
        lines += [f"## Topologies, {store}", "",
                  "| topology | target | c1 QPS | c1 p50 ms | c1 p99 ms | c16 QPS | c16 p99 ms | QPS / plain c1 "
                  "| QPS / plain c16 | QPS / echo c16 | cpu ms/q c16 | errors |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for variant, targets in variants.items():
            if "error" in targets:
                lines.append(f"| {variant} | – | could not run: {targets['error']} | | | | | | | | | |")
                continue
            plain = targets.get("plain")
            for name, r in targets.items():
                c1, c16 = r["c1"], r["c16"]
                lines.append(f"| {variant} | {name} | {c1['qps']} | {c1['p50_ms']} | {c1['p99_ms']} | {c16['qps']} | "
                             f"{c16['p99_ms']} | {_ratio(r, plain, 'c1')} | {_ratio(r, plain, 'c16')} | "
                             f"{_ratio(r, targets.get('echo'), 'c16')} | {c16['cpu_ms_per_query']} | "
                             f"{c1['errors'] + c16['errors']} |")
        lines.append("")
    for store, targets in res["matrix"].items():
        levels = list(next(iter(targets.values())))
        plain = targets.get("plain")
        lines += [f"## Every mode, {store}", "", "| target | " + " | ".join(
            f"{c} QPS | {c} / plain | {c} p50 | {c} p99 | {c} cpu/q" for c in levels) + " | errors |",
                  "|---|" + "---|" * (5 * len(levels) + 1)]
        for name, r in targets.items():
            cells = " | ".join(f"{r[c]['qps']} | {_ratio(r, plain, c)} | {r[c]['p50_ms']} | {r[c]['p99_ms']} | "
                               f"{r[c]['cpu_ms_per_query']}" for c in levels)
            lines.append(f"| {name} | {cells} | {sum(r[c]['errors'] for c in levels)} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index-dir", required=True)
    ap.add_argument("--questions", required=True)
    ap.add_argument("--config", default=None)
    ap.add_argument("--stores", default="faiss,milvus")
    ap.add_argument("--variants", default="split,retriever,grpc,haproxy")
    ap.add_argument("--matrix-variant", default="retriever")
    ap.add_argument("--levels", default="1,4,16,32")
    ap.add_argument("--no-plain", action="store_true", help="leave out the plain dense server's row")
    ap.add_argument("--seconds", type=float, default=15.0, help="duration of each measurement")
    ap.add_argument("--out", default="runs/bench_serve", help="path prefix of the .json and .md reports")
    args = ap.parse_args()
    res = run(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    out.with_suffix(".md").write_text(markdown(res))
    print(markdown(res), file=sys.stderr)


if __name__ == "__main__":
    main()
