"""Headless load test of `hygraph serve` over HTTP (issue: Production), asyncio + httpx.

Scenarios (`--scenario a|b|c|all`, each `--seconds` long):
  a  queries only, every mode in turn, at rising concurrency (`--levels`, equal time each);
  b  queries at `--concurrency` plus a stream of inserts (one every `--insert-every` s) and
     deletes (every `--delete-every`-th insert removes an earlier, retrievable document);
     ingest lag = 202 -> job done, and 202 -> retrievable (deletes: -> no longer retrieved);
  c  OpenAI-compatible chat with `stream: true`: time to first token and total latency;
  z  queries at `--concurrency` whose questions follow a Zipf law over the question pool (exponent
     `--zipf-s`): repeated questions, the answer cache's hit rate, and QPS with and without hits.

Scenarios a and b ask with `Cache-Control: no-store`, so every query is computed (the round-robin over
the question pool repeats questions, and the answer cache would answer most of them); z is the one that
measures the cache. Every table counts the requests answered from the cache (`hits`) and gives the
throughput of the others (`QPS uncached`).

Starts its own `hygraph serve` on a fresh index directory under the report's folder (the
bundled demo index is built there first) unless `--index-dir` names one to serve or `--url`
a running server. Writes <out>.json, <out>.md and <out>.png; prints the JSON path.

    python loadtests/loadtest.py --scenario b,z --seconds 60 --out runs/loadtest/report
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import os
import random
import shutil
import signal
import sys
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python loadtests/x.py` finds the package

import httpx  # noqa: E402

from loadtests.common import (DEFAULT_CORPUS, MODES, Recorder, Sample, ServeProcess, ServerExited,  # noqa: E402
                              Write, backoff, demo_questions, fresh_documents, http_client, index_titles,
                              log_excerpt, parse_body, pcts, query_worker, say, timed, track_write, while_serving)

TAG = "loadtest"
LOAD_ENDPOINTS = ("query", "chat")  # what the scenario drives; the rest measures writes


# -- the write stream ---------------------------------------------------------------------------


async def write_stream(http: httpx.AsyncClient, rec: Recorder, docs: list[dict[str, str]], seconds: float,
                       insert_every: float, delete_every: int, timeout_s: float) -> list[Write]:
    """An insert every `insert_every` s for `seconds`; every `delete_every`-th insert is followed by
    the delete of the oldest document that became retrievable. Waits for every write's outcome."""
    writes: list[Write] = []
    tasks: list[asyncio.Task[None]] = []
    deleted: set[str] = set()
    by_id = {d["id"]: d for d in docs}
    end = time.perf_counter() + seconds
    for n, doc in enumerate(docs, 1):
        if time.perf_counter() >= end:
            break
        writes.append(w := Write(doc["id"], "insert", round(rec.now(), 3)))
        tasks.append(asyncio.create_task(track_write(http, rec, w, doc, timeout_s)))
        if n % delete_every == 0 and (victim := next(
                (x for x in writes if x.op == "insert" and x.visible_s is not None and x.doc_id not in deleted), None)):
            deleted.add(victim.doc_id)
            writes.append(d := Write(victim.doc_id, "delete", round(rec.now(), 3)))
            tasks.append(asyncio.create_task(track_write(http, rec, d, by_id[victim.doc_id], timeout_s)))
        await asyncio.sleep(insert_every)
    await asyncio.gather(*tasks)
    return writes


# -- chat ---------------------------------------------------------------------------------------


async def chat_once(http: httpx.AsyncClient, rec: Recorder, question: str, mode: str) -> Sample:
    """One streamed chat completion; time to the first content token and to `[DONE]`."""
    body = {"model": "hygraph", "messages": [{"role": "user", "content": question}], "stream": True,
            "hygraph": {"mode": mode}}
    s = Sample(rec.now(), rec.scenario, "chat", mode, 0.0, 0)
    start = time.perf_counter()
    try:
        async with http.stream("POST", "/v1/chat/completions", json=body) as resp:
            s.status = resp.status_code
            if resp.is_success:
                await _read_chat_stream(resp, s, start)
            else:
                await resp.aread()
                s.error = parse_body(resp)[1]
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
        s.error = f"{type(exc).__name__}: {exc}"[:300]
    s.ms = round((time.perf_counter() - start) * 1e3, 2)
    rec.samples.append(s)
    return s


