"""`bm25` and `dense+bm25`: the two baselines besides `dense` that a user would run instead of a graph.

`bm25` ranks chunks by BM25 over their title + text (core/lexical.py: bm25s's analyzer and
scores); `dense+bm25` fuses the dense and BM25 chunk rankings by reciprocal-rank fusion, the
usual hybrid search of vector databases.
"""

from __future__ import annotations

import numpy as np

from hygraph.core.retrieval.context import Context, Search, passages_from_chunks, pool_size
from hygraph.core.retrieval.fusion import bm25_hits, rrf
from hygraph.core.retrieval.items import chunk_item
from hygraph.core.retrieval.view import IndexView


def bm25(question: str, k: int, view: IndexView) -> Context:
    """Lexical baseline: the top-k chunks by BM25 (title + text, stemmed, stopwords removed)."""
    chunks = [chunk_item(cid, score, view) for cid, score in bm25_hits(question, k, view)]
    return Context(chunks=chunks, passages=passages_from_chunks(chunks, view.titles, k))


def dense_bm25(question: str, query_vec: np.ndarray, k: int, view: IndexView, search: Search) -> Context:
    """Hybrid-search baseline: RRF of the dense and the BM25 chunk rankings, each `pool_size(k)` deep."""
    depth = pool_size(k)
    dense_hits = search("chunks", query_vec[None, :], depth, None)[0]
    fused = rrf([[cid for cid, _ in dense_hits], [cid for cid, _ in bm25_hits(question, depth, view)]])
    chunks = [chunk_item(cid, score, view) for cid, score in fused]
    return Context(chunks=chunks[:k], passages=passages_from_chunks(chunks, view.titles, k))
