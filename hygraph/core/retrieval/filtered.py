"""A filtered query's retrieval (core/retrieval/filter.py says what a filter allows).

Every mode runs as it does unfiltered, over a view carrying the filter and a `FilteredSearch`:

- chunk searches (the `chunks` and `hyperbolic` collections) return allowed chunks only. When the filter
  allows at most EXACT_CHUNKS chunks, a `chunks` search scores exactly those chunks against their stored
  vectors (no vector-store call); otherwise it searches deeper and deeper (x4 from max(4k, 64) up to
  MAX_DEPTH) until k allowed chunks are found. The filter is never written into a vector-store expression.
- the BM25 ranking and the graph walk's passages honour the view's filter (fusion.bm25_hits,
  propagation.by_mass), so the lexical and graph modes rank allowed passages only.
- `restrict` then cuts the context: chunks, entities, relations and hyperedges keep only their allowed
  sources and are dropped when none is left; summaries are dropped (a community summary has no sources and
  may describe documents the filter excludes); passages are the allowed ones.
- `fill`: a mode that still found fewer than k passages (a walk or a community that reached few allowed
  documents) gets the next best allowed passages by dense similarity, after its own.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

import numpy as np

from hygraph.core.retrieval.context import Context, ContextItem, Hits, Passage, Search, SearchRequest, pool_size
from hygraph.core.retrieval.filter import PassageFilter
from hygraph.core.retrieval.items import chunk_item
from hygraph.core.retrieval.view import IndexView

CHUNK_KINDS = ("chunks", "hyperbolic")  # the collections keyed by chunk id
MAX_DEPTH = 16_384  # the deepest over-fetching search (Milvus's top-k limit)


class FilteredSearch:
    """`Search` over a filtered view: chunk searches return allowed chunks only; other kinds are unchanged."""

    def __init__(self, search: Search, view: IndexView) -> None:
        if view.passage_filter is None:
            raise ValueError("a filtered search needs a view with a passage filter")
        self.search, self.view, self.filter = search, view, view.passage_filter

    def __call__(self, kind: str, queries: np.ndarray, k: int, layer: int | None) -> Hits:
        if kind not in CHUNK_KINDS:
            return self.search(kind, queries, k, layer)
        if kind == "chunks" and self.filter.chunks is not None:
            return exact_hits(queries, k, self.filter.chunks, self.view)
        return self._deepening(kind, queries, k, layer)

    def _deepening(self, kind: str, queries: np.ndarray, k: int, layer: int | None) -> Hits:
        depth = min(max(4 * k, 64), MAX_DEPTH)
        while True:
            rows = self.search(kind, queries, depth, layer)
            kept = [[h for h in row if self.filter.allows(h[0])][:k] for row in rows]
            exhausted = all(len(row) < depth for row in rows)
            if depth >= MAX_DEPTH or exhausted or all(len(row) >= k for row in kept):
                return kept
            depth = min(4 * depth, MAX_DEPTH)

    def many(self, requests: Sequence[SearchRequest]) -> list[Hits]:
        return self.start(requests)()

    def start(self, requests: Sequence[SearchRequest]) -> Callable[[], list[Hits]]:
        """The other kinds' searches begin at once in the wrapped search; the chunk searches run here."""
        plain = [i for i, r in enumerate(requests) if r[0] not in CHUNK_KINDS]
        waiting = self.search.start([requests[i] for i in plain])
        own = {i: self(*r) for i, r in enumerate(requests) if r[0] in CHUNK_KINDS}

        def done() -> list[Hits]:
            got = dict(zip(plain, waiting()))
            return [got[i] if i in got else own[i] for i in range(len(requests))]
        return done


def exact_hits(queries: np.ndarray, k: int, chunk_ids: Sequence[str], view: IndexView) -> Hits:
    """The k chunks of `chunk_ids` with the largest inner product (the collections' metric) with each query row,
    scored over their stored vectors; ties in `chunk_ids` order."""
    found = [(cid, view.chunk_embedding.get(cid)) for cid in chunk_ids]
    ids = [cid for cid, vec in found if vec is not None]
    if not ids:
        return [[] for _ in range(len(queries))]
    vectors = np.stack([np.asarray(vec, dtype=np.float32) for _, vec in found if vec is not None])
    scores = np.asarray(queries, dtype=np.float32) @ vectors.T
    return [[(ids[i], float(row[i])) for i in np.argsort(-row, kind="stable")[:k]] for row in scores]


def _narrowed(items: Sequence[ContextItem], allowed: PassageFilter) -> list[ContextItem]:
    out = []
    for item in items:
        sources = tuple(s for s in item.sources if s in allowed.docs)
        if sources:
            out.append(replace(item, sources=sources))
    return out


def restrict(ctx: Context, allowed: PassageFilter) -> Context:
    """The context of the allowed passages only (see the module docstring)."""
    return Context(chunks=_narrowed(ctx.chunks, allowed), entities=_narrowed(ctx.entities, allowed),
                   relations=_narrowed(ctx.relations, allowed), hyperedges=_narrowed(ctx.hyperedges, allowed),
                   passages=[p for p in ctx.passages if p.id in allowed.docs], notes=ctx.notes)


def run_filtered(mode: Callable[[IndexView, Search], Context], view: IndexView, search: Search,
                 allowed: PassageFilter, query_vec: np.ndarray, k: int) -> Context:
    """A mode (called with the view and search to use) under a filter: over the filtered view and search, its
    context restricted and its passages filled up to k (see the module docstring)."""
    filtered_view = replace(view, passage_filter=allowed)
    filtered_search = FilteredSearch(search, filtered_view)
    ctx = restrict(mode(filtered_view, filtered_search), allowed)
    return fill(ctx, query_vec, k, filtered_search, filtered_view)


def fill(ctx: Context, query_vec: np.ndarray, k: int, search: FilteredSearch, view: IndexView) -> Context:
    """Up to k passages: the allowed passages nearest the query that the mode did not reach, after its own,
    each with its best chunk; `notes["filter"]["filled"]` counts them."""
    have = {p.id for p in ctx.passages}
    added = 0
    if len(have) < k:
        for cid, score in search("chunks", query_vec[None, :], pool_size(k), None)[0]:
            doc = view.chunk_doc[cid]
            if doc not in have:
                have.add(doc)
                ctx.chunks.append(chunk_item(cid, score, view))
                ctx.passages.append(Passage(doc, view.titles.get(doc, ""), score))
                added += 1
                if len(have) == k:
                    break
    ctx.notes["filter"] = {"documents": len(search.filter.docs), "filled": added}
    return ctx
