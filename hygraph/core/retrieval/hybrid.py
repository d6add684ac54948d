"""`hybrid`: HyGRAG's context- and relation-aware bi-level retrieval (§3.2, Alg. 2, eqs. 14-20), with passages
ranked by graph propagation (HippoRAG 2).

Four vector searches, one per collection (asked at once: `Search.start`), and one BM25 lookup
with the question's entity extraction while the store searches;
the context is set operations over the hits, bounded by the retrieved items' degrees and the
retrieved communities' sizes, never a scan of a whole collection; the passages come from one
personalized PageRank. The helpers below the strategy (`select_relations`, `chunks_under`, the
item builders) are shared with the other modes.
"""

from __future__ import annotations

from itertools import chain
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from hygraph.core.retrieval.context import Context, ContextItem, Search, passages_from_chunks
from hygraph.core.retrieval.fusion import bm25_hits, rrf
from hygraph.core.retrieval.linking import link_entities
from hygraph.core.retrieval.propagation import RELATION_SEEDS, by_mass, propagate
from hygraph.core.retrieval.view import IndexView, QuestionEntities

# A similarity search deeper than k scores candidates that a top-k search would not reach
# (relations around the entity set, passages seeding the walk). 20 x k keeps one search per
# collection cheap; the cap bounds it for large k.
POOL_FACTOR = 20
MAX_POOL = 1000


def pool_size(k: int) -> int:
    """HyGRAG eq. 19 filter depth: hits fetched to score candidates beyond the top k (20 x k, at most 1000, >= k)."""
    return max(k, min(POOL_FACTOR * k, MAX_POOL))


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
    # E_all is only ever asked about the ends of the searched relations, so the community
    # members are looked up among those ends only.
    ends = {end for rid, _ in relation_hits for end in _ends(view.relations[rid])}
    entity_set = set(entity_ids) | searched_members(communities, ends, view)
    retrieved_chunks = {cid for cid, _ in chunk_hits[:k]}

    def in_entity_set(eid: str) -> bool:
        return eid in entity_set or not retrieved_chunks.isdisjoint(view.entity_chunks.get(eid, ()))

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


def select_relations(relation_hits: Sequence[tuple[str, float]], is_candidate_end: Callable[[str], bool],
                     fallback_entities: Iterable[str], k: int, view: IndexView) -> list[tuple[str, float]]:
    """HyGRAG eqs. 18-19: the k relations with an end in the entity set, most similar to the query first.

    `relation_hits` is a similarity search over the whole relation collection, deeper than k;
    the candidates among them (head or tail accepted by `is_candidate_end`) keep their
    similarity and come first. This scores exactly the candidates the search reached, without
    scanning the collection. When fewer than k are found, the rest are taken from
    `view.entity_relations` of `fallback_entities`, in that order (it should list the entity set
    by priority), until k are collected. Such a relation is outside the search, so its
    similarity is at most the search's last score (the floor); it is scored floor x its
    extraction score, which ranks it after every searched candidate and orders the fallbacks
    by extraction confidence.
    """
    picked: list[tuple[str, float]] = []
    for rid, score in relation_hits:
        head, _, tail, _ = view.relations[rid]
        if is_candidate_end(head) or is_candidate_end(tail):
            picked.append((rid, score))
            if len(picked) == k:
                return picked
    floor = max(relation_hits[-1][1], 0.0) if relation_hits else 0.0
    searched = {rid for rid, _ in relation_hits}
    extra: list[str] = []
    for eid in fallback_entities:
        for rid in view.entity_relations.get(eid, ()):
            if rid not in searched:
                searched.add(rid)
                extra.append(rid)
        if len(picked) + len(extra) >= k:
            break
    extra.sort(key=lambda rid: -view.relations[rid][3])
    return picked + [(rid, floor * view.relations[rid][3]) for rid in extra[:k - len(picked)]]


def chunk_item(cid: str, score: float, view: IndexView) -> ContextItem:
    """HyGRAG eq. 20 context item: a chunk, sourced to its passage."""
    return ContextItem(cid, "chunk", view.chunk_text[cid], score, (view.chunk_doc[cid],))


def summary_item(sid: str, score: float, view: IndexView) -> ContextItem:
    """HyGRAG eq. 20 context item: a community summary with its layer (no sources, see `hybrid`)."""
    return ContextItem(sid, "summary", view.summary_text[sid], score, (), view.summary_layer[sid])


def entity_item(eid: str, score: float, view: IndexView) -> ContextItem:
    """HyGRAG eq. 20 context item: an entity as "name: description", sourced to the passages mentioning it."""
    name = view.entity_name.get(eid, eid)
    desc = view.entity_desc.get(eid, "")
    return ContextItem(eid, "entity", f"{name}: {desc}" if desc else name, score,
                _docs(view.entity_chunks.get(eid, ()), view))


def relation_item(rid: str, score: float, view: IndexView) -> ContextItem:
    """HyGRAG eq. 20 context item: a triplet in entity names, sourced to the passages stating it."""
    head, phrase, tail, _ = view.relations[rid]
    text = f"{view.entity_name.get(head, head)} {phrase} {view.entity_name.get(tail, tail)}"
    return ContextItem(rid, "relation", text, score, _docs(view.relation_chunks.get(rid, ()), view),
                       links=(head, tail))


def searched_members(summary_ids: Iterable[str], searched: set[str], view: IndexView) -> set[str]:
    """HyGRAG eq. 17 / seed 004 global search: the searched ids that are layer-0 members of the summaries.

    Tests each id of the small searched set for membership in each summary's leaves (`in`)
    instead of listing the leaves: an upper-layer summary covers a large share of the index.
    """
    out: set[str] = set()
    for sid in summary_ids:
        leaves = view.summary_leaves.get(sid, ())
        out.update(x for x in searched if x in leaves)
    return out


def chunks_under(summary_ids: Sequence[str], chunk_hits: Sequence[tuple[str, float]], members: set[str],
                 view: IndexView) -> Iterator[ContextItem]:
    """EraRAG §III-D / seed 004 global search: chunks under the summaries, searched ones (`members`) first.

    The rest follow in summary order and leaf order; the search did not reach them, so their
    similarity is at most its last score, which they are given. Lazy: take what you need.
    """
    yield from (chunk_item(cid, score, view) for cid, score in chunk_hits if cid in members)
    floor = chunk_hits[-1][1] if chunk_hits else 0.0
    placed = set(members)
    for sid in summary_ids:
        for cid in view.summary_leaves.get(sid, ()):
            if cid in view.chunk_text and cid not in placed:
                placed.add(cid)
                yield chunk_item(cid, floor, view)


def until_k_passages(items: Iterable[ContextItem], k: int) -> list[ContextItem]:
    """CONTRACT `passages` cut: chunk items in order until they cover k passages, so a long walk stops early."""
    out: list[ContextItem] = []
    docs: set[str] = set()
    for item in items:
        out.append(item)
        docs.update(item.sources)
        if len(docs) >= k:
            break
    return out


def _ends(relation: tuple[str, str, str, float]) -> tuple[str, str]:
    return relation[0], relation[2]


def _docs(chunk_ids: Iterable[str], view: IndexView) -> tuple[str, ...]:
    return tuple(dict.fromkeys(view.chunk_doc[c] for c in chunk_ids))
