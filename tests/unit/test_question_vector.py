"""Which requests need the question embedded: every mode but bm25, and bm25 with a filter (its fill-up)."""

from __future__ import annotations

from hygraph.config import RetrievalConfig
from hygraph.core.retrieval.modes import MODE_NAMES
from hygraph.pipeline import QueryRequest, needs_question_vector


def test_only_an_unfiltered_bm25_query_skips_the_question_vector():
    cfg = RetrievalConfig()
    for mode in MODE_NAMES:
        assert needs_question_vector(QueryRequest.make(cfg, "Who?", mode)) == (mode != "bm25"), mode
        assert needs_question_vector(QueryRequest.make(cfg, "Who?", mode, filter={"lang": "en"})), mode
