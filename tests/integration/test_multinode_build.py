"""`hygraph index` against a real three-node Ray cluster (a head with no CPUs and two 1-CPU worker nodes, each
its own `ray start`, in private namespaces: tests/raycluster.py): the Ray stages run on the worker nodes, a
worker node killed mid-ingest is survived, and a driver killed after it resumes to the uninterrupted build."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from hygraph.backends.vectorstore import netns
from tests.integration.conftest import HYGRAPH, build_record, cli_env
from tests.raycluster import RayCluster

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(bool(netns.unavailable()), reason=f"no private namespaces: {netns.unavailable()}")]

# Ray Data and the encoder actors, the stages the assembling actor runs itself and the Ray tasks it starts beside
# it (hyperbolic, lexical: indexing/beside.py).
RAY_STAGES = ("chunk+embed+extract", "embed entities, relations, hyperedges", "hierarchy", "knowledge",
              "hybrid graph", "cleora", "hyperbolic", "lexical", "write vectors")
COUNTS = ("documents", "chunks", "entities", "relations", "hyperedges", "summaries", "layers")
# On a 1-CPU node one embedding actor (0.6 CPU), the extraction actor (0.25) and the chunk tasks (0.1) fit
# together: the two embedding actors (embedder.pool_size 2) land one on each node, and so do the hierarchy's
# two encoder actors. (Ray 2.60 stalls an actor
# pool whose CPUs reach a node's.) The writer lease is taken over 3 s after a killed driver. The assembler asks
# for more memory than any node has: it gets the most a worker offers (the head, which has no CPUs, offers more).
BUILD_ENV = {"HYGRAPH__EMBEDDER__NUM_CPUS": "0.6", "HYGRAPH__STORE__LEASE_S": "3",
             "HYGRAPH__INDEXING__ASSEMBLER_MEMORY_GB": "100000"}


@pytest.fixture(scope="module")
def cluster():
    with RayCluster(workers=2) as c:
        yield c


def _build(cluster: RayCluster, args: list[str]) -> dict:
    out = cluster.run([*HYGRAPH, *args], env=cli_env(**BUILD_ENV), cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-4000:]
    # The summary is the last line that is an object (Ray may print warnings to stdout under load).
    return json.loads(next(line for line in reversed(out.stdout.splitlines()) if line.startswith("{")))


def _wait(what: str, ready, proc, log: Path, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert proc.poll() is None, f"the build ended before {what}:\n{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"no {what} after {timeout_s:g} s:\n{log.read_text()[-4000:]}"
        time.sleep(0.1)


@pytest.mark.timeout(900)
def test_a_multinode_build_survives_a_node_death_and_resumes_after_a_driver_kill(cluster, demo_build, tmp_path):
    # The uninterrupted build of the same passages is the session's, on this node (shared with
    # test_build_resume): the counts of a build do not depend on where its stages ran.
    corpus, _, whole = demo_build
    workers = {cluster.worker_node_id(i)[:8] for i in range(2)}

    # A worker node dies while an embedding actor of the ingest runs on it (a small corpus starts one actor: its
    # node is whichever Ray placed it on); a new node joins (as an autoscaler replaces one).
    index_dir = tmp_path / "killed"
    args = ["index", "--corpus", str(corpus), "--index-dir", str(index_dir)]
    log = tmp_path / "killed.log"
    with log.open("w") as err:
        proc = cluster.popen([*HYGRAPH, *args], env=cli_env(**BUILD_ENV), stdout=err, stderr=err,
                             cwd=Path(__file__).resolve().parents[2])
    try:
        running: list[int] = []

        def embedding() -> bool:
            running[:] = [i for i in range(2) if any("EmbedStage" in p for p in cluster.worker_processes(i))]
            return bool(running)

        _wait("an embedding actor on a worker node", embedding, proc, log)
        lost = cluster.kill_worker(running[0])
        added = cluster.add_worker()
        nodes = cluster.wait_nodes(2)
        # Ray retries the lost node's work: the same driver finishes the ingest...
        _wait("ingest checkpointed after the node death",
              lambda: "chunk+embed+extract" in build_record(index_dir).get("done", []), proc, log)
        # ...and is SIGKILLed in the next stage.
        cluster.kill(proc)
    finally:
        if proc.poll() is None:
            cluster.kill(proc)
    assert lost[:8] in workers

    again = _build(cluster, args)
    assert again["resumed_stages"][:1] == ["chunk+embed+extract"]
    for key in COUNTS:
        assert again[key] == whole[key], key
    assert again["llm_calls"] == whole["llm_calls"]

    # Every stage the resumed build ran, the assembler's included, ran on the worker nodes alive then (the head
    # has no CPUs; the ingest's embedding actor was seen on a worker node above): the driver held none of them.
    alive = {cluster.worker_node_id(i)[:8] for i in (1 - running[0], added)}
    head = {n["node_id"][:8] for n in nodes if n["head"]}
    placed = {s: {n.split("/")[1] for n in ns} for s, ns in again["stats"]["nodes_per_stage"].items()}
    print(f"nodes per stage (workers {sorted(alive)}, head {sorted(head)}): {placed}")
    assert set(RAY_STAGES) - set(again["resumed_stages"]) <= set(placed)
    for stage in placed:
        assert placed[stage] and placed[stage] <= alive, stage
    # The hierarchy's two encoder actors sit one per node (0.6 CPU each on 1-CPU nodes) and both report: both
    # workers ran it. (The Ray Data stages use both when their input spans several bundles: 16 passages and
    # their 400-odd knowledge texts are one bundle each, so which workers ran them is printed, not asserted.)
    assert placed["hierarchy"] == alive
    # The knowledge merge's tasks take the nodes in turn: one map task, and a fold of each of two partitions
    # (unless the killed run had finished the stage: it is kept then).
    if "knowledge" not in again["resumed_stages"]:
        assert placed["knowledge"] == alive
    # Hyperbolic and lexical, Ray tasks of their own, ran on the other worker than the assembler's (which ran the
    # hybrid graph), unless this run loaded them from the checkpoint.
    for stage in {"hyperbolic", "lexical"} - set(again["resumed_stages"]):
        assert placed[stage] == alive - placed["hybrid graph"], stage
    assert set(again["stats"]["worker_peak_rss_bytes_per_node"]) == {
        n for ns in again["stats"]["nodes_per_stage"].values() for n in ns}
