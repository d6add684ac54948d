"""The resumable build's checkpoint: fingerprint, record, directory rules, stage files, resumed collections."""

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pyarrow as pa
import pytest

from hygraph.backends.vectorstore import connect
from hygraph.config import HygraphConfig, VectorStoreConfig
from hygraph.errors import InputError, StoreError
from hygraph.indexing import checkpoint
from hygraph.indexing.checkpoint import BuildRecord, Checkpoint
from hygraph.indexing.stages import ingest, lexical
from hygraph.indexing.stages.hierarchy import HierarchyResult
from hygraph.indexing.stages.hyperbolic import Trained
from hygraph.indexing.stages.vectors import CollectionWriter
from hygraph.model import Document
from hygraph.store import lease, stage_files
from hygraph.store.artifacts import LEXICAL_CHUNKS
from hygraph.store.index import Index
from hygraph.store.versions import IndexStore

FAISS = VectorStoreConfig(backend="faiss", index_type="FLAT", device="cpu")


def _files(tmp_path, **content: str):
    out = {}
    for name, text in content.items():
        out[name] = tmp_path / name
        out[name].write_text(text)
    return out


def test_fingerprint_follows_every_input_and_nothing_else(tmp_path):
    f = _files(tmp_path, corpus='{"id": "a"}\n', copy='{"id": "a"}\n', other='{"id": "b"}\n', empty="",
               ab="ab", c="c", a="a", bc="bc")
    base = checkpoint.fingerprint(f["corpus"], None, None, "h1", True)
    assert base == checkpoint.fingerprint(f["copy"], None, None, "h1", True)  # bytes, not the path
    assert len(base) == 24
    others = [checkpoint.fingerprint(f["other"], None, None, "h1", True),
              checkpoint.fingerprint(f["corpus"], f["empty"], None, "h1", True),  # an empty file is not "none"
              checkpoint.fingerprint(f["corpus"], None, f["empty"], "h1", True),
              checkpoint.fingerprint(f["corpus"], None, None, "h2", True),
              checkpoint.fingerprint(f["corpus"], None, None, "h1", False)]
    assert len({base, *others}) == 6
    # Inputs are length-prefixed: bytes moved from one file to the next change the fingerprint.
    assert checkpoint.fingerprint(f["ab"], f["c"], None, "h", True) != \
        checkpoint.fingerprint(f["a"], f["bc"], None, "h", True)


def test_record_round_trips_and_a_foreign_record_is_refused():
    rec = BuildRecord("fp", 12, done=["cleora"], seconds={"cleora": 1.5}, llm_calls={"hierarchy": {"summarize": 3}},
                      generation=4, collections={"chunks": "hg_x_g4_chunks"})
    assert BuildRecord.from_json(rec.to_json(), "here") == rec
    with pytest.raises(StoreError, match="format 9"):
        BuildRecord.from_json(json.dumps({"fingerprint": "fp", "pid": 1, "format": 9}).encode(), "here")
    with pytest.raises(StoreError, match="not a readable"):
        BuildRecord.from_json(b"[1, 2", "here")


def test_a_checkpoint_keeps_finished_stages_until_other_inputs_or_restart(tmp_path):
    ck = Checkpoint(tmp_path, "fp1")
    assert ck.record.done == [] and ck.record.pid == os.getpid()
    ck.finish("cleora", 2.0)
    ck.finish("hierarchy", 3.0, {"summarize": 5})
    ck.write_arrays("cleora", {"cleora": np.ones((2, 2), np.float32)})
    again = Checkpoint(tmp_path, "fp1")
    assert again.record.done == ["cleora", "hierarchy"] and again.done("hierarchy") and not again.done("hyperbolic")
    assert again.llm_calls() == {"summarize": 5}
    assert np.array_equal(again.read_arrays("cleora")["cleora"], np.ones((2, 2)))
    other = Checkpoint(tmp_path, "fp2")  # other inputs: the stale checkpoint goes
    assert not (tmp_path / "builds" / "fp1").exists() and other.record.done == []
    other.finish("cleora", 1.0)
    assert Checkpoint(tmp_path, "fp2", restart=True).record.done == []
    Checkpoint(tmp_path, "fp2").remove()
    assert not (tmp_path / "builds" / "fp2").exists()


