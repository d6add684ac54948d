"""Query metadata filters: their rules (input_rules.check_filter), what they match (core/retrieval/filter.py) and
every retrieval mode restricted to the documents they allow (core/retrieval/filtered.py), on the hand-made
two-hop index of test_retrieval_graph_modes."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from hygraph.core.retrieval import filter as filter_module
from hygraph.core.retrieval.collapsed import collapsed
from hygraph.core.retrieval.dense import dense
from hygraph.core.retrieval.filter import MetadataIndex, PassageFilter, canonical
from hygraph.core.retrieval.filtered import run_filtered
from hygraph.core.retrieval.hybrid import hybrid
from hygraph.core.retrieval.lexical import bm25, dense_bm25
from hygraph.core.retrieval.local_global import global_, local
from hygraph.core.retrieval.ppr import ppr
from hygraph.errors import InputError
from hygraph.input_rules import MAX_FILTER_KEYS, MAX_FILTER_VALUES, check_filter
from tests.unit.test_retrieval_graph_modes import CHUNKS, QUERY, QUESTION, BruteForce, at, make_view, question_entities

# ---------------------------------------------------------------- rules


@pytest.mark.parametrize("flt,where", [
    ([], "filter: must be an object"),
    ("lang=en", "filter: must be an object"),
    ({"lang": {"$ne": "en"}}, r"filter\.lang: an object is not a filter value"),
    ({"tags": [["a"]]}, r"filter\.tags\.0: a list inside a list"),
    ({"tags": ["a", {"b": 1}]}, r"filter\.tags\.1: an object"),
    ({"score": float("nan")}, r"filter\.score: nan is not a JSON number"),
    ({"score": [1.0, float("inf")]}, r"filter\.score\.1: inf is not a JSON number"),
    ({"k\x00": "v"}, r"filter \(a key\): a control character"),
    ({"k": "v\x00"}, r"filter\.k: a control character"),
    ({"k": "\ud800"}, r"filter\.k: a lone surrogate"),
    ({f"k{i}": 1 for i in range(MAX_FILTER_KEYS + 1)}, f"filter: {MAX_FILTER_KEYS + 1} keys exceeds"),
    ({"k": list(range(MAX_FILTER_VALUES + 1))}, rf"filter\.k: {MAX_FILTER_VALUES + 1} values exceeds"),
])
def test_a_bad_filter_is_refused_naming_its_field(flt, where):
    with pytest.raises(InputError, match=where):
        check_filter(flt)


def test_filters_of_scalars_and_lists_of_scalars_pass_as_given():
    flt = {"lang": "en", "année": 2024, "ok": True, "gone": None, "tags": ["a", 1, 2.5, False, None], "empty": [],
           "' OR 1=1 --": "\"; drop"}
    assert check_filter(flt) is flt and check_filter({}) == {}


# ---------------------------------------------------------------- matching

DOCS = {
    "a": {"lang": "en", "year": 2024, "tags": ["x", "y"], "ok": True, "n": 1, "nested": {"k": 1}},
    "b": {"lang": "fr", "year": 2024.0, "ok": 1, "n": None},
    "c": {"lang": "en", "year": "2024", "place": "caf\u00e9", "deep": [["x"]]},
    "d": {},
}


@pytest.fixture
def index() -> MetadataIndex:
    return MetadataIndex.build((doc, json.dumps(meta)) for doc, meta in DOCS.items())


@pytest.mark.parametrize("flt,want", [
    ({"lang": "en"}, {"a", "c"}),
    ({"lang": "EN"}, set()),                            # strings compare exactly: case counts
    ({"Lang": "en"}, set()),                            # keys too
    ({"year": 2024}, {"a", "b"}),                       # numbers by value: 2024 == 2024.0 ...
    ({"year": 2024.0}, {"a", "b"}),
    ({"year": "2024"}, {"c"}),                          # ... but not the string "2024"
    ({"ok": True}, {"a"}),                              # true is not 1 ...
    ({"ok": 1}, {"b"}),                                 # ... and 1 is not true
    ({"n": None}, {"b"}),                               # null: present with null, never missing
    ({"tags": "x"}, {"a"}),                             # a metadata list matches any of its elements
    ({"tags": ["z", "y"]}, {"a"}),
    ({"lang": ["en", "fr"], "year": 2024}, {"a", "b"}),  # IN, ANDed across keys
    ({"lang": "en", "year": 2024}, {"a"}),
    ({"lang": []}, set()),                              # an empty list matches nothing
    ({"place": "caf\u00e9"}, {"c"}),
    ({"place": "cafe\u0301"}, set()),                   # no Unicode normalization: decomposed é differs
    ({"deep": "x"}, set()),                             # a list inside a list never matches
    ({"missing": "x"}, set()),
])
def test_a_filter_matches_by_the_documented_rules(index, flt, want):
    assert index.documents(check_filter(flt)) == want


def test_canonical_values():
    assert [canonical(v) for v in (1, 1.0, True, None, "1", 0.5, -0.0, "é")] == \
        ["1", "1", "true", "null", '"1"', "0.5", "0", '"é"']


@pytest.mark.parametrize("exact", [True, False])
def test_best_keeps_allowed_rows_by_score_either_way(exact, monkeypatch):
    if not exact:
        monkeypatch.setattr(filter_module, "EXACT_CHUNKS", 0)
    chunk_doc = {"a:0": "a", "a:1": "a", "b:0": "b", "c:0": "c", "c:1": "c"}
    doc_chunks = {"a": ["a:0", "a:1"], "b": ["b:0"], "c": ["c:0", "c:1"]}
    allowed = PassageFilter.of(frozenset({"a", "c"}), chunk_doc, doc_chunks)
    assert (allowed.chunks is not None) == exact
    ids = ["c:1", "b:0", "a:0", "c:0", "a:1"]
    scores = np.array([0.5, 0.9, 0.5, 0.0, 0.7], np.float32)
    rows = allowed.best(scores, ids, {cid: i for i, cid in enumerate(ids)}, 3)
    assert [ids[i] for i in rows] == ["a:1", "c:1", "a:0"]  # b:0 not allowed, c:0 scores 0, ties in row order


# ---------------------------------------------------------------- every mode under a filter

KIND = {"film": "film", "dan": "person", "harbor": "place", "lighthouse": "place", "orchard": "place",
        "quarry": "place"}


@pytest.fixture
def view():
    v = make_view()
    meta = {doc: json.dumps({"kind": kind}) for doc, kind in KIND.items()}
    return replace(v, doc_metadata=meta, chunk_embedding={cid: at(cos) for cid, (_, cos) in CHUNKS.items()})


def allowed_for(view, flt) -> PassageFilter:
    docs = MetadataIndex.build(view.doc_metadata.items()).documents(flt)
    return PassageFilter.of(docs, view.chunk_doc, view.doc_chunks)


MODES = {
    "dense": lambda v, s, k: dense(QUERY, k, s, v.chunk_text, v.chunk_doc, v.titles),
    "bm25": lambda v, s, k: bm25(QUESTION, k, v),
    "dense+bm25": lambda v, s, k: dense_bm25(QUESTION, QUERY, k, v, s),
    "hybrid": lambda v, s, k: hybrid(QUESTION, QUERY, k, v, s, question_entities),
    "ppr": lambda v, s, k: ppr(QUESTION, QUERY, k, v, s, question_entities),
    "local": lambda v, s, k: local(QUESTION, QUERY, k, v, s, question_entities),
    "global": lambda v, s, k: global_(QUERY, k, v, s),
    "collapsed": lambda v, s, k: collapsed(QUERY, k, v, s, max_tokens=2000),
}


@pytest.mark.parametrize("exact", [True, False])
@pytest.mark.parametrize("mode", MODES)
def test_every_mode_returns_only_allowed_passages_and_fills_to_k(view, mode, exact, monkeypatch):
    if not exact:  # the allowed chunks are not listed: searches go deeper and the rankings are walked
        monkeypatch.setattr(filter_module, "EXACT_CHUNKS", 0)
    allowed = allowed_for(view, {"kind": "place"})
    search = BruteForce(view)
    ctx = run_filtered(lambda v, s: MODES[mode](v, s, 3), view, search, allowed, QUERY, 3)
    places = {"harbor", "lighthouse", "orchard", "quarry"}
    assert len(ctx.passages) == 3 and {p.id for p in ctx.passages} <= places
    assert len({p.id for p in ctx.passages}) == 3
    for item in ctx.items():
        assert item.sources and set(item.sources) <= places, item
    assert ctx.summaries == [] and ctx.notes["filter"]["documents"] == 4


def test_dense_under_a_filter_is_dense_over_the_allowed_documents(view):
    allowed = allowed_for(view, {"kind": ["place", "person"]})
    ctx = run_filtered(lambda v, s: MODES["dense"](v, s, 3), view, BruteForce(view), allowed, QUERY, 3)
    # allowed chunks by cosine: harbor:0 .70, lighthouse:0 .65, orchard:0 .60, dan:0 .50, ...
    assert [(p.id, round(p.score, 2)) for p in ctx.passages] == [("harbor", 0.7), ("lighthouse", 0.65),
                                                                  ("orchard", 0.6)]
    assert ctx.notes["filter"]["filled"] == 0


def test_bm25_under_a_filter_ranks_the_allowed_chunks(view):
    allowed = allowed_for(view, {"kind": "person"})
    ctx = run_filtered(lambda v, s: MODES["bm25"](v, s, 3), view, BruteForce(view), allowed, QUERY, 3)
    # only "dan" is a person; "Dan Smith is married to Yara Lee." has no question word, so the fill brings it
    assert [p.id for p in ctx.passages] == ["dan"]


def test_a_filter_allowing_fewer_than_k_documents_returns_those(view):
    allowed = allowed_for(view, {"kind": "film"})
    ctx = run_filtered(lambda v, s: MODES["hybrid"](v, s, 5), view, BruteForce(view), allowed, QUERY, 5)
    assert [p.id for p in ctx.passages] == ["film"]