async def _read_chat_stream(resp: httpx.Response, s: Sample, start: float) -> None:
    async for line in resp.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            if s.ttft_ms is None and s.error is None:
                s.error = "stream ended without a content token"
            return
        chunk = json.loads(data)
        if "error" in chunk:  # after the 200 a failure can only come in-band
            s.error = f"in-band {chunk['error'].get('code')}: {chunk['error'].get('message')}"[:300]
        elif s.ttft_ms is None and chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
            s.ttft_ms = round((time.perf_counter() - start) * 1e3, 2)
        if "hygraph" in chunk:
            s.index_version = chunk["hygraph"].get("index_version")
    s.error = s.error or "stream ended without [DONE]"


async def chat_worker(http: httpx.AsyncClient, rec: Recorder, questions: list[str], modes: list[str],
                      offset: int, stride: int, stop: asyncio.Event) -> None:
    i = offset
    while not stop.is_set():
        await backoff(await chat_once(http, rec, questions[i % len(questions)], modes[i % len(modes)]))
        i += stride


# -- scenarios -----------------------------------------------------------------------------------

Worker = Callable[[httpx.AsyncClient, Recorder, list[str], list[str], int, int, asyncio.Event], Awaitable[None]]


async def workers_for(http: httpx.AsyncClient, rec: Recorder, worker: Worker, questions: list[str],
                      modes: list[str], concurrency: int, until: Awaitable[Any]) -> Any:
    """Run `concurrency` workers until `until` completes; returns its result."""
    stop = asyncio.Event()
    tasks = [asyncio.create_task(worker(http, rec, questions, modes, i, concurrency, stop)) for i in range(concurrency)]
    try:
        return await until
    finally:
        stop.set()
        await asyncio.gather(*tasks)


# Every query computed: `no-store` neither reads the answer cache nor fills it (for scenario z after it).
COMPUTED = functools.partial(query_worker, cache_control="no-store")


async def scenario_a(http: httpx.AsyncClient, rec: Recorder, args: argparse.Namespace,
                     questions: list[str], docs: list[dict[str, str]]) -> dict[str, Any]:
    windows = []
    for c in args.levels:
        start = rec.now()
        await workers_for(http, rec, COMPUTED, questions, args.modes, c,
                          asyncio.sleep(args.seconds / len(args.levels)))
        windows.append({"concurrency": c, "start": round(start, 3), "end": round(rec.now(), 3)})
    return {"windows": windows}


async def scenario_b(http: httpx.AsyncClient, rec: Recorder, args: argparse.Namespace,
                     questions: list[str], docs: list[dict[str, str]]) -> dict[str, Any]:
    # Queries go on until the last write is measured, so every lag is taken under load.
    writes = await workers_for(http, rec, COMPUTED, questions, args.modes, args.concurrency,
                               write_stream(http, rec, docs, args.seconds, args.insert_every,
                                            args.delete_every, args.lag_timeout))
    return {"writes": [asdict(w) for w in writes]}


async def scenario_c(http: httpx.AsyncClient, rec: Recorder, args: argparse.Namespace,
                     questions: list[str], docs: list[dict[str, str]]) -> dict[str, Any]:
    await workers_for(http, rec, chat_worker, questions, args.modes, args.concurrency, asyncio.sleep(args.seconds))
    return {}


async def zipf_worker(http: httpx.AsyncClient, rec: Recorder, questions: list[str], modes: list[str],
                      offset: int, stride: int, stop: asyncio.Event, top_k: int = 5, s: float = 1.1) -> None:
    """Questions drawn by a Zipf law over the pool (the i-th most asked with weight 1 / i^s), modes in turn."""
    rng = random.Random(offset)
    weights = [1 / (i + 1) ** s for i in range(len(questions))]
    i = offset
    while not stop.is_set():
        mode = modes[i % len(modes)]
        question = rng.choices(questions, weights)[0]
        sample, _ = await timed(http, rec, "query", "POST", "/v1/query",
                                {"question": question, "mode": mode, "top_k": top_k}, mode)
        await backoff(sample)
        i += stride


