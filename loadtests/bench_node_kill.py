"""A worker node killed in a chosen stage of `hygraph index` on a real multi-node Ray cluster: does the build
complete (Ray retrying the lost node's tasks and rebuilding their outputs from lineage, or the assembler resuming
from the checkpoint), and does its index equal an uninterrupted build's?

    python loadtests/bench_node_kill.py --corpus C --process _fold --work W

The cluster is bench_build's (a 0-CPU head, two 1-CPU worker nodes in private namespaces). The corpus is built
once without interruption, then again into a new index directory: once a Ray worker process whose name contains
`--process` (`_map` or `_fold` for the knowledge shuffle's tasks) runs on a worker node, that node is SIGKILLed
and a new one joins (as an autoscaler replaces one). Prints the stage that was running, both builds' seconds,
what the progress log says of the loss, and the equality of every table (`bench_build.compare_tables`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from loadtests.bench_build import build, build_env, compare_tables, index_command, running_stages  # noqa: E402
from loadtests.bench_scale import embedder_dir  # noqa: E402
from loadtests.common import say  # noqa: E402
from tests.raycluster import RayCluster  # noqa: E402

TAG = "bench_node_kill"


def killed_build(cluster: RayCluster, corpus: Path, index_dir: Path, env: dict[str, str], log: Path,
                 process: str, timeout_s: float) -> dict:
    """The build with the first worker node that runs a `process` worker SIGKILLed; what happened."""
    t0 = time.perf_counter()
    with log.open("w") as err:
        proc = cluster.popen(index_command(corpus, index_dir), env=env, cwd=REPO, stdout=subprocess.PIPE,
                             stderr=err, text=True)
        killed = None
        while killed is None and proc.poll() is None and time.perf_counter() - t0 < timeout_s:
            for i in range(cluster.workers):
                if any(process in p for p in cluster.worker_processes(i)):
                    stage = running_stages(log.read_text())
                    killed = {"node": cluster.kill_worker(i)[:8], "at_s": round(time.perf_counter() - t0, 1),
                              "stages_running": stage}
                    cluster.add_worker()
                    break
            time.sleep(0.2)
        stdout, _ = proc.communicate()
    text = log.read_text()
    return {"killed": killed, "returncode": proc.returncode, "wall_s": round(time.perf_counter() - t0, 1),
            "result": json.loads(stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None,
            "loss_lines": [line for line in text.splitlines() if "lost" in line or "retr" in line][-10:],
            "log_tail": text[-2000:] if proc.returncode != 0 else ""}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--process", default="_fold", help="kill the node of the first worker process naming this")
    ap.add_argument("--embedder", default="m2v")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--timeout-s", type=float, default=3600)
    ap.add_argument("--reuse-whole", action="store_true", help="the uninterrupted build of an earlier run in --work")
    args = ap.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    env = build_env(embedder_dir(args.embedder, work), 0.6)
    with RayCluster(workers=2, cpus_per_worker=1, object_store_mb=2048) as cluster:
        say(TAG, "the uninterrupted build" + (" (an earlier run's)" if args.reuse_whole else ""))
        whole = (json.loads((work / "whole.json").read_text()) if args.reuse_whole else
                 build(cluster, args.corpus.resolve(), work / "index_whole", env, work / "whole.log"))
        (work / "whole.json").write_text(json.dumps(whole))
        say(TAG, f"the build whose node running {args.process!r} is killed")
        out = killed_build(cluster, args.corpus.resolve(), work / "index_killed", env, work / "killed.log",
                           args.process, args.timeout_s)
    out["whole_wall_s"] = whole["wall_s"]
    if out["returncode"] == 0:
        eq = compare_tables(work / "index_whole", work / "index_killed")
        out["equal"] = {"manifest_differs": eq["manifest_differs"],
                        "tables": {k: v.get("equal") for k, v in eq["tables"].items()}}
        out["result"] = {k: out["result"][k] for k in ("chunks", "entities", "relations", "resumed_stages")}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