def test_a_live_build_keeps_its_checkpoint(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for fp in ("busy", "mine"):
            (tmp_path / "builds" / fp).mkdir(parents=True)
        (tmp_path / "builds" / "busy" / "build.json").write_bytes(BuildRecord("busy", sleeper.pid).to_json())
        (tmp_path / "builds" / "mine" / "build.json").write_bytes(BuildRecord("mine", sleeper.pid).to_json())
        with pytest.raises(InputError, match=f"pid {sleeper.pid}.*same inputs"):
            Checkpoint(tmp_path, "mine")
        Checkpoint(tmp_path, "third")
        assert (tmp_path / "builds" / "busy").is_dir()  # another live build's: kept
    finally:
        sleeper.kill()
        sleeper.wait()
    Checkpoint(tmp_path, "third")  # its owner is dead now: removed
    assert sorted(p.name for p in (tmp_path / "builds").iterdir() if p.is_dir()) == ["third"]


def test_hierarchy_hyperbolic_and_named_arrays_load_as_saved(tmp_path):
    ck = Checkpoint(tmp_path, "fp")
    hier = HierarchyResult(partitioner="leiden")
    hier.add("s1", 1, "one", ["c1", "c2"], ["c3"], "k1", np.array([3, 1]))
    hier.add("s2", 2, "two", ["s1"], [], "k2", np.array([], np.int64))
    hier.embedding_parts = [np.arange(4, dtype=np.float32).reshape(1, 4), np.ones((1, 4), np.float32)]
    hier.hyperplanes = {2: np.full((3, 4), 0.5)}
    checkpoint.save_hierarchy(ck, hier)
    got = checkpoint.load_hierarchy(ck)
    assert (got.ids, got.layers, got.texts, got.children, got.extra, got.keys, got.partitioner) == \
        (hier.ids, hier.layers, hier.texts, hier.children, hier.extra, hier.keys, "leiden")
    assert [c.tolist() for c in got.codes] == [[3, 1], []] and got.codes[1].dtype == np.int64
    assert np.array_equal(got.embeddings, hier.embeddings) and list(got.hyperplanes) == [2]
    assert np.array_equal(got.hyperplanes[2], hier.hyperplanes[2])

    trained = Trained([{"b", "a"}, set()], np.array([[0, 1]], np.int64), np.array([[0.1, 0.2], [0.3, 0.4]]), 2.5)
    checkpoint.save_hyperbolic(ck, trained)
    back = checkpoint.load_hyperbolic(ck)
    assert back.terms == [{"a", "b"}, set()] and back.M == 2.5
    assert np.array_equal(back.edges, trained.edges) and np.array_equal(back.points, trained.points)

    postings = lexical.build(["c1", "c2"], ["Dan Smith's film", "the harbor"], ["dan smith"])
    checkpoint.save_lexical(ck, postings)
    assert checkpoint.load_lexical(ck, graph=True) == postings
    assert list(checkpoint.load_lexical(ck, graph=False)) == [LEXICAL_CHUNKS]

    ids = {"nodes": ["c1", "e1"]}
    checkpoint.save_named(ck, "cleora", {"cleora": np.eye(2)}, ids)
    assert np.array_equal(checkpoint.load_named(ck, "cleora", ids)["cleora"], np.eye(2))
    with pytest.raises(StoreError, match="nodes ids differ"):
        checkpoint.load_named(ck, "cleora", {"nodes": ["e1", "c1"]})
    assert ck.bytes_written > 0


def _shard(rows: list[tuple[str, str, int, int]], dim: int = 2) -> pa.Table:
    """(chunk id, doc id, ordinal, chunks of the doc) rows; embedding = [ordinal, ordinal]."""
    vecs = np.array([[r[2]] * dim for r in rows], np.float32)
    return pa.table({"id": [r[0] for r in rows], "doc_id": [r[1] for r in rows], "ordinal": [r[2] for r in rows],
                     "text": [f"text {r[0]}" for r in rows], "n_tokens": [3] * len(rows),
                     "title": [r[1].upper() for r in rows], "doc_chunks": [r[3] for r in rows],
                     "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), dim)})


def test_ingest_shards_keep_only_whole_documents_in_corpus_order(tmp_path):
    docs = [Document("b", "B", "x"), Document("a", "A", "y"), Document("c", "C", "z")]
    assert ingest.complete_documents(tmp_path).to_pylist() == []
    assert ingest.read_shards(tmp_path, docs, extract=False).chunks == []
    # A kill left doc c cut off (1 of its 2 chunks); doc a was streamed twice.
    stage_files.write_table(tmp_path / "shard-000001.arrow", _shard([("a:1", "a", 1, 2), ("c:0", "c", 0, 2)]))
    stage_files.write_table(tmp_path / "shard-000002.arrow",
                            _shard([("a:0", "a", 0, 2), ("a:1", "a", 1, 2), ("b:0", "b", 0, 1)]))
    assert sorted(ingest.complete_documents(tmp_path).to_pylist()) == ["a", "b"]
    ing = ingest.read_shards(tmp_path, docs, extract=False)
    assert [c.id for c in ing.chunks] == ["b:0", "a:0", "a:1"]
    assert ing.embeddings.tolist() == [[0, 0], [0, 0], [1, 1]] and ing.chunks[1].title == "A"
    # The Ray task stages' reader: the same chunks in the same order, the documents' order read from the corpus.
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n" for d in docs))
    ids, texts, vecs = ingest.read_texts(tmp_path, str(corpus), vectors=True)
    assert ids == [c.id for c in ing.chunks] and texts == [c.text for c in ing.chunks]
    assert vecs.tolist() == ing.embeddings.tolist()
    assert ingest.read_texts(tmp_path, str(corpus), vectors=False)[:2] == (ids, texts)


def test_a_resumed_writer_keeps_the_collections_written_and_rewrites_the_rest(tmp_path):
    store = IndexStore(tmp_path, create=True)
    vs = connect(FAISS, tmp_path)
    ck = Checkpoint(tmp_path, "fp")
    with store.begin(prefer=ck.record.generation) as w:
        gen = w.version
        writer = CollectionWriter(vs, store, gen, kept=ck.kept_collections(gen), on_written=ck.collection_written)
        writer.add("chunks", ["c1", "c2"], np.eye(2, 3, dtype=np.float32))
        writer.finish()
    chunks = store.collection(gen, "chunks")
    assert ck.record.collections == {"chunks": chunks} and ck.record.generation == gen
    assert writer.vectors_written == 2 and writer.kept == []
    # The rerun reserves the same version number and keeps `chunks`; `summaries` was cut off and is written.
    ck = Checkpoint(tmp_path, "fp")
    with store.begin(prefer=ck.record.generation) as w:
        assert w.version == gen
        writer = CollectionWriter(vs, store, gen, kept=ck.kept_collections(gen), on_written=ck.collection_written)
        writer.add("chunks", ["c1", "c2"], np.eye(2, 3, dtype=np.float32))
        writer.add("summaries", ["s1"], np.ones((1, 3), np.float32), layers=[1])
        writer.finish()
    assert writer.kept == ["chunks"] and writer.vectors_written == 1
    assert set(ck.record.collections) == {"chunks", "summaries"}
    # A kept collection that gc dropped meanwhile (its build was dead) is written again.
    vs.drop(chunks)
    writer = CollectionWriter(vs, store, gen, kept=ck.kept_collections(gen), on_written=ck.collection_written)
    writer.add("chunks", ["c1", "c2"], np.eye(2, 3, dtype=np.float32))
    writer.finish()
    assert writer.kept == [] and vs.exists(chunks)
    # Another generation: nothing is kept.
    assert ck.kept_collections(gen + 1) == {} and ck.record.collections == {}


def test_a_sealed_collection_is_recorded_before_the_writer_finishes(tmp_path):
    # The collections are written beside the stages after them and `finish` comes after the last stage: a build
    # killed in between must find every collection sealed by then in its record, not write them again.
    store = IndexStore(tmp_path, create=True)
    vs = connect(FAISS, tmp_path)
    ck = Checkpoint(tmp_path, "fp")
    recorded = threading.Event()

    def on_written(kind: str, name: str) -> None:
        ck.collection_written(kind, name)
        recorded.set()

    with store.begin(prefer=ck.record.generation) as w:
        writer = CollectionWriter(vs, store, w.version, kept=ck.kept_collections(w.version), on_written=on_written)
        writer.add("chunks", ["c1", "c2"], np.eye(2, 3, dtype=np.float32))
        assert recorded.wait(10)
        # What the rerun of a build killed here reads: the record on disk.
        assert Checkpoint(tmp_path, "fp").record.collections == {"chunks": store.collection(w.version, "chunks")}
        writer.finish()


def test_a_collection_is_written_as_soon_as_it_is_added_and_a_failed_one_stops_the_build_at_the_next(tmp_path):
    store = IndexStore(tmp_path, create=True)
    index = Index(HygraphConfig(vector_store=FAISS), store)
    vs = index.vectors
    filling, release, failing = threading.Event(), threading.Event(), threading.Event()
    real_fill = vs.fill

    def fill(name, *args, **kwargs):
        if name.endswith("_chunks"):
            filling.set()
            assert release.wait(10)
        if name.endswith("_entities"):
            failing.set()
            raise StoreError("the server went away")
        return real_fill(name, *args, **kwargs)

    vs.fill = fill
    with pytest.raises(StoreError, match="went away"):
        with index.publishing() as w, CollectionWriter(vs, store, w.version) as writer:
            writer.add("chunks", ["c1", "c2"], np.eye(2, 3, dtype=np.float32))
            assert filling.wait(10)  # written while the build goes on: nobody has called finish
            release.set()
            writer.add("entities", ["e1"], np.ones((1, 3), np.float32))
            assert failing.wait(10)
            threading.Event().wait(0.5)  # the failed write's thread hands its error over
            writer.add("summaries", ["s1"], np.ones((1, 3), np.float32), layers=[1])
    # The version was not published: its collections went with it, and so did their record.
    assert not any(vs.exists(store.collection(w.version, kind)) for kind in ("chunks", "entities"))
    assert store.recorded_collections(w.version) == []
    index.close()


def test_begin_prefers_a_dead_writers_number_only_above_every_published_version(tmp_path):
    store = IndexStore(tmp_path, create=True)
    # A dead writer held the lease for version 3 (its term is over) and left a segment.
    store.objects.put_if_absent(lease.key(1), json.dumps({"holder": "dead", "expires": 1.0, "version": 3}).encode())
    store.objects.put("segments/chunks/000003-0.arrow", b"left by the dead writer")
    with store.begin(prefer=3) as w:
        assert w.version == 3
    assert store.objects.list("segments/") == []
    store.objects.put("versions/000005.json", b"{}")  # published 5
    with store.begin(prefer=3) as w:
        assert w.version == 6


def test_a_resumed_ingest_skips_exactly_the_finished_documents(tmp_path):
    from hygraph.model import scan_corpus

    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(f'{{"id": "{i}", "text": "Passage {i} about Lake Ohrid."}}\n'
                              for i in ("a", "b", "c", "d")))
    span = scan_corpus(corpus).spans[0]
    batch = {"start": np.array([span.start]), "end": np.array([span.end]), "first_line": np.array([span.first_line])}
    cfg = HygraphConfig()
    args = dict(corpus=str(corpus), model=cfg.embedder.model, size=cfg.chunking.size_tokens,
                overlap=cfg.chunking.overlap_tokens)
    assert sorted(ingest.chunk_batch(batch, skip=np.sort(ingest.id_keys([])), **args)["doc_id"]) == ["a", "b", "c", "d"]
    done = np.sort(ingest.id_keys(["d", "b", "zz-not-in-corpus"]))
    assert sorted(ingest.chunk_batch(batch, skip=done, **args)["doc_id"]) == ["a", "c"]


def test_the_writer_lets_a_kinds_vectors_go_once_filled_before_the_seal(tmp_path):
    """A build drops its own reference to the relations' vectors once handed over: the writer holds them only
    until the fill, not through the seal (the server's index build, the longest part of a write)."""
    import gc
    import weakref

    store = IndexStore(tmp_path, create=True)
    vs = connect(FAISS, tmp_path)
    sealing, release = threading.Event(), threading.Event()
    seal = vs.seal

    def slow_seal(name: str) -> None:
        sealing.set()
        release.wait(30)
        seal(name)

    vs.seal = slow_seal  # type: ignore[method-assign]
    with store.begin() as w:
        writer = CollectionWriter(vs, store, w.version)
        vecs = np.ones((4, 3), np.float32)
        gone = weakref.ref(vecs)
        writer.add("relations", ["r1", "r2", "r3", "r4"], vecs)
        del vecs
        assert sealing.wait(30)
        gc.collect()
        freed = gone() is None
        release.set()
        writer.finish()
    assert freed and writer.vectors_written == 4


def test_embed_parts_are_the_rows_of_one_embed_in_arrays_of_their_own():
    """The knowledge texts are batched as one call would batch them (the same vectors, whatever the model), and
    each kind's rows land in an array of its own, not a view of a shared block."""
    class Ref:
        def __init__(self, value):
            self.value = value

    class FakeRay:
        @staticmethod
        def wait(refs, num_returns):
            return refs[:num_returns], refs[num_returns:]

        @staticmethod
        def get(ref):
            return ref.value

    batches = []

    class Actor:
        class encode:
            @staticmethod
            def remote(texts):
                batches.append(list(texts))
                # A vector that depends on the batch too: any other batching would show.
                return Ref(np.array([[len(t), ord(t[0]), len(batches)] for t in texts], np.float32))

    pool = ingest.EmbedPool.__new__(ingest.EmbedPool)
    pool._ray, pool.actors = FakeRay, [Actor(), Actor()]
    texts = ["alpha", "b", "gamma ray", "de", "epsilon", "z", "eta carinae", "th"]
    whole = pool.embed(texts, _quiet(), "x", 3)
    one_call = list(batches)
    batches.clear()
    parts = pool.embed_parts(texts, [3, 0, 5], _quiet(), "x", 3)
    assert batches == one_call
    assert [p.shape for p in parts] == [(3, 3), (0, 3), (5, 3)]
    assert all(p.base is None for p in parts)
    np.testing.assert_array_equal(np.vstack(parts), whole)
    assert [p.shape for p in pool.embed_parts([], [0, 0], _quiet(), "x", 3)] == [(0, 0), (0, 0)]


def _quiet():
    from hygraph.indexing.progress import Stages

    stages = Stages()
    stages.emit = lambda _: None
    return stages


class _Rows:
    """A vector store that keeps what it was sent across writers and, like Milvus, stores a row twice when it is
    inserted twice; `tells`: whether `reopen` can say which ids a collection holds."""

    def __init__(self, tells: bool = True) -> None:
        self.rows: dict[str, list[str]] = {}
        self.sealed: set[str] = set()
        self.released: set[str] = set()
        self.tells, self.cut_after = tells, None  # cut_after: rows a fill sends before the writer is cut off

    def create(self, name: str, dim: int, metric: str) -> None:
        self.rows[name] = []
        self.sealed.discard(name)

    def fill(self, name: str, ids, vectors, version: int, layers=None) -> None:
        self.rows[name].extend(ids[:self.cut_after])
        if self.cut_after is not None:
            raise StoreError("killed")

    def seal(self, name: str) -> None:
        self.sealed.add(name)

    def release(self, name: str) -> None:
        assert name in self.sealed  # a build lets a collection go once it is sealed
        self.released.add(name)

    def reopen(self, name: str, dim: int, metric: str) -> set[str] | None:
        return set(self.rows[name]) if self.tells and name in self.rows else None

    def exists(self, name: str) -> bool:
        return name in self.rows


def _cut_off_write(tmp_path, vs: _Rows, ids: list[str]) -> tuple[IndexStore, int, str]:
    """A build whose chunks collection is cut off after 3 rows: what its checkpoint and the store hold then."""
    store = IndexStore(tmp_path, create=True)
    ck = Checkpoint(tmp_path, "fp")
    vs.cut_after = 3
    with store.begin(prefer=ck.record.generation) as w:
        gen = w.version
        writer = CollectionWriter(vs, store, gen, kept=ck.kept_collections(gen), on_written=ck.collection_written,
                                  partial=ck.partial_collections(gen), on_created=ck.collection_created)
        writer.add("chunks", ids, np.ones((len(ids), 2), np.float32))
        with pytest.raises(StoreError, match="killed"):
            writer.finish()
    name = store.collection(gen, "chunks")
    assert ck.record.created == {"chunks": name} and ck.record.collections == {}
    vs.cut_after = None
    return store, gen, name


def _rerun(tmp_path, store: IndexStore, vs: _Rows, gen: int, ids: list[str]) -> tuple[Checkpoint, CollectionWriter]:
    ck = Checkpoint(tmp_path, "fp")
    with store.begin(prefer=ck.record.generation) as w:
        assert w.version == gen
        writer = CollectionWriter(vs, store, gen, kept=ck.kept_collections(gen), on_written=ck.collection_written,
                                  partial=ck.partial_collections(gen), on_created=ck.collection_created)
        writer.add("chunks", ids, np.ones((len(ids), 2), np.float32))
        writer.finish()
    return ck, writer


def test_a_collection_cut_off_mid_write_is_continued_with_the_rows_it_lacks(tmp_path):
    vs, ids = _Rows(), [f"c{i}" for i in range(10)]
    store, gen, name = _cut_off_write(tmp_path, vs, ids)
    ck, writer = _rerun(tmp_path, store, vs, gen, ids)
    assert writer.continued == {"chunks": 3} and writer.vectors_written == 7 and writer.kept == []
    assert sorted(vs.rows[name]) == ids and name in vs.sealed and name in vs.released  # every row once
    assert ck.record.collections == {"chunks": name} and ck.partial_collections(gen) == {}
    assert ck.kept_collections(gen + 1) == {} and ck.record.created == {}  # another generation: nothing continued


@pytest.mark.parametrize("why", ["cannot tell", "holds another row"])
def test_a_cut_off_collection_the_store_cannot_vouch_for_is_written_again(tmp_path, why):
    vs, ids = _Rows(tells=why != "cannot tell"), [f"c{i}" for i in range(10)]
    store, gen, name = _cut_off_write(tmp_path, vs, ids)
    if why == "holds another row":
        vs.rows[name].append("not-this-build's")
    _, writer = _rerun(tmp_path, store, vs, gen, ids)
    assert writer.continued == {} and writer.vectors_written == 10
    assert sorted(vs.rows[name]) == ids and name in vs.sealed


_KILLED_SNAPSHOT = """
import os, sys
from hygraph.indexing.checkpoint import Checkpoint, SnapshotTables
from hygraph.store.artifacts import DOCUMENTS, RELATIONS, DocumentRow
from hygraph.store.versions import IndexStore
store, ck = IndexStore(sys.argv[1]), Checkpoint(sys.argv[1], "fp")
with store.begin(prefer=ck.record.generation) as w:
    tables = SnapshotTables(w, ck)
    tables.replace(DOCUMENTS, [DocumentRow("d1", "T1", "one", ("c1",)), DocumentRow("d2", "T2", "two", ())], {})
    tables.replace(RELATIONS, [], {}, stats={"edges": {"e": 3}})
    w.replace(DOCUMENTS, [], {})  # stored, then killed before its record: not the table
    os._exit(0)  # killed: no cleanup, the version never published
"""


def test_a_resumed_snapshot_keeps_the_tables_the_killed_writer_stored_whole(tmp_path):
    from hygraph.indexing.checkpoint import SnapshotTables
    from hygraph.store.artifacts import CHUNKS, DOCUMENTS, RELATIONS

    store = IndexStore(tmp_path, create=True)
    subprocess.run([sys.executable, "-c", _KILLED_SNAPSHOT, str(tmp_path)], check=True)
    ck = Checkpoint(tmp_path, "fp")
    assert set(ck.record.tables) == {"documents", "relations"} and ck.record.generation == 1
    assert len(store.objects.list("segments/documents/")) == 4  # two segments: .arrow and .keys.npy each
    # The rerun takes the dead writer's number at once (its pid is gone) and keeps the recorded segments only.
    with store.begin(prefer=ck.record.generation, keep=ck.table_segments()) as w:
        assert w.version == 1
        assert sorted(store.objects.list("segments/")) == ["segments/documents/000001-0.arrow",
                                                          "segments/documents/000001-0.keys.npy",
                                                          "segments/relations/000001-1.arrow",
                                                          "segments/relations/000001-1.keys.npy"]
        tables = SnapshotTables(w, ck)
        assert tables.kept == ["documents", "relations"] and tables.rows(DOCUMENTS) == 2
        assert tables.has(RELATIONS) and tables.stats(RELATIONS) == {"edges": {"e": 3}} and not tables.has(CHUNKS)
        tables.replace(CHUNKS, [], {"text": 3})
        assert w.tables["chunks"].segments == ["000001-2"]  # numbered past the kept segments
        from hygraph.store.manifest import Manifest
        w.commit(Manifest(embedder_model="m", dims={}, graph=False, counts={}))
    version = store.open()
    assert version.table(DOCUMENTS).get("d1").text == "one" and len(version.table(DOCUMENTS)) == 2


def test_a_recorded_table_no_longer_stored_whole_is_written_again(tmp_path):
    from hygraph.indexing.checkpoint import SnapshotTables
    from hygraph.store.artifacts import DOCUMENTS, RELATIONS

    store = IndexStore(tmp_path, create=True)
    subprocess.run([sys.executable, "-c", _KILLED_SNAPSHOT, str(tmp_path)], check=True)
    ck = Checkpoint(tmp_path, "fp")
    store.objects.put("segments/documents/000001-0.keys.npy", b"cut short")  # not the size recorded
    store.objects.delete("segments/relations/000001-1.arrow")  # gone (a gc of the dead build's segments)
    with store.begin(prefer=ck.record.generation, keep=ck.table_segments()) as w:
        tables = SnapshotTables(w, ck)
        assert tables.kept == [] and not tables.has(DOCUMENTS) and not tables.has(RELATIONS)
    # Another version number: nothing recorded for it is kept.
    assert ck.kept_tables(2) == {} and ck.table_segments() == []