async def scenario_z(http: httpx.AsyncClient, rec: Recorder, args: argparse.Namespace,
                     questions: list[str], docs: list[dict[str, str]]) -> dict[str, Any]:
    worker = functools.partial(zipf_worker, s=args.zipf_s)
    await workers_for(http, rec, worker, questions, args.modes, args.concurrency, asyncio.sleep(args.seconds))
    return {"zipf_s": args.zipf_s, "questions": len(questions)}


SCENARIOS = {"a": ("queries, rising concurrency", scenario_a),
             "b": ("queries with inserts and deletes", scenario_b),
             "c": ("streamed OpenAI-compatible chat", scenario_c),
             "z": ("queries with Zipf-distributed repeated questions", scenario_z)}


async def progress(rec: Recorder, every_s: float = 5.0) -> None:
    seen = 0
    while True:
        await asyncio.sleep(every_s)
        new = rec.samples[seen:]
        seen = len(rec.samples)
        ok = [s.ms for s in new if s.ok]
        writes = Counter(e["kind"] for e in rec.events)
        say(TAG, f"{rec.scenario} t={rec.now():5.0f}s  +{len(new)} requests, {len(new) - len(ok)} errors, "
                 f"p50 {pcts(ok)['p50_ms']} ms  | total {len(rec.samples)}"
                 + (f"  writes: {dict(writes)}" if writes else ""))


async def run_scenarios(url: str, api_key: str, args: argparse.Namespace, docs: list[dict[str, str]],
                        server: ServeProcess | None) -> tuple[dict[str, Recorder], dict[str, dict[str, Any]]]:
    questions = demo_questions()
    recs: dict[str, Recorder] = {}
    meta: dict[str, dict[str, Any]] = {}
    async with http_client(url, max([*args.levels, args.concurrency]), api_key) as http:
        # Warm-up, not counted: each mode's first call loads what it needs.
        warm = Recorder("warmup")
        for mode in args.modes:
            await timed(http, warm, "query", "POST", "/v1/query", {"question": questions[0], "mode": mode}, mode)
        for name in args.scenarios:
            say(TAG, f"scenario {name}: {SCENARIOS[name][0]} ({args.seconds:.0f} s)")
            rec = recs[name] = Recorder(name)
            ticker = asyncio.create_task(progress(rec))
            try:
                meta[name] = await while_serving(server, SCENARIOS[name][1](http, rec, args, questions, docs))
            finally:
                ticker.cancel()
            meta[name]["wall_s"] = round(rec.now(), 2)
    return recs, meta


# -- the report (pure) ----------------------------------------------------------------------------


def request_stats(samples: list[Sample], wall_s: float) -> dict[str, Any]:
    """Throughput of every request; latency percentiles of the successful ones; errors by status."""
    ok = [s.ms for s in samples if s.ok]
    errors = len(samples) - len(ok)
    hits = sum(s.cached for s in samples)
    return {"requests": len(samples), "qps": round(len(samples) / wall_s, 2) if wall_s > 0 else None,
            "hits": hits, "qps_uncached": round((len(samples) - hits) / wall_s, 2) if wall_s > 0 else None,
            "hit_rate": round(hits / len(samples), 4) if samples else 0.0,
            **pcts(ok), "errors": errors, "error_rate": round(errors / len(samples), 4) if samples else 0.0,
            "status_codes": dict(sorted(Counter(str(s.status) for s in samples).items()))}


def _grouped(samples: Iterable[Sample], key: Callable[[Sample], str | None], wall_s: float) -> dict[str, Any]:
    groups: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        groups[key(s) or "-"].append(s)
    return {k: request_stats(v, wall_s) for k, v in sorted(groups.items())}


