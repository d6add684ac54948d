"""BM25 postings (core/lexical.py): the analyzer, hand-checked scores, equality with bm25s, incremental updates,
and the lexical stage's update of chunk and entity postings (indexing/lexical.py)."""

from __future__ import annotations

import math

import bm25s
import numpy as np
import pytest
import Stemmer

from hygraph.core import lexical
from hygraph.indexing.lexical import build_lexical, update_lexical

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
    lengths = {"d1": 3, "d2": 4, "d3": 4}  # director direct film | film director histori cinema | harbor lie below lighthous
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


def test_lexical_stage_update_moves_chunks_and_entities():
    start = build_lexical(["c1", "c2"], ["Dan Smith directed Film X.", "The harbor."], ["dan smith", "film x"])
    after = update_lexical(start, removed_chunks=["c2"], new_chunk_ids=["c3"], new_chunk_texts=["Yara Lee's harbor"],
                           removed_entities=["film x"], new_entities=["yara lee"])
    assert after["chunks"].ids == ("c1", "c3")
    assert [d for d, _ in after["chunks"].top_k(lexical.analyze("harbor"), 5)] == ["c3"]
    assert after["entities"].ids == ("dan smith", "yara lee")
    assert after["entities"].top_k(lexical.analyze("film"), 5) == []
    dense_only = update_lexical(build_lexical(["c1"], ["text"], None), [], ["c2"], ["more text"], [], [])
    assert set(dense_only) == {"chunks"}
