"""A `hygraph index` killed mid-build resumes: the rerun keeps the finished stages and the written collections,
its version equals an uninterrupted build's, and no collection of the killed runs is left in Milvus."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from hygraph.backends.vectorstore import connect
from hygraph.config import load_config
from hygraph.data import DEMO_DIR
from hygraph.engine import QueryEngine
from hygraph.pipeline import QueryPipeline, QueryRequest
from hygraph.store import lease
from hygraph.store.versions import IndexStore
from tests.integration.conftest import HYGRAPH, build_record, cli_env, copy_index, last_json, run_cli

pytestmark = pytest.mark.integration

MODES = "dense,hybrid,hyperbolic"
CHECKPOINTED = {"chunk+embed+extract", "cleora", "embed entities, relations, hyperedges", "hierarchy", "hyperbolic",
                "lexical"}

@pytest.fixture(scope="module")
def questions(tmp_path_factory) -> Path:
    """Five demo questions (the rankings compared need no gold passage)."""
    out = tmp_path_factory.mktemp("resume_data") / "questions.jsonl"
    out.write_text("\n".join((DEMO_DIR / "questions.jsonl").read_text().splitlines()[:5]) + "\n")
    return out

def _ranked(index_dir: Path, questions: Path) -> dict:
    """The top-5 passages per mode and question, read in this process (an eval per build cost a minute)."""
    cfg = load_config(None)
    engine = QueryEngine(cfg, index_dir)
    try:
        pipeline = QueryPipeline(engine)
        asked = [json.loads(line)["question"] for line in questions.read_text().splitlines()]
        return {mode: [[p.id for p in pipeline.retrieve(QueryRequest.make(cfg.retrieval, q, mode, 5))
                        .context.passages] for q in asked] for mode in MODES.split(",")}
    finally:
        engine.close()


def _killed_when(args: list[str], index_dir: Path, ready, log: Path) -> dict:
    """Run `hygraph index` and SIGKILL it once its checkpoint record satisfies `ready`; the record then."""
    with log.open("w") as err:
        proc = subprocess.Popen([*HYGRAPH, *args], stdout=subprocess.DEVNULL, stderr=err,
                                env=cli_env(HYGRAPH__STORE__LEASE_S="3"),  # its writer lease: taken over 3 s after
                                cwd=Path(__file__).resolve().parents[2])
    try:
        deadline = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < deadline and not ready(build_record(index_dir)):
            time.sleep(0.05)
        assert proc.poll() is None, f"the build ended before it could be killed:\n{log.read_text()[-3000:]}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(60)
    return build_record(index_dir)

def _partial(record: dict) -> set[str]:
    """The kinds whose collections a build created and did not seal."""
    return {k for k, n in record.get("created", {}).items() if record.get("collections", {}).get(k) != n}


def _once_the_writer_is_gone(index_dir: Path) -> dict:
    """The checkpoint record once the process that held the index's writer lease has ended."""
    _, holder = lease.newest(IndexStore(index_dir).objects)
    pid = int(holder.holder.split(":")[1]) if holder is not None else None
    deadline = time.monotonic() + 120
    while pid is not None and psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, f"the killed build's writer (pid {pid}) still runs"
        time.sleep(0.1)
    return build_record(index_dir)


def _ids_per_collection(index_dir: Path, collections: dict[str, str]) -> dict[str, list[str]]:
    """Every row's id, per kind, as stored (a strongly consistent read)."""
    vs = connect(load_config(None).vector_store, index_dir)
    out: dict[str, list[str]] = {}
    try:
        for kind, name in collections.items():
            vs.open(name)
            rows = vs.client.query_iterator(name, batch_size=1000, output_fields=["item_id"],
                                            consistency_level="Strong")
            out[kind] = []
            while batch := rows.next():
                out[kind].extend(r["item_id"] for r in batch)
            rows.close()
    finally:
        vs.close()
    return out


