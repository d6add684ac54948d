"""`ppr`: HippoRAG 2's retrieval over the hybrid graph (its §3): the question linked to entities (names and
query-to-triple) and to passages (dense + BM25), personalized PageRank, passages ranked by their mass."""

from __future__ import annotations

import numpy as np

from hygraph.core.retrieval.context import Context, Search, passages_from_chunks, pool_size
from hygraph.core.retrieval.fusion import bm25_hits, rrf
from hygraph.core.retrieval.items import chunk_item, entity_item, relation_item
from hygraph.core.retrieval.linking import link_entities
from hygraph.core.retrieval.propagation import RELATION_SEEDS, by_mass, propagate
from hygraph.core.retrieval.view import IndexView, QuestionEntities


def ppr(question: str, query_vec: np.ndarray, k: int, view: IndexView, search: Search,
        question_entities: QuestionEntities) -> Context:
    """Seeds: linked entities (exact and fuzzy names, ends of the RELATION_SEEDS most similar triplets) and the
    RRF of the `pool_size(k)` dense and BM25 chunks; PPR (propagation.py); chunks by mass until k passages.

    Context: the chunks, the linked entities by seed weight (k), the seed triplets;
    notes["seeds"] counts the seeds of each kind.
    """
    q = query_vec[None, :]
    depth = pool_size(k)
    searches = search.start([("relations", q, RELATION_SEEDS, None), ("chunks", q, depth, None)])
    spans, lexical_hits = question_entities(question), bm25_hits(question, depth, view)
    relation_hits, chunk_hits = (hits[0] for hits in searches())
    seeds = link_entities(spans, relation_hits, view)
    fused = rrf([[c for c, _ in chunk_hits], [c for c, _ in lexical_hits]])
    chunks = [chunk_item(cid, mass, view) for cid, mass in by_mass(propagate(view, seeds, fused), view, k)]
    linked = sorted(seeds.items(), key=lambda kv: -kv[1])[:k]
    return Context(chunks=chunks, entities=[entity_item(e, w, view) for e, w in linked],
                   relations=[relation_item(r, s, view) for r, s in relation_hits],
                   passages=passages_from_chunks(chunks, view.titles, k),
                   notes={"seeds": {"entities": len(seeds), "passages": len(fused)}})