def level_stats(samples: list[Sample], windows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Scenario a: one row per concurrency level, over the load requests started in its window."""
    rows = []
    for w in windows:
        inside = [s for s in samples if s.endpoint in LOAD_ENDPOINTS and w["start"] <= s.t < w["end"]]
        rows.append({"concurrency": w["concurrency"], **request_stats(inside, w["end"] - w["start"])})
    return rows


def lag_stats(values: Iterable[float | None]) -> dict[str, Any]:
    v = [x for x in values if x is not None]
    return {"n": len(v), **pcts(v, unit="s", digits=3), "max_s": round(max(v), 3) if v else None}


def ingest_stats(writes: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for op, reached in (("insert", "retrievable"), ("delete", "gone")):
        mine = [w for w in writes if w["op"] == op]
        out[op] = {"sent": len(mine), "acked": sum(w["acked_t"] is not None for w in mine),
                   "outcomes": dict(Counter(w["outcome"] for w in mine)),
                   "lag_job_done_s": lag_stats(w["done_s"] for w in mine),
                   f"lag_{reached}_s": lag_stats(w["visible_s"] for w in mine)}
        if op == "insert":
            out[op]["lag_summarized_s"] = lag_stats(w.get("summarized_s") for w in mine)
    out["problems"] = [w for w in writes if w["outcome"] != "ok"]
    return out


def chat_stats(samples: list[Sample]) -> dict[str, Any]:
    ok = [s for s in samples if s.endpoint == "chat" and s.ok]
    return {"ttft": pcts(s.ttft_ms for s in ok if s.ttft_ms is not None), "total": pcts(s.ms for s in ok)}


def error_examples(samples: list[Sample], limit: int = 10) -> list[dict[str, Any]]:
    counts = Counter((s.endpoint, s.status, s.error or f"HTTP {s.status}") for s in samples if not s.ok)
    return [{"endpoint": e, "status": st, "error": msg, "count": n} for (e, st, msg), n in counts.most_common(limit)]


def scenario_report(samples: list[Sample], meta: dict[str, Any]) -> dict[str, Any]:
    wall = meta["wall_s"]
    load = [s for s in samples if s.endpoint in LOAD_ENDPOINTS]
    out = {"wall_s": wall, "all": request_stats(samples, wall),
           "endpoints": _grouped(samples, lambda s: s.endpoint, wall),
           "modes": _grouped(load, lambda s: s.mode, wall), "error_examples": error_examples(samples)}
    if "windows" in meta:
        out["levels"] = level_stats(samples, meta["windows"])
    if "writes" in meta:
        out["ingest"] = ingest_stats(meta["writes"])
    if any(s.endpoint == "chat" for s in samples):
        out["chat"] = chat_stats(samples)
    if "zipf_s" in meta:
        out["cache"] = {"zipf_s": meta["zipf_s"], "questions": meta["questions"],
                        "hit": pcts(s.ms for s in load if s.ok and s.cached),
                        "miss": pcts(s.ms for s in load if s.ok and not s.cached)}
    return out


def index_versions(samples: Iterable[Sample], meta: dict[str, dict[str, Any]]) -> list[int]:
    seen = {s.index_version for s in samples if s.index_version is not None}
    seen |= {w["version"] for m in meta.values() for w in m.get("writes", []) if w["version"] is not None}
    return sorted(seen)


def build_report(recs: dict[str, Recorder], meta: dict[str, dict[str, Any]], info: dict[str, Any]) -> dict[str, Any]:
    every = [s for r in recs.values() for s in r.samples]
    return {**info, "scenarios": {n: scenario_report(r.samples, meta[n]) for n, r in recs.items()},
            "index_versions": index_versions(every, meta),
            "raw": {n: {**r.dump(), **{k: v for k, v in meta[n].items() if k != "writes"},
                        "writes": meta[n].get("writes", [])} for n, r in recs.items()}}


# -- Markdown ---------------------------------------------------------------------------------------


def _v(x: Any) -> str:
    return "–" if x is None else str(x)


def _row(name: Any, st: dict[str, Any], codes: bool = False) -> str:
    cells = [name, st["requests"], st["qps"], st["hits"], st["qps_uncached"], st["p50_ms"], st["p95_ms"],
             st["p99_ms"], st["errors"]]
    if codes:
        cells.append(", ".join(f"{k}×{n}" for k, n in st["status_codes"].items()))
    return "| " + " | ".join(_v(c) for c in cells) + " |"


def _table(first: str, rows: dict[str, dict[str, Any]], codes: bool = False) -> list[str]:
    head = (f"| {first} | requests | QPS | hits | QPS uncached | p50 ms | p95 ms | p99 ms | errors |"
            + (" status codes |" if codes else ""))
    sep = "|---" * (10 if codes else 9) + "|"
    return [head, sep, *(_row(k, v, codes) for k, v in rows.items()), ""]


def _lag(l: dict[str, Any]) -> str:
    return f"{_v(l['p50_s'])} / {_v(l['p95_s'])} / {_v(l['max_s'])} (n={l['n']})"


def _ingest_md(ing: dict[str, Any]) -> list[str]:
    lines = ["Ingest lag, seconds from the 202, p50 / p95 / max. Inserts are served before their summaries, "
             "which follow when the updater is idle (at most `updates.defer_summaries_s` later):", "",
             "| write | sent | acked | outcomes | to job done | to retrievable / gone | to summarized |",
             "|---|---|---|---|---|---|---|"]
    for op, reached in (("insert", "retrievable"), ("delete", "gone")):
        g = ing[op]
        outcomes = ", ".join(f"{k}×{n}" for k, n in g["outcomes"].items()) or "–"
        summarized = _lag(g["lag_summarized_s"]) if "lag_summarized_s" in g else "–"
        lines.append(f"| {op} | {g['sent']} | {g['acked']} | {outcomes} | {_lag(g['lag_job_done_s'])} | "
                     f"{_lag(g[f'lag_{reached}_s'])} | {summarized} |")
    lines.append("")
    for w in ing["problems"]:
        lines.append(f"- **{w['op']} {w['doc_id']}: {w['outcome']}** (job {w['job_id']}, last status "
                     f"{w['last_job_status']}, error {w['error']})")
    return lines + ([""] if ing["problems"] else [])


def _scenario_md(name: str, sc: dict[str, Any]) -> list[str]:
    lines = [f"## Scenario {name}: {SCENARIOS[name][0]} ({sc['wall_s']} s)", ""]
    if "levels" in sc:
        lines += _table("concurrency", {str(r["concurrency"]): r for r in sc["levels"]})
    lines += _table("mode", sc["modes"])
    lines += _table("endpoint", sc["endpoints"], codes=True)
    if "ingest" in sc:
        lines += _ingest_md(sc["ingest"])
    if "chat" in sc:
        t, tot = sc["chat"]["ttft"], sc["chat"]["total"]
        lines += ["| streamed chat | p50 ms | p95 ms | p99 ms |", "|---|---|---|---|",
                  f"| time to first token | {_v(t['p50_ms'])} | {_v(t['p95_ms'])} | {_v(t['p99_ms'])} |",
                  f"| total | {_v(tot['p50_ms'])} | {_v(tot['p95_ms'])} | {_v(tot['p99_ms'])} |", ""]
    if "cache" in sc:
        c, q = sc["cache"], sc["endpoints"]["query"]
        lines += [f"Questions drawn by a Zipf law (s = {c['zipf_s']}) over {c['questions']} questions: "
                  f"hit rate {q['hit_rate']:.1%}, {q['qps']} QPS in all, {q['qps_uncached']} QPS of misses.", "",
                  "| answered | p50 ms | p95 ms | p99 ms |", "|---|---|---|---|",
                  *(f"| {name} | {_v(c[name]['p50_ms'])} | {_v(c[name]['p95_ms'])} | {_v(c[name]['p99_ms'])} |"
                    for name in ("hit", "miss")), ""]
    if sc["error_examples"]:
        lines += ["Errors:", ""] + [f"- {e['count']}× {e['endpoint']} status {e['status']}: {e['error']}"
                                     for e in sc["error_examples"]] + [""]
    return lines


def markdown(report: dict[str, Any]) -> str:
    cfg = report["config"]
    lines = [f"# Load test of {report['target']}", "",
             f"{report['started_at']}, {report['machine']}; server: {report['server']['summary']}.",
             f"Modes {', '.join(cfg['modes'])}; concurrency {cfg['concurrency']} (scenario a: levels "
             f"{cfg['levels']}); scenario b: an insert every {cfg['insert_every']} s, a delete after every "
             f"{cfg['delete_every']} inserts.", "",
             "Latency percentiles are over successful requests. An error is any non-2xx answer, a request "
             "with no answer (status 0), or an error inside a 200 stream. `probe` and `job` are the requests "
             "that measure ingest lag (dense queries for the document, job polls).", ""]
    for name, sc in report["scenarios"].items():
        lines += _scenario_md(name, sc)
    lines += [f"Index versions seen: {report['index_versions']}", ""]
    if report["server"].get("log_errors"):
        lines += ["Server log, error lines:", "", "```", *report["server"]["log_errors"], "```", ""]
    return "\n".join(lines)


# -- the chart --------------------------------------------------------------------------------------


def plot(report: dict[str, Any], path: Path) -> None:
    """Latency over time per scenario: one colour per mode, probes grey, errors as red crosses,
    inserts and deletes as vertical lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["raw"])
    fig, axes = plt.subplots(len(names), 1, figsize=(12, 3.8 * len(names)), squeeze=False)
    colours = dict(zip(MODES, plt.get_cmap("tab10").colors))
    for ax, name in zip(axes[:, 0], names):
        raw = report["raw"][name]
        samples = raw["samples"]
        for mode in MODES:
            pts = [(s["t"], s["ms"]) for s in samples if s["endpoint"] in LOAD_ENDPOINTS and s["mode"] == mode
                   and 200 <= s["status"] < 300 and s["error"] is None]
            if pts:
                ax.scatter(*zip(*pts), s=6, color=colours[mode], label=mode)
        probes = [(s["t"], s["ms"]) for s in samples if s["endpoint"] == "probe"]
        if probes:
            ax.scatter(*zip(*probes), s=4, color="0.6", label="ingest probe")
        bad = [(s["t"], max(s["ms"], 1.0)) for s in samples if not (200 <= s["status"] < 300 and s["error"] is None)]
        if bad:
            ax.scatter(*zip(*bad), s=30, marker="x", color="red", label="error")
        _mark_events(ax, raw)
        ax.set_yscale("log")
        ax.set_xlabel("seconds since the scenario started")
        ax.set_ylabel("latency ms")
        ax.set_title(f"scenario {name}: {SCENARIOS[name][0]}")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _mark_events(ax: Any, raw: dict[str, Any]) -> None:
    style = {"insert": ("green", "--"), "delete": ("purple", "--"), "retrievable": ("green", ":"),
             "gone": ("purple", ":")}
    used = set()
    for e in raw["events"]:
        if e["kind"] in style:
            colour, line = style[e["kind"]]
            ax.axvline(e["t"], color=colour, linestyle=line, linewidth=0.8,
                       label=None if e["kind"] in used else e["kind"])
            used.add(e["kind"])
    for i, w in enumerate(raw.get("windows", [])):
        ax.axvspan(w["start"], w["end"], color="0.93" if i % 2 else "white", zorder=0)
        ax.text(w["start"], 1.0, f" c={w['concurrency']}", transform=ax.get_xaxis_transform(), va="top", fontsize=8)


