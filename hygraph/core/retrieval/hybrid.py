"""`hybrid`: HyGRAG's context- and relation-aware bi-level retrieval (§3.2, Alg. 2, eqs. 14-20), with passages
ranked by graph propagation (HippoRAG 2).

Four vector searches, one per collection (asked at once: `Search.start`), and one BM25 lookup
with the question's entity extraction while the store searches;
the context is set operations over the hits, bounded by the retrieved items' degrees and the
retrieved communities' sizes, never a scan of a whole collection; the passages come from one
personalized PageRank. Its helpers (`select_relations`, `chunks_under`, the item builders) are shared with
the other modes: items.py.
"""

from __future__ import annotations

from itertools import chain

import numpy as np

from hygraph.core.retrieval.context import Context, Search, passages_from_chunks, pool_size
from hygraph.core.retrieval.fusion import bm25_hits, rrf
from hygraph.core.retrieval.items import (chunk_item, entity_item, is_member, relation_item, select_relations,
                                          summary_item)
from hygraph.core.retrieval.linking import link_entities
from hygraph.core.retrieval.propagation import RELATION_SEEDS, by_mass, propagate
from hygraph.core.retrieval.view import IndexView, QuestionEntities


def hybrid(question: str, query_vec: np.ndarray, k: int, view: IndexView, search: Search,
           question_entities: QuestionEntities, *, relation_k: int | None = None,
           relation_pool: int | None = None, chunk_pool: int | None = None) -> Context:
    """HyGRAG Alg. 2 / eqs. 14-20 for the context, HippoRAG 2's propagation for the passages.

    Context items (HyGRAG):
    - eq. 14: the top-k summaries over every layer; eq. 15: the top-k chunks; eq. 16: the
      top-k entities (the chunk search goes `chunk_pool` deep, its first k hits are eq. 15).
    - eq. 17: the entity set E_all is the retrieved entities, the layer-0 members of the
      retrieved communities (`summary_leaves`), and the entities mentioned in the retrieved
      chunks (the chunk-entity edges E^ce, eq. 5, of Alg. 2 line 9).
    - eqs. 18-19: the `relation_k` relations touching E_all most similar to the query
      (`select_relations`: one `relation_pool`-deep search intersected with the candidates).

    Passage ranking (recall@k is computed on it): dense similarity finds the first hop of a
    multi-hop question but ranks the second-hop passage low, because the question does not
    name the bridge entity. The graph does: personalized PageRank (propagation.py) from the
    entities the question names and the ends of its most similar triplets (the first
    RELATION_SEEDS hits of the relation search), and from the RRF of the dense chunk hits and
    BM25, reaches the bridge entity's own passage. `chunks` are the chunks by PPR mass until
    they cover k passages, `passages` those passages (score = the chunk's mass).

    Summaries carry no `sources`: an upper-layer community covers a large share of the corpus.
    """
    q = query_vec[None, :]
    relation_k = relation_k or k
    depth = max(k, chunk_pool or pool_size(k))
    searches = search.start([
        ("summaries", q, k, None), ("chunks", q, depth, None), ("entities", q, k, None),
        ("relations", q, max(relation_k, relation_pool or pool_size(relation_k)), None)])
    lexical_hits = bm25_hits(question, depth, view)
    spans = question_entities(question)
    summary_hits, chunk_hits, entity_hits, relation_hits = (hits[0] for hits in searches())

    communities = [sid for sid, _ in summary_hits]
    entity_ids = [eid for eid, _ in entity_hits]
    retrieved = set(entity_ids)
    under = set(communities)
    retrieved_chunks = {cid for cid, _ in chunk_hits[:k]}

    def in_entity_set(eid: str) -> bool:
        # E_all is asked about the ends of the searched relations only until k candidates are found, so each
        # end asked is tested (a community member: a summary above it was retrieved), and no other relation is read.
        return (eid in retrieved or is_member(eid, under, view)
                or not retrieved_chunks.isdisjoint(view.entity_chunks.get(eid, ())))

    # lazy: the community members are walked only when the search yields too few candidates
    fallback_order = chain(entity_ids, *(view.summary_leaves.get(sid, ()) for sid in communities))
    relations = select_relations(relation_hits, in_entity_set, fallback_order, relation_k, view)

    seeds = link_entities(spans, relation_hits[:RELATION_SEEDS], view)
    fused = rrf([[cid for cid, _ in chunk_hits], [cid for cid, _ in lexical_hits]])
    chunks = [chunk_item(cid, mass, view) for cid, mass in by_mass(propagate(view, seeds, fused), view, k)]
    return Context(
        summaries=[summary_item(sid, score, view) for sid, score in summary_hits],
        chunks=chunks,
        entities=[entity_item(eid, score, view) for eid, score in entity_hits],
        relations=[relation_item(rid, score, view) for rid, score in relations],
        passages=passages_from_chunks(chunks, view.titles, k),
    )
