"""`Index.publishing`, the one way a version is published: what happens to the version's vector collections and
the rows it retired, around its commit (FAISS store)."""

import time

import numpy as np
import pytest

from hygraph.config import HygraphConfig, VectorStoreConfig
from hygraph.errors import StoreError
from hygraph.store import lease
from hygraph.store.artifacts import DOCUMENTS, DocumentRow
from hygraph.store.index import Index
from hygraph.store.manifest import Manifest
from hygraph.store.versions import IndexStore

FAISS = VectorStoreConfig(backend="faiss", index_type="FLAT", device="cpu")
DIMS = {"text": 3}


def _index(tmp_path) -> Index:
    return Index(HygraphConfig(vector_store=FAISS), IndexStore(tmp_path, create=True))


def _publish(index: Index, collection: bool = True, retired: dict[str, list[str]] | None = None,
             expect_current: int | None = None, warn=None) -> int:
    """A version with one document and, with `collection`, a chunks collection of its own holding rows a, b
    (else the current version's collections)."""
    store = index.files
    with index.publishing(**({"warn": warn} if warn else {})) as w:
        collections = {} if collection or store.current_version() is None else dict(store.manifest().collections)
        if collection:
            name = collections["chunks"] = store.collection(w.version, "chunks")
            store.record_collections(w.version, [name])
            index.vectors.create(name, 3, "IP")
            index.vectors.fill(name, ["a", "b"], np.eye(2, 3, dtype=np.float32), w.version)
            index.vectors.seal(name)
        w.replace(DOCUMENTS, [DocumentRow("d", "title", "text", ())], DIMS)
        w.commit(Manifest(dims=DIMS, collections=collections, retired=retired or {}), expect_current=expect_current)
    return w.version


def test_a_refused_conditional_commit_leaves_no_collection_of_its_own(tmp_path):
    index = _index(tmp_path)
    v1 = _publish(index)  # an update reads version 1 ...
    v2 = _publish(index)  # ... then a full build lands before it takes the lease
    with pytest.raises(StoreError, match="appeared while"):
        _publish(index, expect_current=v1)
    refused = v2 + 1
    assert not index.vectors.exists(index.files.collection(refused, "chunks"))
    assert index.files.recorded_collections(refused) == []
    assert index.files.current_version() == v2 and index.files.versions() == [v1, v2]
    assert index.vectors.exists(index.files.collection(v2, "chunks"))  # the published version's stay
    index.close()


def test_a_commit_whose_manifest_landed_keeps_its_collections(tmp_path, monkeypatch):
    """A commit that fails after its manifest landed published the version (the next writer moves CURRENT):
    its collections are not dropped."""
    index = _index(tmp_path)
    objects = index.files.objects
    put = objects.put

    def no_current(key, data, **kwargs):
        if key == "CURRENT":
            raise StoreError("the store went away")
        put(key, data, **kwargs)

    monkeypatch.setattr(objects, "put", no_current)
    with pytest.raises(StoreError, match="went away"):
        _publish(index)
    monkeypatch.setattr(objects, "put", put)
    assert index.files.is_published(1) and index.vectors.exists(index.files.collection(1, "chunks"))
    index.close()


def test_after_the_commit_rows_are_retired_records_forgotten_and_garbage_collected(tmp_path, monkeypatch):
    index = _index(tmp_path)
    index.cfg.updates.keep_versions, index.cfg.updates.gc_grace_s = 1, 0.0
    v1 = _publish(index)
    seen = []
    delete = index.vectors.delete

    def retire(name, ids):
        # CURRENT moved already, and the writer lease is released (other writers do not wait on this).
        holder = lease.newest(index.files.objects)[1]
        seen.append((index.files.current_version(), holder is not None and holder.live(), list(ids)))
        delete(name, ids)

    monkeypatch.setattr(index.vectors, "delete", retire)
    v2 = _publish(index, collection=False, retired={"chunks": ["b"], "entities": ["x"]})
    assert seen == [(v2, False, ["b"])]  # only kinds the version names
    assert index.files.recorded_collections(v1) == []  # its manifest names them
    assert index.files.versions() == [v2]  # garbage collected, but not the collection v2 still names
    assert index.vectors.exists(index.files.collection(v1, "chunks"))
    index.close()


def test_a_failure_after_the_commit_is_reported_never_raised(tmp_path, monkeypatch):
    index = _index(tmp_path)
    _publish(index)

    def down(*args, **kwargs):
        raise StoreError("the vector store went away")

    monkeypatch.setattr(index.vectors, "delete", down)
    monkeypatch.setattr(index, "collect_garbage", down)
    warnings: list[str] = []
    v2 = _publish(index, collection=False, retired={"chunks": ["a"]}, warn=warnings.append)
    assert index.files.current_version() == v2
    assert [w.split(" failed")[0] for w in warnings] == ["retiring old vector rows",
                                                         "garbage collection of old versions"]
    assert all("went away" in w for w in warnings)
    index.close()


def test_the_versions_a_publish_spared_are_collected_once_their_grace_is_over(tmp_path):
    cfg = HygraphConfig(vector_store=FAISS)
    cfg.updates.keep_versions, cfg.updates.gc_grace_s = 2, 0.5
    index = Index(cfg, IndexStore(tmp_path, create=True))
    v1, v2, v3 = _publish(index), _publish(index), _publish(index)  # a burst: each publish's GC spares the rest
    assert index.files.versions() == [v1, v2, v3]
    assert index.collect_garbage_when_due() is None  # the grace is not over
    time.sleep(0.6)
    collected = index.collect_garbage_when_due()
    assert collected is not None and collected.versions == [v1]  # the newest two kept
    assert index.files.versions() == [v2, v3] and not index.vectors.exists(index.files.collection(v1, "chunks"))
    assert index.collect_garbage_when_due() is None  # once per publish
    index.close()
