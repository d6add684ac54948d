"""Live updates without a server: `hygraph insert/delete` apply journal jobs in this process
(the embedded Milvus server, bundled model); a killed updater loses and duplicates nothing."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from hygraph.updater.jobs import summaries_pending
from hygraph.updater.index_updater import IndexUpdater
from hygraph.config import load_config
from hygraph.core.retrieval.modes import MODE_NAMES
from hygraph.core.hyperbolic import from_storage, init_from_text, poincare_distance
from hygraph.engine import QueryEngine
from hygraph.pipeline import QueryPipeline, QueryRequest
from hygraph.store.artifacts import LEXICAL_CHUNKS
from hygraph.store import lease
from hygraph.store.journal import FileJournal, request_of
from hygraph.store.object_journal import open_journal
from hygraph.store.objects import open_objects
from hygraph.store.versions import IndexStore
from tests.index_tables import chunk_ids, chunks_of, doc_ids, leaves, summaries
from tests.integration.conftest import DATA, HYGRAPH, cli_env, last_json, run_cli

pytestmark = pytest.mark.integration


def _new_docs(index_dir: Path, n: int, skip: int = 0) -> list[dict]:
    """Corpus documents the index does not hold yet."""
    have = set(doc_ids(index_dir))
    rows = [json.loads(line) for line in (DATA / "hotpotqa_train100.corpus.jsonl").open()]
    return [r for r in rows if r["id"] not in have][skip:skip + n]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_insert_then_delete_touch_only_what_changed(built_index, tmp_path):
    index_dir, _ = built_index
    docs = _new_docs(index_dir, 2)
    before = IndexStore(index_dir).current_version()
    out = last_json(run_cli("insert", "--index-dir", str(index_dir), "--corpus",
                            str(_write(tmp_path / "a.jsonl", docs))))
    # The version holding the insert; a compaction that came due after it publishes one more.
    assert out["version"] == before + 1 + bool(out["compaction"]) and out["documents"] == 2 and out["chunks"] >= 2
    assert {"seconds", "llm_calls", "summaries_rebuilt"} <= out.keys()
    assert out["llm_calls"]["extract"] == out["chunks"]
    assert out["llm_calls"]["summarize"] == out["summaries_rebuilt"] > 0
    old, new = summaries(index_dir, before), summaries(index_dir, out["version"])
    # Ids are never reused for other text: a kept id is an unchanged summary, reused as it was.
    assert all(old[i] == new[i] for i in old.keys() & new.keys())
    assert len(new.keys() - old.keys()) == out["summaries_rebuilt"] < len(old)
    hit = last_json(run_cli("query", "--index-dir", str(index_dir), "--mode", "dense", docs[0]["title"]))
    assert hit["index_version"] == out["version"] and hit["passages"][0]["id"] == docs[0]["id"]
    assert sorted(IndexStore(index_dir).open().table(LEXICAL_CHUNKS).values("id")) == sorted(chunk_ids(index_dir))
    # The rest through one in-process engine: a CLI query pays a process, the model and the vector store's
    # start each time, and the CLI's query path is the same pipeline (checked just above).
    cfg = load_config(None)
    engine = QueryEngine(cfg, index_dir)
    try:
        pipeline = QueryPipeline(engine)
        for doc, mode in itertools.product(docs, ("dense", "bm25")):  # BM25: the postings took the new chunks in
            hit = pipeline.run(QueryRequest.make(cfg.retrieval, doc["title"], mode)).to_json()
            assert hit["index_version"] == out["version"] and hit["passages"][0]["id"] == doc["id"], mode

        gone = docs[0]
        deleted = last_json(run_cli("delete", "--index-dir", str(index_dir), "--ids", f"{gone['id']},no-such-doc"))
        assert deleted["version"] == out["version"] + 1 + bool(deleted["compaction"])
        assert deleted["documents_removed"] == 1
        assert gone["id"] not in doc_ids(index_dir) and docs[1]["id"] in doc_ids(index_dir)
        after = summaries(index_dir, deleted["version"])
        assert all(new[i] == after[i] for i in new.keys() & after.keys())
        assert engine.refresh() and engine.version == deleted["version"]
        sentence = gone["text"][:60]
        for mode in MODE_NAMES:
            res = pipeline.run(QueryRequest.make(cfg.retrieval, gone["title"], mode)).to_json()
            assert gone["id"] not in [p["id"] for p in res["passages"]], mode
            assert sentence not in json.dumps(res["context"]), mode
    finally:
        engine.close()


def test_bad_insert_input_exits_2_and_journals_nothing(built_index, tmp_path):
    index_dir, _ = built_index
    journal = FileJournal(index_dir).path
    size = journal.stat().st_size if journal.is_file() else 0
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "text": "fine"}\n{"id": "y"}\n')
    proc = run_cli("insert", "--index-dir", str(index_dir), "--corpus", str(bad))
    assert proc.returncode == 2 and ":2: missing field 'text'" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert (journal.stat().st_size if journal.is_file() else 0) == size
    proc = run_cli("delete", "--index-dir", str(index_dir), "--ids", " , ")
    assert proc.returncode == 2 and "--ids" in proc.stderr


SHORT_LEASE = {"HYGRAPH__STORE__LEASE_S": "3"}


def _writing(index_dir: Path) -> bool:
    """Whether a live writer holds the index's writer lease."""
    record = lease.newest(open_objects(index_dir))[1]
    return record is not None and record.live()