# -- command line ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="all", help="all, or a comma-separated list of a, b, c, z")
    ap.add_argument("--seconds", type=float, default=60.0, help="length of each scenario")
    ap.add_argument("--url", help="a running server (default: start one)")
    ap.add_argument("--api-key", default=None, help="with --url: the key writes need")
    ap.add_argument("--index-dir", help="serve this index (it gets the inserts) instead of a fresh demo index")
    ap.add_argument("--keep-index", action="store_true", help="keep the fresh index directory afterwards")
    ap.add_argument("--out", default="runs/loadtest/report", help="path prefix of .json, .md and .png")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--levels", default="1,2,4,8", help="scenario a: concurrency levels")
    ap.add_argument("--concurrency", type=int, default=4, help="scenarios b and c")
    ap.add_argument("--insert-every", type=float, default=5.0, help="scenario b: seconds between inserts")
    ap.add_argument("--delete-every", type=int, default=3, help="scenario b: a delete after every Nth insert")
    ap.add_argument("--lag-timeout", type=float, default=300.0, help="seconds a write may take to show")
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="documents to insert")
    ap.add_argument("--zipf-s", type=float, default=1.1, help="scenario z: the Zipf exponent")
    args = ap.parse_args(argv)
    args.modes = args.modes.split(",")
    args.levels = [int(x) for x in args.levels.split(",")]
    args.scenarios = list(SCENARIOS) if args.scenario == "all" else args.scenario.split(",")
    unknown = [s for s in args.scenarios if s not in SCENARIOS]
    if unknown:
        ap.error(f"--scenario: unknown {', '.join(unknown)} (one of {', '.join(SCENARIOS)}, or all)")
    return args


