"""Rank fusion and the lexical channel's chunk ranking, shared by the baselines and the graph modes."""

from __future__ import annotations

from typing import Sequence

from hygraph.core.lexical import analyze
from hygraph.core.retrieval.view import IndexView

RRF_K = 60  # Cormack, Clarke & Büttcher's constant: a document's fused score is sum 1 / (60 + rank)


def bm25_hits(question: str, depth: int, view: IndexView) -> list[tuple[str, float]]:
    """The `depth` best chunks by BM25 of the analyzed question (title + text postings), best first; of a
    filtered view, the best of the chunks its filter allows."""
    lex = view.chunk_lexical
    if lex is None:
        raise ValueError("BM25 needs the lexical index, and this index version has none")
    if view.passage_filter is None:
        return lex.top_k(analyze(question), depth)
    scores = lex.scores(analyze(question))
    return [(lex.ids[i], float(scores[i])) for i in view.passage_filter.best(scores, lex.ids, lex.row_index, depth)]


def rrf(rankings: Sequence[Sequence[str]], k0: int = RRF_K,
        weights: Sequence[float] | None = None) -> list[tuple[str, float]]:
    """Reciprocal-rank fusion (Cormack et al. 2009): each id scores sum over rankings of w / (k0 + rank), rank
    from 1, w the ranking's weight (1 by default); best first, ties in order of first appearance."""
    if weights is not None and len(weights) != len(rankings):
        raise ValueError(f"{len(rankings)} rankings but {len(weights)} weights")
    fused: dict[str, float] = {}
    for ranking, w in zip(rankings, weights if weights is not None else [1.0] * len(rankings)):
        for rank, item in enumerate(ranking, 1):
            fused[item] = fused.get(item, 0.0) + w / (k0 + rank)
    return sorted(fused.items(), key=lambda kv: -kv[1])
