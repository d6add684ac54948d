"""Reading back what a version holds (store/catalog.py) and what the journal will add (Journal.holds_after)."""

from __future__ import annotations

from hygraph.store.artifacts import DOCUMENTS, Artifact, DocumentRow, metadata_text
from hygraph.store.catalog import Catalog
from hygraph.store.journal import request_of
from hygraph.store.object_journal import open_journal
from hygraph.store.manifest import HierarchyInfo, Manifest
from hygraph.store.versions import IndexStore

DIMS = {"text": 3}


def _doc(i: str, text: str = "", chunks: int = 1) -> DocumentRow:
    return DocumentRow(i, f"title {i}", text or f"text of {i}", tuple(f"{i}:{n}" for n in range(chunks)))


def _commit(store: IndexStore, rows=(), dead=(), **manifest) -> Catalog:
    base = store.open().table(DOCUMENTS) if store.current_version() is not None else None
    with store.begin() as w:
        w.change(base, DOCUMENTS, list(rows), list(dead), DIMS)
        w.commit(Manifest(dims=DIMS, **manifest))
    return Catalog(store.open())


def test_pages_follow_id_order_and_a_cursor_survives_an_update(tmp_path):
    store = IndexStore(tmp_path, create=True)
    cat = _commit(store, [_doc("b", "two words", chunks=2), _doc("é"), _doc("a"), _doc("d"), _doc("c")])
    first = cat.page(2)
    assert [d["id"] for d in first.documents] == ["a", "b"] and first.total == 5 and first.next_after == "b"
    assert first.documents[1] == {"id": "b", "title": "title b", "chars": 9, "chunks": 2, "metadata": {}}
    assert [d["id"] for d in cat.page(2, offset=2).documents] == ["c", "d"]
    # A new version inserts before the cursor and deletes after it: the next page neither repeats nor skips.
    newer = _commit(store, [_doc("aa"), _doc("ca")], dead=["d"])
    rest = newer.page(10, after=first.next_after)
    assert [d["id"] for d in rest.documents] == ["c", "ca", "é"] and rest.next_after is None and rest.total == 6
    assert newer.page(10, after="\u00e9").documents == [] and newer.page(3, offset=99).next_after is None


def test_one_document_and_the_counts(tmp_path):
    store = IndexStore(tmp_path, create=True)
    cat = _commit(store, [_doc("x/1", "the text", chunks=3)], counts={"documents": 1, "chunks": 3, "entities": 7},
                  hierarchy=HierarchyInfo("leiden", 2, {}), journal_offset=42)
    assert cat.document("x/1") == {"id": "x/1", "title": "title x/1", "text": "the text", "chars": 8, "chunks": 3,
                                   "metadata": {}}
    assert cat.document("nope") is None and cat.holds("x/1") and not cat.holds("nope")
    stats = cat.stats()
    assert stats["documents"] == 1 and stats["chunks"] == 3 and stats["entities"] == 7 and stats["summaries"] == 0
    assert stats["layers"] == 2 and stats["index_version"] == 1 and stats["journal_offset"] == 42
    assert stats["updated_at"].endswith("+00:00")


def test_metadata_is_returned_and_a_version_written_before_the_column_reads_it_as_empty(tmp_path):
    store = IndexStore(tmp_path, create=True)
    # The documents artifact as it was before the metadata column: its segments lack the column.
    old = Artifact("documents", DocumentRow, DOCUMENTS.columns[:-1])
    with store.begin() as w:
        w.change(None, old, [_doc("old")], [], DIMS)
        w.commit(Manifest(dims=DIMS))
    assert Catalog(store.open()).document("old")["metadata"] == {}
    meta = {"lang": "fr", "année": 2024, "tags": ["a", "b"]}
    cat = _commit(store, [DocumentRow("new", "t", "text", ("new:0",), metadata_text(meta))])
    assert cat.document("new")["metadata"] == meta and cat.document("old")["metadata"] == {}
    assert [d["metadata"] for d in cat.page(10).documents] == [meta, {}]
    # Compaction merges the old segment (read with the default) and the new one.
    base = store.open().table(DOCUMENTS)
    with store.begin() as w:
        w.compact(base, DOCUMENTS, full=True)
        w.commit(Manifest(dims=DIMS))
    table = store.open().table(DOCUMENTS)
    assert len(table.segments_names) == 1 and table.value("new", "metadata") == metadata_text(meta)
    assert table.value("old", "metadata") == "{}"


def test_queued_inserts_count_as_held_and_queued_deletes_do_not(tmp_path):
    journal = open_journal(tmp_path)
    first = journal.append(request_of("insert", {"documents": [{"id": "new", "text": "t"}]}))
    assert journal.holds_after("new", 0, held=False)
    assert not journal.holds_after("new", first.end_offset, held=False)  # applied already: the version decides
    journal.append(request_of("delete", {"ids": ["old"]}))
    assert not journal.holds_after("old", 0, held=True) and journal.holds_after("other", 0, held=True)
    failed = journal.append(request_of("insert", {"documents": [{"id": "bad", "text": "t"}]}))
    journal.mark_failed(failed.job_id, "could not apply")
    assert not journal.holds_after("bad", 0, held=False)
    assert journal.pending(0) == 2 and journal.pending(first.end_offset) == 1