def _raise_interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_interrupt)  # `kill` cleans up like Ctrl-C
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tag = datetime.now().strftime("%Y%m%d-%H%M%S")
    api_key = args.api_key or uuid.uuid4().hex
    index_dir = Path(args.index_dir) if args.index_dir else None if args.url else out.parent / f"index-{tag}"
    docs = []
    if "b" in args.scenarios:
        per_run = math.ceil(args.seconds / args.insert_every) + 1
        docs = fresh_documents(args.corpus, per_run, index_titles(index_dir), tag)
    server = ServeProcess(index_dir, out.parent / f"serve-{tag}.log", api_key, TAG) if not args.url else None
    server_info: dict[str, Any] = {"index_dir": str(index_dir) if index_dir else None}
    try:
        if server is not None:
            server.start()
            server_info["startup_s"] = server.wait_ready()
            say(TAG, f"server ready after {server_info['startup_s']} s")
        url = args.url or server.url
        recs, meta = asyncio.run(run_scenarios(url, api_key, args, docs, server))
    except ServerExited as exc:
        say(TAG, f"no report: {exc}")
        return 1
    finally:
        if server is not None:
            server_info["left_running_after_stop"] = server.stop()
            server_info["log_errors"] = log_excerpt(server.log_tail(2_000_000))
            if not args.index_dir and not args.keep_index:
                shutil.rmtree(index_dir, ignore_errors=True)
    server_info["summary"] = (f"started by the load test on {'a fresh demo index' if not args.index_dir else index_dir}"
                              f", ready after {server_info['startup_s']} s" if server else f"{url} (not started here)")
    info = {"target": url, "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{os.cpu_count()} CPUs", "server": server_info,
            "config": {k: getattr(args, k) for k in ("seconds", "modes", "levels", "concurrency", "insert_every",
                                                     "delete_every", "lag_timeout", "scenarios")}}
    report = build_report(recs, meta, info)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    out.with_suffix(".md").write_text(markdown(report))
    plot(report, out.with_suffix(".png"))
    print(summary(report), file=sys.stderr)
    print(out.with_suffix(".json"))
    return 0