def test_a_killed_updater_applies_every_document_exactly_once(built_index, tmp_path):
    """Two jobs are journaled (as the HTTP API does), then `hygraph insert` of a third starts
    applying all three and is killed with SIGKILL while it publishes the version. The next
    run replays the journal: every acknowledged document is present, once."""
    index_dir, _ = built_index
    docs = _new_docs(index_dir, 3, skip=5)
    journal = open_journal(index_dir)
    for doc in docs[:2]:
        journal.append(request_of("insert", {"documents": [{**doc, "metadata": {}}]}))
    start = IndexStore(index_dir).current_version()
    third = _write(tmp_path / "third.jsonl", docs[2:])
    # A short writer lease: the next run takes it over once the killed one's term is over.
    proc = subprocess.Popen([*HYGRAPH, "insert", "--index-dir", str(index_dir), "--corpus", str(third)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=cli_env(**SHORT_LEASE))
    deadline = time.monotonic() + 300
    while not _writing(index_dir):
        assert proc.poll() is None and time.monotonic() < deadline, "the insert never started publishing"
        time.sleep(0.005)
    # The writer lease is taken from the start of publishing; vector writes come first.
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    assert IndexStore(index_dir).current_version() == start, "the killed apply must publish nothing"

    out = last_json(run_cli("insert", "--index-dir", str(index_dir), "--corpus", str(third)))
    ids = doc_ids(index_dir)
    assert len(ids) == len(set(ids))
    assert {d["id"] for d in docs} <= set(ids)
    chunks = chunk_ids(index_dir)
    assert len(chunks) == len(set(chunks))
    manifest = IndexStore(index_dir).manifest()
    assert all(open_journal(index_dir).status(job, manifest)[0] == "done" for job in open_journal(index_dir).jobs())
    assert out["version"] > start
    # In this process (a CLI query each cost a process start; the CLI's query path is test_insert_then_delete's).
    cfg = load_config(None)
    engine = QueryEngine(cfg, index_dir)
    try:
        pipeline = QueryPipeline(engine)
        for doc in docs:
            hit = pipeline.run(QueryRequest.make(cfg.retrieval, doc["title"], "dense")).to_json()
            ranked = [p["id"] for p in hit["passages"]]
            assert ranked[0] == doc["id"] and ranked.count(doc["id"]) == 1
    finally:
        engine.close()


def test_a_kill_while_segments_are_written_publishes_all_or_nothing_and_orphans_are_collected(built_index, tmp_path):
    """SIGKILL as soon as the first delta segment of the next version is on disk: CURRENT is then either the
    old version or the complete new one, never a half-written one; the next run applies what is left once,
    and garbage collection removes the segments no version names."""
    index_dir, _ = built_index
    docs = _new_docs(index_dir, 2, skip=40)
    store = IndexStore(index_dir)
    start = store.current_version()
    batch = _write(tmp_path / "two.jsonl", docs)
    proc = subprocess.Popen([*HYGRAPH, "insert", "--index-dir", str(index_dir), "--corpus", str(batch)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=cli_env(**SHORT_LEASE))
    prefix = f"{start + 1:06d}-"
    deadline = time.monotonic() + 300
    while not any(f.name.startswith(prefix) for d in (index_dir / "segments").iterdir() for f in d.iterdir()):
        assert proc.poll() is None and time.monotonic() < deadline, "the insert never wrote a segment"
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    current = store.current_version()
    assert current in (start, start + 1)
    if current == start + 1:
        store.open()  # published whole: every segment its manifest names is there
    cfg = load_config(None)
    cfg = cfg.model_copy(update={"updates": cfg.updates.model_copy(update={"keep_versions": 1, "gc_grace_s": 0.0})})
    updater = IndexUpdater(cfg, index_dir)
    try:
        updater.run_until_idle()
        updater.step()
    finally:
        updater.close()
    ids = doc_ids(index_dir)
    assert len(ids) == len(set(ids)) and {d["id"] for d in docs} <= set(ids)
    store.gc(keep=1, grace_s=0.0)
    named = {(name, s) for name, ref in store.manifest().tables.items() for s in ref.segments}
    on_disk = {(d.name, f.name.split(".")[0]) for d in (index_dir / "segments").iterdir() for f in d.iterdir()}
    assert on_disk == named


def test_hyperbolic_queries_move_live_points_and_recalibration_swaps_the_collection(built_index):
    """HyperRAG §3.3 in process: an observed query's L_inc step reaches a reader holding the points through the
    learner's feed (no new version; store/points.py), and a recalibration publishes a version with its own
    hyperbolic collection; the replaced collection goes with the last version that named it."""
    index_dir, _ = built_index
    cfg = load_config(None)
    cfg = cfg.model_copy(update={"updates": cfg.updates.model_copy(
        update={"recalibrate_every": 3, "keep_versions": 1, "gc_grace_s": 0.0})})
    engine, updater = QueryEngine(cfg, index_dir), IndexUpdater(cfg, index_dir)
    try:
        loaded = engine.loaded
        offset = IndexStore(index_dir).manifest().journal_offset
        question = "Which magazine was started first, Arthur's Magazine or First for Women?"
        vec = engine.embedder.encode([question])[0]
        subgraph = engine.retrieve(question, vec, "hyperbolic", 5, loaded).notes["implicit_subgraph"]
        round1 = [c for p, c in subgraph["edges"] if p == "query"]
        read = engine._points(loaded)
        anchor = init_from_text(vec[None, :], cfg.hyperbolic.dim, cfg.hyperbolic.seed)[0]
        before = read(round1)
        feed = updater.learning.feed
        assert feed.since(*engine.points_position()).reset  # new to the feed: it reads every point, then follows
        assert engine.follow_moves(feed.since(*engine.points_position())) == loaded.catalog.stats()["chunks"]

        updater.learning.observe(subgraph, vec)
        assert len(updater.learning.learn(max_steps=8)) == 1
        np.testing.assert_allclose(read(round1), before)  # held: unmoved until the feed is read
        assert engine.follow_moves(feed.since(*engine.points_position())) >= len(round1)
        after = read(round1)
        assert engine.index.files.current_version() == loaded.view.version  # a step publishes no version
        stored = from_storage(updater.publisher.vectors.fetch(loaded.collections["hyperbolic"], round1))
        np.testing.assert_allclose(after, stored, atol=1e-5)
        assert np.mean(poincare_distance(after, anchor[None, :])) < np.mean(poincare_distance(before, anchor[None, :]))

        old = loaded.collections["hyperbolic"]
        for _ in range(2):
            updater.learning.observe(subgraph, vec)
        updater.learning.learn(max_steps=8)
        assert updater.learning.recalibrate_step() is None and updater.learning.recalibrating
        deadline = time.monotonic() + 300
        while (published := updater.learning.recalibrate_step()) is None:
            assert time.monotonic() < deadline, "the recalibration never finished"
            time.sleep(0.1)
        assert published["version"] == loaded.view.version + 1
        assert published["recalibration"]["subgraphs"] == 3
        manifest = IndexStore(index_dir).manifest()
        assert manifest.journal_offset == offset
        assert manifest.hyperbolic.M == published["recalibration"]["M"]
        assert engine.refresh()
        new = engine.loaded.collections["hyperbolic"]
        assert new != old and {k: v for k, v in engine.loaded.collections.items() if k != "hyperbolic"} == \
            {k: v for k, v in loaded.collections.items() if k != "hyperbolic"}
        # The recalibration's own GC spared the replaced version: `engine` still served it, and its reader lease
        # said so (store/lease.py). Now that it serves the new one, GC removes it (keep_versions=1, no grace).
        served = lease.served_versions(engine.index.files.objects)
        assert updater.publisher.vectors.exists(old) and engine.version in served and loaded.view.version not in served
        # The idle updater's collection once the grace is over (none here) removes it (updater/actor.py `_work`).
        assert updater.publisher.index.collect_garbage_when_due() is not None
        assert not updater.publisher.vectors.exists(old)
        ctx = engine.retrieve(question, vec, "hyperbolic", 5)
        assert ctx.passages and engine.version == published["version"]
    finally:
        updater.close()
        engine.close()


def test_served_inserts_are_retrievable_before_their_summaries_and_deletes_never_wait(built_index):
    """The serving updater's deferred hierarchy step: an insert-only batch is published without new
    summaries (and the document is retrievable at once), later batches accumulate, one version then
    summarizes them, in slices when asked; a delete takes what it removes out of the summaries at once and
    leaves pending inserts pending."""
    index_dir, _ = built_index
    cfg = load_config(None)
    docs = _new_docs(index_dir, 4, skip=20)
    journal, store = open_journal(index_dir), IndexStore(index_dir)
    updater = IndexUpdater(cfg, index_dir)
    engine = QueryEngine(cfg, index_dir)
    try:
        start = store.current_version()
        before = summaries(index_dir, start)
        jobs = []
        for doc in docs[:2]:
            jobs.append(journal.append(request_of("insert", {"documents": [{**doc, "metadata": {}}]})))
            out = updater.step(defer_summaries=True)
            assert out["summaries_rebuilt"] == 0 and set(out["llm_calls"]) == {"extract"}
        manifest = store.manifest()
        assert store.current_version() == start + 2 and summaries(index_dir, start + 2) == before
        pending = manifest.summaries_pending
        new_chunks = chunks_of(index_dir, docs[0]["id"]) | chunks_of(index_dir, docs[1]["id"])
        assert set(pending.chunks) == new_chunks and pending.entities
        assert all(summaries_pending(manifest, job) for job in jobs)
        assert not new_chunks & leaves(index_dir)
        assert engine.refresh()
        hit = QueryPipeline(engine).run(QueryRequest.make(cfg.retrieval, docs[1]["title"], "dense")).to_json()
        assert hit["passages"][0]["id"] == docs[1]["id"]  # served before its summaries exist

        total = len(pending.chunks) + len(pending.entities)
        out = updater.summarize_pending(max_nodes=total - 1)  # a slice: one node stays pending
        assert out["version"] == start + 3 and out["summaries_rebuilt"] == out["llm_calls"]["summarize"] > 0
        assert out["summarized_nodes"] == total - 1 and out["summaries_still_pending"] == 1
        manifest = store.manifest()
        assert manifest.summaries_pending.since == pending.since and all(summaries_pending(manifest, j) for j in jobs)
        out = updater.summarize_pending(max_nodes=total - 1)
        assert out["version"] == start + 4 and out["summarized_nodes"] == 1 and out["summaries_still_pending"] == 0
        manifest = store.manifest()
        assert manifest.summaries_pending is None and not any(summaries_pending(manifest, j) for j in jobs)
        assert new_chunks <= leaves(index_dir)
        assert updater.summarize_pending() is None

        # A delete does not wait: deleting a pending document and the pending one next to it.
        journal.append(request_of("insert", {"documents": [{**docs[2], "metadata": {}}]}))
        journal.append(request_of("insert", {"documents": [{**docs[3], "metadata": {}}]}))
        assert updater.step(defer_summaries=True)["summaries_rebuilt"] == 0
        deleted, kept = chunks_of(index_dir, docs[2]["id"]), chunks_of(index_dir, docs[3]["id"])
        journal.append(request_of("delete", {"ids": [docs[2]["id"]]}))
        out = updater.step(defer_summaries=True)
        assert out["documents_removed"] == 1
        waiting = store.manifest().summaries_pending
        assert set(waiting.chunks) == kept  # the pending insert beside it stays pending
        assert not deleted & leaves(index_dir)
        # A delete of a document the summaries cover takes it out in the delete's own version.
        covered = chunks_of(index_dir, docs[0]["id"])
        assert covered <= leaves(index_dir)
        journal.append(request_of("delete", {"ids": [docs[0]["id"]]}))
        out = updater.step(defer_summaries=True)
        assert out["summaries_rebuilt"] > 0 and not covered & leaves(index_dir)
        assert set(store.manifest().summaries_pending.chunks) == kept
        updater.summarize_pending()
        under = leaves(index_dir)
        assert kept <= under and not deleted & under and store.manifest().summaries_pending is None
    finally:
        engine.close()
        updater.close()
