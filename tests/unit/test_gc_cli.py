"""`hygraph gc`: the vector collections of a build that died before committing are dropped (FAISS store)."""

import json
import multiprocessing as mp
import os
import time

import numpy as np

from hygraph.backends.vectorstore import connect
from hygraph.cli import main
from hygraph.config import VectorStoreConfig
from hygraph.indexing.stages.vectors import CollectionWriter
from hygraph.store.versions import IndexStore

FAISS = VectorStoreConfig(backend="faiss", index_type="FLAT", device="cpu")


def _build_and_die(index_dir: str) -> None:
    """A build that wrote its collections and was killed before its snapshot: no cleanup runs."""
    store = IndexStore(index_dir, create=True, lease_s=0.5)  # its writer lease runs out half a second after
    vs = connect(FAISS, index_dir)
    with store.begin() as w:
        writer = CollectionWriter(vs, store, w.version)
        writer.add("chunks", ["c:0", "c:1'] or 1=1"], np.eye(2, 3, dtype=np.float32))
        writer.add("summaries", ["s1"], np.ones((1, 3), np.float32), layers=[1])
        writer.add("entities", [], np.zeros((0, 3), np.float32))  # no rows: no collection
        writer.finish()
        os._exit(0)


def test_gc_drops_the_collections_of_a_build_that_never_committed(tmp_path, capsys):
    config = tmp_path / "faiss.yaml"
    config.write_text("vector_store: {backend: faiss, index_type: FLAT, device: cpu}\n")
    index_dir = tmp_path / "index"
    proc = mp.get_context("spawn").Process(target=_build_and_die, args=(str(index_dir),))
    proc.start()
    proc.join()
    time.sleep(0.6)
    store = IndexStore(index_dir)
    names = [store.collection(1, "chunks"), store.collection(1, "summaries")]
    vs = connect(FAISS, index_dir)
    assert all(vs.exists(n) for n in names)

    assert main(["gc", "--index-dir", str(index_dir), "--config", str(config)]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out == {"versions_removed": [], "segment_files_removed": 0, "bytes_removed": 0,
                   "collections_dropped": sorted(names), "unfinished_builds": [1]}
    vs = connect(FAISS, index_dir)
    assert not any(vs.exists(n) for n in names)
    assert not list((index_dir / "collections").iterdir())
    assert main(["gc", "--index-dir", str(index_dir), "--config", str(config)]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["collections_dropped"] == []


def test_gc_of_a_missing_or_foreign_directory_exits_2(tmp_path, capsys):
    assert main(["gc", "--index-dir", str(tmp_path / "nope")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert main(["gc", "--index-dir", str(tmp_path)]) == 2
    assert "not an index directory" in capsys.readouterr().err