def summary(report: dict[str, Any]) -> str:
    lines = []
    for name, sc in report["scenarios"].items():
        a = sc["all"]
        load = sc["endpoints"].get("query") or sc["endpoints"].get("chat")
        lines.append(f"[{TAG}] {name}: {load['qps']} QPS ({load['qps_uncached']} uncached, hit rate "
                     f"{load['hit_rate']:.1%}), p50/p95/p99 {load['p50_ms']}/{load['p95_ms']}/"
                     f"{load['p99_ms']} ms, errors {a['errors']}/{a['requests']} {a['status_codes']}")
        if "ingest" in sc:
            i = sc["ingest"]["insert"]
            lines.append(f"[{TAG}]    inserts {i['acked']}/{i['sent']} acked, lag to done {_lag(i['lag_job_done_s'])}, "
                         f"to retrievable {_lag(i['lag_retrievable_s'])}, to summarized {_lag(i['lag_summarized_s'])}; "
                         f"problems {len(sc['ingest']['problems'])}")
        if "chat" in sc:
            lines.append(f"[{TAG}]    chat TTFT p50 {sc['chat']['ttft']['p50_ms']} ms, total p50 "
                         f"{sc['chat']['total']['p50_ms']} ms")
    left = report["server"].get("left_running_after_stop")
    if left:
        lines.append(f"[{TAG}] processes left after the server stopped (killed): {left}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
