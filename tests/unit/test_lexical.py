"""BM25 postings (core/lexical.py): the analyzer, hand-checked scores, equality with bm25s, incremental updates,
and the lexical stage's postings of chunks and entities in the segment store (indexing/stages/lexical.py)."""

from __future__ import annotations

import math

import bm25s
import numpy as np
import pytest
import Stemmer

from hygraph.core import lexical
from hygraph.indexing.stages import lexical as lexical_stage
from hygraph.indexing.state import IndexState
from hygraph.store.artifacts import ENTITIES, LEXICAL_CHUNKS, LEXICAL_ENTITIES, EntityRow
from hygraph.store.manifest import Manifest
from hygraph.store.versions import IndexStore
from hygraph.store.view_loader import lexical_index

DOCS = {
    "d1": "The director directed the film.",
    "d2": "Films and directors: a history of cinema",
    "d3": "The harbor lies below the lighthouse.",
}


def test_analyze_lowercases_drops_stopwords_and_one_letter_tokens_and_stems():
    assert lexical.analyze("The Director directed a Film in 1999, and I ran.") == [
        "director", "direct", "film", "1999", "ran"]


def test_scores_match_the_formula_on_a_hand_checked_case():
    # "film" is in d1 and d2 (stems of "film" and "Films"); N = 3, df = 2
    index = lexical.build(list(DOCS), [lexical.analyze(t) for t in DOCS.values()])
    # director direct film | film director histori cinema | harbor lie below lighthous
    lengths = {"d1": 3, "d2": 4, "d3": 4}
    assert lengths == {d: len(lexical.analyze(t)) for d, t in DOCS.items()}
    avg = sum(lengths.values()) / 3
    idf = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
    expected = [idf * 1 / (1 + 1.5 * (1 - 0.75 + 0.75 * lengths[d] / avg)) for d in ("d1", "d2")]
    assert index.scores(["film"]) == pytest.approx([*expected, 0.0], rel=1e-6)
    assert index.top_k(["film"], 5) == [("d1", pytest.approx(expected[0])), ("d2", pytest.approx(expected[1]))]
    assert index.top_k(["submarine"], 5) == []


def test_scores_equal_bm25s_lucene_with_its_english_analyzer():
    corpus = [*DOCS.values(), "Lighthouse keepers kept the lighthouse lit.", "A film about a harbor and a film crew."]
    queries = ["film director", "lighthouse harbor", "harbor film film", "keeper of the light"]
    stemmer = Stemmer.Stemmer("english")
    reference = bm25s.BM25(method="lucene")
    reference.index(bm25s.tokenize(corpus, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    mine = lexical.build([str(i) for i in range(len(corpus))], [lexical.analyze(t) for t in corpus])
    for q in queries:
        terms = lexical.analyze(q)
        assert terms == bm25s.tokenize([q], stopwords="en", stemmer=stemmer, show_progress=False,
                                       return_ids=False)[0]
        assert mine.scores(terms) == pytest.approx(reference.get_scores(terms), rel=1e-5, abs=1e-6)


def test_update_equals_a_build_from_scratch():
    tokens = {d: lexical.analyze(t) for d, t in DOCS.items()}
    extra = {"d4": lexical.analyze("The lighthouse film festival"), "d1": lexical.analyze("A new text on harbors")}
    start = lexical.build(["d1", "d2", "d3"], [tokens["d1"], tokens["d2"], tokens["d3"]])
    # d2 is removed, d1 replaced with a new text, d4 added
    updated = lexical.update(start, ["d2"], ["d4", "d1"], [extra["d4"], extra["d1"]])
    scratch = lexical.build(["d3", "d4", "d1"], [tokens["d3"], extra["d4"], extra["d1"]])
    assert updated.ids == ("d3", "d4", "d1")
    for q in (["film"], ["harbor"], ["lighthous", "film"], ["director"]):
        assert updated.scores(q) == pytest.approx(scratch.scores(q))
    # "director" only occurred in removed texts: it stays in the vocabulary but no longer scores
    assert "director" in updated.terms and updated.top_k(["director"], 3) == []


def test_update_rejects_mismatched_or_duplicate_input():
    start = lexical.build(["d1"], [["film"]])
    with pytest.raises(ValueError):
        lexical.update(start, [], ["d2"], [])
    with pytest.raises(ValueError):
        lexical.update(start, [], ["d2", "d2"], [["a"], ["b"]])
    with pytest.raises(ValueError):
        lexical.build(["d1", "d1"], [["a"], ["b"]])


def test_top_k_breaks_ties_by_row_and_cuts_at_k():
    index = lexical.build(["a", "b", "c"], [["x"], ["x"], ["x"]])
    assert [d for d, _ in index.top_k(["x"], 2)] == ["a", "b"]


def _entity(eid: str) -> EntityRow:
    return EntityRow(eid, eid, "NAME", "", 1.0, (), (), (), (eid,), np.ones(1, np.int64), np.zeros(2, np.float32))


def test_lexical_stage_update_writes_the_change_and_reads_back_as_a_build(tmp_path):
    """The stage's rows in the segment store: an update writes the changed documents' rows only, and the
    version reads back (store/view_loader.py) as the BM25 index a build over its documents gives."""
    dims = {"text": 2}
    store = IndexStore(tmp_path, create=True)
    with store.begin() as w:
        for artifact, table in lexical_stage.build(["c1", "c2"], ["Dan Smith directed Film X.", "The harbor."],
                                                   ["dan smith", "film x"]).items():
            w.replace_table(artifact, table)
        w.replace(ENTITIES, [_entity("dan smith"), _entity("film x")], dims)
        w.commit(Manifest(dims=dims, graph=True))
    state = IndexState(store.open())
    state.delete(ENTITIES, "film x")  # as the knowledge stage leaves it: one entity gone, one new
    state.put(ENTITIES, _entity("yara lee"))
    lexical_stage.update(state, ["c2"], ["c3", "c1"], ["Yara Lee's harbor", "Dan Smith's film."],
                         ["film x", "yara lee"])
    chunk_rows, chunk_dead = state.changes(LEXICAL_CHUNKS)
    assert sorted(r.id for r in chunk_rows) == ["c1", "c3"] and chunk_dead == ["c2"]
    entity_rows, entity_dead = state.changes(LEXICAL_ENTITIES)
    assert [r.id for r in entity_rows] == ["yara lee"] and entity_dead == ["film x"]
    with store.begin() as w:
        for artifact in (ENTITIES, LEXICAL_CHUNKS, LEXICAL_ENTITIES):
            w.change(state.table(artifact), artifact, *state.changes(artifact), dims)
        w.commit(state.manifest)
    version = store.open()
    chunks = lexical_index(version, LEXICAL_CHUNKS)
    assert sorted(chunks.ids) == ["c1", "c3"]
    scratch = lexical.build(list(chunks.ids), [lexical.analyze({"c1": "Dan Smith's film.",
                                                                "c3": "Yara Lee's harbor"}[c]) for c in chunks.ids])
    for q in (["harbor"], ["film", "dan"], ["direct"]):
        assert chunks.scores(q) == pytest.approx(scratch.scores(q))
    assert [d for d, _ in chunks.top_k(lexical.analyze("harbor"), 5)] == ["c3"]
    entities = lexical_index(version, LEXICAL_ENTITIES)
    assert sorted(entities.ids) == ["dan smith", "yara lee"]
    assert entities.top_k(lexical.analyze("film"), 5) == []


def test_lexical_stage_without_a_graph_indexes_chunks_only():
    assert set(lexical_stage.build(["c1"], ["text"], None)) == {LEXICAL_CHUNKS}