@pytest.mark.timeout(1500)  # a build (the shared reference), a killed one and its resumed rerun
def test_a_killed_build_resumes_to_the_same_version(demo_build, questions, tmp_path):
    # The uninterrupted build (the session's, shared with test_multinode_build), and a copy of it to rebuild.
    corpus, reference, first = demo_build
    assert first["resumed_stages"] == []
    assert [p for p in (reference / "builds").iterdir() if p.is_dir()] == []  # the commit removed it
    before = _ranked(reference, questions)
    index_dir = tmp_path / "index"
    copy_index(reference, index_dir)
    args = ["index", "--corpus", str(corpus), "--index-dir", str(index_dir)]

    # Killed while its collections are written, after every stage was checkpointed (the stages' own resume,
    # stage by stage, is in tests/unit/test_build_checkpoint.py; a second kill here cost over a minute): once
    # one collection is sealed and another created but not yet sealed. A collection is recorded as soon as it
    # is sealed, which may come before the last stage: both are waited for.
    rec = _killed_when(args, index_dir, lambda r: CHECKPOINTED <= set(r.get("done", [])) and bool(r.get("collections"))
                       and bool(_partial(r)), tmp_path / "kill.log")
    assert rec["generation"] == 2 and "hyperbolic" in rec["done"]
    assert list((index_dir / "builds").glob("*/ingest/shard-*.arrow"))
    # The killed build's writer (its assembling actor) may seal more in the moment before Ray ends it: what the
    # rerun finds is the record once that process is gone.
    rec = _once_the_writer_is_gone(index_dir)
    partial = _partial(rec)

    rerun = run_cli(*args)
    again = last_json(rerun)
    stats = again["stats"]
    assert again["resumed_stages"] == stats["resumed_stages"] == [
        "chunk+embed+extract", "cleora", "embed entities, relations, hyperedges", "hierarchy", "hyperbolic", "lexical"]
    # Every collection sealed is kept; every one created and cut off is continued with the rows it lacked.
    assert set(rec["collections"]) == set(stats["collections_kept"])
    assert partial and set(stats["collections_continued"]) == partial, (partial, stats["collections_continued"])
    assert "collections continued from the checkpoint" in rerun.stderr
    # The snapshot's tables stored whole before the kill are kept, not written again.
    assert set(stats["tables_kept"]) == set(rec.get("tables", {}))
    assert again["version"] == 2
    for key in ("documents", "chunks", "entities", "relations", "hyperedges", "summaries", "layers"):
        assert again[key] == first[key], key
    assert again["llm_calls"]["summarize"] == first["llm_calls"]["summarize"]
    # Accounting: the uninterrupted build's Ray workers reported their peak RSS and node per stage; the
    # resumed one ran no ingest work, loaded every later stage in its assembling actor (the one worker it
    # reports) and wrote only the collections not kept.
    ran = first["stats"]
    assert ran["worker_peak_rss_bytes"] > 0
    assert set(ran["nodes_per_stage"]) == set(ran["worker_peak_rss_bytes_per_stage"])
    assert {"chunk+embed+extract", "hierarchy"} <= set(ran["nodes_per_stage"])
    assert ran["vectors_per_s"] > 0 and ran["checkpoint_bytes_written"] > 0 and ran["resumed_stages"] == []
    assert stats["driver_peak_rss_bytes"] > 0 and "chunk+embed+extract" not in stats["nodes_per_stage"]
    assert len({n for nodes in stats["nodes_per_stage"].values() for n in nodes}) == 1
    assert set(stats["seconds_of_resumed_stages"]) == set(stats["resumed_stages"])
    assert [p for p in (index_dir / "builds").iterdir() if p.is_dir()] == []
    assert _ranked(index_dir, questions) == before

    # Every collection in Milvus is one a version names: none of the killed runs' is left.
    store = IndexStore(index_dir)
    named = {n for v in store.versions() for n in store.manifest(v).collections.values()}
    vs = connect(load_config(None).vector_store, index_dir)
    try:
        present = {n for n in vs.client.list_collections() if n.startswith(f"hg_{store.uid}_")}
    finally:
        vs.close()
    assert present == named and set(store.manifest(2).collections.values()) <= named
    assert store.objects.list("collections/") == []
    # Each collection of the resumed version holds each of its rows once (the continued ones too: Milvus keeps
    # a row inserted twice twice), as many as the uninterrupted build's.
    held = _ids_per_collection(index_dir, store.manifest(2).collections)
    assert all(len(ids) == len(set(ids)) for ids in held.values()), {k: len(v) for k, v in held.items()}
    for kind in ("chunks", "entities", "relations", "hyperedges"):
        assert len(held[kind]) == first[kind], kind
    assert len(held["hyperbolic"]) == first["chunks"] and len(held["summaries"]) == first["summaries"]
