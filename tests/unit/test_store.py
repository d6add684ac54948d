"""The segmented version store: versions share segments, deltas shadow older rows, GC and compaction."""

import gc
import multiprocessing as mp
import os

import numpy as np
import pyarrow as pa
import pytest

from hygraph.errors import InputError, StoreError
from hygraph.store import derived, segment
from hygraph.store.artifacts import CHUNKS, DOCUMENTS, ChunkRow, DocumentRow
from hygraph.store.manifest import Manifest, PendingSummaries
from hygraph.store.versions import IndexStore

DIMS = {"text": 3}


def _docs(*ids: str) -> list[DocumentRow]:
    return [DocumentRow(i, f"title {i}", f"text of {i}", (f"{i}:0",)) for i in ids]


def _commit(store: IndexStore, base=None, rows=(), dead=(), replace=None) -> int:
    with store.begin() as w:
        if replace is not None:
            w.replace(DOCUMENTS, replace, DIMS)
        else:
            w.change(base, DOCUMENTS, list(rows), list(dead), DIMS)
        w.commit(Manifest(dims=DIMS))
        return w.version


def test_missing_index_dir_is_input_error(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        IndexStore(tmp_path / "nope")
    store = IndexStore(tmp_path / "idx", create=True)
    with pytest.raises(InputError, match="holds no index version"):
        store.open()


def test_rows_read_back_by_key_unicode_and_vectors_included(tmp_path):
    store = IndexStore(tmp_path, create=True)
    ids = ["a", "jan švankmajer", "東京", "quote\"and'\\slash/", "x" * 256]
    with store.begin() as w:
        w.replace(DOCUMENTS, _docs(*ids), DIMS)
        w.replace(CHUNKS, [ChunkRow("a:0", "a", 0, "text", 2, "t", ("e1", "e2"), (), ("h",),
                                    np.array([1, 2, 3], np.float32))], DIMS)
        w.commit(Manifest(dims=DIMS, summaries_pending=PendingSummaries(["a:0"], [], 1.5, 7)))
    version = store.open()
    docs = version.table(DOCUMENTS)
    assert len(docs) == 5 and all(i in docs for i in ids) and "b" not in docs
    assert docs.get("東京") == DocumentRow("東京", "title 東京", "text of 東京", ("東京:0",))
    assert docs.value("jan švankmajer", "title") == "title jan švankmajer"
    chunk = version.table(CHUNKS).get("a:0")
    assert chunk.entities == ("e1", "e2") and chunk.hyperedges == ("h",)
    np.testing.assert_array_equal(chunk.embedding, [1, 2, 3])
    assert version.manifest.summaries_pending == PendingSummaries(["a:0"], [], 1.5, 7)


def test_a_version_writes_only_its_changes_and_older_versions_keep_theirs(tmp_path):
    store = IndexStore(tmp_path, create=True)
    v1 = _commit(store, replace=_docs("a", "b", "c"))
    base = store.open(v1).table(DOCUMENTS)
    v2 = _commit(store, base, rows=[DocumentRow("b", "new b", "x", ()), *_docs("d")], dead=["c", "absent"])
    old, new = store.open(v1).table(DOCUMENTS), store.open(v2).table(DOCUMENTS)
    assert new.segments_names[0] == old.segments_names[0] and len(new.segments_names) == 2
    assert sorted(new.ids()) == ["a", "b", "d"] and len(new) == 3
    assert new.value("b", "title") == "new b" and old.value("b", "title") == "title b"
    assert "c" in old and "c" not in new
    v3 = _commit(store, new, rows=_docs("c"), dead=["b"])
    latest = store.open(v3).table(DOCUMENTS)
    assert sorted(latest.ids()) == ["a", "c", "d"] and len(latest) == 3
    assert latest.values("title") == ["title a", "title d", "title c"]  # oldest segment first
    assert store.current_version() == v3


def test_keys_are_located_in_their_newest_segment_and_the_kept_locations_are_not_gc_tracked(tmp_path):
    store = IndexStore(tmp_path, create=True)
    v1 = _commit(store, replace=_docs("a", "b", "c"))
    v2 = _commit(store, store.open(v1).table(DOCUMENTS), rows=[DocumentRow("b", "new b", "x", ())], dead=["c"])
    table = store.open(v2).table(DOCUMENTS)
    for _ in range(2):  # a first read finds each key, a second reads the kept location
        assert table.locate("a") == (table.segments[0], 0) and table.locate("b") == (table.segments[1], 0)
        assert table.locate("c") is None and table.locate("z") is None
        assert table.value("b", "title") == "new b" and table.value_or("a", "title", None) == "title a"
        assert table.value_or("c", "title", "gone") == "gone" and "c" not in table and "a" in table
        with pytest.raises(KeyError):
            table.value("c", "title")
    # Locations outlive a query: kept as ints, the collector never sweeps them.
    assert not gc.is_tracked(table._recent)


def test_a_version_opened_after_another_shares_the_segments_both_name(tmp_path):
    store = IndexStore(tmp_path, create=True)
    v1 = _commit(store, replace=_docs("a", "b"))
    old = store.open(v1)
    v2 = _commit(store, old.table(DOCUMENTS), rows=_docs("c"), dead=["a"])
    new = store.open(v2, reuse=old)
    before, after = old.table(DOCUMENTS), new.table(DOCUMENTS)
    assert after.segments[0] is before.segments[0] and len(after.segments) == 2
    assert sorted(after.ids()) == ["b", "c"] and sorted(before.ids()) == ["a", "b"]  # each its own rows
    other = IndexStore(tmp_path)  # another store object of the index: nothing shared with it
    assert other.open(v2, reuse=old).table(DOCUMENTS).segments[0] is not before.segments[0]


def test_live_rows_between_shadowed_ones_are_read_as_slices_in_row_order(tmp_path):
    """A segment whose rows are shadowed here and there yields its live runs, each a zero-copy slice."""
    store = IndexStore(tmp_path, create=True)
    v1 = _commit(store, replace=_docs("a", "b", "c", "d", "e", "f", "g"))
    v2 = _commit(store, store.open(v1).table(DOCUMENTS), rows=[DocumentRow("c", "new c", "x", ())],
                 dead=["a", "e", "f"])
    table = store.open(v2).table(DOCUMENTS)
    batches = list(table.batches(["id", "title"]))
    # old segment: a b c d e f g with a, c (replaced), e, f shadowed -> runs [b], [d], [g]; then the new segment
    assert [b.column(0).to_pylist() for b in batches] == [["b"], ["d"], ["g"], ["c"]]
    assert table.values("title") == ["title b", "title d", "title g", "new c"]
    assert table.segments[0].batch.column("id").buffers()[2].address == batches[1].column(0).buffers()[2].address


def test_lookups_stay_exact_when_every_key_hashes_alike(tmp_path, monkeypatch):
    monkeypatch.setattr(segment, "key_hash", lambda key: 42)
    monkeypatch.setattr(segment, "hashes", lambda keys: np.full(len(list(keys)), 42, np.int64))
    from hygraph.store import table

    monkeypatch.setattr(table, "key_hash", lambda key: 42)
    store = IndexStore(tmp_path, create=True)
    v1 = _commit(store, replace=_docs("a", "b", "c"))
    v2 = _commit(store, store.open(v1).table(DOCUMENTS), rows=[DocumentRow("b", "B", "", ())], dead=["c"])
    docs = store.open(v2).table(DOCUMENTS)
    assert docs.value("a", "title") == "title a" and docs.value("b", "title") == "B"
    assert "c" not in docs and "d" not in docs and sorted(docs.ids()) == ["a", "b"]


@pytest.mark.parametrize("colliding", [False, True])
def test_many_keys_read_together_read_what_each_read_alone_does(tmp_path, monkeypatch, colliding):
    from hygraph.store import table as table_module

    if colliding:  # every key hashes alike: found by comparing the strings
        monkeypatch.setattr(segment, "key_hash", lambda key: 42)
        monkeypatch.setattr(segment, "hashes", lambda keys: np.full(len(list(keys)), 42, np.int64))
        monkeypatch.setattr(table_module, "key_hash", lambda key: 42)
        monkeypatch.setattr(table_module, "hashes", lambda keys: np.full(len(list(keys)), 42, np.int64))
    store = IndexStore(tmp_path, create=True)
    ids = [f"d{i}" for i in range(12)]
    v1 = _commit(store, replace=_docs(*ids))
    v2 = _commit(store, store.open(v1).table(DOCUMENTS),
                 rows=[DocumentRow("d3", "new d3", "x", ("n:0", "n:1")), *_docs("e")], dead=["d5", "d7"])
    keys = ["e", "d3", "d5", "absent", "d0", "d3", "d11", "d7", "東京", "d1"]
    alone = store.open(v2).table(DOCUMENTS)
    expected = {c: [alone.value_or(k, c, None) for k in keys] for c in ("title", "chunks")}
    assert expected["title"][:4] == ["title e", "new d3", None, None]
    assert expected["chunks"][1] == ("n:0", "n:1")
    together = store.open(v2).table(DOCUMENTS)  # nothing located yet
    for _ in range(2):  # then every location kept
        for column in ("title", "chunks"):
            assert together.values_or(keys, column, None) == expected[column]
        assert together.values_or(keys[:3], "title", "-") == ["title e", "new d3", "-"]  # a few keys: one by one


def test_a_failed_version_leaves_nothing_behind(tmp_path):
    store = IndexStore(tmp_path, create=True)
    v1 = _commit(store, replace=_docs("a"))
    with pytest.raises(RuntimeError):
        with store.begin() as w:
            w.change(store.open(v1).table(DOCUMENTS), DOCUMENTS, _docs("b"), [], DIMS)
            raise RuntimeError("crash mid-apply")
    assert store.versions() == [v1] and store.current_version() == v1
    assert sorted(p.name for p in (tmp_path / "segments" / "documents").iterdir()) == \
        ["000001-0.arrow", "000001-0.keys.npy"]


def test_commit_refuses_when_another_writer_published_meanwhile(tmp_path):
    store = IndexStore(tmp_path, create=True)
    v1 = _commit(store, replace=_docs("a"))
    base = store.open(v1).table(DOCUMENTS)  # an update read version 1 ...
    _commit(store, replace=_docs("z"))  # ... then a full build landed before it took the lease
    with pytest.raises(StoreError, match="appeared while"):
        with store.begin() as w:
            w.change(base, DOCUMENTS, _docs("b"), [], DIMS)
            w.commit(Manifest(dims=DIMS), expect_current=v1)
    assert sorted(store.open().table(DOCUMENTS).ids()) == ["z"]


def _commit_one(path: str) -> int:
    store = IndexStore(path, create=True)
    with store.begin() as w:
        w.replace(DOCUMENTS, _docs("x"), DIMS)
        w.commit(Manifest(dims=DIMS))
        return w.version


def test_concurrent_writers_get_distinct_versions(tmp_path):
    with mp.get_context("spawn").Pool(2) as pool:
        versions = pool.map(_commit_one, [str(tmp_path)] * 4)
    assert sorted(versions) == [1, 2, 3, 4]
    assert IndexStore(tmp_path).current_version() == 4


def test_gc_removes_old_versions_and_only_unreferenced_segments(tmp_path):
    store = IndexStore(tmp_path, create=True)
    v = _commit(store, replace=_docs("a", "b"))
    for i in range(3):
        v = _commit(store, store.open(v).table(DOCUMENTS), rows=_docs(f"n{i}"), dead=["b"] if i == 0 else [])
    reader = store.open(1).table(DOCUMENTS)  # a reader still on version 1 maps its segments
    full = _commit(store, replace=_docs("fresh"))  # a rebuild: nothing shared with the versions before
    for version in (1, full):  # what readers derived from two of the versions (store/derived.py)
        derived.shared(store.derived_dir, derived.directory_name(store.uid, version),
                       lambda d: derived.write(d, {"a": np.ones(1)}, {}))
    result = store.gc(keep=1, grace_s=0.0)
    assert result.versions == [1, 2, 3, 4] and store.versions() == [full]
    assert sorted(p.name for p in store.derived_dir.iterdir()) == [
        f"{derived.directory_name(store.uid, full)}{suffix}" for suffix in ("", ".lock")]
    assert sorted(p.name.split(".")[0] for p in (tmp_path / "segments" / "documents").iterdir()) == ["000005-0"] * 2
    assert reader.value("b", "title") == "title b"  # its mapping outlives the files
    assert sorted(store.open().table(DOCUMENTS).ids()) == ["fresh"]


def _die_while_writing(index_dir: str) -> None:
    """A build that records its collections and dies (no cleanup runs) before it commits."""
    store = IndexStore(index_dir, lease_s=1.0)  # its lease expires a second after it died
    with store.begin() as w:
        store.record_collections(w.version, [store.collection(w.version, "chunks")])
        store.record_collections(w.version, [store.collection(w.version, "entities")])  # a second record adds
        os._exit(0)


def test_gc_hands_back_the_collections_of_builds_that_never_committed(tmp_path):
    store = IndexStore(tmp_path, create=True)
    v1 = _commit(store, replace=_docs("a"))
    proc = mp.get_context("spawn").Process(target=_die_while_writing, args=(str(tmp_path),))
    proc.start()
    proc.join()
    dead = v1 + 1
    with store.begin() as live:  # a writer still at work: its recorded collections stay
        store.record_collections(live.version, [store.collection(live.version, "chunks")])
        result = store.gc(keep=1, grace_s=0.0)
        assert result.collections == {store.collection(dead, "chunks"), store.collection(dead, "entities")}
        assert result.orphaned == [dead] and result.versions == []
        assert store.gc(keep=1, grace_s=0.0).orphaned == [dead]  # kept until the caller dropped them
        store.forget_collections(result.orphaned)
        assert store.gc(keep=1, grace_s=0.0).collections == set()
        live.commit(Manifest(dims=DIMS, collections={"chunks": store.collection(live.version, "chunks")}))
    # Published: the manifest names its collections, so gc removes the record and hands back nothing.
    assert (tmp_path / "collections" / f"{live.version:06d}.json").is_file()
    result = store.gc(keep=2, grace_s=0.0)
    assert result.collections == set() and result.orphaned == []
    assert not list((tmp_path / "collections").iterdir())


def test_compaction_keeps_the_rows_and_the_deletions(tmp_path):
    store = IndexStore(tmp_path, create=True)
    v = _commit(store, replace=_docs("a", "b", "c"))
    for rows, dead in ((_docs("d"), ["a"]), ([DocumentRow("b", "B2", "", ())], []), (_docs("a"), ["d", "c"])):
        v = _commit(store, store.open(v).table(DOCUMENTS), rows=rows, dead=dead)
    before = store.open(v).table(DOCUMENTS)
    expected = {i: before.get(i) for i in before.ids()}
    for full in (False, True):
        with store.begin() as w:
            w.compact(store.open(v).table(DOCUMENTS), DOCUMENTS, full=full)
            w.commit(Manifest(dims=DIMS))
            v = w.version
        table = store.open(v).table(DOCUMENTS)
        assert len(table.segments_names) == (1 if full else 2) and len(table) == len(expected) == 2
        assert {i: table.get(i) for i in table.ids()} == expected and "c" not in table and "d" not in table


def test_a_reader_that_may_not_write_its_lease_serves_without_one(tmp_path, monkeypatch, caplog):
    """Read-only credentials or mount: the reader's lease cannot be written. It serves all the same (GC then
    spares its version for the grace period only), says so once, and is never taken for a lapsed reader."""
    from hygraph.store import lease

    store = IndexStore(tmp_path / "idx", create=True)
    reader = store.reader_lease()

    def refused(*_args, **_kwargs):
        raise StoreError("access denied")

    monkeypatch.setattr(reader.objects, "put", refused)
    with caplog.at_level("WARNING", logger="hygraph.store.lease"):
        reader.hold(1)
        reader.hold(2)
    assert reader.unwritable and not reader.lapsed
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
    assert "gc_grace_s" in caplog.records[0].message and lease.served_versions(store.objects) == set()
    reader.release()


def test_compaction_is_overdue_only_past_its_factor_of_the_delta_bound():
    from hygraph.store.manifest import TableRef
    from hygraph.updater.compaction import OVERDUE_FACTOR, overdue

    def manifest(deltas: int) -> Manifest:
        return Manifest(tables={"chunks": TableRef(["base"] + [f"d{i}" for i in range(deltas)], 10),
                                "documents": TableRef(["base"], 3)})

    assert not overdue(manifest(OVERDUE_FACTOR * 8), max_segments=8)
    assert overdue(manifest(OVERDUE_FACTOR * 8 + 1), max_segments=8)
    assert not overdue(Manifest(), max_segments=8)


def test_segment_sizes_are_asked_of_the_store_once(tmp_path):
    store = IndexStore(tmp_path / "idx", create=True)
    (tmp_path / "idx" / "segments" / "chunks").mkdir(parents=True)
    (tmp_path / "idx" / "segments" / "chunks" / "000001-0.arrow").write_bytes(b"x" * 10)
    asked = []
    size = store.objects.size
    store.objects.size = lambda key: asked.append(key) or size(key)  # type: ignore[method-assign]
    assert store.segment_bytes("chunks", "000001-0") == 10 and len(asked) == 3
    assert store.segment_bytes("chunks", "000001-0") == 10 and len(asked) == 3  # immutable: not asked again


def test_hashes_of_many_keys_are_each_keys_hash():
    keys = ["a", "", "東京", "d1:0", "x" * 300]
    assert segment.hashes(keys).tolist() == [segment.key_hash(k) for k in keys]
    assert segment.hashes([]).dtype == np.int64 and len(segment.hashes([])) == 0


def test_strings_compared_together_compare_as_each_alone():
    strings = segment.Strings.of(pa.array(["ab", "", "東京", "abc", "ab"], pa.large_string()))
    rows = np.array([0, 1, 2, 3, 4, 0, 3, 2, 1])
    keys = [b"ab", b"", "東京".encode(), b"abd", b"ab", b"a", b"abc", "東".encode(), b"x"]
    assert strings.equals_many(rows, keys).tolist() == [strings.equals(r, k) for r, k in zip(rows.tolist(), keys)]
    assert strings.equals_many(rows, keys).tolist() == [True, True, True, False, True, False, True, False, False]
    assert strings.equals_many(np.zeros(0, np.int64), []).tolist() == []


def test_strings_read_together_read_as_each_alone():
    array = pa.array(["x", "ab", "", "東京", None, "y" * 300], pa.string()).slice(1)  # an offset, a null: ""
    strings = segment.Strings.of(array)
    rows = np.array([3, 0, 2, 0, 4, 1])
    assert strings.many(rows) == [strings[r] for r in rows.tolist()] == ["", "ab", "東京", "ab", "y" * 300, ""]
    assert strings.part(1, 4).many(np.array([2, 0])) == ["", ""] and strings.part(2, 4).many(np.array([0])) == ["東京"]
    assert strings.many(np.zeros(0, np.int64)) == []
