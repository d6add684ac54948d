"""Insert lag of one-line documents behind a large one, through a running `hygraph serve` (issue 34).

Starts `hygraph serve` on an existing index, then measures, in one run:

0. one one-line insert to warm the updater (its first job loads its models), reported apart;
1. the baseline: `--small` one-line inserts sent one after another with nothing else queued, each timed
   from its 202 to the moment `GET /v1/jobs/{id}` reads `done`;
2. a `--size`-byte document of prose (words of the corpus; the default is the largest text a request of
   `serve.max_body_bytes`, 1 MiB, carries), then, 1 s later, the same number of one-line inserts one
   after another while the large document is applied in slices.

It prints the lag of each one-line insert, the p50/p99 of both series, their ratio and how far the
large document had got, and writes them as JSON (`--out`). The index grows by the documents sent
(ids carry the run's time, so runs never collide).

    python loadtests/bench_insert_lag.py --index-dir /tmp/lag-index --small 5
"""

from __future__ import annotations

import argparse
import json
import random
import secrets
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python loadtests/x.py` finds the package

from hygraph.client import Client  # noqa: E402
from loadtests.common import DEFAULT_CORPUS, ServeProcess, pcts, say  # noqa: E402

POLL_S = 0.1
MAX_BODY = 1 << 20  # serve.max_body_bytes' default


def prose(corpus: Path, size: int, seed: int = 0) -> str:
    """`size` bytes of the corpus's words in a random run, as a long document of ordinary prose."""
    words = [w for line in corpus.open() for w in json.loads(line)["text"].split()]
    rng = random.Random(seed)
    i, out, n = rng.randrange(len(words)), [], 0
    while n < size:
        word = words[i % len(words)]
        out.append(word)
        n += len(word.encode()) + 1
        i += 1
    return " ".join(out).encode()[:size].decode(errors="ignore")


def fitted(doc: dict[str, str], max_body: int) -> dict[str, str]:
    """`doc` with its text cut until the insert request's JSON body (non-ASCII escaped, the larger form)
    fits `max_body` bytes."""
    while (excess := len(json.dumps({"documents": [doc]}).encode()) - max_body) > 0:
        doc = {**doc, "text": doc["text"][:-excess]}
    return doc


def wait_done(client: Client, job_id: str, timeout_s: float) -> float:
    """Seconds until the job reads `done` (raises if it fails or takes longer than `timeout_s`)."""
    t0 = time.monotonic()
    while True:
        status = client.job(job_id)
        if status["status"] == "done":
            return time.monotonic() - t0
        if status["status"] == "failed" or time.monotonic() - t0 > timeout_s:
            raise RuntimeError(f"job {job_id}: {status}")
        time.sleep(POLL_S)


def one_line_lags(client: Client, n: int, tag: str, timeout_s: float) -> list[float]:
    lags = []
    for i in range(n):
        doc = {"id": f"{tag}-{i}", "title": f"One line {i}",
               "text": f"Kestrel Quayside {tag} {i} is a one-line document."}
        job = client.add_documents([doc])["job_id"]
        lags.append(round(wait_done(client, job, timeout_s), 3))
        say("lag", f"{tag} #{i}: done {lags[-1]:.2f} s after its 202")
    return lags


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index-dir", required=True, help="a built index (it grows by the documents sent)")
    ap.add_argument("--size", type=int, default=MAX_BODY,
                    help="bytes of the large document's text, cut to what one request of --max-body carries")
    ap.add_argument("--max-body", type=int, default=MAX_BODY, help="the service's serve.max_body_bytes")
    ap.add_argument("--small", type=int, default=5, help="one-line inserts per series")
    ap.add_argument("--corpus", default=str(DEFAULT_CORPUS), help="where the large document's words come from")
    ap.add_argument("--timeout-s", type=float, default=600.0, help="longest wait for one job")
    ap.add_argument("--out", default=None, help="write the figures here as JSON")
    args = ap.parse_args()
    key, run = secrets.token_hex(16), time.strftime("%Y%m%dT%H%M%S")
    server = ServeProcess(Path(args.index_dir), Path(args.index_dir).parent / f"bench_insert_lag.{run}.log", key)
    server.start()
    try:
        ready_s = server.wait_ready()
        result: dict[str, Any] = {"index_dir": args.index_dir, "size_bytes": args.size, "ready_s": ready_s}
        with Client(server.url, api_key=key, timeout_s=120) as client:
            result["first_insert_s"] = one_line_lags(client, 1, f"warm-{run}", args.timeout_s)[0]
            result["alone_s"] = one_line_lags(client, args.small, f"alone-{run}", args.timeout_s)
            doc = fitted({"id": f"big-{run}", "title": "Large document", "text": prose(Path(args.corpus), args.size)},
                         args.max_body)
            result["large_text_bytes"] = len(doc["text"].encode())
            big = client.add_documents([doc])["job_id"]
            say("lag", f"{result['large_text_bytes']:,}-byte document journaled as job {big}")
            time.sleep(1.0)
            result["behind_large_s"] = one_line_lags(client, args.small, f"behind-{run}", args.timeout_s)
            result["large_status_after"] = client.job(big)["status"]
            updater = client.updater()
            result["documents_in_slices_after"] = updater.get("documents_in_slices")
    finally:
        left = server.stop()
        if left:
            say("lag", f"killed {len(left)} processes left after the server stopped")
    alone, behind = pcts(result["alone_s"], "s"), pcts(result["behind_large_s"], "s")
    result["p50_s"] = {"alone": alone["p50_s"], "behind_large": behind["p50_s"]}
    result["p99_s"] = {"alone": alone["p99_s"], "behind_large": behind["p99_s"]}
    print(f"| one-line insert lag | alone | behind a {result['large_text_bytes']:,}-byte document |\n|---|---|---|")
    for p in ("p50", "p99"):
        print(f"| {p} s | {alone[p + '_s']:.2f} | {behind[p + '_s']:.2f} |")
    print(f"| ratio of p50 | 1 | {behind['p50_s'] / alone['p50_s']:.2f} |")
    print(f"first insert after the start (models loading): {result['first_insert_s']:.2f} s; "
          f"large document after the series: {result['large_status_after']}; "
          f"documents still in slices: {result['documents_in_slices_after']}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
